"""Megatron indexed datasets: the ``MMIDIDX`` ``.bin`` / ``.idx`` pair that
``megatron.core.datasets.indexed_dataset.IndexedDataset`` reads (NumPy only, no torch).

The format (megatron-core's ``_IndexWriter`` / ``_IndexReader``; version 1)
--------------------------------------------------------------------------
``PREFIX.bin``: the token ids of every sequence, one after another, in the token dtype, no
header. ``PREFIX.idx``, little-endian:

====================  ======================================================================
``MMIDIDX\\x00\\x00``   9 bytes of magic
version               uint64, 1
dtype code            uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
                      7 float32, 8 uint16 (:data:`DTYPE_CODES`)
sequence count S      uint64
document count D      uint64: documents + 1 (the document indices start with 0)
sequence lengths      S x int32, tokens per sequence
sequence pointers     S x int64, byte offset of each sequence in ``.bin``
document indices      D x int64, the sequence index where each document ends (cumulative)
sequence modes        S x int8, only in a multimodal dataset (never written here)
====================  ======================================================================

The token dtype is chosen as Megatron's ``DType.optimal_dtype(vocab_size)`` chooses it:
uint16 for a vocabulary of fewer than 65,500 ids, else int32 (:func:`token_dtype`).

Sequences and documents (:func:`document_sequences`) follow ``tools/preprocess_data.py``: a
sequence (a document, or a piece of one) without tokens is left out; a document left with no
sequence stays a document (its document index repeats the previous one), so document ``k`` of
a dataset is input row ``k`` (its logID); ``append_eod`` adds the end-of-document id to the
last sequence of every document that has one.
"""

from __future__ import annotations

import dataclasses
import errno
import mmap
import os
import struct
import threading
from typing import Sequence

import numpy as np

from ..core.options import env_value

__all__ = ["DTYPE_CODES", "INDEX_HEADER", "INDEX_VERSION", "OPTIMAL_DTYPE_LIMIT", "SLICE_BYTES",
           "append_file", "complete_file", "create_file", "document_sequences",
           "document_slices", "drop_cached_pages", "encode_pieces", "frame_pieces",
           "gather_pieces", "HashingWriter", "index_size", "megatron_sequences", "megatron_slices",
           "MegatronIndex", "merge_pairs", "merge_pairs_in", "merged_range_digest",
           "open_direct", "PairAppender", "read_index", "read_sequences", "sequences_of",
           "token_dtype", "unfinish_pair", "write_index", "write_pair", "write_pair_from"]

INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
#: Megatron's ``DType`` codes.
DTYPE_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3,
               np.dtype(np.int32): 4, np.dtype(np.int64): 5, np.dtype(np.float64): 6,
               np.dtype(np.float32): 7, np.dtype(np.uint16): 8}
_CODE_DTYPES = {c: d for d, c in DTYPE_CODES.items()}
#: ``DType.optimal_dtype``: uint16 below this many ids, else int32.
OPTIMAL_DTYPE_LIMIT = 65500
_FIXED = struct.calcsize("<9sQBQQ")   # 34 bytes before the arrays
_COPY_CHUNK = 1 << 24


def token_dtype(vocab_size: int) -> np.dtype:
    """The ``.bin`` dtype Megatron's ``DType.optimal_dtype(vocab_size)`` picks: uint16 when
    ``vocab_size < 65500``, else int32."""
    return np.dtype(np.uint16 if vocab_size < OPTIMAL_DTYPE_LIMIT else np.int32)


def index_size(sequences: int, documents: int) -> int:
    """Bytes of the ``.idx`` of ``sequences`` sequences and ``documents`` documents (a
    text dataset: no modes)."""
    return _FIXED + 12 * sequences + 8 * (documents + 1)


def _header(dtype, sequences: int, document_entries: int) -> bytes:
    dtype = np.dtype(dtype)
    if dtype not in DTYPE_CODES:
        raise ValueError(f"Megatron indexed datasets have no dtype {dtype}; allowed: "
                         f"{', '.join(str(d) for d in DTYPE_CODES)}")
    return struct.pack("<9sQBQQ", INDEX_HEADER, INDEX_VERSION, DTYPE_CODES[dtype],
                       sequences, document_entries)


def _pointers(lengths: np.ndarray, itemsize: int, start: int = 0) -> np.ndarray:
    """Byte offset of each sequence: ``start`` + the exclusive prefix sum of lengths x
    itemsize."""
    out = np.empty(len(lengths), dtype=np.int64)
    if len(lengths):
        out[0] = start
        np.cumsum(lengths[:-1], dtype=np.int64, out=out[1:])
        out[1:] *= itemsize
        out[1:] += start
    return out


def _check_lengths(lengths) -> np.ndarray:
    lengths = np.asarray(lengths)
    if len(lengths) and (lengths.min() < 0 or lengths.max() > np.iinfo(np.int32).max):
        raise ValueError(f"sequence lengths must be in [0, 2**31-1] (the .idx stores them "
                         f"as int32); got {int(lengths.min())}..{int(lengths.max())}")
    return lengths.astype(np.int32, copy=False)


def write_index(path: str, sequence_lengths, document_indices, dtype, *,
                digest=None, direct: bool = False, fsync: bool = False) -> None:
    """Write the ``.idx`` of a text dataset: ``sequence_lengths`` (tokens per sequence),
    ``document_indices`` (starting with 0, one more than the documents, non-decreasing,
    ending at the number of sequences) and the token ``dtype``. The bytes are those of
    megatron-core's ``_IndexWriter``. ``digest``: a hash object updated with them;
    ``direct``: written without the page cache where the file system allows it
    (:func:`create_file`); ``fsync``: written back before it returns."""
    _write_index_pieces(path, [sequence_lengths], [document_indices], dtype, digest=digest,
                        direct=direct, fsync=fsync)


def _write_index_pieces(path: str, sequence_lengths: list, document_indices: list, dtype, *,
                        digest=None, direct: bool = False, fsync: bool = False) -> None:
    """:func:`write_index` of the arrays whose consecutive pieces are the lists
    ``sequence_lengths`` and ``document_indices`` (a partition's slices' entries: written
    one after another, never concatenated; concatenated, they and the pointers were the
    largest arrays of a partition's write).

    Memory: the pointers of one piece of lengths at a time."""
    lengths = [_check_lengths(a) for a in sequence_lengths]
    docs = [np.asarray(a, dtype=np.int64) for a in document_indices]
    sequences = sum(len(a) for a in lengths)
    entries = sum(len(a) for a in docs)
    _check_document_indices(docs, sequences, entries)
    itemsize = np.dtype(dtype).itemsize
    raw = create_file(path, direct)
    try:
        fh = raw if digest is None else HashingWriter(raw, digest)
        _write_all(fh, _header(dtype, sequences, entries))
        for a in lengths:
            _write_array(fh, a)
        start = 0
        for a in lengths:
            _write_array(fh, _pointers(a, itemsize, start))
            start += int(a.sum(dtype=np.int64)) * itemsize
        for a in docs:
            _write_array(fh, a)
        complete_file(raw, fsync)
    finally:
        raw.close()


def _check_document_indices(docs: list, sequences: int, entries: int) -> None:
    """``docs`` (pieces of the document indices, ``entries`` in all) start at 0, never
    decrease and end at ``sequences``; ValueError otherwise."""
    docs = [a for a in docs if len(a)]
    ok = bool(docs) and docs[0][0] == 0 and docs[-1][-1] == sequences
    last = 0
    for a in docs if ok else ():
        if a[0] < last or (len(a) > 1 and bool(np.any(a[1:] < a[:-1]))):
            ok = False
            break
        last = a[-1]
    if not ok:
        head = docs[0][:3].tolist() if docs else []
        tail = docs[-1][-3:].tolist() if docs else []
        raise ValueError(f"document_indices must start at 0, never decrease and end at the "
                         f"number of sequences ({sequences}); got "
                         f"{head}...{tail} ({entries} entries)")


class HashingWriter:
    """A file object that updates ``digest`` with every buffer written to ``fh``, as far as
    it reached the file (a file's checksum as it is written, not read back); ``tell`` is
    ``fh``'s (for a writer that asks, as the native Parquet writer does)."""

    def __init__(self, fh, digest):
        self.fh, self.digest = fh, digest

    def write(self, data) -> int:
        n = self.fh.write(data)
        self.digest.update(memoryview(data).cast("B")[:n])    # what reached the file
        return n

    def tell(self) -> int:
        return self.fh.tell()


def _write_array(fh, a: np.ndarray) -> None:
    """Write the bytes of ``a`` (little-endian, C order) to ``fh`` without a copy (all of
    them: an unbuffered file's ``write`` may take fewer)."""
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    if a.size:
        _write_all(fh, a.reshape(-1))


def _write_all(fh, data) -> None:
    """Write every byte of ``data`` to ``fh`` (an unbuffered file's ``write`` may take
    fewer than given)."""
    view = memoryview(data).cast("B")
    while view:
        view = view[fh.write(view):]


def _pread_pieces(fh, offset: int, count: int, piece: int | None = None):
    """The ``count`` bytes of the open file ``fh`` (a file object or a descriptor) from
    ``offset``, in pieces of at most ``piece`` bytes (default 16 MB; its position stays).
    ValueError where it is shorter."""
    piece = piece or _COPY_CHUNK
    fd = fh if isinstance(fh, int) else fh.fileno()
    while count:
        buf = os.pread(fd, min(count, piece), offset)
        if not buf:
            name = f"file descriptor {fh}" if isinstance(fh, int) else fh.name
            raise ValueError(f"{name} ends {count} bytes early")
        yield buf
        offset += len(buf)
        count -= len(buf)


def write_pair(prefix: str, tokens: np.ndarray, sequence_lengths, document_indices, *,
               fsync: bool = False) -> None:
    """Write ``prefix.bin`` (``tokens``, in their dtype) and ``prefix.idx``."""
    tokens = np.ascontiguousarray(tokens)
    lengths = np.asarray(sequence_lengths)
    if int(lengths.sum(dtype=np.int64)) != len(tokens):
        raise ValueError(f"the sequence lengths add up to {int(lengths.sum())} tokens, "
                         f"the data holds {len(tokens)}")
    with open(prefix + ".bin", "wb") as fh:
        _write_array(fh, tokens)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    write_index(prefix + ".idx", lengths, document_indices, tokens.dtype)
    if fsync:
        with open(prefix + ".idx", "rb+") as fh:
            os.fsync(fh.fileno())


