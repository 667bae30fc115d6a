"""Plain text partitions, one document per line. A local byte range is split from a memory map of
the file into a buffer of the host memory pool (a URL's is read with one ``readinto`` into
that buffer and split there in place) by one native pass (``daskwp/kernels/text_lines.cpp``)
that also counts each line's invalid UTF-8 bytes, so the read stage copies the bytes once,
allocates nothing but the offsets and needs no second pass. Counting a partition's
lines reads a local range (or a URL's fetch spool file) from a memory map too, piece by
piece; a URL's read from the store (in big ranged GETs) or a compressed file's in pieces
into one buffer kept by the thread.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ... import _ext
from .byte_ranges import map_range, mapped_pieces, read_pieces, read_range_into
from .compression import read_all
from .specs import PartitionSpec


_LF = ord("\n")

#: Bytes of a mapped range split per native call, after which their pages leave the
#: process (:func:`_split_mapped`).
MAPPED_PIECE = 8 << 20


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


def _split_mapped(src: np.ndarray, out: np.ndarray) -> tuple[pa.Array, tuple[int, int]]:
    """:func:`_split_lines` of ``src``, a view of a memory map (:func:`map_range`), in
    pieces of about :data:`MAPPED_PIECE` bytes cut after a newline, each piece's pages
    dropped from the process's map once split (``MADV_DONTNEED``: the page cache keeps
    them). Split whole, the range's file pages and ``out`` were resident together at the
    split's end: a worker's peak RSS rose by the partition's size over the in-place
    split's. A piece ends after a newline, so no line or UTF-8 sequence spans two pieces
    and the result is the whole split's."""
    import mmap

    from ...backends.memory import madvise_range

    offsets, bad_bytes, bad_docs = [np.zeros(1, dtype=np.int64)], 0, 0
    pos = written = 0
    while pos < len(src):
        end = _piece_end(src, pos + MAPPED_PIECE)
        o, bad, counts = _ext.split_lines(src[pos:end], out[written:])
        offsets.append(o[1:] + written)
        bad_bytes += int(counts.sum())
        bad_docs += len(bad)
        written += int(o[-1])
        if hasattr(mmap, "MADV_DONTNEED"):
            madvise_range(src[pos:end], mmap.MADV_DONTNEED)
        pos = end
    return _lines_array(out, np.concatenate(offsets)), (bad_bytes, bad_docs)


def _piece_end(src: np.ndarray, at: int) -> int:
    """The end of a piece of ``src`` from about ``at``: just after the first newline at or
    after ``at`` (the end of ``src`` when there is none)."""
    n = len(src)
    step = 4096
    while at < n:
        hit = np.flatnonzero(src[at:at + step] == _LF)
        if len(hit):
            return at + int(hit[0]) + 1
        at += step
        step = min(step * 4, 1 << 20)
    return n


def lines_to_arrow(data: bytes) -> pa.Array:
    """Split UTF-8 bytes on b"\\n" only (one document per line; a final line without a
    newline is a document too) into an Arrow large_binary array, with the newlines removed.
    Bytes are not validated: invalid UTF-8 decodes to U+FFFD in the tokenizer.

    One native pass (``daskwp/kernels/text_lines.cpp``) copies the bytes less their
    newlines into a buffer of the host memory pool, which the array then holds."""
    src = np.frombuffer(data, dtype=np.uint8)
    return _split_lines(src, _ext.host_bytes(len(src)))[0]


def read_text_lines(spec: PartitionSpec) -> tuple[pa.Array, tuple[int, int]]:
    """``(lines, (invalid_bytes, invalid_documents))`` of a text partition.

    A local uncompressed byte range (or a URL's fetch spool file) is split straight from a
    memory map of the file (:func:`.byte_ranges.map_range`: the page cache's pages, no
    copy) into a buffer of the
    host memory pool (a freed partition's block, already mapped, is reused), which the
    lines array holds (so it cannot be a buffer reused by the next partition): the read
    stage allocates nothing else but the offsets. A range that is not mapped (a URL's read
    from the store) is read with one ``readinto`` into that buffer and split there in
    place."""
    if spec.compression:
        data = read_all(spec.path, spec.compression)
        src = np.frombuffer(data, dtype=np.uint8)
        return _split_lines(src, _ext.host_bytes(len(src)))
    out = _ext.host_bytes(spec.byte_end - spec.byte_start)
    src = map_range(spec)
    if src is not None:
        return _split_mapped(src, out)
    buf = read_range_into(spec, out)
    return _split_lines(buf, buf)


def count_text_lines(spec: PartitionSpec) -> int:
    """Lines of a text partition. A local uncompressed range, or a URL's local copy (its
    fetch spool file), is counted from a memory map of the file
    (:func:`.byte_ranges.map_range`) in pieces (:func:`.byte_ranges.mapped_pieces`), each
    piece's pages dropped from the process once counted (the page cache keeps them), as
    the read stage splits it; any other (a URL's read from the store, a compressed file's)
    is read in pieces into one buffer kept by the thread (:func:`.byte_ranges.read_pieces`:
    a compressed file is streamed through its decompressor). The partition is never held
    whole.

    Why: ``read()`` copied each 1 MB piece out of the page cache before the count read it
    again: 6.9 CPU ms per 64 MB partition, 4.1 from the map (the count itself is 2.5)."""
    src = map_range(spec)
    n, last = 0, _LF
    for piece in read_pieces(spec) if src is None else mapped_pieces(src, MAPPED_PIECE):
        n += _ext.count_newlines(piece)
        last = int(piece[-1])
    return n + (last != _LF)
