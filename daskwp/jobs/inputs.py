"""Job inputs: listing files, planning partitions, reading a partition as Arrow arrays.

A partition is one of (docs/batch-jobs.md, "Inputs"):

* a byte range of a text or JSON Lines file, split at line ends;
* a byte range of a CSV/TSV file, split at record boundaries (the header is read again with
  every piece), or the whole file where no safe boundary is known;
* a whole compressed file (gzip, bz2, xz, zstd, lz4: a compressed stream has no byte offsets
  to split at) or a whole JSON array file;
* row groups of a Parquet file.

With ``column_pair`` (sentence pairs, docs/design.md §2.8) a partition of a Parquet, CSV/TSV
or JSON Lines file reads that column beside ``column``: its documents are then a two-column
Arrow table (the texts, then the second sequences), one row per pair; plain text has no
columns and refuses it by name.

Streams (standard input ``-``, named pipes, character devices, ``/proc`` files) are copied to
a spool file first, then read like any file. Every format decodes bytes the same way: invalid
UTF-8 is kept as bytes, and the tokenizer reads each ill-formed sequence as U+FFFD;
:func:`count_invalid_utf8` counts those bytes for the job summary.

A text partition is read with one ``readinto`` into a buffer of the host memory pool and
split there in place by one native pass (``daskwp/kernels/text_lines.cpp``) that also counts
the invalid bytes of each line: :func:`read_partition_with_counts` returns those counts,
with no second pass over the bytes.

Reading and counting a partition are partition tasks: they import no Dask and run on workers.
"""

from __future__ import annotations

import atexit
import bz2
import dataclasses
import fnmatch
import glob as _glob
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
import warnings
import zlib
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from .. import _ext
from ..core.options import INPUT_FORMATS, JOB_OUTPUT_COLUMNS, QUOTING
from ..core.strings import to_arrow
from ..frames.partition import attach_kept_columns  # noqa: F401 (the jobs' name for it)
from ..frames.schema import POSITION_OUTPUTS
from ..frames import storage
from ..frames.storage import is_url, open_input
from .errors import InputError, JobError

__all__ = ["COMPRESSIONS", "INPUT_FORMATS", "InputFile", "InputWarning", "PartitionSpec",
           "STDIN", "attach_kept_columns", "count_invalid_utf8", "count_partition",
           "input_fingerprint", "lines_to_arrow", "list_input_files", "plan_partitions",
           "read_partition", "read_partition_with_columns", "read_partition_with_counts"]

#: Output columns of the per-position outputs (a kept input column may not take their names).
POSITION_OUTPUT_NAMES = tuple(o.name for o in POSITION_OUTPUTS)
#: What ``input: -`` names (standard input).
STDIN = "-"

_EXTENSION_FORMATS = {
    ".parquet": "parquet", ".pq": "parquet", ".parq": "parquet",
    ".csv": "csv", ".tsv": "tsv",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
}
#: Compression suffixes and the codec each names (also recognised by their magic bytes).
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".xz": "xz",
                ".zst": "zstd", ".zstd": "zstd", ".lz4": "lz4"}
#: Archives: several files in one, refused by name (and by magic bytes).
_ARCHIVES = {".zip": "zip", ".tar": "tar", ".tgz": "tar", ".tbz": "tar", ".tbz2": "tar",
             ".txz": "tar", ".7z": "7z", ".rar": "rar"}
#: Errors that reading a corrupt or truncated compressed file raises.
_READ_ERRORS = (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error, pa.ArrowException)
_CHUNK = 8 << 20
_COUNT_PIECE = 1 << 20  # counting a text partition: read in pieces that stay in cache
_LF = ord("\n")


class InputWarning(UserWarning):
    """Something about the input that the job handles, but less well than it could (a big
    file that cannot be split)."""


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One input file. ``compression`` is the codec of a compressed file (``format`` is then
    the format of its content); ``source`` is what the user named when ``path`` is a spool
    copy of a stream (standard input, a pipe, a /proc file)."""

    path: str
    format: str
    size: int
    mtime_ns: int
    compression: str | None = None
    source: str | None = None


@dataclasses.dataclass(frozen=True)
class PartitionSpec:
    """One partition: a byte range of a text/JSON Lines/CSV file, a whole compressed or JSON
    array file, or row groups of a Parquet file. ``documents`` is known at planning time for
    Parquet only. A CSV piece with ``header_end > 0`` is read as the file's bytes
    ``[0, header_end)`` (the header) followed by ``[byte_start, byte_end)``."""

    index: int
    path: str
    format: str
    column: str
    byte_start: int = 0
    byte_end: int = 0
    row_groups: tuple = ()
    documents: int | None = None
    compression: str | None = None
    quoting: str = "csv"
    header_end: int = 0
    keep_columns: tuple = ()
    keep_types: tuple = ()
    column_pair: str | None = None
    #: The fsspec options of a URL ``path`` (travel with the task; never in ``to_json``).
    storage_options: dict | None = dataclasses.field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        if self.format == "parquet":
            rg = (f"row group {self.row_groups[0]}" if len(self.row_groups) == 1 else
                  f"row groups {self.row_groups[0]}-{self.row_groups[-1]}")
            return f"{self.path} ({rg})"
        if self.compression:
            return f"{self.path} (the whole {self.compression} file)"
        if self.format == "json" or (self.format in ("csv", "tsv") and not self.header_end):
            return self.path
        return f"{self.path} (bytes {self.byte_start}-{self.byte_end})"

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        del d["storage_options"]   # may hold secrets: never recorded
        for k in ("row_groups", "keep_columns", "keep_types"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_json(cls, d: dict) -> "PartitionSpec":
        d = dict(d)
        for k in ("row_groups", "keep_columns", "keep_types"):
            d[k] = tuple(d.get(k) or ())
        return cls(**d)


# ---------------------------------------------------------------------------------------
# Listing: paths, globs, directories, streams
# ---------------------------------------------------------------------------------------

def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith((".crc", "~"))


def _named_explicitly(name: str, segments: Sequence[str]) -> bool:
    """Whether a hidden ``name`` is matched by a pattern segment that is itself hidden
    (``_*.txt``, ``.cache``): a wildcard never matches a leading ``.`` or ``_``."""
    return any(_is_hidden(s) and fnmatch.fnmatchcase(name, s) for s in segments)


def _file_format(path: str, input_format: str) -> str:
    if input_format != "auto":
        return input_format
    return _EXTENSION_FORMATS.get(os.path.splitext(path)[1].lower(), "text")


def _pattern_regex(pattern: str) -> re.Pattern:
    """A glob pattern over ``/``-separated paths: ``**`` spans any folders (none too), ``*``
    and ``?`` stay within one name, ``[...]`` is a character class (``[!...]`` negated)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "]") else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1:j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out))


class _Patterns:
    """include/exclude patterns. A path matches when a pattern matches it whole, or one of
    its folders (so a folder's pattern takes in everything below it), where a pattern
    without ``/`` is matched against the last name only (``*.jsonl`` at any depth)."""

    def __init__(self, patterns: Sequence[str]):
        self.patterns = [p.strip("/") if not os.path.isabs(p) else p for p in patterns]
        self.rx = [(_pattern_regex(p), "/" in p) for p in self.patterns]
        self.segments = [s for p in self.patterns for s in p.split("/")]

    def __bool__(self):
        return bool(self.rx)

    def match(self, rel: str) -> bool:
        parts = rel.split("/")
        for k in range(len(parts), 0, -1):
            prefix = "/".join(parts[:k])
            for rx, has_slash in self.rx:
                if rx.fullmatch(prefix if has_slash else parts[k - 1]):
                    return True
        return False


class _Excluded:
    """What ``exclude`` leaves out. An absolute path is a file or folder to leave out of
    every input (the driver passes the output directory when it lies inside an input
    directory); an absolute pattern is matched against absolute paths; any other pattern
    is matched against paths relative to a directory input."""

    def __init__(self, exclude: Sequence[str]):
        self.folders: tuple = ()
        #: URL prefixes left out of URL inputs (an output folder inside an input's)
        self.url_folders: tuple = ()
        abs_patterns, rel_patterns = [], []
        for e in exclude or ():
            e = os.fspath(e)
            if is_url(e):
                self.url_folders += (e.rstrip("/") + "/",)
            elif os.path.isabs(e) and not _glob.has_magic(e):
                self.folders += (os.path.join(os.path.realpath(e), ""),)
            elif os.path.isabs(e):
                abs_patterns.append(Path(os.path.abspath(e)).as_posix())
            else:
                rel_patterns.append(e)
        self.absolute = _Patterns(abs_patterns)
        self.relative = _Patterns(rel_patterns)

    def path(self, p: str) -> bool:
        """Whether ``p`` (a file or folder of any input) is left out."""
        if self.folders and os.path.join(os.path.realpath(p), "").startswith(self.folders):
            return True
        return bool(self.absolute) and self.absolute.match(Path(os.path.abspath(p)).as_posix())