@dataclasses.dataclass
class MegatronIndex:
    """A ``.idx`` read back (arrays are views of a memory map of the file)."""

    path: str
    dtype: np.dtype
    sequence_lengths: np.ndarray     # int32
    sequence_pointers: np.ndarray    # int64
    document_indices: np.ndarray     # int64, documents + 1
    sequence_modes: np.ndarray | None = None   # int8, multimodal datasets only

    @property
    def sequences(self) -> int:
        return len(self.sequence_lengths)

    @property
    def documents(self) -> int:
        return len(self.document_indices) - 1

    @property
    def tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))


def read_index(path: str) -> MegatronIndex:
    """Read and check a ``.idx`` (header, version, dtype code, and a size that matches its
    counts, with or without the multimodal modes). ValueError names what is wrong."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(_FIXED)
    if len(head) < _FIXED or head[:9] != INDEX_HEADER:
        raise ValueError(f"{path}: not a Megatron index (no MMIDIDX header)")
    _, version, code, n, d = struct.unpack("<9sQBQQ", head)
    if version != INDEX_VERSION:
        raise ValueError(f"{path}: index version {version}, this reader knows version "
                         f"{INDEX_VERSION}")
    if code not in _CODE_DTYPES:
        raise ValueError(f"{path}: unknown dtype code {code}; known: "
                         f"{sorted(_CODE_DTYPES)}")
    body = 12 * n + 8 * d
    if size not in (_FIXED + body, _FIXED + body + n) or d < 1:
        raise ValueError(f"{path}: {size} bytes, but its header counts {n} sequences and "
                         f"{d} document indices ({_FIXED + body} bytes, or {_FIXED + body + n} "
                         f"with modes)")
    mm = np.memmap(path, mode="r", dtype=np.uint8)
    lengths = mm[_FIXED:_FIXED + 4 * n].view(np.int32)
    pointers = mm[_FIXED + 4 * n:_FIXED + 12 * n].view(np.int64)
    docs = mm[_FIXED + 12 * n:_FIXED + body].view(np.int64)
    modes = mm[_FIXED + body:].view(np.int8) if size > _FIXED + body else None
    return MegatronIndex(path, _CODE_DTYPES[code], lengths, pointers, docs, modes)


def read_sequences(prefix: str) -> tuple[MegatronIndex, list]:
    """The index of ``prefix`` and its sequences as NumPy arrays (a test and debugging
    reader; checks that the pointers follow the lengths and ``.bin`` has their size)."""
    idx = read_index(prefix + ".idx")
    data = np.fromfile(prefix + ".bin", dtype=idx.dtype)
    want = _pointers(idx.sequence_lengths, idx.dtype.itemsize)
    if not np.array_equal(want, idx.sequence_pointers) or len(data) != idx.tokens:
        raise ValueError(f"{prefix}: the pointers or the .bin size do not match the lengths")
    ends = np.cumsum(idx.sequence_lengths, dtype=np.int64)
    return idx, [data[e - k:e] for e, k in zip(ends, idx.sequence_lengths)]


def append_file(src, out) -> int:
    """Copy what is left of the open file ``src`` to the end of the open file ``out`` (both
    unbuffered); returns the bytes copied. In the kernel where it can (``copy_file_range``:
    no copy through this process, a reflink or server-side copy where the filesystem has
    one), else in 16 MB pieces."""
    copied = 0
    if hasattr(os, "copy_file_range"):
        while True:
            try:
                n = os.copy_file_range(src.fileno(), out.fileno(), 1 << 30)
            except OSError:   # not across these filesystems, or not at all: read + write
                break
            if n == 0:
                return copied
            copied += n
    while True:
        buf = src.read(_COPY_CHUNK)
        if not buf:
            return copied
        _write_all(out, buf)
        copied += len(buf)


def _copy_range(src, out, offset: int, count: int) -> None:
    """Copy ``count`` bytes of the open file ``src`` from ``offset`` to the end of the open
    file ``out`` (unbuffered): in the kernel where it can, else in 16 MB pieces."""
    if hasattr(os, "copy_file_range"):
        try:
            while count:
                n = os.copy_file_range(src.fileno(), out.fileno(), count, offset)
                if n == 0:
                    break
                offset += n
                count -= n
        except OSError:   # not across these filesystems, or not at all: read + write
            pass
    for buf in _pread_pieces(src, offset, count):
        _write_all(out, buf)


def drop_cached_pages(fd: int) -> bool:
    """Drop the page cache of the open file ``fd`` (its clean pages: call it once they are
    written back, after ``fsync``). Returns whether it could ask: where the system has no
    ``posix_fadvise``, or the file system takes no page cache advice, nothing is done.

    Why: pages a job writes and never reads again (a Parquet part, a Megatron part once
    merged, the merged pair) otherwise stay cached while every new page the job writes or
    allocates comes from memory it never touched, whose first touch costs several times the
    copy on a virtual machine; dropped, the next pages reuse them
    (benchmarks/results/megatron_write.md). At 10 GB a job's input and parts fill a 23 GB
    machine's page cache, and the memory later writes need then comes from reclaim in the
    threads that ask (benchmarks/results/pipeline_bench.md). Part writers commonly do this
    (RocksDB's ``bytes_per_sync``, PostgreSQL's ``backend_flush_after``)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return False
    try:
        advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:   # a file system without page cache advice: nothing to drop
        return False
    return True


#: Bytes of :class:`_DirectAppendFile`'s buffer: written to the file a whole buffer at a
#: time, at offsets and in sizes that are multiples of :data:`_DIRECT_ALIGN`.
_DIRECT_CHUNK = 8 << 20
#: Direct I/O's alignment of offsets, sizes and memory (a page: every block size a local
#: disk has, 512 or 4096 bytes, divides it).
_DIRECT_ALIGN = 4096


def open_direct(path: str, flags: int, mode: int = 0o644) -> int | None:
    """``path`` opened with ``O_DIRECT`` (no page cache: bytes written once, or read
    once, cost as much in fresh page-cache pages as in the copy into them); None where the
    platform or the file system refuses it (tmpfs: EINVAL), for the caller's buffered
    path."""
    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        return None
    try:
        return os.open(path, flags | direct, mode)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return None


#: Idle :class:`_DirectAppendFile` buffers, for the next file of this process (a fresh
#: mapping's first touch costs page faults; a worker writes two files a partition).
_idle_buffers: list = []
_idle_lock = threading.Lock()
#: The most idle buffers kept (one file of each thread that writes at once, as a rule).
_IDLE_BUFFERS_KEPT = 4


def _take_buffer() -> mmap.mmap:
    with _idle_lock:
        while _idle_buffers:
            buf = _idle_buffers.pop()
            if len(buf) == _DIRECT_CHUNK:
                return buf
            buf.close()   # pooled while the chunk size was another (a test's)
    buf = mmap.mmap(-1, _DIRECT_CHUNK, flags=mmap.MAP_PRIVATE)
    _ask_huge_pages(buf)
    return buf


