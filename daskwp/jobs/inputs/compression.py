"""Compressed inputs: the codecs known by suffix and by magic bytes (gzip, bz2, xz, zstd,
lz4), archives refused by name, whether this installation can decompress a codec, and
opening a file (or an object URL) as its decompressed byte stream. A compressed stream has
no byte offsets to split at, so a compressed file is one partition read whole
(:func:`read_all`); planning only peeks at its first bytes (:func:`read_head`).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib

import pyarrow as pa

from ...frames.storage import is_url, open_input
from ..errors import InputError


#: Compression suffixes and the codec each names (also recognised by their magic bytes).
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".xz": "xz",
                ".zst": "zstd", ".zstd": "zstd", ".lz4": "lz4"}
#: Archives: several files in one, refused by name (and by magic bytes).
_ARCHIVES = {".zip": "zip", ".tar": "tar", ".tgz": "tar", ".tbz": "tar", ".tbz2": "tar",
             ".txz": "tar", ".7z": "7z", ".rar": "rar"}
#: Errors that reading a corrupt or truncated compressed file raises.
READ_ERRORS = (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error, pa.ArrowException)
READ_CHUNK = 8 << 20


def _sniff_compression(head: bytes) -> str | None:
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    if head.startswith(b"\x04\x22\x4d\x18"):
        return "lz4"
    if (len(head) >= 10 and head[:3] == b"BZh" and 0x31 <= head[3] <= 0x39
            and head[4:10] in (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")):
        return "bz2"
    return None


def sniff_archive(head: bytes) -> str | None:
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"7z\xbc\xaf\x27\x1c"):
        return "7z"
    if head.startswith(b"Rar!\x1a\x07"):
        return "rar"
    if head[257:262] == b"ustar":
        return "tar"
    return None


def _codec_available(codec: str) -> bool:
    if codec in ("gzip", "bz2", "xz"):
        return True
    if codec == "zstd":
        try:
            import zstandard  # noqa: F401
            return True
        except ImportError:
            pass
    return pa.Codec.is_available(codec)


def open_stream(path: str, compression: str | None):
    """A binary file object with ``read(n)``: the file, or its decompressed content."""
    if is_url(path):   # an object: read ahead in big blocks, not a request per 128 kB
        source = open_input(path, sequential=True)
    else:
        source = path
    if compression is None:
        return open(path, "rb") if source is path else source
    if compression == "gzip":
        return gzip.open(source, "rb")
    if compression == "bz2":
        return bz2.open(source, "rb")
    if compression == "xz":
        return lzma.open(source, "rb")
    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            pass
        else:
            return zstandard.ZstdDecompressor().stream_reader(
                open(path, "rb") if source is path else source, read_across_frames=True,
                closefd=True)
    return pa.CompressedInputStream(pa.OSFile(path) if source is path else
                                    pa.PythonFile(source, mode="r"), compression)


def read_all(path: str, compression: str | None) -> bytes:
    with open_stream(path, compression) as fh:
        chunks = []
        while True:
            b = fh.read(READ_CHUNK)
            if not b:
                break
            chunks.append(bytes(b) if not isinstance(b, bytes) else b)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_head(path: str, compression: str | None, n: int) -> bytes:
    with open_stream(path, compression) as fh:
        out = b""
        while len(out) < n:
            b = fh.read(n - len(out))
            if not b:
                break
            out += bytes(b)
    return out


def compression_of(path: str, head: bytes) -> tuple[str | None, str]:
    """(codec or None, the file name without the compression suffix). Archives, unknown
    codecs and names that promise a codec the bytes do not hold are refused."""
    name = os.path.basename(path)
    root, ext = os.path.splitext(name)
    by_ext = COMPRESSIONS.get(ext.lower())
    base = root if by_ext else name
    archive = (_ARCHIVES.get(ext.lower()) or
               (_ARCHIVES.get(os.path.splitext(base)[1].lower()) if by_ext else None) or
               sniff_archive(head))
    if archive:
        codecs = ", ".join(sorted(set(COMPRESSIONS.values())))
        raise InputError(f"input {path!r} is a {archive} archive; daskwp reads single files, "
                         f"plain or compressed ({codecs}): extract the archive first")
    codec = _sniff_compression(head)
    if codec is None and by_ext and head:
        raise InputError(f"input {path!r} is named {ext} but does not hold {by_ext} data "
                         f"(its first bytes are {head[:8]!r})")
    if codec is not None and not _codec_available(codec):
        hint = "install the 'zstandard' package" if codec == "zstd" else \
            f"use a pyarrow build with the {codec} codec"
        raise InputError(f"input {path!r} is {codec}-compressed, and this installation "
                         f"cannot decompress {codec}: {hint}, or decompress the file")
    return codec, base