def _glob_files(pattern: str, excluded: _Excluded) -> list[str]:
    """The files a glob matches, sorted, by the same rule as a directory walk: a name that
    starts with ``.`` or ``_`` (or ends with ``.crc``, ``~``) is not matched by a wildcard,
    only by a pattern segment that names it (``data/_meta/*``, ``_*.txt``)."""
    pat_parts = pattern.split(os.sep)
    fixed = 0
    while fixed < len(pat_parts) and not _glob.has_magic(pat_parts[fixed]):
        fixed += 1
    segments = pat_parts[fixed:]
    found = []
    for p in _glob.glob(pattern, recursive=True):
        if not os.path.isfile(p) or excluded.path(p):
            continue
        rest = p.split(os.sep)[fixed:]
        if any(_is_hidden(c) and not _named_explicitly(c, segments) for c in rest):
            continue
        found.append(p)
    return sorted(found)


def _walk_files(root: str, include: _Patterns, excluded: _Excluded) -> list[str]:
    """The regular files below ``root``, sorted by their ``/``-separated relative path;
    hidden names skipped (unless an include pattern names them), include/exclude applied."""
    found = []
    for dirpath, dirs, names in os.walk(root):
        rel_dir = Path(os.path.relpath(dirpath, root)).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for d in dirs:
            if _is_hidden(d) and not _named_explicitly(d, include.segments):
                continue
            if excluded.path(os.path.join(dirpath, d)) or excluded.relative.match(rel_dir + d):
                continue
            keep.append(d)
        dirs[:] = keep
        for n in names:
            full, rel = os.path.join(dirpath, n), rel_dir + n
            if _is_hidden(n) and not _named_explicitly(n, include.segments):
                continue
            if os.path.exists(full) and not os.path.isfile(full):
                continue  # a named pipe or socket inside a folder is not an input file
            if excluded.path(full) or excluded.relative.match(rel):
                continue
            if include and not include.match(rel):
                continue
            found.append(full)
    found.sort(key=lambda p: Path(os.path.relpath(p, root)).as_posix())
    return found


def _url_error(url: str, e: BaseException) -> InputError:
    return InputError(f"cannot read input {storage.describe_storage_error(url, e)}")


def _url_files(item: str, include: _Patterns, excluded: _Excluded) -> list[str]:
    """The objects an fsspec URL names (an object, a glob, or a folder: every object
    below it), as URLs, by the rules of local inputs: sorted, hidden names skipped unless a
    pattern names them, include/exclude relative to a folder input."""
    fs, path = storage.filesystem(item)
    path = path.rstrip("/") or path

    def url(p):
        return fs.unstrip_protocol(p)

    def left_out(u):
        return u.startswith(excluded.url_folders) or any(
            u.rstrip("/") + "/" == f for f in excluded.url_folders)
    try:
        if _glob.has_magic(path):
            parts = path.split("/")
            fixed = 0
            while fixed < len(parts) and not _glob.has_magic(parts[fixed]):
                fixed += 1
            found = []
            for p, info in fs.glob(path, detail=True).items():
                rest = p.split("/")[fixed:]
                if info.get("type") != "file" or left_out(url(p)) or any(
                        _is_hidden(c) and not _named_explicitly(c, parts[fixed:])
                        for c in rest):
                    continue
                found.append(url(p))
            if not found:
                raise InputError(f"no input file matches {item!r}")
            return sorted(found)
        if fs.isdir(path):
            found = []
            for p, info in fs.find(path, detail=True).items():
                rel = p[len(path):].lstrip("/")
                comps = rel.split("/")
                if info.get("type") != "file" or not rel or left_out(url(p)):
                    continue
                if any(_is_hidden(c) and not _named_explicitly(c, include.segments)
                       for c in comps):
                    continue
                if any(excluded.relative.match("/".join(comps[:k]))
                       for k in range(1, len(comps) + 1)):
                    continue
                if include and not include.match(rel):
                    continue
                found.append((rel, url(p)))
            if not found:
                what = " that include/exclude select" if include or excluded.relative else ""
                raise InputError(f"input directory {item!r} holds no files{what}")
            return [u for _, u in sorted(found)]
        if fs.isfile(path):
            return [item]
    except InputError:
        raise
    except storage.StorageError as e:
        raise InputError(f"cannot read input {e}") from None
    except Exception as e:
        raise _url_error(item, e) from None
    raise InputError(f"input not found: {item!r}")


def _url_input_file(url: str, input_format: str) -> InputFile:
    """An InputFile of an object: its size and modification time from the store, its
    compression and format as for a local file."""
    try:
        info = storage.url_info(url)
        with open_input(url) as f:
            head = f.read(512)
    except FileNotFoundError:
        raise InputError(f"input not found: {url!r}") from None
    except storage.StorageError as e:
        raise InputError(f"cannot read input {e}") from None
    except Exception as e:
        raise _url_error(url, e) from None
    mtime = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
    if hasattr(mtime, "timestamp"):
        mtime = mtime.timestamp()
    try:
        mtime_ns = int(float(mtime) * 1e9)
    except (TypeError, ValueError):
        mtime_ns = 0
    return _described_file(url, url, int(info.get("size") or 0), mtime_ns, head,
                           input_format, None)


def _is_stdin(item: str) -> bool:
    # The job config resolves paths against a folder: "-" may arrive as "/some/dir/-".
    return item == STDIN or (os.path.basename(item) == STDIN and not os.path.lexists(item))


_SPOOL_DIR: list = []


def _default_spool_dir() -> str:
    """A private temporary folder for this process, removed when it exits."""
    if not _SPOOL_DIR or not os.path.isdir(_SPOOL_DIR[0]):
        d = tempfile.mkdtemp(prefix="daskwp-spool-")
        atexit.unregister(remove_spool_dir)  # registered once, however many folders
        atexit.register(remove_spool_dir)
        _SPOOL_DIR[:] = [d]
    return _SPOOL_DIR[0]


def remove_spool_dir() -> None:
    """Remove this process's spool folder of standard-input streams, if it made one (at
    exit; the console command calls it itself when it exits without the interpreter's
    shutdown)."""
    if _SPOOL_DIR:
        shutil.rmtree(_SPOOL_DIR.pop(), True)


def _suffixes(name: str) -> str:
    """The extensions of a file name (``.jsonl.gz``), for the format of a spooled stream."""
    base = os.path.basename(name)
    parts = base.split(".")[1:] if not base.startswith(".") else base.split(".")[2:]
    exts = []
    for p in reversed(parts):
        if not p or len(p) > 8 or not p.isalnum():
            break
        exts.insert(0, "." + p)
    return "".join(exts)


def _spool(source: str, spool_dir: str | None) -> str:
    """Copy a stream to ``spool_dir`` (default: a temporary folder of this process) and
    return the copy's path. The name is ``<name>-<hash of the content><extensions>``, so the
    same stream content spooled to the same folder is the same file (a rerun resumes)."""
    d = spool_dir or _default_spool_dir()
    os.makedirs(d, exist_ok=True)
    stem = "stdin" if source == STDIN or source in ("/dev/stdin", "/proc/self/fd/0") else \
        re.sub(r"[^A-Za-z0-9_-]", "_", os.path.basename(source).split(".")[0] or "input")
    tmp = os.path.join(d, f".spooling-{uuid.uuid4().hex}")
    h = hashlib.blake2b(digest_size=12)
    try:
        if source == STDIN:
            if sys.stdin is None:
                raise InputError("input '-' is standard input, and this process has none")
            src = getattr(sys.stdin, "buffer", sys.stdin)
            close = False
        else:
            src = open(source, "rb")
            close = True
        try:
            with open(tmp, "wb") as out:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    if isinstance(chunk, str):
                        chunk = chunk.encode("utf-8", "surrogateescape")
                    h.update(chunk)
                    out.write(chunk)
        finally:
            if close:
                src.close()
        final = os.path.join(d, f"{stem}-{h.hexdigest()}{_suffixes(source)}")
        if os.path.isfile(final) and os.path.getsize(final) == os.path.getsize(tmp):
            os.unlink(tmp)  # the same content, spooled before: keep it (and its mtime)
        else:
            os.replace(tmp, final)
        return final
    except OSError as e:
        raise InputError(f"cannot read input {source!r} (a stream, copied to a spool file "
                         f"in {d!r} first): {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _stream_kind(path: str, st: os.stat_result) -> str | None:
    """What kind of stream ``path`` is (it has no size and cannot be split or reread by a
    worker), or None for a regular file."""
    mode = st.st_mode
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISSOCK(mode) or stat.S_ISBLK(mode):
        what = "a socket" if stat.S_ISSOCK(mode) else "a block device"
        raise InputError(f"input {path!r} is {what}; daskwp reads files, directories, globs "
                         f"and streams (standard input '-', named pipes)")
    real = os.path.realpath(path)
    if real.startswith(("/proc/", "/sys/")):
        return "a /proc or /sys file"
    if st.st_size == 0:
        try:
            with open(path, "rb") as f:
                if f.read(1):
                    return "a file whose size is not known"  # other virtual file systems
        except OSError:
            pass
    return None


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


def _sniff_archive(head: bytes) -> str | None:
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


def _open_stream(path: str, compression: str | None):
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


def _read_all(path: str, compression: str | None) -> bytes:
    with _open_stream(path, compression) as fh:
        chunks = []
        while True:
            b = fh.read(_CHUNK)
            if not b:
                break
            chunks.append(bytes(b) if not isinstance(b, bytes) else b)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _head(path: str, compression: str | None, n: int) -> bytes:
    with _open_stream(path, compression) as fh:
        out = b""
        while len(out) < n:
            b = fh.read(n - len(out))
            if not b:
                break
            out += bytes(b)
    return out


def _compression_of(path: str, head: bytes) -> tuple[str | None, str]:
    """(codec or None, the file name without the compression suffix). Archives, unknown
    codecs and names that promise a codec the bytes do not hold are refused."""
    name = os.path.basename(path)
    root, ext = os.path.splitext(name)
    by_ext = COMPRESSIONS.get(ext.lower())
    base = root if by_ext else name
    archive = (_ARCHIVES.get(ext.lower()) or
               (_ARCHIVES.get(os.path.splitext(base)[1].lower()) if by_ext else None) or
               _sniff_archive(head))
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


def _is_json_array(path: str, compression: str | None) -> bool:
    """Whether the first byte after whitespace (and a BOM) is ``[``: a JSON array file."""
    try:
        head = _head(path, compression, 1 << 16)
    except _READ_ERRORS as e:
        raise InputError(f"cannot read input {path!r}"
                         f"{f' as {compression}' if compression else ''}: {e}") from None
    return head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1] == b"["


