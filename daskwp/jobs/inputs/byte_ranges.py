"""Byte ranges of an input file: the next line start after a position, a text or JSON Lines
partition's planned cuts moved to line starts when it is read (planning reads none of the
file for them, :func:`exact_range`), and reading a planned range back, checking that the file did not
shrink since planning (a whole compressed file is read decompressed instead): whole, into a
buffer given or one of the host memory pool, or as a view of a memory map of a local file
(:func:`map_range`, :func:`read_partition_bytes`), or piece by piece into one buffer the
thread keeps (:func:`read_pieces`, the count pass). Within
:func:`keeping_counted_bytes` (a job on threads in this process) the count of a local
uncompressed range reads it whole and keeps it for the read that follows
(:func:`read_counted_bytes`): the file is read once, not twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import threading
from typing import Iterator

import numpy as np

from ... import _ext
from ...frames.storage import is_url, local_copy_place, local_path, open_input
from ..errors import InputError
from .compression import READ_ERRORS, open_stream, read_all
from .specs import PartitionSpec

#: The count pass reads a partition in pieces that stay in cache ...
PIECE = 1 << 20
# ... of a URL: each piece is one ranged GET, whose fixed cost (a round trip, the server's
# work per request) 1 MB pieces paid 64 times per 64 MB partition
PIECE_URL = 16 << 20
_ROUND = 1 << 20   # a kept buffer grows in whole MB
#: A mapped range is counted in pieces of this size, each dropped from the process once
#: counted (:func:`mapped_pieces`).
MAPPED_PIECE = 8 << 20
#: Looking for a line end: the first read's size (each further read four times bigger, up
#: to 16 MB; from a URL each read is one ranged GET).
_FIND_PIECE = 64 << 10

_thread = threading.local()


def thread_buffer(name: str, n: int) -> np.ndarray:
    """``n`` bytes of a buffer kept by this thread under ``name`` (grown when too small), so
    that each piece is read into memory that is already mapped. The bytes are valid until
    this thread asks for ``name`` again: nothing may hold a view of them after that. A
    bytearray, not NumPy's allocation (which asks for transparent huge pages)."""
    bufs = _thread.__dict__.setdefault("buffers", {})
    buf = bufs.get(name)
    if buf is None or len(buf) < n:
        bufs[name] = None   # the old one goes before the new one is mapped
        buf = bufs[name] = np.frombuffer(bytearray(-(-max(n, 1) // _ROUND) * _ROUND),
                                         dtype=np.uint8)
    return buf[:n]


def next_line_start(f, pos: int, size: int, chunk: int = 1 << 20) -> int:
    """The position just after the first b"\\n" at or after ``pos - 1`` (or ``size``)."""
    f.seek(pos - 1)
    while True:
        buf = f.read(chunk)
        if not buf:
            return size
        i = buf.find(b"\n")
        if i >= 0:
            return f.tell() - len(buf) + i + 1


def changed_error(what: str) -> InputError:
    """The error for a file shorter than when the job was planned."""
    return InputError(f"{what}: the file is shorter than when the job was planned (it "
                      f"changed during the job)")


def line_start_at(fh, pos: int, what: str) -> int:
    """The first line start at or after ``pos`` in the open file ``fh``: ``pos`` when it is
    0 or byte ``pos - 1`` is b"\\n", else just after the next b"\\n", else the end of the
    file (a file that ends before ``pos`` shrank since planning: an InputError)."""
    if pos == 0:
        return 0
    at, piece = pos - 1, _FIND_PIECE
    fh.seek(at)
    while True:
        buf = fh.read(piece)
        if not buf:
            if at < pos:
                raise changed_error(what)
            return at
        i = buf.find(b"\n")
        if i >= 0:
            return at + i + 1
        at += len(buf)
        piece = min(piece * 4, 16 << 20)


def exact_range(spec: PartitionSpec) -> PartitionSpec:
    """``spec`` with its byte range at line starts: a partition planned with
    ``cut_at_lines`` reads its cuts' neighbourhood (from a URL: a ranged GET at each cut,
    or its fetch spool's local copy) and moves each cut to the next line start; another
    partition as it is. A cut moves to the same place from the partitions on both sides of
    it, so the partitions of a file hold each line once."""
    if not spec.cut_at_lines:
        return spec
    what = spec.describe()
    try:
        with open_input(spec.path) as fh:
            start = line_start_at(fh, spec.byte_start, what)
            # no line starts before byte_end: the partition is empty
            end = start if start >= spec.byte_end else line_start_at(fh, spec.byte_end, what)
    except InputError:
        raise
    except READ_ERRORS as e:
        raise InputError(f"cannot read {what}: {e}") from None
    return dataclasses.replace(spec, byte_start=start, byte_end=end, cut_at_lines=False)


def read_range(path: str, start: int, end: int, what: str) -> bytes:
    with open_input(path) as fh:
        fh.seek(start)
        data = fh.read(end - start)
    if len(data) != end - start:
        raise changed_error(what)
    return data


def read_range_into(spec: PartitionSpec, buf: np.ndarray) -> np.ndarray:
    """``buf`` (uint8, the partition's size) filled with the partition's byte range by
    ``readinto`` (no copy, no allocation)."""
    size = spec.byte_end - spec.byte_start
    view = memoryview(buf)
    got = 0
    try:
        with open_input(spec.path, buffering=0) as fh:
            fh.seek(spec.byte_start)
            while got < size:
                k = fh.readinto(view[got:size])
                if not k:
                    break
                got += k
    finally:
        view.release()
    if got != size:
        raise changed_error(spec.describe())
    return buf


def map_range(spec: PartitionSpec) -> np.ndarray | None:
    """The partition's byte range of a local uncompressed file, or of a URL's local copy
    (its fetch spool file, :func:`~daskwp.frames.storage.local_copy`), as a read-only uint8
    array over a memory map of the file (the page cache's pages themselves: nothing is
    copied, nothing allocated but the map), unmapped when the array and its views are gone;
    None for a URL read from the store, a compressed file or an empty range, or where the
    file cannot be mapped: read those (:func:`read_range_into`). A file shorter than the
    range (it changed since planning): an InputError.

    Why: ``readinto`` copied the range out of the page cache into a buffer (7.6 ms of a
    64 MB text partition's 21.5 ms read stage), which the split then read again; the map
    costs its page faults (one per 64 KB or so, about 3 ms per 64 MB) and the split reads
    the page cache directly. The page cache is not touched otherwise (no
    ``MADV_SEQUENTIAL``, which would drop the pages behind the read: the same input is
    often read again, by the next run of a job). A spool file is mapped for the same
    reason: the S3 job's read stage copied every byte its count had fetched to the host's
    disk once more than the local job's.

    A file truncated while a reader is in the range's bytes (not before: checked here) is
    a SIGBUS in that process, as for any memory map; a file replaced by rename, or
    appended to, is not (nor is a spool file: complete under its name, never written
    again, removed by unlinking)."""
    size = spec.byte_end - spec.byte_start
    if spec.compression or size <= 0:
        return None
    if is_url(spec.path):
        place = local_copy_place(spec.path, spec.byte_start, spec.byte_end)
        if place is None:
            return None
        path, offset = place
    else:
        path, offset = local_path(spec.path), spec.byte_start
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None   # read_range_into says why (the same error as before)
    try:
        if os.fstat(fd).st_size < offset + size:
            raise changed_error(spec.describe())
        try:
            m = mmap.mmap(fd, offset + size - start, access=mmap.ACCESS_READ, offset=start)
        except (OSError, ValueError):
            return None   # a file system or file that cannot be mapped
    finally:
        os.close(fd)
    if hasattr(m, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
        # a file not in the page cache: one read-ahead of the whole range, not one per fault
        with contextlib.suppress(OSError):
            m.madvise(mmap.MADV_WILLNEED)
    return np.frombuffer(m, dtype=np.uint8, offset=offset - start, count=size)


def mapped_pieces(src: np.ndarray, piece: int = MAPPED_PIECE) -> Iterator[np.ndarray]:
    """``src`` (a view of a memory map, :func:`map_range`) in pieces of ``piece`` bytes,
    each piece's pages dropped from the process once the caller asks for the next
    (``MADV_DONTNEED``: the page cache keeps them): a count that reads the range once
    never holds it whole."""
    from ...backends.memory import madvise_range

    for pos in range(0, len(src), piece):
        part = src[pos:pos + piece]
        yield part
        if hasattr(mmap, "MADV_DONTNEED"):
            madvise_range(part, mmap.MADV_DONTNEED)


def read_bytes(spec: PartitionSpec) -> bytes:
    """The partition's bytes (decompressed for a compressed file)."""
    if spec.compression:
        return read_all(spec.path, spec.compression)
    return read_range(spec.path, spec.byte_start, spec.byte_end, spec.describe())


#: Partitions whose bytes the count kept, at most, within :func:`keeping_counted_bytes`
#: (the in-process scheduler counts a partition just before its write reads it: one a
#: thread is kept at a time; a count past this bound reads pieces, keeping nothing).
KEPT_PARTITIONS = 4

_kept_lock = threading.Lock()
_kept: dict | None = None   # (path, byte_start, byte_end) -> uint8 array; None: not kept
_kept_users = 0


@contextlib.contextmanager
def keeping_counted_bytes():
    """Within the block, in this process: the count of a local uncompressed partition reads
    its bytes whole into a host pool buffer and keeps it (:func:`read_counted_bytes`, at
    most :data:`KEPT_PARTITIONS` at once), and the next :func:`read_partition_bytes` of the
    same range takes it instead of reading the file again. For a job whose count and write
    tasks run in this process (threads): on a cluster the write may run on another worker,
    which would never take what this one kept. What is left when the last block ends (a
    failed job) is dropped.

    Why: the count pass read every byte of the input once more than the writes, a copy out
    of the page cache (~0.17 CPU s per GB of JSON Lines: 6% of the default Megatron
    command's CPU samples, with the write's read as much again)."""
    global _kept, _kept_users
    with _kept_lock:
        if _kept_users == 0:
            _kept = {}
        _kept_users += 1
    try:
        yield
    finally:
        with _kept_lock:
            _kept_users -= 1
            if _kept_users == 0:
                _kept = None


def _range_key(spec: PartitionSpec) -> tuple:
    return (spec.path, spec.byte_start, spec.byte_end)


def read_counted_bytes(spec: PartitionSpec) -> np.ndarray | None:
    """For the count of a partition (its exact range): within
    :func:`keeping_counted_bytes`, its bytes read whole into a host pool buffer and kept for
    :func:`read_partition_bytes`; None (nothing read) outside it, for a compressed file,
    a URL, an empty range, or when :data:`KEPT_PARTITIONS` are kept already: the count
    then reads pieces (:func:`read_pieces`)."""
    if spec.compression or is_url(spec.path) or spec.byte_end <= spec.byte_start:
        return None
    with _kept_lock:
        if _kept is None or len(_kept) >= KEPT_PARTITIONS:
            return None
    buf = read_range_into(spec, _ext.host_bytes(spec.byte_end - spec.byte_start))
    with _kept_lock:
        if _kept is not None and len(_kept) < KEPT_PARTITIONS:
            _kept[_range_key(spec)] = buf
    return buf


def _take_counted_bytes(spec: PartitionSpec) -> np.ndarray | None:
    with _kept_lock:
        return None if _kept is None else _kept.pop(_range_key(spec), None)


def read_partition_bytes(spec: PartitionSpec):
    """The partition's bytes for a reader that keeps no view of them once it returns: the
    bytes its count kept (:func:`read_counted_bytes`), when it did, without reading the
    file; else a local uncompressed range as a read-only view of a memory map of the file
    (:func:`map_range`: no copy out of the page cache, unmapped when the reader lets go of
    it), as is a URL's local copy (its fetch spool file); else (a URL read from the store)
    read into a buffer of the host memory pool (a uint8 array; freed, it
    goes back to the pool, and the next partition's read gets the already mapped block
    instead of a fresh allocation, whose page faults were 92.5% of a Parquet job's; a job
    that releases the pool after each partition, or a pool of size 0, gets fresh memory,
    and no worker keeps a partition-sized buffer outside the pool's limit); a compressed
    file decompressed into bytes."""
    if spec.compression:
        return read_all(spec.path, spec.compression)
    kept = _take_counted_bytes(spec)
    if kept is not None:
        return kept
    mapped = map_range(spec)
    if mapped is not None:
        return mapped
    return read_range_into(spec, _ext.host_bytes(spec.byte_end - spec.byte_start))


def _readinto(fh, view: memoryview) -> int:
    k = fh.readinto(view)
    return k or 0


def read_pieces(spec: PartitionSpec) -> Iterator[np.ndarray]:
    """The partition's bytes (decompressed for a compressed file) in pieces (of
    :data:`PIECE`, :data:`PIECE_URL` from a URL), each a uint8 array over one buffer this
    thread keeps (:func:`thread_buffer`): valid until the next piece. No piece is empty.
    The partition is never held whole."""
    piece = PIECE_URL if is_url(spec.path) else PIECE
    buf = thread_buffer("piece", piece)
    view = memoryview(buf)
    try:
        if spec.compression:
            with open_stream(spec.path, spec.compression) as fh:
                while k := _readinto(fh, view):
                    yield buf[:k]
            return
        size, got = spec.byte_end - spec.byte_start, 0
        with open_input(spec.path, buffering=0) as fh:
            fh.seek(spec.byte_start)
            while got < size:
                k = _readinto(fh, view[:min(piece, size - got)])
                if not k:
                    break
                got += k
                yield buf[:k]
        if got != size:
            raise changed_error(spec.describe())
    finally:
        view.release()