def _ask_huge_pages(buf: mmap.mmap) -> bool:
    """Ask for transparent huge pages for a direct I/O buffer (``MADV_HUGEPAGE``), unless
    the option ``huge_pages`` (``DASKWP_HUGE_PAGES``) is false; returns whether it asked.

    Why: each direct read or write pins the buffer's pages for the device (the kernel's
    ``get_user_pages``): over 4 KB pages that was most of the system CPU of a part's writes
    and of the merge's copy (0.07 CPU s per GB each way; over 2 MB pages 0.015, this VM,
    kernel 6.18). Unlike an output array, a buffer is touched once and pooled
    (:data:`_idle_buffers`), so the cost of huge pages, a 2 MB zeroing and maybe a
    compaction at first touch, is paid once per buffer, not per partition."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or not hasattr(buf, "madvise") or env_value("huge_pages") is False:
        return False
    try:
        buf.madvise(advice)
    except OSError:   # a kernel without THP: 4 KB pages
        return False
    return True


def _give_buffer(buf: mmap.mmap) -> None:
    with _idle_lock:
        if len(_idle_buffers) < _IDLE_BUFFERS_KEPT and len(buf) == _DIRECT_CHUNK:
            _idle_buffers.append(buf)
            return
    buf.close()


def create_file(path: str, direct: bool = False, behind: bool = False):
    """A new, empty file at ``path`` (replacing one there) to write once, front to back:
    with ``direct``, a :class:`_DirectAppendFile` (no page cache) where the file system
    takes ``O_DIRECT``, else an unbuffered file. ``behind`` (with ``direct``): each full
    buffer written by a writer thread while the caller fills the next (write-behind).
    Complete it with :func:`complete_file`, then ``close`` it."""
    fh = _DirectAppendFile.open(path, behind=behind) if direct else None
    return fh if fh is not None else open(path, "wb", buffering=0)


def complete_file(fh, fsync: bool = False) -> None:
    """Write what :func:`create_file`'s ``fh`` holds to its file (with ``fsync``: to
    disk)."""
    if isinstance(fh, _DirectAppendFile):
        fh.flush()
    if fsync:
        os.fsync(fh.fileno())


def _read_direct(path: str, offset: int, count: int):
    """The ``count`` bytes of the file ``path`` from ``offset``, read with ``O_DIRECT``
    (no page cache: a part the merge reads once was written without it too) in aligned
    pieces of up to :data:`_DIRECT_CHUNK` bytes into a pooled buffer: yields views of it,
    each valid until the next (copy or write it before asking for more). Where the file
    system refuses ``O_DIRECT`` (at open, or at the first read), buffered reads. ValueError
    where the file is shorter."""
    fd = open_direct(path, os.O_RDONLY)
    if fd is not None:
        buf = _take_buffer()
        view = memoryview(buf)
        try:
            while count:
                at = offset - offset % _DIRECT_ALIGN
                want = min(_DIRECT_CHUNK,
                           -(-(offset - at + count) // _DIRECT_ALIGN) * _DIRECT_ALIGN)
                try:
                    got = os.preadv(fd, [view[:want]], at)
                except OSError as e:   # refused after all: buffered from here
                    if e.errno != errno.EINVAL:
                        raise
                    break
                k = min(got - (offset - at), count)
                if k <= 0:
                    raise ValueError(f"{path} ends {count} bytes early")
                yield view[offset - at:offset - at + k]
                offset += k
                count -= k
        finally:
            view.release()
            _give_buffer(buf)
            os.close(fd)
    if count:
        with open(path, "rb", buffering=0) as fh:
            yield from _pread_pieces(fh, offset, count)


class _DirectAppendFile:
    """Bytes appended to a file without the page cache (``O_DIRECT``): gathered in a
    page-aligned buffer of :data:`_DIRECT_CHUNK` bytes, written a whole buffer at a time;
    :meth:`flush` writes what the buffer holds, its unaligned tail padded to a block and the
    file then cut to the bytes appended, and keeps that tail in the buffer: the next write
    of that block writes it again with what follows. The file's size is the bytes appended
    after each :meth:`flush` (``fdatasync`` is the caller's). Duck-types an unbuffered file
    for :func:`_write_all` (``write``, ``fileno``, ``close``).

    Why: ``write`` into new page-cache pages (and dropping them again after the
    ``fdatasync``) was nearly all of a merge's CPU; a direct write copies nothing in the
    kernel. Where a write is refused after all (EINVAL), the file goes on buffered (the
    same bytes).

    ``open``: None where ``O_DIRECT`` is refused (use a buffered file); ``keep``: the bytes
    of an existing file kept (a resumed merge), its end cut after them; ``behind``: each
    full buffer written by a writer thread (:func:`_write_behind`) while the caller fills
    another, one write in flight (:meth:`flush` and :meth:`close` wait for it and raise
    its error).

    Memory: the buffer (:data:`_DIRECT_CHUNK`); with ``behind``, two."""

    def __init__(self, path: str, fd: int, keep: int | None = None, behind: bool = False):
        self.path = path
        self.fd = fd
        self.direct = True
        self._map = _take_buffer()
        self._buf = memoryview(self._map)
        self.size = self._base = self._fill = self._flushed = 0
        self._behind = behind
        self._pending = None   # the write in flight (``behind``): (future, map, view)
        if keep is not None:
            os.ftruncate(fd, keep)
        if keep:   # the tail of the last block kept goes back into the buffer
            self._base = keep - keep % _DIRECT_ALIGN
            with open(path, "rb", buffering=0) as fh:
                tail = b"".join(_pread_pieces(fh, self._base, keep - self._base))
            self._buf[:len(tail)] = tail
            self._fill = len(tail)
            self.size = self._flushed = keep

    @classmethod
    def open(cls, path: str, keep: int | None = None,
             behind: bool = False) -> "_DirectAppendFile | None":
        fd = open_direct(path, os.O_RDWR | os.O_CREAT | (0 if keep is not None else
                                                          os.O_TRUNC))
        return None if fd is None else cls(path, fd, keep, behind)

    @property
    def name(self) -> str:
        return self.path

    @property
    def behind(self) -> bool:
        """Whether its full buffers are written by a writer thread."""
        return self._behind

    def fileno(self) -> int:
        return self.fd

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        while view:
            k = min(len(view), _DIRECT_CHUNK - self._fill)
            self._buf[self._fill:self._fill + k] = view[:k]
            self._fill += k
            view = view[k:]
            if self._fill == _DIRECT_CHUNK:
                self._put_full()
        self.size += n
        return n

    def _put_full(self) -> None:
        """Write the full buffer and start the next: with ``behind``, by a writer thread
        (:func:`_write_behind`) while this one fills a second buffer; one such write in
        flight at a time."""
        if not self._behind:
            self._put(_DIRECT_CHUNK)
        else:
            self._wait()   # (its buffer back to the pool: the one taken next)
            self._pending = (_write_behind(self._put, _DIRECT_CHUNK, self._buf, self._base),
                             self._map, self._buf)
            self._map = _take_buffer()
            self._buf = memoryview(self._map)
        self._base += _DIRECT_CHUNK
        self._fill = 0

    def _wait(self) -> None:
        """Wait for the write in flight, if any, and pool its buffer; raises its error."""
        if self._pending is None:
            return
        future, buf_map, buf = self._pending
        self._pending = None
        try:
            future.result()
        finally:
            buf.release()
            _give_buffer(buf_map)

    def _put(self, nbytes: int, buf=None, base: int | None = None) -> None:
        """Write the first ``nbytes`` (aligned) of ``buf`` (default: the buffer) at
        ``base`` (default: the buffer's offset)."""
        buf = self._buf if buf is None else buf
        base = self._base if base is None else base
        done = 0
        while done < nbytes:
            try:
                done += os.pwrite(self.fd, buf[done:nbytes], base + done)
            except OSError as e:
                if e.errno != errno.EINVAL or not self.direct:
                    raise
                # refused after all (a file system that takes O_DIRECT at open only):
                # buffered from here, the same bytes
                import fcntl
                fcntl.fcntl(self.fd, fcntl.F_SETFL,
                            fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                self.direct = False

    def flush(self) -> None:
        """Write every byte appended to the file: the buffer's whole blocks, then its tail
        padded to a block (zeros) and the file cut to :attr:`size`. The tail stays in the
        buffer, at its start."""
        self._wait()
        if self.size == self._flushed:
            return
        self._flushed = self.size
        whole = self._fill - self._fill % _DIRECT_ALIGN
        if whole:
            self._put(whole)
            tail = self._fill - whole
            self._buf[:tail] = self._buf[whole:self._fill]
            self._base += whole
            self._fill = tail
        if self._fill:
            self._buf[self._fill:_DIRECT_ALIGN] = bytes(_DIRECT_ALIGN - self._fill)
            self._put(_DIRECT_ALIGN)
            os.ftruncate(self.fd, self.size)

    def close(self) -> None:
        """Close the file (after the write in flight, whose error it raises)."""
        try:
            self._wait()
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if self._map is not None:
                self._buf.release()
                _give_buffer(self._map)
                self._map = None


#: The thread pools of :func:`_write_behind` and :func:`_complete_behind`, by name (each made
#: at its first use): as many threads as the idle buffers kept, one write in flight for each
#: file written at once. Two pools: a completion waits for its file's writes.
_pools: dict = {}


def _pool(name: str):
    with _idle_lock:
        pool = _pools.get(name)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor
            pool = _pools[name] = ThreadPoolExecutor(_IDLE_BUFFERS_KEPT,
                                                     thread_name_prefix=name)
    return pool


def _write_behind(put, nbytes: int, buf, base: int):
    """``put(nbytes, buf, base)`` run by a writer thread: a future of it."""
    return _pool("daskwp-write-behind").submit(put, nbytes, buf, base)


def _complete_behind(fh, fsync: bool):
    """:func:`complete_file` of ``fh`` (a :class:`_DirectAppendFile` written behind) run by a
    thread of its own: a future of it. The caller leaves ``fh`` alone until it is done,
    then closes it."""
    return _pool("daskwp-complete-behind").submit(complete_file, fh, fsync)


def _forget_writers() -> None:
    """A forked child has none of its parent's threads: it makes its own pools."""
    global _pools
    _pools = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_writers)


def _pwrite_all(fd: int, data, offset: int) -> None:
    """Write every byte of ``data`` to the open file ``fd`` at ``offset``."""
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


class _DirectRegion:
    """Bytes written front to back into an open file from offset ``start`` (any), past
    what the file holds or not, without the page cache: whole blocks (:data:`_DIRECT_ALIGN`)
    through ``direct_fd`` (opened ``O_DIRECT``) a buffer (:data:`_DIRECT_CHUNK`) at a time,
    and the partial blocks at either end, whose other bytes are not this region's (the
    ``.idx`` sections before and after it), through ``fd`` (buffered): the first when
    the buffer is first written, the last by :meth:`close`. ``direct_fd`` None (or a
    write refused with EINVAL): every byte through ``fd``. :meth:`close` writes what is
    left; :meth:`discard` drops it.

    Memory: the buffer (:data:`_DIRECT_CHUNK`, pooled)."""

    def __init__(self, fd: int, direct_fd: int | None, start: int):
        self.fd, self.direct_fd = fd, direct_fd
        self.end = start
        self._map = _take_buffer() if direct_fd is not None else None
        self._buf = memoryview(self._map) if self._map is not None else None
        self._base = start - start % _DIRECT_ALIGN
        self._skip = self._fill = start - self._base   # of the first block: not this region's

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        if self._buf is None:
            _pwrite_all(self.fd, view, self.end)
        while self._buf is not None and view:
            k = min(len(view), _DIRECT_CHUNK - self._fill)
            self._buf[self._fill:self._fill + k] = view[:k]
            self._fill += k
            view = view[k:]
            self._filled()
        self.end += n
        return n

    def write_from(self, fd: int, offset: int, count: int) -> None:
        """Write ``count`` bytes of the open file ``fd`` from ``offset`` (read straight into
        the buffer: one copy). ValueError where it is shorter."""
        if self._buf is None:
            for buf in _pread_pieces(fd, offset, count):
                self.write(buf)
            return
        while count:
            k = min(count, _DIRECT_CHUNK - self._fill)
            got = os.preadv(fd, [self._buf[self._fill:self._fill + k]], offset)
            if not got:
                raise ValueError(f"file descriptor {fd} ends {count} bytes early")
            self._fill += got
            self.end += got
            offset += got
            count -= got
            self._filled()

    def _filled(self) -> None:
        if self._fill == _DIRECT_CHUNK:
            self._put(_DIRECT_CHUNK)
            self._base += _DIRECT_CHUNK
            self._fill = self._skip = 0

    def _put(self, nbytes: int) -> None:
        """Write the buffer's first ``nbytes`` (whole blocks) at its offset: the first
        block's bytes of this region buffered where it begins inside it, the rest direct."""
        lo = 0
        if self._skip:
            _pwrite_all(self.fd, self._buf[self._skip:_DIRECT_ALIGN], self._base + self._skip)
            lo = _DIRECT_ALIGN
        while lo < nbytes:
            if self.direct_fd is None:
                _pwrite_all(self.fd, self._buf[lo:nbytes], self._base + lo)
                return
            try:
                lo += os.pwrite(self.direct_fd, self._buf[lo:nbytes], self._base + lo)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                self.direct_fd = None   # refused after all: buffered, the same bytes

    def close(self) -> None:
        """Write what the buffer holds (its whole blocks direct, the last partial block
        buffered) and release it."""
        if self._buf is not None:
            whole = self._fill - self._fill % _DIRECT_ALIGN
            lo = self._skip
            if whole > self._skip:
                self._put(whole)
                lo = whole
            if self._fill > lo:
                _pwrite_all(self.fd, self._buf[lo:self._fill], self._base + lo)
        self.discard()

    def discard(self) -> None:
        """Release the buffer, unwritten."""
        if self._map is not None:
            self._buf.release()
            _give_buffer(self._map)
            self._map = self._buf = None


#: Index entries shifted at a time by :class:`PairAppender` (8 MB of int64).
_SHIFT_ENTRIES = 1 << 20
#: Pointers and document indices from which :class:`PairAppender` writes both at once
#: (two threads; fewer: one after the other).
_PARALLEL_ENTRIES = 1 << 16
#: Bytes of document indices (int64) a :class:`PairAppender` without ``keep`` holds in
#: memory instead of writing them to its section file (:meth:`PairAppender._store_documents`;
#: runs of consecutive indices, a dataset's whose documents are one sequence each, take
#: none of it).
_DOCUMENT_MEMORY = 64 << 20
#: Entries of a run of document indices made at a time (:func:`_write_run`).
_RUN_ENTRIES = 1 << 16


def _is_run(a: np.ndarray, buf: np.ndarray) -> bool:
    """Whether ``a`` (int64) is ``a[0], a[0] + 1, ...`` (checked ``len(buf)`` at a time,
    at most :data:`_RUN_ENTRIES`)."""
    n = len(a)
    if not n or int(a[-1]) - int(a[0]) != n - 1:
        return False
    first = int(a[0])
    for lo in range(0, n, len(buf)):
        piece = a[lo:lo + len(buf)]
        chunk = buf[:len(piece)]
        np.subtract(piece, _RUN_BASE[:len(piece)], out=chunk)
        chunk -= first + lo
        if chunk.any():
            return False
    return True


def _write_run(out, first: int, n: int, buf: np.ndarray) -> None:
    """Write ``first, first + 1, ..., first + n - 1`` (int64) to ``out``, ``len(buf)``
    entries at a time."""
    for lo in range(0, n, len(buf)):
        chunk = buf[:min(len(buf), n - lo)]
        chunk[:] = _RUN_BASE[:len(chunk)]
        chunk += first + lo
        _write_array(out, chunk)


_RUN_BASE = np.arange(_RUN_ENTRIES, dtype=np.int64)


def _write_shifted(out, a: np.ndarray, shift: int, buf: np.ndarray) -> None:
    """Write ``a + shift`` (int64) to ``out``, ``len(buf)`` entries at a time."""
    for lo in range(0, len(a), len(buf)):
        piece = a[lo:lo + len(buf)]
        chunk = buf[:len(piece)]
        np.add(piece, shift, out=chunk)
        _write_array(out, chunk)


def _section_sizes(sequences: int, documents: int, bin_bytes: int) -> dict:
    """The sizes of an unfinished :class:`PairAppender`'s three files."""
    return {".bin": bin_bytes, ".idx": _FIXED + 4 * sequences,
            ".idx.documents": 8 * (documents + 1)}


def _sections(prefix: str, finished: bool) -> list:
    """``(path, offset of entry 0, entry size)`` of three sections of a
    :class:`PairAppender`'s output, .bin bytes, lengths, document indices (after the
    leading 0): in its unfinished files, or (``finished``) in the pair. (The pointers
    follow from the lengths: written by :meth:`PairAppender.finish`.)"""
    if not finished:
        return [(prefix + ".bin", 0, 1), (prefix + ".idx", _FIXED, 4),
                (prefix + ".idx.documents", 8, 8)]
    with open(prefix + ".idx", "rb") as fh:
        head = fh.read(_FIXED)
    if len(head) < _FIXED or head[:9] != INDEX_HEADER:
        raise ValueError(f"{prefix}.idx: not a Megatron index (no MMIDIDX header)")
    n = struct.unpack("<9sQBQQ", head)[3]
    return [(prefix + ".bin", 0, 1), (prefix + ".idx", _FIXED, 4),
            (prefix + ".idx", _FIXED + 12 * n + 8, 8)]


def merged_range_digest(prefix: str, finished: bool, rng: dict, digest) -> None:
    """Update ``digest`` with the bytes of the dataset at ``rng`` (``{"sequences": [s0, s1],
    "documents": [d0, d1], "bin_bytes": [b0, b1]}``, what :meth:`PairAppender.append_data`
    returns) in the output of a :class:`PairAppender` at ``prefix`` (``finished``: the
    pair, else its unfinished files): its .bin bytes, lengths and document indices, the
    bytes and the order ``append_data`` hashes. ValueError when a file is shorter than the
    range."""
    spans = (rng["bin_bytes"], rng["sequences"], rng["documents"])
    for (path, base, size), (lo, hi) in zip(_sections(prefix, finished), spans):
        with open(path, "rb", buffering=0) as fh:
            for buf in _pread_pieces(fh, base + size * int(lo), size * (int(hi) - int(lo))):
                digest.update(buf)


def unfinish_pair(prefix: str, out_prefix: str, sequences: int, documents: int,
                  bin_bytes: int) -> None:
    """Turn the finished pair ``prefix`` (a :class:`PairAppender`'s) back into the
    unfinished files at ``out_prefix`` of its first datasets (``sequences``, ``documents``
    and ``bin_bytes`` of them), for ``PairAppender(out_prefix, resume=...)``: its document
    indices copied to the section file, the pair renamed (it is gone after)."""
    base = _sections(prefix, True)[2][1]
    with open(prefix + ".idx", "rb", buffering=0) as src, \
            open(out_prefix + ".idx.documents", "wb", buffering=0) as out:
        _write_array(out, np.zeros(1, dtype=np.int64))
        _copy_range(src, out, base, 8 * documents)
        os.fdatasync(out.fileno())
    os.replace(prefix + ".bin", out_prefix + ".bin")
    os.replace(prefix + ".idx", out_prefix + ".idx")


class PairAppender:
    """Concatenate Megatron datasets into ``out_prefix.bin`` / ``.idx``, one at a time in
    order (:meth:`append`), then :meth:`finish`: the bytes megatron-core's
    ``IndexedDatasetBuilder`` writes after ``add_index`` of each and ``finalize``.

    Each append copies the dataset's ``.bin`` data and sequence lengths in the kernel
    (``copy_file_range``; else read + write), and writes its document indices shifted by
    what came before (the ``.idx`` keeps its lengths in place; the indices go to a section
    file, ``out_prefix.idx.documents``, copied after them by :meth:`finish`, which first
    writes the sequence pointers from the lengths: the only work left once every dataset is
    appended).
    :meth:`plan_index` with the counts the dataset will end with (known before its last
    datasets are appended) starts that work early: :meth:`write_ahead` then writes the
    pointers and document indices of what is appended so far at their places in the
    ``.idx`` for those counts (a job's merge calls it while it waits for its next
    partition), and :meth:`finish` writes only what is left; a dataset past those counts
    drops the plan, and :meth:`finish` with other counts writes them all again.
    :meth:`close` removes the section files (and, before :meth:`finish`, the output pair;
    with ``keep``, nothing before :meth:`finish`: ``resume`` = ``(sequences, documents,
    bin_bytes, dtype)`` then reopens the three files, cut to the datasets they held then).
    :meth:`append_data` appends a dataset from memory.
    With ``fsync`` (a job's merge) each append writes the pair back and then drops the
    cached pages of the pair and of the dataset's ``.bin`` (:func:`drop_cached_pages`).
    With ``direct`` the ``.bin`` is written without the page cache
    (:class:`_DirectAppendFile`; buffered where the file system refuses ``O_DIRECT``:
    :attr:`bin_direct` says which), its last block written again by the next append, and
    each appended dataset's ``.bin`` is read without it too (:func:`_read_direct`): a
    cluster's part writers write their pairs so (``write_pair_from(direct=True)``), and
    a page-cache copy on either side costs a fresh page per 4 KB, several times the copy
    on a virtual machine (benchmarks/results/megatron_write.md).

    Without ``keep`` the document indices appended before the plan's region has them are
    held in memory, up to :data:`_DOCUMENT_MEMORY` bytes, runs of consecutive indices as
    two numbers (:meth:`_store_documents`); past that they go to the section file.

    Memory: 8 MB of shifted entries at a time; document indices up to
    :data:`_DOCUMENT_MEMORY` (without ``keep``)."""

    def __init__(self, out_prefix: str, *, fsync: bool = False, keep: bool = False,
                 resume: tuple | None = None, direct: bool = False):
        self.prefix = out_prefix
        self.fsync = fsync
        self.keep = keep
        self.direct = direct
        self.dtype: np.dtype | None = None
        self.sequences = self.documents = self.bin_bytes = 0
        self.finished = False
        self._buf = np.empty(_SHIFT_ENTRIES, dtype=np.int64)
        self._files = []
        # plan_index: the counts planned, the two regions being written (pointers,
        # document indices), the sequences, document entries and .bin bytes they hold
        self._plan: tuple | None = None
        self._planned = False
        self._regions: list = []
        self._direct_idx: int | None = None
        self._ahead = (0, 0, 0)
        self._ahead_lock = threading.Lock()
        self._helper = None     # the document indices' writer thread (_write_regions)
        self._lengths: np.ndarray | None = None
        # the first document index written only to the plan's region, not the section file
        # (_append_documents); None: the section file holds them all
        self._region_only: int | None = None
        # the document indices after the section file's (_store_documents): its entries
        # (the leading 0 the first), the pieces after them in memory ((first entry, int64
        # array) or (first entry, (first index, count)): a run), their entries and the
        # bytes of their arrays
        self._file_entries = 1
        self._memory: list = []
        self._memory_entries = 0
        self._memory_bytes = 0
        self._memory_limit = 0 if keep else _DOCUMENT_MEMORY
        self._run_buf = np.empty(_RUN_ENTRIES, dtype=np.int64)
        # with keep and direct: the section file written without the page cache, and the
        # indices it gets also held in memory (_mirror_documents) for the .idx: entries
        # [_mirror_lo, _mirror_hi) as pieces like _memory's; the file read back (through
        # a buffered descriptor of its own, _doc_read) only for the others
        direct_doc = keep and direct
        self._mirror: list | None = [] if direct_doc else None
        self._mirror_lo = self._mirror_hi = 0
        self._mirror_bytes = 0
        self._doc_read: int | None = None
        if resume is not None:   # the files hold datasets already: cut to them, go on
            self.sequences, self.documents, self.bin_bytes, dtype = resume
            self.dtype = None if dtype is None else np.dtype(dtype)
            sizes = _section_sizes(self.sequences, self.documents, self.bin_bytes)
            for ext in (".bin", ".idx", ".idx.documents"):
                fh = self._open(ext, "r+b", direct and ext == ".bin" or
                                direct_doc and ext == ".idx.documents", sizes[ext])
                if not isinstance(fh, _DirectAppendFile):
                    fh.truncate(sizes[ext])
                    fh.seek(0, os.SEEK_END)
            self._bin, self._idx, self._doc = (f for _, f in self._files)
            self._file_entries = self.documents + 1
            self._mirror_lo = self._mirror_hi = self._file_entries
            return
        self._bin = self._open(".bin", direct=direct)
        self._idx = self._open(".idx")
        self._doc = self._open(".idx.documents", direct=direct_doc)
        self._idx.write(bytes(_FIXED))          # the header, written by finish
        _write_array(self._doc, np.zeros(1, dtype=np.int64))
        self._mirror_lo = self._mirror_hi = 1

    def _open(self, ext: str, mode: str = "w+b", direct: bool = False,
              keep: int | None = None):
        fh = _DirectAppendFile.open(self.prefix + ext, keep) if direct else None
        if fh is None:   # (O_DIRECT refused: buffered)
            fh = open(self.prefix + ext, mode, buffering=0)
        self._files.append((ext, fh))
        return fh

    @property
    def bin_direct(self) -> bool:
        """Whether the ``.bin`` is written without the page cache (``direct``)."""
        return isinstance(self._bin, _DirectAppendFile) and self._bin.direct

    def _check_dtype(self, dtype, what: str) -> None:
        if self.finished:
            raise ValueError(f"{self.prefix} is finished; cannot append {what}")
        if self.dtype is None:
            self.dtype = np.dtype(dtype)
        elif np.dtype(dtype) != self.dtype:
            raise ValueError(f"{what} holds {np.dtype(dtype)} tokens, the datasets before it "
                             f"{self.dtype}: datasets of one dtype only")

    def append_data(self, tokens: Sequence[np.ndarray], sequence_lengths,
                    document_ends, dtype, digest=None) -> dict:
        """Append a dataset held in memory: ``tokens`` (arrays of ``dtype``, one after
        another), its ``sequence_lengths`` and ``document_ends`` (the sequence index where
        each of its documents ends, counted from its first sequence: the document indices
        without the leading 0). ``digest``: a hash object updated with the bytes appended
        to the three sections (:func:`merged_range_digest`'s order). Returns the dataset's
        range (:func:`merged_range_digest`'s arguments)."""
        self._check_dtype(dtype, "a dataset")
        lengths = _check_lengths(sequence_lengths)
        ends = np.asarray(document_ends, dtype=np.int64)
        self._past_plan(len(lengths), len(ends))
        with self._ahead_lock:
            if self._region_only is not None:   # (after append: the section file whole again)
                self._region_to_section()
            self._spill()   # (the indices held in memory first: written in order)
        start = (self.sequences, self.documents, self.bin_bytes)
        n_bytes = 0

        def sink(fh):
            return HashingWriter(fh, digest) if digest is not None else fh
        for t in tokens:
            if t.dtype != self.dtype:
                raise ValueError(f"a piece holds {t.dtype} tokens, the dataset {self.dtype}")
            _write_array(sink(self._bin), t)
            n_bytes += t.nbytes
        _write_array(sink(self._idx), lengths)
        # shifted a buffer at a time (an array of them was fresh memory each partition)
        _write_shifted(sink(self._doc), ends, self.sequences, self._buf)
        self._mirror_documents(ends, self.sequences)
        self.sequences += len(lengths)
        self.documents += len(ends)
        self._file_entries += len(ends)
        self.bin_bytes += n_bytes
        self._sync(sections=self.keep)
        return {"sequences": [start[0], self.sequences],
                "documents": [start[1], self.documents],
                "bin_bytes": [start[2], self.bin_bytes]}

    def _sync(self, sections: bool = False) -> None:
        """With ``fsync``: write the pair back (``sections``: the section files too, which
        a resumed merge reads) and drop its cached pages."""
        if not self.fsync:
            return
        for ext, fh in self._files:
            section = ext.startswith(".idx.")
            if sections or not section:
                direct = isinstance(fh, _DirectAppendFile)
                if direct:
                    fh.flush()
                os.fdatasync(fh.fileno())
                # the sections (and, with keep or a plan, the lengths: the pointers
                # follow from them) are read again by finish or write_ahead: kept
                if not section and not direct and not (
                        (self.keep or self._plan is not None) and ext == ".idx"):
                    drop_cached_pages(fh.fileno())

    def append(self, prefix: str) -> None:
        """Append the dataset ``prefix`` (checked: the dtype of the others, a text dataset,
        its pointers following its lengths and its ``.bin`` of their size)."""
        ix = read_index(prefix + ".idx")
        self._check_dtype(ix.dtype, ix.path)
        if ix.sequence_modes is not None:
            raise ValueError(f"{ix.path} is multimodal; only text datasets are merged")
        size = ix.tokens * ix.dtype.itemsize
        have = os.path.getsize(prefix + ".bin")
        if have != size:
            raise ValueError(f"{prefix}.bin holds {have} bytes, its index {size}")
        n = ix.sequences
        self._past_plan(n, ix.documents)
        if n and (ix.sequence_pointers[0] != 0 or int(ix.sequence_pointers[-1]) +
                  int(ix.sequence_lengths[-1]) * ix.dtype.itemsize != size):
            raise ValueError(f"{ix.path}: its sequence pointers do not follow its lengths")
        if isinstance(self._bin, _DirectAppendFile):
            # read without the page cache too (a cluster's part, written so), copied into
            # the buffer of the direct writes
            for piece in _read_direct(prefix + ".bin", 0, size):
                self._bin.write(piece)
        else:
            with open(prefix + ".bin", "rb", buffering=0) as src:
                append_file(src, self._bin)
        with open(prefix + ".idx", "rb", buffering=0) as src:
            _copy_range(src, self._idx, _FIXED, 4 * n)
        self._append_documents(ix.document_indices[1:])
        self.sequences += n
        self.documents += ix.documents
        self.bin_bytes += size
        del ix   # its memory map: mapped pages are not dropped
        # written back a dataset at a time, not all at the end; the section files are
        # copied into the .idx (fsync'ed) by finish and removed: synced here (but for a
        # merge kept to resume) they were written to disk once more than their bytes need
        self._sync(sections=self.keep)
        if self.fsync and not isinstance(self._bin, _DirectAppendFile):
            # the part's .bin: fsync'ed by its writer, read once, here (its .idx is read
            # again when the job checks the parts: kept)
            with open(prefix + ".bin", "rb", buffering=0) as src:
                drop_cached_pages(src.fileno())

    def _append_documents(self, ends: np.ndarray) -> None:
        """Write a dataset's document indices (``ends``: its own, without the leading 0)
        shifted by the sequences before it: with a plan (:meth:`plan_index`) whose region
        holds every index before them already, straight into it (in a merge that keeps no
        state to resume: not ``keep``), else held (:meth:`_store_documents`: in memory, or
        the section file) and written to the region by :meth:`write_ahead` or
        :meth:`finish`.

        Why: the section file's bytes went through the page cache twice (written, read
        back) on the driver's merge thread: with the region caught up, a dataset's indices
        are written once. The plan dropped (:meth:`drop_plan`, or counts other than the
        plan's at :meth:`finish`), the indices written so are copied to the section file
        first (:meth:`_region_to_section`)."""
        with self._ahead_lock:
            seq, doc, nbytes = self._ahead
            if self._plan is not None and not self.keep and doc == self.documents + 1:
                if self._region_only is None:
                    self._region_only = doc
                _write_shifted(self._regions[1], ends, self.sequences, self._buf)
                self._ahead = (seq, doc + len(ends), nbytes)
                return
            self._store_documents(ends, self.sequences)

    def _store_documents(self, ends: np.ndarray, shift: int) -> None:
        """(Under the lock) keep ``ends + shift``, the document indices after those held,
        in memory (without ``keep``): a run of consecutive indices (each document one
        sequence: the datasets of a merge with no ``document_separator``) as its first
        index and count, other indices as an array while the arrays held stay within
        :data:`_DOCUMENT_MEMORY`; else (and with ``keep``) they go to the section file,
        after what memory holds (:meth:`_spill`).

        Why: on a cluster the plan comes once most parts are appended (the dataset's
        total from the pass over the last eighth of the partitions): their indices went
        through the section file (written, read back by :meth:`write_ahead`: 190 MB per
        2 GB of JSON Lines, copied twice through the page cache on the merge thread)."""
        n = len(ends)
        if not n:
            return
        if self._memory_limit:
            at = self._file_entries + self._memory_entries
            if _is_run(ends, self._run_buf):
                first = int(ends[0]) + shift
                if self._memory:
                    start, last = self._memory[-1]
                    if isinstance(last, tuple) and last[0] + last[1] == first:
                        self._memory[-1] = (start, (last[0], last[1] + n))
                        self._memory_entries += n
                        return
                self._memory.append((at, (first, n)))
                self._memory_entries += n
                return
            if self._memory_bytes + 8 * n <= self._memory_limit:
                self._memory.append((at, ends + shift))
                self._memory_entries += n
                self._memory_bytes += 8 * n
                return
        self._spill()
        _write_shifted(self._doc, ends, shift, self._buf)
        self._mirror_documents(ends, shift)
        self._file_entries += n

    def _spill(self) -> None:
        """(Under the lock) write the document indices held in memory to the section file
        (which then holds them all)."""
        for _, piece in self._memory:
            if isinstance(piece, tuple):
                _write_run(self._doc, piece[0], piece[1], self._run_buf)
            else:
                _write_array(self._doc, piece)
        self._file_entries += self._memory_entries
        self._memory = []
        self._memory_entries = self._memory_bytes = 0

    def _documents_to(self, region, lo: int, hi: int) -> None:
        """Write the document indices' entries ``lo`` to ``hi`` (the leading 0 entry 0)
        to ``region``: from the section file, then from memory."""
        top = min(hi, self._file_entries)
        # the section file's entries: those the mirror holds from memory, the others read
        for a, b, held in ((lo, min(top, self._mirror_lo), False),
                           (self._mirror_lo, min(top, self._mirror_hi), True),
                           (self._mirror_hi, top, False)):
            a = max(a, lo)
            if b <= a:
                continue
            if held:
                lo = self._pieces_to(region, self._mirror, a, b)
            else:
                region.write_from(self._section_fd(), 8 * a, 8 * (b - a))
                lo = b
        lo = self._pieces_to(region, self._memory, max(lo, top), hi)
        if lo < hi:
            raise ValueError(f"{self.prefix}: document indices {lo} to {hi} are not held")

    def _pieces_to(self, region, pieces: list, lo: int, hi: int) -> int:
        """Write the entries ``lo`` to ``hi`` that ``pieces`` (``_memory``'s or
        ``_mirror``'s: ``(first entry, int64 array or (first index, count))``, in order)
        hold to ``region``; returns the entry after the last written."""
        for start, piece in pieces:
            if lo >= hi:
                break
            size = piece[1] if isinstance(piece, tuple) else len(piece)
            if start + size <= lo:
                continue
            a, b = lo - start, min(hi, start + size) - start
            if isinstance(piece, tuple):
                # (the lock held: _store_documents waits)
                _write_run(region, piece[0] + a, b - a, self._run_buf)
            else:
                region.write(piece[a:b])
            lo = start + b
        return lo

    def _mirror_documents(self, ends: np.ndarray, shift: int) -> None:
        """(With keep and direct) hold ``ends + shift``, the entries just written to the
        section file, in memory too (:meth:`_documents_to` takes them there): a run of
        consecutive indices as two numbers, other indices as an array while the arrays
        held stay within :data:`_DOCUMENT_MEMORY`; past that the mirror stops (the file
        is read back from there).

        Why: in-process (:class:`daskwp.jobs.megatron.InlineMerge`, whose merge keeps its
        files to resume) every index went through the page cache: written to the section
        file (fresh cached pages, 8 bytes a document: most of the merge thread's system
        CPU with the lengths), written back by each append's fdatasync, read back for the
        ``.idx``. Now that file is written without the page cache and read back only for
        the entries the mirror lacks (of a resumed run's earlier partitions)."""
        if self._mirror is None or self._mirror_hi != self._file_entries or not len(ends):
            return   # (none, or stopped: the entries before these are not all held)
        n = len(ends)
        if _is_run(ends, self._run_buf):
            first = int(ends[0]) + shift
            if self._mirror and isinstance(self._mirror[-1][1], tuple):
                start, (f0, k) = self._mirror[-1]
                if f0 + k == first:
                    self._mirror[-1] = (start, (f0, k + n))
                    self._mirror_hi += n
                    return
            self._mirror.append((self._mirror_hi, (first, n)))
        elif self._mirror_bytes + 8 * n <= _DOCUMENT_MEMORY:
            self._mirror.append((self._mirror_hi, ends + shift))
            self._mirror_bytes += 8 * n
        else:
            return
        self._mirror_hi += n

    def _section_fd(self) -> int:
        """A descriptor to read the section file: its own, or (written without the page
        cache) a buffered one, once what its buffer holds is written."""
        if not isinstance(self._doc, _DirectAppendFile):
            return self._doc.fileno()
        self._doc.flush()
        if self._doc_read is None:
            self._doc_read = os.open(self.prefix + ".idx.documents", os.O_RDONLY)
        return self._doc_read

    def _region_to_section(self) -> None:
        """(Under the lock, before the plan's regions are dropped) copy the document
        indices that only the plan's region holds (:meth:`_append_documents`) to the end of
        the section file, which then holds them all again."""
        lo, self._region_only = self._region_only, None
        if lo is None or self._plan is None:
            return
        self._spill()
        self._regions[1].close()   # (its bytes in the .idx; dropped after, as before)
        start = _FIXED + 12 * self._plan[0] + 8 * lo
        _copy_range(self._idx, self._doc, start, 8 * (self.documents + 1 - lo))
        self._file_entries = self.documents + 1

    def plan_index(self, sequences: int, documents: int) -> bool:
        """Expect the dataset to end with ``sequences`` sequences and ``documents``
        documents: :meth:`write_ahead` may write the ``.idx``'s pointers and document
        indices at their places for those counts (once; not below what is appended).
        Returns whether the plan is taken."""
        with self._ahead_lock:
            if self.finished or self._planned or sequences < self.sequences or \
                    documents < self.documents:
                return False
            self._planned = True
            self._start_regions(sequences, documents)
            return True

    def _start_regions(self, sequences: int, documents: int) -> None:
        self._plan = (sequences, documents)
        self._ahead = (0, 0, 0)
        if self.direct and self._direct_idx is None:
            self._direct_idx = open_direct(self.prefix + ".idx", os.O_WRONLY)
        fd = self._idx.fileno()
        self._regions = [_DirectRegion(fd, self._direct_idx, _FIXED + 4 * sequences),
                         _DirectRegion(fd, self._direct_idx, _FIXED + 12 * sequences)]

    def drop_plan(self) -> None:
        """Forget :meth:`plan_index` (after a failed :meth:`write_ahead`: :meth:`finish`
        writes every pointer and document index)."""
        with self._ahead_lock:
            self._region_to_section()
            self._drop_plan()

    def _drop_plan(self) -> None:
        if self._helper is not None:
            self._helper.shutdown()
            self._helper = None
        for r in self._regions:
            r.discard()
        self._regions = []
        self._plan = None
        if self._direct_idx is not None:
            os.close(self._direct_idx)
            self._direct_idx = None

    def _past_plan(self, sequences: int, documents: int) -> None:
        """Before a dataset of ``sequences`` and ``documents`` is appended: the plan is
        dropped when they go past it (its regions would then hold lengths)."""
        plan = self._plan
        if plan is not None and (self.sequences + sequences > plan[0] or
                                 self.documents + documents > plan[1]):
            self.drop_plan()

    def ahead_pending(self) -> bool:
        """Whether :meth:`write_ahead` has entries to write."""
        plan = self._plan
        return (plan is not None and not self.finished and
                (self._ahead[0] < self.sequences or self._ahead[1] < self.documents + 1))

    def write_ahead(self, entries: int | None = None) -> bool:
        """Write up to ``entries`` (default all) pointers and as many document indices of
        the datasets appended so far to their places in the ``.idx`` (:meth:`plan_index`);
        returns whether some are left. Nothing without a plan. Its own lock: another
        thread may :meth:`finish` (it waits for this)."""
        with self._ahead_lock:
            if self._plan is None or self.finished:
                return False
            self._write_regions(entries)
            return self.ahead_pending()

    def _write_regions(self, entries: int | None) -> None:
        """The pointers and document indices up to ``entries`` more of each (None: all);
        the indices on a thread of their own while this one makes and writes the
        pointers, when both are many (two writers: the disk takes more at once)."""
        seq, doc, nbytes = self._ahead
        hi = self.sequences if entries is None else min(self.sequences, seq + entries)
        top = self.documents + 1
        hi_doc = top if entries is None else min(top, doc + entries)
        docs = None
        if hi_doc > doc:
            args = (self._regions[1], doc, hi_doc)
            if hi - seq >= _PARALLEL_ENTRIES and hi_doc - doc >= _PARALLEL_ENTRIES:
                if self._helper is None:
                    from concurrent.futures import ThreadPoolExecutor
                    self._helper = ThreadPoolExecutor(1, thread_name_prefix="daskwp-idx")
                docs = self._helper.submit(self._documents_to, *args)
            else:
                self._documents_to(*args)
        try:
            if hi > seq:
                for chunk in self._pointer_chunks(seq, hi, nbytes):
                    self._regions[0].write(chunk)
                nbytes = self._pointer_end
        finally:
            if docs is not None:
                docs.result()
        self._ahead = (hi, hi_doc, nbytes)

    def _pointer_chunks(self, lo: int, hi: int, start: int):
        """The pointers of sequences ``lo`` to ``hi`` (``start``: sequence ``lo``'s): the
        prefix sum of the lengths (read back from the ``.idx``, kept in the page cache) x
        the token size, ``_SHIFT_ENTRIES`` at a time (views of one buffer: each is used
        before the next is made)."""
        size = self.dtype.itemsize
        if self._lengths is None:
            self._lengths = np.empty(_SHIFT_ENTRIES, dtype=np.int32)
        lengths = self._lengths
        self._pointer_end = start   # the pointer after the last: its sequence's end
        for at in range(lo, hi, _SHIFT_ENTRIES):
            k = min(_SHIFT_ENTRIES, hi - at)
            piece = lengths[:k]
            view = memoryview(piece).cast("B")
            done = 0
            while done < 4 * k:
                got = os.preadv(self._idx.fileno(), [view[done:]], _FIXED + 4 * at + done)
                if not got:
                    raise ValueError(f"{self.prefix}.idx ends before its lengths")
                done += got
            chunk = self._buf[:k]
            chunk[0] = start
            np.cumsum(piece[:-1], dtype=np.int64, out=chunk[1:])
            chunk[1:] *= size
            chunk[1:] += start
            start = self._pointer_end = int(chunk[-1]) + int(piece[-1]) * size
            yield chunk

    def finish(self) -> dict:
        """Complete the ``.idx`` (header, pointers, document indices: what
        :meth:`write_ahead` has not written, all of them when the dataset does not end
        with the planned counts) and close both files; returns ``{"sequences",
        "documents", "tokens", "dtype"}``. With ``direct``, the pointers and the document
        indices go to the ``.idx`` without the page cache (:class:`_DirectRegion`: the
        blocks they share with the lengths and each other buffered)."""
        if self.dtype is None:
            raise ValueError("merge_pairs needs at least one dataset")
        with self._ahead_lock:
            if self._plan != (self.sequences, self.documents):
                self._region_to_section()
                self._drop_plan()
                self._start_regions(self.sequences, self.documents)
            self._write_regions(None)
            for r in self._regions:
                r.close()
            self._regions = []
            fd = self._idx.fileno()
            # (a plan dropped may have written past the end)
            os.ftruncate(fd, index_size(self.sequences, self.documents))
            os.pwrite(fd, _header(self.dtype, self.sequences, self.documents + 1), 0)
            if isinstance(self._bin, _DirectAppendFile):
                self._bin.flush()
            if self.fsync:
                for fh in (self._bin, self._idx):
                    os.fsync(fh.fileno())
                    if not isinstance(fh, _DirectAppendFile):
                        drop_cached_pages(fh.fileno())
            self._drop_plan()
            self.finished = True
        self.close()
        return {"sequences": self.sequences, "documents": self.documents,
                "tokens": self.bin_bytes // self.dtype.itemsize, "dtype": str(self.dtype)}

    def close(self) -> None:
        """Close the files and remove the section files; before :meth:`finish`, the output
        pair too."""
        with self._ahead_lock:
            self._drop_plan()
            self._memory = []
            if self._mirror is not None:
                self._mirror = []
            if self._doc_read is not None:
                os.close(self._doc_read)
                self._doc_read = None
        for ext, fh in self._files:
            fh.close()
            if self.keep and not self.finished:   # to resume (a job's merge)
                continue
            if ext.startswith(".idx.") or not self.finished:
                try:
                    os.unlink(self.prefix + ext)
                except FileNotFoundError:
                    pass
        self._files = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def merge_pairs(prefixes: Sequence[str], out_prefix: str, *, fsync: bool = False) -> dict:
    """Concatenate the datasets ``prefixes`` (same dtype, in order) into ``out_prefix``: the
    bytes megatron-core's ``IndexedDatasetBuilder`` writes after ``add_index`` of each of
    them and ``finalize`` (:class:`PairAppender`; nothing is left at ``out_prefix`` when a
    dataset is refused). Returns ``{"sequences", "documents", "tokens", "dtype"}``.

    Memory: streams; the ``.bin`` data and lengths are copied by the kernel
    (:func:`append_file`), else in 16 MB pieces."""
    if not prefixes:
        raise ValueError("merge_pairs needs at least one dataset")
    with PairAppender(out_prefix, fsync=fsync) as out:
        for p in prefixes:
            out.append(p)
        return out.finish()


def merge_pairs_in(folder, part_names: Sequence[str], merged_name: str) -> None:
    """:func:`merge_pairs` of the pairs ``part_names`` of ``folder`` (a
    :class:`daskwp.frames.storage.Folder` on an object store) into ``merged_name`` there:
    the pairs downloaded to a local folder, merged, and the merged ``.bin`` then ``.idx``
    uploaded (one put or completed multipart upload each)."""
    import uuid
    names = [p + ext for p in part_names for ext in (".bin", ".idx")]
    with folder.local_copies(names) as paths, folder.staging() as staging:
        tmp = os.path.join(staging, f".tmp-merged-{uuid.uuid4().hex}")
        merge_pairs([p[:-len(".bin")] for p in paths[::2]], tmp)
        for ext in (".bin", ".idx"):
            folder.publish(tmp + ext, merged_name + ext)


def frame_pieces(ids, lengths, dtype, cls_id=None, sep_id=None, eod_id=None, last=None):
    """Each piece (``lengths`` consecutive ids of the flat ``ids``) as
    ``[cls_id] ids [sep_id] [eod_id]`` (each when not None; ``eod_id`` only on the pieces
    the bool array ``last`` marks): ``(flat ids in dtype, lengths int64)``, written by the
    native core in one pass (``_ext.frame_sequences``, uint16 or int32 output; other
    dtypes by NumPy). ValueError for an id ``dtype`` cannot hold."""
    out, out_lens, _ = _frame_pieces(ids, lengths, dtype, cls_id, sep_id, eod_id, last)
    return out, out_lens.astype(np.int64)


def _frame_pieces(ids, lengths, dtype, cls_id, sep_id, eod_id, last, unk_id=None):
    """:func:`frame_pieces` with the lengths int32 (checked: what the ``.idx`` stores), and
    how many of ``ids`` are ``unk_id`` (0 when None), counted by the native core in the
    pass that checks the ids' range. ``last`` None with an ``eod_id``: every piece is the
    last of its document.

    The lengths are made in one int32 array (the piece's tokens + what each piece adds):
    the int64 sums of each term, then their int32 copy, were four arrays of a slice's
    pieces, fresh memory each, in a stage that moves ~8 bytes per piece for every byte of
    them it needs."""
    from .. import _ext
    dtype = np.dtype(dtype)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    every = eod_id is not None and last is None   # (every piece gets the eod)
    per_piece = (cls_id is not None) + (sep_id is not None) + every
    if every:
        last = np.ones(len(lengths), dtype=bool)
    elif eod_id is not None:
        last = np.ascontiguousarray(last, dtype=bool)
    some = eod_id is not None and not every   # (the pieces marked by last get the eod)
    top = np.iinfo(np.int32).max - per_piece - some
    if len(lengths) and (int(lengths.max()) > top or int(lengths.min()) < 0):
        exact = lengths + per_piece
        if some:
            exact += last
        _check_lengths(exact)   # (raises where one does not fit)
    out_lens = np.empty(len(lengths), dtype=np.int32)
    np.add(lengths, per_piece, out=out_lens, casting="unsafe")
    if some:
        out_lens += last
    total = int(out_lens.sum(dtype=np.int64))
    if dtype not in (np.dtype(np.uint16), np.dtype(np.int32)):
        unknown = 0 if unk_id is None else int(np.count_nonzero(np.asarray(ids) == unk_id))
        return _frame_pieces_numpy(ids, lengths, out_lens, total, dtype, cls_id, sep_id,
                                   eod_id, last), out_lens, unknown
    out = _host_array(total, dtype)
    unknown = _ext.frame_sequences(np.ascontiguousarray(ids, dtype=np.int32), lengths,
                                   -1 if cls_id is None else int(cls_id),
                                   -1 if sep_id is None else int(sep_id),
                                   -1 if eod_id is None else int(eod_id),
                                   None if eod_id is None else last.view(np.uint8), out,
                                   -1 if unk_id is None else int(unk_id))
    return out, out_lens, unknown


def _host_array(n: int, dtype) -> np.ndarray:
    """An uninitialized array of ``n`` entries of ``dtype`` from the host pool
    (:mod:`daskwp.backends.memory`; 4 MB and more): a slice's ``.bin`` data, held until the
    merge appends it, is then written into blocks freed by partitions before it, already
    mapped, instead of fresh pages that fault on first touch."""
    from .. import _ext
    if n == 0:
        return np.empty(0, dtype=dtype)
    return _ext.host_bytes(n * dtype.itemsize).view(dtype)


def _frame_pieces_numpy(ids, lengths, out_lens, total, dtype, cls_id, sep_id, eod_id, last):
    """:func:`frame_pieces` for a dtype the native core does not write."""
    ids = np.asarray(ids)
    if len(ids) and (int(ids.max()) > np.iinfo(dtype).max or int(ids.min()) < 0):
        raise ValueError(f"token id {int(ids.max())} does not fit the output dtype {dtype}")
    lead = int(cls_id is not None)
    ends = np.cumsum(out_lens, dtype=np.int64)
    starts = ends - out_lens
    out = np.empty(total, dtype=dtype)
    body = np.ones(total, dtype=bool)
    if lead:
        body[starts] = False
        out[starts] = cls_id
    if sep_id is not None:
        pos = starts + lead + lengths
        body[pos] = False
        out[pos] = sep_id
    if eod_id is not None:
        pos = ends[last] - 1
        body[pos] = False
        out[pos] = eod_id
    out[body] = ids
    return out


def document_sequences(token_ids: np.ndarray, offsets: np.ndarray, dtype, *,
                       pieces_per_document: np.ndarray | None = None,
                       cls_id: int | None = None, sep_id: int | None = None,
                       eod_id: int | None = None):
    """Megatron sequences from ragged token ids.

    ``token_ids`` / ``offsets`` (pieces + 1 entries) are the ids of each piece (a document,
    or one piece of one); ``pieces_per_document`` (documents + 1 offsets into the pieces,
    default one piece per document) groups pieces into documents. Pieces without tokens are
    left out; each kept piece becomes ``[cls_id] ids [sep_id]`` (each when not None), and
    the last sequence of every document with one gets ``eod_id`` appended.

    Returns ``(tokens, sequence_lengths, document_indices)``: the ``.bin`` data in
    ``dtype``, int32 lengths, int64 document indices (documents + 1, from 0).

    Memory: the output, and one byte per output token when special ids are added.
    """
    return _document_sequences(token_ids, offsets, dtype, pieces_per_document, cls_id,
                               sep_id, eod_id)[:3]


def _document_sequences(token_ids, offsets, dtype, pieces_per_document=None, cls_id=None,
                        sep_id=None, eod_id=None, unk_id=None):
    """:func:`document_sequences`, and how many of ``token_ids`` are ``unk_id`` (0 when
    None): ``(tokens, sequence_lengths, document_indices, unknown)``."""
    dtype = np.dtype(dtype)
    offsets = np.asarray(offsets, dtype=np.int64)
    ids = np.asarray(token_ids)
    lens = np.diff(offsets)
    n_pieces = len(lens)
    if pieces_per_document is None and (n_pieces == 0 or int(lens.min()) > 0):
        # a piece per document and none empty (most corpora): every piece is kept as the
        # last of its document; no index of the kept, no count per document
        out, out_lens, unknown = _frame_pieces(ids, lens, dtype, cls_id, sep_id, eod_id,
                                               None, unk_id)
        return out, out_lens, np.arange(n_pieces + 1, dtype=np.int64), unknown
    kept = np.flatnonzero(lens > 0)
    if pieces_per_document is None:   # a piece per document
        n_docs = n_pieces
        doc_of_kept = kept
    else:
        ppd = np.asarray(pieces_per_document, dtype=np.int64)
        n_docs = len(ppd) - 1
        doc_of_kept = np.searchsorted(ppd, kept, side="right") - 1
    per_doc = np.bincount(doc_of_kept, minlength=n_docs) if n_docs else np.zeros(0, np.int64)
    document_indices = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(per_doc, out=document_indices[1:])
    lengths = lens[kept]
    last = np.ones(len(kept), dtype=bool)
    last[:-1] = doc_of_kept[:-1] != doc_of_kept[1:]
    out, out_lens, unknown = _frame_pieces(ids, lengths, dtype, cls_id, sep_id, eod_id, last,
                                           unk_id)
    return out, out_lens, document_indices, unknown


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _zero_where_null(lengths) -> np.ndarray:
    """An Arrow array of lengths (int32 or int64, fresh from a compute function) as a NumPy
    array with 0 where it is null. Not ``pc.fill_null(lengths, 0)``: its Python scalar goes
    through ``pa.scalar``, which imports pandas (0.5-2.5 s of CPU) in a process that has not."""
    import pyarrow as pa

    from .schema import numpy_of_arrow
    if lengths.null_count == 0:
        return numpy_of_arrow(lengths)
    values = pa.Array.from_buffers(lengths.type, len(lengths), [None, lengths.buffers()[1]],
                                   offset=lengths.offset)     # the values, nulls ignored
    return np.where(np.asarray(lengths.is_valid()), numpy_of_arrow(values), 0)


def encode_pieces(tokenizer, texts, options: dict, to_device=None):
    """The token ids of documents (a pyarrow string or binary array; null: empty), or of
    the pieces between ``options["document_separator"]`` strings in them:
    ``(ids, offsets, pieces_per_document, documents)`` on the host
    (``pieces_per_document``: None without a separator). ``to_device(pieces)``, when given,
    turns the texts into the tokenizer's input type (a cudf Series for the GPU).

    The result holds no reference to ``texts``: a caller that drops its own frees the text
    before the sequences are framed (:func:`sequences_of`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    sep = options.get("document_separator")
    pieces_per_document = None
    pieces = texts
    if sep is not None:
        lists = pc.split_pattern(texts, pattern=sep)
        counts = _zero_where_null(pc.list_value_length(lists))
        pieces_per_document = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(counts, out=pieces_per_document[1:])
        pieces = pc.list_flatten(lists)
        del lists
    enc = tokenizer.encode(pieces if to_device is None else to_device(pieces))
    return _host(enc.token_ids), _host(enc.offsets), pieces_per_document, len(texts)


def sequences_of(vocab, ids, offsets, pieces_per_document, documents: int, options: dict):
    """:func:`encode_pieces`' result as Megatron sequences (the options and the return
    value of :func:`megatron_sequences`)."""
    special = bool(options.get("add_special_tokens"))
    eod_token = options.get("eod_token") or vocab.sep_token
    eod_id = vocab.token_to_id(eod_token) if options.get("append_eod") else None
    if options.get("append_eod") and eod_id is None:
        raise ValueError(f"eod_token {eod_token!r} is not a token of the vocabulary")
    per_document = offsets if pieces_per_document is None else offsets[pieces_per_document]
    stats = {"documents": documents, "tokens": len(ids),
             "document_lengths": np.diff(per_document)}
    tokens, lengths, docs, unknown = _document_sequences(
        ids, offsets, token_dtype(len(vocab)), pieces_per_document,
        cls_id=vocab.cls_id if special else None, sep_id=vocab.sep_id if special else None,
        eod_id=eod_id, unk_id=vocab.unk_id)
    stats.update(rows=len(lengths), tokens_written=len(tokens), unknown_tokens=unknown)
    return tokens, lengths, docs, stats


#: Text bytes of a slice of a partition's documents tokenized at a time by
#: :func:`megatron_slices` (the ids of a whole partition, int32, and the kernel's buffers
#: for them would otherwise be held at once, several times the ``.bin`` data).
SLICE_BYTES = 8 << 20


def document_slices(texts, nbytes: int | None = None) -> list:
    """``texts`` (a pyarrow string or binary array) cut into consecutive slices of whole
    documents of about ``nbytes`` (default :data:`SLICE_BYTES`) bytes of text each
    (zero-copy views; at least one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    nbytes = SLICE_BYTES if nbytes is None else nbytes
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if len(texts) == 0:
        return [texts]
    ends = _text_offsets(texts)
    if ends is None:   # (another layout: the lengths, added up)
        ends = np.cumsum(_zero_where_null(pc.binary_length(texts)), dtype=np.int64)
        first = 0
    else:
        first, ends = int(ends[0]), ends[1:]
    k = max(1, -(-(int(ends[-1]) - first) // max(int(nbytes), 1)))
    at = np.arange(1, k, dtype=np.int64) * nbytes + first
    cuts = np.searchsorted(ends, at.astype(ends.dtype), side="left") + 1
    cuts = np.unique(np.concatenate([[0], np.clip(cuts, 0, len(texts)), [len(texts)]]))
    return [texts.slice(int(a), int(b - a)) for a, b in zip(cuts[:-1], cuts[1:])]


def _text_offsets(texts) -> np.ndarray | None:
    """The offsets of a string or binary Arrow array (one more than its documents) as a
    NumPy view of its offsets buffer: where each document's bytes begin and end, a null's
    bytes (if the array gives it any) counted as text; None for another layout.

    Why: :func:`document_slices` cut a partition where the running sum of its documents'
    lengths crosses each slice's bytes: ``pc.binary_length`` and that sum were two int64
    arrays of the whole partition in fresh memory (Arrow's pool gives its freed pages back
    after each partition), 1.8% of the in-process Megatron job's CPU samples; the offsets
    are those sums already."""
    import pyarrow as pa
    t = texts.type
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        dtype = np.int64
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        dtype = np.int32
    else:
        return None
    buf = texts.buffers()[1]
    if buf is None:
        return None
    return np.frombuffer(buf, dtype=dtype, count=texts.offset + len(texts) + 1)[texts.offset:]


def megatron_slices(tokenizer, texts, options: dict, to_device=None, clock=None,
                    nbytes: int | None = None):
    """:func:`megatron_sequences` of each of :func:`document_slices` (of ``nbytes`` of text,
    default :data:`SLICE_BYTES`) in turn: yields ``(tokens, sequence_lengths,
    document_indices, stats)`` per slice (document indices from 0 in each). ``clock`` (a
    dict), when given, accumulates ``tokenize`` and ``frame`` CPU seconds
    (:func:`~daskwp.core.cpu_clock.stage_cpu_seconds`). Memory: one slice's ids at a time."""
    from ..core.cpu_clock import stage_cpu_seconds
    clock = {} if clock is None else clock
    for piece in document_slices(texts, nbytes):
        c0 = stage_cpu_seconds()
        encoded = encode_pieces(tokenizer, piece, options, to_device)
        c1 = stage_cpu_seconds()
        out = sequences_of(tokenizer.vocab, *encoded, options)
        del encoded
        c2 = stage_cpu_seconds()
        clock["tokenize"] = clock.get("tokenize", 0.0) + c1 - c0
        clock["frame"] = clock.get("frame", 0.0) + c2 - c1
        yield out


class _PieceIndex:
    """The index of consecutive ``(tokens, sequence_lengths, document_indices, stats)``
    pieces (:func:`megatron_slices`) as they come: :meth:`add` each, then :meth:`arrays`."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.lengths, self.docs, self.stats = [], [np.zeros(1, np.int64)], {}
        self.sequences = 0

    def add(self, tokens, lens, doc_idx, st) -> None:
        if tokens.dtype != self.dtype:
            raise ValueError(f"a piece holds {tokens.dtype} tokens, the dataset {self.dtype}")
        self.lengths.append(np.asarray(lens, dtype=np.int32))
        self.docs.append(np.asarray(doc_idx[1:], dtype=np.int64) + self.sequences)
        self.sequences += len(lens)
        for k, v in st.items():
            if k == "document_lengths":
                self.stats.setdefault(k, []).append(v)
            else:
                self.stats[k] = self.stats.get(k, 0) + v

    def statistics(self) -> dict:
        """The pieces' statistics added up (``document_lengths`` concatenated)."""
        if isinstance(self.stats.get("document_lengths"), list):
            self.stats["document_lengths"] = np.concatenate(self.stats["document_lengths"])
        return self.stats

    def arrays(self) -> tuple:
        """``(sequence_lengths, document_indices, stats)``: the pieces' index entries
        concatenated, and :meth:`statistics`."""
        return (np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int32),
                np.concatenate(self.docs), self.statistics())


def gather_pieces(pieces, dtype) -> tuple:
    """Consecutive ``(tokens, sequence_lengths, document_indices, stats)`` pieces
    (:func:`megatron_slices`) as one dataset in memory: ``(token arrays, sequence_lengths,
    document_indices, stats)``, what :func:`write_pair_from` writes for them."""
    index = _PieceIndex(dtype)
    tokens = []
    for piece in pieces:
        index.add(*piece)
        tokens.append(piece[0])
    return (tokens, *index.arrays())


def write_pair_from(prefix: str, pieces, dtype, *, fsync: bool = False,
                    digests: dict | None = None, direct: bool = False,
                    index_direct: bool | None = None) -> dict:
    """Write ``prefix.bin`` / ``prefix.idx`` from consecutive ``(tokens, sequence_lengths,
    document_indices, stats)`` pieces (:func:`megatron_slices`): the bytes
    :func:`write_pair` writes for them concatenated. ``.bin`` data is streamed; returns the
    pieces' statistics added up (``document_lengths`` concatenated). ``digests``: hash
    objects by ``".bin"`` / ``".idx"``, updated with each file's bytes as they are written
    (its checksum without reading it back). ``direct``: both files written without the
    page cache where the file system allows it (:func:`create_file`), the ``.bin``'s
    buffers written behind (while the next pieces are made and copied; the bytes the
    same, written back by ``fsync`` before it returns). ``index_direct``: the ``.idx``
    so too (default: as ``direct``); False: through the page cache.

    Why write-behind: a direct write returns once the device has the bytes: a cluster's
    part writer, one task thread a worker, waited for each 8 MB buffer of its ``.bin``
    instead of making the next slice. For the same reason, with a buffered ``.idx``
    (``index_direct`` False), the ``.bin``'s last buffers go to disk (and its fsync runs)
    on another thread while the ``.idx`` is written: the task thread waited ~18 ms a 64 MB
    partition for them."""
    index = _PieceIndex(dtype)
    digests = digests or {}
    index_direct = direct if index_direct is None else index_direct
    raw = create_file(prefix + ".bin", direct, behind=direct)
    # the .bin's last writes (and fsync) while a buffered .idx is written (a direct one
    # would take a third pooled buffer while the .bin holds its two)
    tail = None
    try:
        fh = raw if digests.get(".bin") is None else HashingWriter(raw, digests[".bin"])
        for piece in pieces:
            index.add(*piece)
            _write_array(fh, piece[0])
        if isinstance(raw, _DirectAppendFile) and raw.behind and not index_direct:
            tail = _complete_behind(raw, fsync)
        else:
            complete_file(raw, fsync)
    finally:
        if tail is None:
            raw.close()
    try:
        # the index written from the slices' entries as they are (concatenated, they and
        # the pointers were a partition's largest arrays, at the peak of its write)
        _write_index_pieces(prefix + ".idx", index.lengths, index.docs, dtype,
                            digest=digests.get(".idx"), fsync=fsync, direct=index_direct)
    finally:
        if tail is not None:
            try:
                tail.result()
            finally:
                raw.close()
    index.lengths = index.docs = None
    return index.statistics()


def megatron_sequences(tokenizer, texts, options: dict, to_device=None):
    """Documents (a pyarrow string or binary array; null: empty) as Megatron sequences:
    ``(tokens, sequence_lengths, document_indices, stats)``.

    ``options``: ``add_special_tokens`` ([CLS]/[SEP] around each sequence),
    ``append_eod`` and ``eod_token`` (default: the vocabulary's sep_token),
    ``document_separator`` (split each document on it into pieces, one sequence each).
    ``to_device(pieces)``, when given, turns the texts to encode into the tokenizer's input
    type (a cudf Series for the GPU); the ids come back to the host, the bytes the same.
    ``stats``: ``documents``, ``rows`` (sequences), ``tokens`` (ids of the text, without
    added special ids), ``unknown_tokens`` among them, ``tokens_written``,
    ``document_lengths`` (the text's tokens per document, an array).

    Memory: the text, its ids (int32) and the ``.bin`` data (:func:`encode_pieces` then
    :func:`sequences_of`, which a caller can call itself to free the text in between)."""
    return sequences_of(tokenizer.vocab, *encode_pieces(tokenizer, texts, options, to_device),
                        options)