def _input_file(item: str, input_format: str, spool_dir: str | None) -> InputFile:
    source = None
    if _is_stdin(item):
        path, source = _spool(STDIN, spool_dir), STDIN
    else:
        try:
            st = os.stat(item)
        except OSError as e:
            raise InputError(f"cannot read input {item!r}: {e.strerror or e}") from None
        if _stream_kind(item, st):
            path, source = _spool(item, spool_dir), item
        elif item.startswith("/dev/"):
            path = os.path.realpath(item)  # /dev/stdin redirected from a file: that file
        else:
            path = os.path.abspath(item)
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        raise InputError(f"cannot read input {item!r}: {e.strerror or e}") from None
    return _described_file(item, path, st.st_size, st.st_mtime_ns, head, input_format, source)


def _described_file(item: str, path: str, size: int, mtime_ns: int, head: bytes,
                    input_format: str, source: str | None) -> InputFile:
    """The InputFile of ``path`` (named ``item`` by the user) from its first bytes: its
    compression, and the format of its content."""
    compression, base = _compression_of(path, head)
    fmt = _file_format(base, input_format)
    if compression:
        try:
            inner = _head(path, compression, 512)
        except _READ_ERRORS as e:
            raise InputError(f"cannot read input {item!r} as {compression}: {e}") from None
        if _sniff_archive(inner):
            raise InputError(f"input {item!r} is a compressed {_sniff_archive(inner)} "
                             f"archive; extract it first")
    if fmt == "parquet" and compression:
        raise InputError(f"input {item!r} is a compressed Parquet file ({compression}); Parquet "
                         f"compresses its own pages: decompress the file")
    if fmt == "jsonl" and size and _is_json_array(path, compression):
        fmt = "json"
    return InputFile(path=path, format=fmt, size=size, mtime_ns=mtime_ns,
                     compression=compression, source=source)


def list_input_files(inputs, input_format: str = "auto", exclude: Sequence[str] = (), *,
                     include: Sequence[str] | None = None,
                     spool_dir: str | None = None) -> list[InputFile]:
    """Expand paths, globs, directories and streams into files.

    A directory is walked recursively; names starting with ``.`` or ``_`` (Spark/Dask
    metadata files) are skipped there and in glob matches alike, unless a pattern segment
    names them (``_*.txt``). ``include`` (patterns) keeps only the files of a directory
    whose path relative to it matches one; ``exclude`` leaves out the files and folders
    matching a pattern (relative, for directory inputs), and everything inside an absolute
    folder path (the driver's output directory when it lies inside an input). Each path or
    pattern contributes its files in sorted order; list items keep their order.

    ``-`` is standard input; it, named pipes, character devices and ``/proc`` files are
    copied to ``spool_dir`` (default: a temporary folder of this process, removed when it
    exits; with a remote cluster, a folder every worker sees) and read from there.
    Compressed files are recognised by suffix and by magic bytes; the format is the one of
    the name under the compression suffix (``x.csv.gz`` is CSV).
    """
    items = [os.fspath(inputs)] if isinstance(inputs, (str, os.PathLike)) else \
        [os.fspath(i) for i in inputs]
    include_p = _Patterns(include or ())
    excluded = _Excluded(exclude)
    files: list[str] = []
    for item in items:
        if is_url(item):
            files.extend(_url_files(item, include_p, excluded))
        elif _is_stdin(item):
            files.append(STDIN)
        elif _glob.has_magic(item) and not os.path.lexists(item):
            found = _glob_files(item, excluded)
            if not found:
                raise InputError(f"no input file matches {item!r}")
            files.extend(found)
        elif os.path.isdir(item):
            found = _walk_files(item, include_p, excluded)
            if not found:
                what = " that include/exclude select" if include_p or excluded.relative else ""
                raise InputError(f"input directory {item!r} holds no files{what}")
            files.extend(found)
        elif os.path.lexists(item):
            files.append(item)
        else:
            raise InputError(f"input not found: {item!r}")
    return [_url_input_file(p, input_format) if is_url(p) else
            _input_file(p, input_format, spool_dir) for p in files]


# ---------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------
_STRINGLIKE = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
               pa.types.is_large_binary, pa.types.is_null)


def _is_stringlike(t: pa.DataType) -> bool:
    if any(f(t) for f in _STRINGLIKE):
        return True
    if pa.types.is_dictionary(t):
        return _is_stringlike(t.value_type)
    return getattr(pa.types, "is_string_view", lambda _: False)(t)


def _next_line_start(f, pos: int, size: int, chunk: int = 1 << 20) -> int:
    """The position just after the first b"\\n" at or after ``pos - 1`` (or ``size``)."""
    f.seek(pos - 1)
    while True:
        buf = f.read(chunk)
        if not buf:
            return size
        i = buf.find(b"\n")
        if i >= 0:
            return f.tell() - len(buf) + i + 1
        # keep scanning: a very long line


def _csv_options(spec_format: str, columns: Sequence[str], size: int, quoting: str = "csv"):
    import pyarrow.csv as pacsv
    read = pacsv.ReadOptions(block_size=int(min(max(size + 1, 1 << 20), 2**31 - 1)),
                             use_threads=False)
    delimiter = "\t" if spec_format == "tsv" else ","
    if quoting == "none":
        parse = pacsv.ParseOptions(delimiter=delimiter, quote_char=False,
                                   newlines_in_values=False)
    else:
        parse = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    # Every column as bytes: no UTF-8 check (invalid bytes are the tokenizer's U+FFFD).
    convert = pacsv.ConvertOptions(include_columns=list(columns),
                                   column_types={c: pa.large_binary() for c in columns})
    return read, parse, convert


def _decode_lossless(data: bytes) -> str:
    """UTF-8 bytes as str; invalid bytes as lone surrogates (restored by
    :func:`_encode_lossless`)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "surrogateescape")


def _encode_lossless(s: str) -> bytes:
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a JSON escape of a lone surrogate: invalid UTF-8 bytes
        return s.encode("utf-8", "surrogatepass")


def _json_type(values: list, name: str, path: str) -> str:
    """The Arrow type of a kept JSON column from sampled values: bool, int64, double or
    large_string (all null: large_string)."""
    kinds = set()
    for v in values:
        if v is None:
            continue
        kinds.add(bool if isinstance(v, bool) else int if isinstance(v, int) else
                  float if isinstance(v, float) else str if isinstance(v, str) else "nested")
    if "nested" in kinds:
        raise InputError(f"keep_columns: column {name!r} of {path!r} holds lists or objects; "
                         f"kept JSON columns hold strings, numbers or booleans")
    if not kinds or kinds == {str}:
        return "large_string"
    if kinds == {bool}:
        return "bool"
    if kinds <= {int}:
        return "int64"
    if kinds <= {int, float}:
        return "double"
    raise InputError(f"keep_columns: column {name!r} of {path!r} holds values of several "
                     f"types ({', '.join(sorted(k.__name__ for k in kinds))}); a kept column "
                     f"has one type")


def _normalized_type(t: pa.DataType) -> pa.DataType:
    """The type a kept column is written with: dictionaries decoded, strings and binaries
    as their large forms."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return pa.large_string()
    if pa.types.is_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
        return pa.large_binary()
    if pa.types.is_null(t):
        return pa.large_string()
    return t


def _type_from_str(s: str) -> pa.DataType | None:
    try:
        return pa.type_for_alias(s)
    except (ValueError, KeyError):
        return None


def _json_sample(f: InputFile, column: str, keep: Sequence[str],
                 limit: int = 1000, lenient: bool = False) -> tuple[list | None, dict]:
    """(keys found in the first objects, or None for an array of strings; sampled values of
    the kept columns). JSON Lines: the first ``limit`` non-blank lines; a JSON array: its
    first ``limit`` items (read from the first MB). ``lenient``: lines and items that are
    not JSON objects are passed over (the row policy rejects them when they are read),
    unless no object at all is found: then the file is not in this format, an error."""
    names: dict = {}
    passed_over: list = []
    samples: dict = {k: [] for k in keep}
    strings = False

    def take(obj, where):
        nonlocal strings
        if isinstance(obj, dict):
            names.update(dict.fromkeys(obj))
            for k in keep:
                samples[k].append(obj.get(k))
        elif lenient and not (f.format == "json" and isinstance(obj, str)):
            passed_over.append(ValueError(f"{where} holds {type(obj).__name__}, not an "
                                          f"object"))
        elif f.format == "json" and (obj is None or isinstance(obj, str)):
            strings = True
        elif f.format == "json":
            raise ValueError(f"a JSON array of documents holds objects or strings; {where} is "
                             f"a {type(obj).__name__}")
        else:
            raise ValueError(f"JSON Lines holds one object per line; {where} holds a "
                             f"{type(obj).__name__}")

    if f.format == "json":
        text = _decode_lossless(_head(f.path, f.compression, 1 << 20)).lstrip("\ufeff")
        dec = json.JSONDecoder()
        pos = text.index("[") + 1
        for k in range(limit):
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text) or text[pos] == "]":
                break
            try:
                obj, pos = dec.raw_decode(text, pos)
            except ValueError:
                break  # an item cut by the end of the sample
            take(obj, f"item {k}")
    else:
        with _open_stream(f.path, f.compression) as fh:
            buf, k, seen, done = b"", 0, 0, False
            while not done:
                chunk = fh.read(1 << 20)
                chunk = bytes(chunk) if chunk else b""
                lines = (buf + chunk).split(b"\n")
                buf = lines.pop() if chunk else b""
                for line in lines:
                    k += 1
                    if line.strip():
                        try:
                            obj = json.loads(_decode_lossless(line))
                        except ValueError as e:
                            if not lenient:
                                raise
                            passed_over.append(ValueError(f"line {k}: {e}"))
                        else:
                            take(obj, f"line {k}")
                        seen += 1
                        if seen >= limit or (column in names and not keep):
                            done = True
                            break
                done = done or not chunk
    if passed_over and not names and not strings:
        raise passed_over[0]   # not one object: the file is not JSON (Lines)
    return (None if strings and not names else list(names)), samples


def _columns_found(f: InputFile, column: str, keep: Sequence[str] = (),
                   quoting: str = "csv",
                   lenient: bool = False) -> tuple[list | None, pa.DataType | None, dict]:
    """(column names of the file, or None for a JSON array of strings; type of ``column``
    or None; the type of every kept column, as a string); raises InputError. ``lenient``:
    bad rows among the first ones are passed over (the row policy)."""
    try:
        if f.format == "parquet":
            import pyarrow.parquet as pq
            schema = pq.ParquetFile(_parquet_source(f.path)).schema_arrow
            names = schema.names
            kept = {k: str(_normalized_type(schema.field(k).type)) for k in keep
                    if k in names}
            return names, (schema.field(column).type if column in names else None), kept
        if f.format in ("csv", "tsv"):
            import pyarrow.csv as pacsv
            read, parse, _ = _csv_options(f.format, [column], min(f.size, 1 << 20), quoting)
            if lenient:
                parse.invalid_row_handler = lambda row: "skip"
            with _open_stream(f.path, f.compression) as fh, \
                    pacsv.open_csv(fh, read_options=read, parse_options=parse) as r:
                names = r.schema.names
            return names, (pa.large_string() if column in names else None), {
                k: "large_string" for k in keep if k in names}
        if f.format in ("jsonl", "json"):
            # The keys of the first objects: an object without the column is an empty
            # document, a file where none has it is an error.
            names, samples = _json_sample(f, column, keep, lenient=lenient)
            if names is None:
                return None, pa.large_string(), {}
            return names, (pa.large_string() if column in names else None), {
                k: _json_type(samples[k], k, f.path) for k in keep if k in names}
    except JobError:
        raise
    except _READ_ERRORS as e:
        raise InputError(f"cannot read input {f.path!r} as {f.format}: {e}") from None
    raise AssertionError(f.format)


def _csv_boundary(fh, start: int, target: int, size: int, delimiter: int,
                  quoting: str) -> tuple[int | None, int | None]:
    """The first record boundary at or after ``target`` of a CSV file whose bytes from
    ``start`` begin a record: ``(position, None)`` (``size`` if none), or ``(None, q)``
    when the quote at byte ``q`` makes the boundaries after it unknowable.

    With ``quoting: csv``, a newline ends a record when an even number of quotes precede it
    (from ``start``) and every quote before it is where RFC 4180 puts quotes: an opening
    quote at the start of a field (after a delimiter, a line end, or the closing quote of a
    doubled ``""``), a closing one before a delimiter, a line end, the end of the file or
    another quote. Such a file has the same records for the parity count as for Arrow's CSV
    parser. A quote anywhere else (``5" screen``: Arrow reads it as a plain character) stops
    the scan. The file is read once, in 8 MB pieces."""
    if quoting == "none":
        return _next_line_start(fh, max(target, start + 1), size), None
    quote, nl, cr = 34, 10, 13
    ok = np.array([delimiter, nl, cr, quote], dtype=np.uint8)
    pos, parity, prev = start, 0, nl
    while pos < size:
        fh.seek(pos)
        data = fh.read(min(_CHUNK, size - pos) + 1)
        n = min(len(data), size - pos)
        if n <= 0:
            break
        b = np.frombuffer(data, dtype=np.uint8)
        chunk = b[:n]
        q = np.flatnonzero(chunk == quote)
        limit, bad = n, None
        if len(q):
            opener = ((np.arange(len(q)) + parity) % 2) == 0
            before = chunk[np.maximum(q - 1, 0)].copy()
            before[q == 0] = prev
            after = chunk[np.minimum(q + 1, n - 1)].copy()
            last = q == n - 1
            after_ok = np.isin(after, ok)
            after_ok[last] = len(b) == n or bool(np.isin(b[n], ok))
            wrong = (opener & ~np.isin(before, ok)) | (~opener & ~after_ok)
            if wrong.any():
                limit = int(q[np.argmax(wrong)])
                bad = pos + limit
        lo = max(0, target - 1 - pos)
        if lo < limit:
            nls = np.flatnonzero(chunk[lo:limit] == nl) + lo
            if len(nls):
                even = ((np.searchsorted(q, nls) + parity) % 2) == 0
                if even.any():
                    return pos + int(nls[np.argmax(even)]) + 1, None
        if bad is not None:
            return None, bad
        parity = (parity + len(q)) % 2
        prev = int(chunk[-1])
        pos += n
    return size, None


def _plan_csv(f: InputFile, partition_size: int, quoting: str, add, warn) -> None:
    """A CSV/TSV file as pieces of about ``partition_size`` bytes cut at record boundaries
    (each read with the header), or as one partition where it is small, compressed, or has
    no boundary that is safe to cut at (with a warning)."""
    if f.compression:
        if f.size > partition_size:
            warn(f"daskwp: {f.path}: a compressed CSV file ({f.compression}) is read as one "
                 f"partition ({f.size:,} compressed bytes, more than partition_size "
                 f"{partition_size:,}); decompress it or split it into several files for "
                 f"smaller partitions")
        add(path=f.path, format=f.format, byte_start=0, byte_end=f.size,
            compression=f.compression)
        return
    if f.size <= partition_size:
        add(path=f.path, format=f.format, byte_start=0, byte_end=f.size)
        return
    delimiter = 9 if f.format == "tsv" else 44
    pieces, bad = [], None
    with open_input(f.path) as fh:
        header_end, bad = _csv_boundary(fh, 0, 1, f.size, delimiter, quoting)
        start = header_end if header_end is not None else 0
        while header_end is not None and start < f.size:
            if f.size - start <= partition_size:
                pieces.append((start, f.size))
                break
            cut, bad = _csv_boundary(fh, start, start + partition_size, f.size, delimiter,
                                     quoting)
            if cut is None:
                pieces.append((start, f.size))
                break
            pieces.append((start, cut))
            start = cut
    if bad is not None:
        warn(f"daskwp: {f.path}: cannot split this CSV file at record boundaries after byte "
             f"{start:,}: the quote at byte {bad:,} is inside a value that does not start "
             f"with a quote (a plain character to the CSV parser), so the newlines after it "
             f"may be inside or outside quoted values. The rest of the file "
             f"({f.size - start:,} bytes) is one partition. With quoting: none, quotes are "
             f"plain characters and the file splits at any newline")
    if len(pieces) <= 1:
        add(path=f.path, format=f.format, byte_start=0, byte_end=f.size)
        return
    for s, e in pieces:
        add(path=f.path, format=f.format, byte_start=s, byte_end=e, header_end=header_end)


def _default_warn(msg: str) -> None:
    warnings.warn(msg, InputWarning, stacklevel=3)


def plan_partitions(files: Sequence[InputFile], column: str, partition_size: int, *,
                    quoting: str = "csv", keep_columns: Sequence[str] | None = None,
                    warn: Callable[[str], None] | None = None,
                    column_pair: str | None = None,
                    lenient: bool = False) -> list[PartitionSpec]:
    """Split the input into partitions of about ``partition_size`` bytes, in input order.

    Text and JSON Lines files split at line ends; CSV/TSV files at record boundaries (see
    :func:`_csv_boundary`; ``quoting: none`` at any newline); a Parquet file between row
    groups; a compressed file or a JSON array file is one partition. ``keep_columns`` are
    read with the text (:func:`read_partition_with_columns`): each must exist in every file
    with one type. ``warn`` receives what the job should tell the user (a big file read as
    one partition); default: :class:`InputWarning`. ``column_pair``: the column of the
    second sequences of sentence pairs, a text column of every file (Parquet, CSV/TSV,
    JSON Lines or a JSON array of objects; not plain text), read with ``column``.
    ``lenient``: the row policy (``on_bad_row: reject``): the lines and records that the
    columns are found in may hold bad rows, which are passed over (they are rejected when
    the partition is read).
    """
    if quoting not in QUOTING:
        raise InputError(f"quoting must be one of {', '.join(map(repr, QUOTING))}, "
                         f"got {quoting!r}")
    keep = tuple(keep_columns or ())
    taken = [k for k in keep if k in JOB_OUTPUT_COLUMNS or k in POSITION_OUTPUT_NAMES]
    if taken:
        raise InputError(f"keep_columns: {taken[0]!r} is a column of the output")
    if column_pair is not None and column_pair == column:
        raise InputError(f"column_pair names the text column {column!r} itself; name the "
                         f"column of the second sequences")
    warn = warn or _default_warn
    specs: list[PartitionSpec] = []
    kept_types: dict[str, tuple[str, str]] = {}
    spec_types: tuple = ()

    def add(**kw):
        specs.append(PartitionSpec(index=len(specs), column=column, quoting=quoting,
                                   keep_columns=keep, keep_types=spec_types,
                                   column_pair=column_pair, storage_options=(
                                       storage.current_options() if is_url(kw["path"])
                                       else None), **kw))

    for f in files:
        if f.size == 0:
            continue
        if column_pair is not None and f.format == "text":
            raise InputError(f"column_pair {column_pair!r}: input {f.path!r} is read as text "
                             f"(one document per line), which has no columns; sentence pairs "
                             f"are two columns of Parquet, CSV/TSV or JSON Lines input")
        if keep and f.format == "text":
            raise InputError(f"keep_columns {list(keep)!r}: input {f.path!r} is read as text "
                             f"(one document per line), which has no columns; keep columns "
                             f"of Parquet, CSV/TSV or JSON input")
        spec_types = ()
        if f.format in ("parquet", "csv", "tsv", "jsonl", "json"):
            names, dtype, types = _columns_found(f, column, keep, quoting, lenient)
            if names is None:  # a JSON array of strings: the strings are the documents
                if column_pair is not None:
                    raise InputError(f"column_pair {column_pair!r}: input {f.path!r} is a "
                                     f"JSON array of strings, which has no columns")
                if keep:
                    raise InputError(f"keep_columns {list(keep)!r}: input {f.path!r} is a "
                                     f"JSON array of strings, which has no columns")
            elif f.format not in ("jsonl", "json") or names:
                if dtype is None:
                    raise InputError(f"input {f.path!r} has no column {column!r}; columns "
                                     f"found: {', '.join(map(repr, names)) or '(none)'}")
                if not _is_stringlike(dtype):
                    raise InputError(f"column {column!r} of {f.path!r} holds {dtype}, not "
                                     f"text; tokenize a string column")
            if column_pair is not None:
                p_names, p_dtype, _ = _columns_found(f, column_pair, (), quoting, lenient)
                if p_dtype is None:
                    raise InputError(f"column_pair: input {f.path!r} has no column "
                                     f"{column_pair!r}; columns found: "
                                     f"{', '.join(map(repr, p_names or [])) or '(none)'}")
                if not _is_stringlike(p_dtype):
                    raise InputError(f"column_pair {column_pair!r} of {f.path!r} holds "
                                     f"{p_dtype}, not text; pair two string columns")
            if keep:
                missing = [k for k in keep if k not in types]
                if missing:
                    raise InputError(f"keep_columns: input {f.path!r} has no column "
                                     f"{missing[0]!r}; columns found: "
                                     f"{', '.join(map(repr, names or [])) or '(none)'}")
                for k in keep:
                    t = types[k]
                    if k in kept_types and kept_types[k][0] != t:
                        raise InputError(
                            f"keep_columns: column {k!r} is {t} in {f.path!r} but "
                            f"{kept_types[k][0]} in {kept_types[k][1]!r}; a kept column has "
                            f"one type in every input file")
                    kept_types.setdefault(k, (t, f.path))
                spec_types = tuple(types[k] for k in keep)
        if f.format == "parquet":
            import pyarrow.parquet as pq
            try:
                md = pq.ParquetFile(_parquet_source(f.path)).metadata
            except (OSError, pa.ArrowException) as e:
                raise InputError(f"cannot read input {f.path!r} as parquet: {e}") from None
            ci = md.schema.to_arrow_schema().get_field_index(column)
            group, rows, size = [], 0, 0
            for rg in range(md.num_row_groups):
                g = md.row_group(rg)
                leaf = [g.column(j) for j in range(g.num_columns)
                        if g.column(j).path_in_schema.split(".")[0] in (column, column_pair)]
                size += sum(c.total_uncompressed_size for c in leaf) if ci >= 0 else 0
                group.append(rg)
                rows += g.num_rows
                if size >= partition_size:
                    add(path=f.path, format="parquet", row_groups=tuple(group), documents=rows)
                    group, rows, size = [], 0, 0
            if group:
                add(path=f.path, format="parquet", row_groups=tuple(group), documents=rows)
        elif f.format in ("csv", "tsv"):
            _plan_csv(f, partition_size, quoting, add, warn)
        elif f.compression or f.format == "json":
            if f.size > partition_size:
                what = ("a compressed file (" + f.compression + ")" if f.compression else
                        "a JSON array file")
                warn(f"daskwp: {f.path}: {what} is read as one partition ({f.size:,} bytes "
                     f"on disk, more than partition_size {partition_size:,})"
                     + ("; write JSON Lines (one object per line) to split it"
                        if f.format == "json" else
                        "; decompress it or split it into several files for smaller "
                        "partitions"))
            add(path=f.path, format=f.format, byte_start=0, byte_end=f.size,
                compression=f.compression)
        else:
            start = 0
            with open_input(f.path) as fh:
                while start < f.size:
                    end = f.size if start + partition_size >= f.size else \
                        _next_line_start(fh, start + partition_size, f.size)
                    add(path=f.path, format=f.format, byte_start=start, byte_end=end)
                    start = end
    return specs


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------

def _read_range(path: str, start: int, end: int, what: str) -> bytes:
    with open_input(path) as fh:
        fh.seek(start)
        data = fh.read(end - start)
    if len(data) != end - start:
        raise InputError(f"{what}: the file is shorter than when the job was planned (it "
                         f"changed during the job)")
    return data


def _read_bytes(spec: PartitionSpec) -> bytes:
    """The partition's bytes (decompressed for a compressed file)."""
    if spec.compression:
        return _read_all(spec.path, spec.compression)
    return _read_range(spec.path, spec.byte_start, spec.byte_end, spec.describe())


def _parquet_source(path: str):
    """What ``pq.ParquetFile`` opens: a local path, or a URL's file object (it reads the
    footer and the column chunks it needs by byte ranges)."""
    return open_input(path) if is_url(path) else path


def _lines_array(values: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A large_binary array over NumPy buffers, without a copy."""
    if len(offsets) == 1:
        return pa.array([], type=pa.large_binary())
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1, [
        None, pa.py_buffer(offsets), pa.py_buffer(values[:int(offsets[-1])])])


def _split_lines(data: np.ndarray, out: np.ndarray) -> tuple[pa.Array, tuple[int, int]]:
    """``(lines, (invalid_bytes, invalid_documents))``: the lines of ``data`` (the bytes
    written to ``out`` without their newlines; ``out`` may be ``data`` itself), and the
    numbers :func:`count_invalid_utf8` gives for them, from the same native pass."""
    offsets, bad_lines, bad_bytes = _ext.split_lines(data, out)
    return _lines_array(out, offsets), (int(bad_bytes.sum()), len(bad_lines))


def lines_to_arrow(data: bytes) -> pa.Array:
    """Split UTF-8 bytes on b"\\n" only (one document per line; a final line without a
    newline is a document too) into an Arrow large_binary array, with the newlines removed.
    Bytes are not validated: invalid UTF-8 decodes to U+FFFD in the tokenizer.

    One native pass (``daskwp/kernels/text_lines.cpp``) copies the bytes less their
    newlines into a buffer of the host memory pool, which the array then holds."""
    src = np.frombuffer(data, dtype=np.uint8)
    return _split_lines(src, _ext.host_bytes(len(src)))[0]


def _read_text_lines(spec: PartitionSpec) -> tuple[pa.Array, tuple[int, int]]:
    """``(lines, (invalid_bytes, invalid_documents))`` of a text partition.

    An uncompressed byte range is read with one ``readinto`` into a buffer of the host
    memory pool (a freed partition's block, already mapped, is reused) and split there in
    place: the lines array holds that buffer, and the read stage allocates nothing else
    but the offsets."""
    if spec.compression:
        data = _read_all(spec.path, spec.compression)
        src = np.frombuffer(data, dtype=np.uint8)
        return _split_lines(src, _ext.host_bytes(len(src)))
    size = spec.byte_end - spec.byte_start
    buf = _ext.host_bytes(size)
    view = memoryview(buf)
    got = 0
    with open_input(spec.path, buffering=0) as fh:
        fh.seek(spec.byte_start)
        while got < size:
            k = fh.readinto(view[got:])
            if not k:
                break
            got += k
    view.release()
    if got != size:
        raise InputError(f"{spec.describe()}: the file is shorter than when the job was "
                         f"planned (it changed during the job)")
    return _split_lines(buf, buf)


def _as_binary(arr) -> pa.Array | None:
    """A string/binary array (or chunked array) as a binary array of the same bytes; None
    for an array of nulls only."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_null(t):
        return None
    if pa.types.is_large_string(t):
        return arr.view(pa.large_binary())
    if pa.types.is_string(t):
        return arr.view(pa.binary())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return arr
    return _as_binary(to_arrow(arr))  # dictionary, string_view: plain strings


def _offsets(arr: pa.Array) -> np.ndarray:
    """The ``len(arr) + 1`` value offsets of a (large) binary array, as int64."""
    dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    raw = np.frombuffer(arr.buffers()[1], dtype=dtype)
    return raw[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _invalid_positions(b: np.ndarray, is_start: np.ndarray) -> np.ndarray:
    """Positions of the bytes of ``b`` outside well-formed UTF-8 sequences; a sequence
    does not cross a document start (``is_start``). Works on the non-ASCII bytes only."""
    nz = np.flatnonzero(b >= 0x80)
    if not len(nz):
        return nz
    n = len(b)
    at = nz[(b[nz] >= 0xC2) & (b[nz] <= 0xF4)]  # the bytes that may start a sequence
    lead = b[at]

    def follower(k):  # the byte k after each lead; whether it continues the sequence
        idx = np.minimum(at + k, n - 1)
        v = b[idx]
        return v, (at + k < n) & ((v & 0xC0) == 0x80) & ~is_start[idx]

    v1, c1 = follower(1)
    c2 = follower(2)[1]
    c3 = follower(3)[1]
    seq2 = (lead <= 0xDF) & c1
    second3 = np.where(lead == 0xE0, v1 >= 0xA0, np.where(lead == 0xED, v1 <= 0x9F, True))
    seq3 = (lead >= 0xE0) & (lead <= 0xEF) & c1 & second3 & c2
    second4 = np.where(lead == 0xF0, v1 >= 0x90, np.where(lead == 0xF4, v1 <= 0x8F, True))
    seq4 = (lead >= 0xF0) & c1 & second4 & c2 & c3
    covered = np.zeros(n, dtype=bool)
    for valid, length in ((seq2, 2), (seq3, 3), (seq4, 4)):
        starts = at[valid]
        for k in range(length):
            covered[starts + k] = True
    return nz[~covered[nz]]


def _invalid_utf8_per_document(texts) -> np.ndarray | None:
    """Bytes of each document outside well-formed UTF-8 sequences (the bytes the tokenizer
    reads as U+FFFD, Python's ``errors="replace"`` rule), or None when every document is
    valid UTF-8.

    Arrow validates 4 MB slices of documents; only a slice that fails is scanned with
    NumPy (over its non-ASCII bytes)."""
    arr = _as_binary(texts)
    if arr is None or len(arr) == 0:
        return None
    target = pa.large_string() if pa.types.is_large_binary(arr.type) else pa.string()
    try:
        arr.cast(target)
        return None
    except pa.ArrowInvalid:
        pass
    n = len(arr)
    offsets = _offsets(arr)
    values = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] else \
        np.zeros(0, np.uint8)
    out = np.zeros(n, dtype=np.int64)
    step = 4 << 20
    i = 0
    while i < n:
        j = int(np.searchsorted(offsets, offsets[i] + step, side="right")) - 1
        j = min(max(j, i + 1), n)
        try:
            arr.slice(i, j - i).cast(target)
        except pa.ArrowInvalid:
            lo, hi = offsets[i], offsets[j]
            b = values[lo:hi]
            rel = offsets[i:j + 1] - lo
            is_start = np.zeros(len(b), dtype=bool)
            is_start[rel[:-1][rel[:-1] < len(b)]] = True
            bad = _invalid_positions(b, is_start)
            doc = np.searchsorted(rel, bad, side="right") - 1
            out[i:j] = np.bincount(doc, minlength=j - i)
        i = j
    if arr.null_count:
        out[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out


def count_invalid_utf8(texts) -> tuple[int, int]:
    """``(bytes, documents)``: the bytes of ``texts`` that are not well-formed UTF-8 (each
    maximal ill-formed sequence is one U+FFFD to the tokenizer; these are its bytes), and
    the documents holding any (for a table of pairs: both sides' bytes, and the pairs with
    any on either side). Vectorised: Arrow's validation, then NumPy on the 4 MB slices that
    fail."""
    if isinstance(texts, pa.Table):
        sides = [_invalid_utf8_per_document(texts.column(j))
                 for j in range(texts.num_columns)]
        sides = [p for p in sides if p is not None]
        if not sides:
            return 0, 0
        per = np.sum(sides, axis=0)
        return int(per.sum()), int(np.count_nonzero(per))
    per = _invalid_utf8_per_document(texts)
    if per is None:
        return 0, 0
    return int(per.sum()), int(np.count_nonzero(per))


def _valid_strings(arr) -> pa.Array:
    """A string/binary array as large_string, invalid UTF-8 replaced by U+FFFD (kept
    columns: written as strings)."""
    b = _as_binary(arr)
    if b is None:
        return pa.nulls(len(arr), pa.large_string())
    b = b.cast(pa.large_binary())
    per = _invalid_utf8_per_document(b)
    if per is not None:
        import pyarrow.compute as pc
        bad = np.flatnonzero(per)
        mask = np.zeros(len(b), dtype=bool)
        mask[bad] = True
        repl = pa.array([b[int(i)].as_py().decode("utf-8", "replace").encode("utf-8")
                         for i in bad], type=pa.large_binary())
        b = pc.replace_with_mask(b, pa.array(mask), repl)
    return b.cast(pa.large_string())


def _kept_table(columns: dict, spec: PartitionSpec) -> pa.Table:
    out = {}
    for name, t in zip(spec.keep_columns, spec.keep_types or (None,) * len(spec.keep_columns)):
        col = columns[name]
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        want = _type_from_str(t) if t else None
        if want is not None and pa.types.is_large_string(want):
            col = _valid_strings(col)
        elif pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if want is not None and col.type != want:
            col = col.cast(want)
        out[name] = col
    return pa.table(out)


def _blank_lines(lines: pa.Array) -> np.ndarray:
    """Which lines hold only spaces, tabs and carriage returns (not JSON Lines documents)."""
    off = _offsets(lines)
    vals = np.frombuffer(lines.buffers()[2], dtype=np.uint8) if len(lines) and \
        lines.buffers()[2] else np.zeros(0, np.uint8)
    lens = np.diff(off)
    blank = lens == 0
    first = np.zeros(len(lens), dtype=np.uint8)
    nz = ~blank
    first[nz] = vals[off[:-1][nz]]
    for i in np.flatnonzero(nz & np.isin(first, np.array([32, 9, 13], dtype=np.uint8))):
        if not vals[off[i]:off[i + 1]].tobytes().strip(b" \t\r"):
            blank[i] = True
    return blank


def _read_jsonl(data: bytes, spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    """The documents (and kept columns) of a JSON Lines partition, parsed by Arrow's
    reader. ``bad`` (the row policy, ``on_bad_row: reject``): a partition that reader
    refuses is parsed line by line instead (:func:`_read_jsonl_lines`), each bad line an
    empty document recorded in ``bad``; None: the reader's error."""
    try:
        return _read_jsonl_arrow(data, spec, with_kept)
    except (ValueError, InputError):   # pa.ArrowInvalid and json's errors are ValueErrors
        if bad is None:
            raise
    return _read_jsonl_lines(data, spec, with_kept, bad)


def _read_jsonl_arrow(data: bytes, spec: PartitionSpec, with_kept: bool):
    import pyarrow.compute as pc
    import pyarrow.json as pj
    keep = spec.keep_columns if with_kept else ()
    types = dict(zip(spec.keep_columns, spec.keep_types))
    text_columns = _text_columns(spec)
    fields = [(c, pa.large_string()) for c in text_columns] + [
        (k, _type_from_str(types.get(k, "")) or pa.large_string())
        for k in keep if k not in text_columns]
    schema = pa.schema(fields)

    def parse(b: bytes) -> pa.Table:
        return pj.read_json(io.BytesIO(b), read_options=pj.ReadOptions(
            use_threads=False, block_size=int(min(max(len(b) + 1, 1 << 20), 2**31 - 1))),
            parse_options=pj.ParseOptions(explicit_schema=schema,
                                          unexpected_field_behavior="ignore"))

    whole = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [
        None, pa.py_buffer(np.array([0, len(data)], dtype=np.int64)), pa.py_buffer(data)])
    if _invalid_utf8_per_document(whole) is None:
        table = parse(data)
        columns = [table.column(c).combine_chunks() for c in text_columns]
    else:
        # Arrow's JSON reader refuses invalid UTF-8: parse the bytes with each ill-formed
        # sequence replaced, then put the original bytes back into the documents of the
        # lines that held them (parsed here, invalid bytes kept as surrogates).
        table = parse(data.decode("utf-8", "replace").encode("utf-8"))
        columns = []
        lines = lines_to_arrow(data)
        per_line = _invalid_utf8_per_document(lines)
        doc_of_line = np.cumsum(~_blank_lines(lines)) - 1
        for c in text_columns:
            texts = table.column(c).combine_chunks().view(pa.large_binary())
            if doc_of_line[-1] + 1 != len(texts):
                raise InputError(f"{spec.describe()}: {doc_of_line[-1] + 1} non-blank lines "
                                 f"but {len(texts)} JSON objects")
            mask = np.zeros(len(texts), dtype=bool)
            repl = []
            for li in np.flatnonzero(per_line):
                obj = json.loads(_decode_lossless(lines[int(li)].as_py()))
                value = obj.get(c) if isinstance(obj, dict) else None
                if isinstance(value, str):
                    mask[doc_of_line[li]] = True
                    repl.append(_encode_lossless(value))
            if repl:
                texts = pc.replace_with_mask(texts, pa.array(mask),
                                             pa.array(repl, type=pa.large_binary()))
            columns.append(texts)
    kept = None
    if keep:
        kept = _kept_table({k: table.column(k) for k in keep}, spec)
    return _documents(spec, columns), kept


_JSON_KINDS = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
               list: "an array", dict: "an object", type(None): "null"}


def _json_kind(value) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _kept_json_problem(value, type_name: str) -> str | None:
    """Why a JSON value cannot go into a kept column of the planned type (None: it can)."""
    if value is None:
        return None
    t = type_name or "large_string"
    ok = (isinstance(value, bool) if t == "bool" else
          isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63
          if t == "int64" else
          isinstance(value, (int, float)) and not isinstance(value, bool) if t == "double"
          else isinstance(value, str))
    return None if ok else f"holds {_json_kind(value)}, the column is {t}"


def _json_record(obj, spec: PartitionSpec, keep: Sequence[str], types: dict) -> tuple:
    """``(texts, kept values, problem)`` of one JSON object of a JSON Lines line or a JSON
    array item; ``problem`` (or None) says why it is not a document."""
    if not isinstance(obj, dict):
        return None, None, f"{_json_kind(obj)}, not an object"
    texts = []
    for c in _text_columns(spec):
        value = obj.get(c)
        if value is not None and not isinstance(value, str):
            return None, None, f"column {c!r} holds {_json_kind(value)}, not text"
        texts.append(value)
    kept = []
    for k in keep:
        value = obj.get(k)
        problem = _kept_json_problem(value, types.get(k, ""))
        if problem:
            return None, None, f"kept column {k!r} {problem}"
        kept.append(value)
    return texts, kept, None


def _json_documents(spec: PartitionSpec, keep: Sequence[str], records, bad: list):
    """``(documents, kept table)`` of ``records``, ``(texts, kept values, problem, where)``
    per document (:func:`_json_record`): a record with a problem is an empty document with
    null kept values, and ``(its index, where: problem)`` goes to ``bad``."""
    texts = {c: [] for c in _text_columns(spec)}
    kept = {k: [] for k in keep}
    for i, (values, kv, problem, where) in enumerate(records):
        if problem:
            bad.append((i, f"{where}: {problem}"))
            values, kv = [None] * len(texts), [None] * len(keep)
        for c, v in zip(texts, values):
            texts[c].append(v)
        for k, v in zip(keep, kv):
            kept[k].append(v)
    docs = _documents(spec, [pa.array([None if v is None else _encode_lossless(v)
                                       for v in texts[c]], type=pa.large_binary())
                             for c in _text_columns(spec)])
    if not keep:
        return docs, None
    types = dict(zip(spec.keep_columns, spec.keep_types))
    cols = {}
    for k in keep:
        t = _type_from_str(types.get(k, "")) or pa.large_string()
        if pa.types.is_large_string(t):
            cols[k] = pa.array([None if v is None else _encode_lossless(v) for v in kept[k]],
                               type=pa.large_binary())
        else:
            cols[k] = pa.array(kept[k], type=t)
    return docs, _kept_table(cols, spec)


def _read_jsonl_lines(data: bytes, spec: PartitionSpec, with_kept: bool, bad: list):
    """A JSON Lines partition parsed one line at a time (the row policy's path): every
    non-blank line is a document; a line that is not a JSON object, or whose text or kept
    column holds another type, is an empty document (null kept values) and
    ``(document, reason)`` in ``bad``."""
    keep = spec.keep_columns if with_kept else ()
    types = dict(zip(spec.keep_columns, spec.keep_types))
    lines = lines_to_arrow(data)

    def records():
        for li in np.flatnonzero(~_blank_lines(lines)):
            try:
                obj = json.loads(_decode_lossless(lines[int(li)].as_py()))
            except ValueError as e:
                yield None, None, f"not valid JSON ({e})", "JSON Lines line"
            else:
                yield (*_json_record(obj, spec, keep, types), "JSON Lines line")
    return _json_documents(spec, keep, records(), bad)


def _read_json_array(data: bytes, spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    if bad is not None:
        return _read_json_array_items(data, spec, with_kept, bad)
    keep = spec.keep_columns if with_kept else ()
    items = json.loads(_decode_lossless(data).lstrip("\ufeff"))
    if not isinstance(items, list):
        raise InputError(f"{spec.describe()}: a JSON array file holds one array, found a "
                         f"{type(items).__name__}")
    text_columns = _text_columns(spec)
    texts, kept = {c: [] for c in text_columns}, {k: [] for k in keep}
    for i, item in enumerate(items):
        if isinstance(item, dict):
            values = [item.get(c) for c in text_columns]
            for k in keep:
                kept[k].append(item.get(k))
        elif item is None or isinstance(item, str):
            values = [item]
            if keep:
                raise InputError(f"{spec.describe()}: item {i} is a string; keep_columns "
                                 f"needs objects")
            if spec.column_pair is not None:
                raise InputError(f"{spec.describe()}: item {i} is a string; column_pair "
                                 f"needs objects")
        else:
            raise InputError(f"{spec.describe()}: item {i} of the array is a "
                             f"{type(item).__name__}; the items are objects (the column "
                             f"{spec.column!r} is the text) or strings")
        for c, value in zip(text_columns, values):
            if value is None:
                texts[c].append(None)
            elif isinstance(value, str):
                texts[c].append(_encode_lossless(value))
            else:
                raise InputError(f"{spec.describe()}: item {i} has a {type(value).__name__} "
                                 f"in column {c!r}, not text")
    arr = _documents(spec, [pa.array(texts[c], type=pa.large_binary())
                            for c in text_columns])
    table = None
    if keep:
        types = dict(zip(spec.keep_columns, spec.keep_types))
        cols = {}
        for k in keep:
            t = _type_from_str(types.get(k, "")) or pa.large_string()
            try:
                cols[k] = pa.array(kept[k], type=t)
            except (pa.ArrowException, TypeError, OverflowError) as e:
                raise InputError(f"{spec.describe()}: kept column {k!r} does not hold {t} "
                                 f"values: {e}") from None
        table = _kept_table(cols, spec)
    return arr, table


def _read_json_array_items(data: bytes, spec: PartitionSpec, with_kept: bool, bad: list):
    """A JSON array under the row policy: an item that is not an object (or a string, a
    document itself, when no other column is read), or whose text or kept column holds
    another type, is an empty document recorded in ``bad``. An array that does not parse
    has no items to number: an error."""
    keep = spec.keep_columns if with_kept else ()
    types = dict(zip(spec.keep_columns, spec.keep_types))
    items = json.loads(_decode_lossless(data).lstrip("\ufeff"))
    if not isinstance(items, list):
        raise InputError(f"{spec.describe()}: a JSON array file holds one array, found a "
                         f"{type(items).__name__}")
    strings = not keep and spec.column_pair is None
    nulls = ([None] * len(_text_columns(spec)), [None] * len(keep), None)

    def records():
        for i, item in enumerate(items):
            if item is None:
                yield (*nulls, "")
            elif strings and isinstance(item, str):
                yield [item], [], None, ""
            else:
                yield (*_json_record(item, spec, keep, types), f"JSON array item {i}")
    return _json_documents(spec, keep, records(), bad)


def _read_csv(spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    import pyarrow.csv as pacsv
    keep = spec.keep_columns if with_kept else ()
    text_columns = _text_columns(spec)
    columns = text_columns + [k for k in keep if k not in text_columns]
    if spec.compression:
        source = pa.BufferReader(_read_all(spec.path, spec.compression))
        size = source.size()
    elif spec.header_end:
        header = _read_range(spec.path, 0, spec.header_end, spec.describe())
        body = _read_range(spec.path, spec.byte_start, spec.byte_end, spec.describe())
        source = pa.BufferReader(header + body)
        size = len(header) + len(body)
    elif is_url(spec.path):   # the object's bytes, fetched once (one range request)
        source = pa.BufferReader(_read_range(spec.path, 0, spec.byte_end, spec.describe()))
        size = source.size()
    else:
        source, size = spec.path, os.path.getsize(spec.path)
    read, parse, convert = _csv_options(spec.format, columns, size, spec.quoting)
    skipped = []
    if bad is not None:
        # the row policy: a record with another number of fields (an unterminated quote
        # too) is skipped by the reader and becomes an empty document here. ``number``
        # counts the records read, the header being 1.
        def invalid_row(row):
            n = row.actual_columns
            skipped.append((row.number - 2, f"CSV record has {n} field{'s' * (n != 1)}, "
                                            f"the header {row.expected_columns}"))
            return "skip"
        parse.invalid_row_handler = invalid_row
    table = pacsv.read_csv(source, read_options=read, parse_options=parse,
                           convert_options=convert)
    if skipped:
        table = _with_empty_rows(table, [i for i, _ in skipped])
        bad.extend(skipped)
    texts = _documents(spec, [table.column(c).combine_chunks() for c in text_columns])
    kept = _kept_table({k: table.column(k) for k in keep}, spec) if keep else None
    return texts, kept


def _with_empty_rows(table: pa.Table, rows: Sequence[int]) -> pa.Table:
    """``table`` with rows of nulls inserted so that they stand at positions ``rows`` (in
    increasing order) of the result."""
    n = table.num_rows + len(rows)
    take = np.full(n, -1, dtype=np.int64)
    mask = np.zeros(n, dtype=bool)
    mask[list(rows)] = True
    take[~mask] = np.arange(table.num_rows)
    return table.take(pa.array(take, mask=mask))


def _read_parquet(spec: PartitionSpec, with_kept: bool):
    import pyarrow.parquet as pq
    keep = spec.keep_columns if with_kept else ()
    text_columns = _text_columns(spec)
    columns = text_columns + [k for k in keep if k not in text_columns]
    table = pq.ParquetFile(_parquet_source(spec.path)).read_row_groups(list(spec.row_groups), columns=columns)
    docs = []
    for c in text_columns:
        col = table.column(c)
        if not _is_stringlike(col.type):
            raise InputError(f"column {c!r} of {spec.path!r} holds {col.type}, not text")
        # Dictionary, null and string_view columns become plain strings, as the tokenizer's
        # own input path does.
        docs.append(to_arrow(col).combine_chunks())
    texts = _documents(spec, docs)
    kept = _kept_table({k: table.column(k) for k in keep}, spec) if keep else None
    return texts, kept


def _text_columns(spec: PartitionSpec) -> list[str]:
    """The text columns a partition reads: ``column``, then ``column_pair`` for pairs."""
    return [spec.column] + ([spec.column_pair] if spec.column_pair is not None else [])


def _documents(spec: PartitionSpec, columns: list):
    """A partition's documents from its text columns: the one array, or for sentence pairs
    a two-column table named after the columns (the texts, then the second sequences)."""
    if spec.column_pair is None:
        return columns[0]
    return pa.Table.from_arrays(columns[:2], names=[spec.column, spec.column_pair])


def _read_documents(spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    """``(documents, kept, invalid)``: ``invalid`` is :func:`count_invalid_utf8` of the
    documents where reading found it (text), else None. ``bad``: the row policy
    (``on_bad_row: reject``): a row that cannot be read (a JSON Lines line that is not a
    JSON object, a CSV record with another number of fields, a non-text value in the text
    column) is an empty document (null) and ``(its index in the partition, the reason)`` is
    appended to ``bad``; None: such a row is an error."""
    try:
        if spec.format == "text":
            lines, invalid = _read_text_lines(spec)
            if spec.column_pair is not None:
                # only the empty partition of an input without documents (planning refuses
                # column_pair for text input)
                return _documents(spec, [lines, lines]), None, None
            return lines, None, invalid
        if spec.format == "jsonl":
            return (*_read_jsonl(_read_bytes(spec), spec, with_kept, bad), None)
        if spec.format == "json":
            return (*_read_json_array(_read_bytes(spec), spec, with_kept, bad), None)
        if spec.format in ("csv", "tsv"):
            return (*_read_csv(spec, with_kept, bad), None)
        if spec.format == "parquet":
            return (*_read_parquet(spec, with_kept), None)
    except JobError:
        raise
    except _READ_ERRORS as e:
        raise InputError(f"cannot read {spec.describe()} as {spec.format}: {e}") from None
    raise AssertionError(spec.format)


def _read(spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    """:func:`_read_documents` with the storage options of a URL partition."""
    if spec.storage_options is None:
        return _read_documents(spec, with_kept, bad)
    with storage.using(spec.storage_options):
        return _read_documents(spec, with_kept, bad)


def read_partition(spec: PartitionSpec, bad: list | None = None):
    """The documents of one partition as an Arrow string/binary array (nulls are empty
    documents; invalid UTF-8 stays as it is, for every format); for sentence pairs
    (``column_pair``) a two-column table of them, one row per pair. ``bad``: the row
    policy (:func:`_read`)."""
    return _read(spec, False, bad)[0]


def read_partition_with_columns(spec: PartitionSpec) -> tuple[pa.Array, pa.Table | None]:
    """``(documents, kept)``: the documents as :func:`read_partition` gives them, and a
    table of the partition's ``keep_columns`` (one row per document, with the types
    planned for every partition), or None when the job keeps no column."""
    return _read(spec, bool(spec.keep_columns))[:2]


def read_partition_with_counts(spec: PartitionSpec, bad: list | None = None) -> tuple:
    """``(documents, kept, (invalid_bytes, invalid_documents))``: what
    :func:`read_partition_with_columns` gives, and :func:`count_invalid_utf8` of the
    documents. A text partition's counts come from the pass that splits its lines (no
    second pass over the bytes); every other format counts after reading. ``bad``: the
    row policy (:func:`_read`)."""
    texts, kept, invalid = _read(spec, bool(spec.keep_columns), bad)
    return texts, kept, invalid if invalid is not None else count_invalid_utf8(texts)


def _count_text_lines(spec: PartitionSpec) -> int:
    """Lines of a text partition, read in 1 MB pieces into one reused buffer (the
    partition is never held whole; a compressed file is streamed)."""
    n, last, size = 0, _LF, spec.byte_end - spec.byte_start
    if spec.compression:
        with _open_stream(spec.path, spec.compression) as fh:
            while True:
                b = fh.read(_CHUNK)
                if not b:
                    break
                b = np.frombuffer(b, dtype=np.uint8)
                n += _ext.count_newlines(b)
                last = int(b[-1])
        return n + (last != _LF)
    buf = np.empty(min(size, _COUNT_PIECE), dtype=np.uint8)
    view = memoryview(buf)
    got = 0
    with open_input(spec.path, buffering=0) as fh:
        fh.seek(spec.byte_start)
        while got < size:
            k = fh.readinto(view[:min(len(buf), size - got)])
            if not k:
                break
            n += _ext.count_newlines(buf[:k])
            last = int(buf[k - 1])
            got += k
    view.release()
    if got != size:
        raise InputError(f"{spec.describe()}: the file is shorter than when the job was "
                         f"planned (it changed during the job)")
    return n + (last != _LF)


def count_partition(spec: PartitionSpec, lenient: bool = False) -> int:
    """Documents in a partition (the same rule as :func:`read_partition`); ``lenient``:
    under the row policy, where a bad row is a document too."""
    if spec.documents is not None:
        return spec.documents
    if spec.format == "text":
        try:
            with storage.using(spec.storage_options):
                return _count_text_lines(spec)
        except JobError:
            raise
        except _READ_ERRORS as e:
            raise InputError(f"cannot read {spec.describe()} as text: {e}") from None
    return len(read_partition(spec, [] if lenient else None))


def input_fingerprint(files: Sequence[InputFile]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        key = [f.path, f.format, f.size, f.mtime_ns]
        if f.compression or f.source:
            key += [f.compression, f.source]
        h.update(json.dumps(key).encode())
    return h.hexdigest()
