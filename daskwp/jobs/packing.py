"""Global packing (``packing: {block_size: 512}``, ``--pack 512``): the tokenized documents
of the whole input, in input order, concatenated and cut into blocks of ``block_size``
tokens — HuggingFace ``run_mlm.py``'s ``group_texts`` applied to the whole corpus at once
(each document ``[CLS] ids [SEP]`` with ``add_special_tokens``, as its tokenizer call gives
them). The final remainder is dropped, or padded with ``[PAD]`` (``pad_last: true``; its
mask 0 there).

Two passes, no shuffle (docs/batch-jobs.md "Global packing"):

1. one task per partition tokenizes it: its documents' tokens (in the token dtype: uint16
   below 65,500 ids, else int32) and their lengths; it gives its token and document counts;
2. the driver sums them: partition i's tokens start at global position ``S_i``, so it owns
   the blocks that start in ``[S_i, S_{i+1})``; its write task cuts them from its own
   tokens and takes the tail of its last block from the heads of the following
   partitions (fewer than ``block_size`` tokens of each). Blocks are the same whatever the
   partitioning or the workers.

In a fresh run the passes overlap: partition i's write runs once partitions 0..i+1 are
counted. Run in this process, the tokens stay in memory for it (:class:`PartitionUnits`,
a task result; its last block's tail from the next partition's head); on a cluster each
partition spills them next to the output (hidden temporary files), read by whichever
worker writes it. A write whose last block reaches further runs after the last count
(its tokens spilled then). A rerun spills every partition and checks its complete parts
against the counts before it writes.

A write task cuts its blocks and hands the part (its write, fsync, renames and record) to
a commit thread, then returns: its task thread goes on to the next task while the disk
writes (:func:`_commit_in_thread`; one commit in flight per task thread). The driver
collects the commits of every process once the writes have run (:func:`collect_commits`);
a part is complete only once its record is renamed into place, so a commit that fails,
or ends with its worker, leaves no part a reader or a rerun takes for complete. A commit
that failed fails the job; one lost with its worker is written again from its spill.

Spills are written and read with direct I/O where the file system allows it (each is
written once and read once, its head a second time by the previous partition's write
task: the page cache would only add fresh pages to fill), in
aligned chunks through a pooled buffer that the next partition reuses, as it reuses the
buffer its blocks are cut into (the process keeps as many as ran at once; a job run in
the driver's process drops them at its end).

Each block records where it starts: ``logID`` (the document) and ``offset`` (the token of
that document, ``[CLS]`` counted), so every block maps back to its text. Parts are written
with records (:mod:`.records`), in the job's ``output_format``: Parquet
(``block, logID, offset, input_ids[, attention_mask]``), Megatron (one sequence and one
document per block) or datasets (the Parquet columns as Arrow shards).
"""

from __future__ import annotations

import functools
import json
import mmap
import os
import threading
import uuid
import weakref

import numpy as np
import pyarrow as pa

from ..core.cpu_clock import stage_cpu_seconds
from ..core.lengths import LengthCounts
from ..distributed.state import cached_tokenizer
from ..distributed.tasks import text_bytes
from ..frames.megatron import (HashingWriter, complete_file, create_file, document_slices,
                               frame_pieces, open_direct, token_dtype, write_pair_from)
from ..frames.part_writer import checksum_hash, checksum_hex
from ..frames.schema import arrow_of_numpy
from .errors import JobError
from .parts import TMP_PREFIX, partition_failure, worker_device, worker_series
from .records import (check_part_record, commit_part, naming_partition, part_stem,
                      refuse_set_options, temporary_path, timed_read, write_part_rejects)

__all__ = ["PACKING_NOT_APPLICABLE", "PartitionUnits", "check_packing_config",
           "collect_commits", "document_units", "run_packed_job", "spill_partition",
           "write_packed_partition"]

#: Options that do not apply to packed blocks: refused when set to anything but their default.
PACKING_NOT_APPLICABLE = ("max_length", "stride", "truncation", "padding", "bucket_widths",
                          "return_overflowing_tokens", "return_token_type_ids",
                          "return_sequence_ids", "return_offsets_mapping", "return_word_ids",
                          "return_special_tokens_mask", "column_pair", "keep_columns",
                          "append_eod", "eod_token", "document_separator")


def check_packing_config(cfg, default_value) -> None:
    """Refuse, by name, what packed blocks cannot honour."""
    refuse_set_options(cfg, PACKING_NOT_APPLICABLE, default_value, "packing (blocks of "
                       "block_size tokens cut from the concatenated documents)",
                       "leave it unset, or drop packing")


def document_units(token_ids, offsets, cls_id=None, sep_id=None, dtype=np.int32):
    """Each document as ``[cls_id] ids [sep_id]`` (each when not None; an empty document is
    ``[cls_id, sep_id]``, as HF's tokenizer call gives it): ``(flat ids in dtype, lengths
    int64)``."""
    lens = np.diff(np.asarray(offsets, dtype=np.int64))
    return frame_pieces(token_ids, lens, dtype, cls_id, sep_id)


def _spill_path(out_dir: str, index: int, what: str) -> str:
    return os.path.join(out_dir, f"{TMP_PREFIX}pack-{index:06d}.{what}")


#: Spill files are written and read in chunks of this many bytes (a multiple of _ALIGN)
#: through a pooled buffer.
_CHUNK = 8 << 20
#: Direct I/O's alignment of file offsets, lengths and buffer addresses (a page).
_ALIGN = mmap.PAGESIZE
_pool_lock = threading.Lock()
#: Buffers given back by the tasks of this process, by kind, for the next ones: a
#: partition after the first writes memory that is already faulted in (fresh pages are
#: expensive on virtual machines). As many of a kind as tasks used at once are kept.
_idle: dict[str, list] = {}


def _take(kind: str, nbytes: int) -> np.ndarray:
    """A page-aligned uint8 buffer of ``kind`` with at least ``nbytes`` (the whole buffer:
    slice it): the smallest idle one that holds them, else a new one a quarter larger
    (an idle one too small is dropped). Give it back with :func:`_give_back`."""
    with _pool_lock:
        idle = _idle.setdefault(kind, [])
        fits = [k for k, b in enumerate(idle) if len(b) >= nbytes]
        if fits:
            return idle.pop(min(fits, key=lambda k: len(idle[k])))
        if idle:
            idle.pop(min(range(len(idle)), key=lambda k: len(idle[k])))
    size = -(-(nbytes + nbytes // 4) // _ALIGN) * _ALIGN or _ALIGN
    # private (a shared anonymous mapping is shmem: slower to fault and to pin for I/O)
    return np.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE), np.uint8)


def _give_back(kind: str, buf: np.ndarray) -> None:
    with _pool_lock:
        _idle.setdefault(kind, []).append(buf)


def release_buffers() -> int:
    """Drop the idle pooled buffers of this process; returns their bytes."""
    with _pool_lock:
        freed = sum(len(b) for idle in _idle.values() for b in idle)
        _idle.clear()
    return freed


def _open_spill(path: str, flags: int) -> tuple[int, bool]:
    """``path`` opened with ``O_DIRECT`` (:func:`~daskwp.frames.megatron.open_direct`: a
    spill is written once and read once), else as it is; ``(fd, direct)``."""
    fd = open_direct(path, flags)
    return (fd, True) if fd is not None else (os.open(path, flags, 0o644), False)


class _SpillWriter:
    """Raw bytes appended to a new file through pooled chunk buffers, in whole aligned
    chunks (direct I/O; the last one padded, then the file truncated to what was
    appended). A full chunk is written by a thread of its own while the caller fills the
    other buffer: the task does not wait for the disk (buffered writes did not either)."""

    def __init__(self, path: str):
        self.fd, self.direct = _open_spill(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        self.buf = _take("chunk", _CHUNK)
        self.spare = None   # the second buffer, taken at the first full chunk
        self.fill = self.size = 0
        self.pending = self.error = None

    def write(self, arr: np.ndarray) -> None:
        data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        while len(data):
            k = min(len(data), _CHUNK - self.fill)
            self.buf[self.fill:self.fill + k] = data[:k]
            self.fill += k
            data = data[k:]
            if self.fill == _CHUNK:
                self._flush()

    def _write_all(self, view) -> None:
        try:
            done = 0
            while done < len(view):
                done += os.write(self.fd, view[done:])
        except BaseException as e:   # raised in the caller's thread by _wait
            self.error = e

    def _wait(self) -> None:
        if self.pending is not None:
            self.pending.join()
            self.pending = None
        if self.error is not None:
            raise self.error

    def _flush(self) -> None:
        n = -(-self.fill // _ALIGN) * _ALIGN if self.direct else self.fill
        self._wait()   # the other buffer's write is done: it is free again
        self.pending = threading.Thread(target=self._write_all,
                                        args=(memoryview(self.buf)[:n],),
                                        name="daskwp-spill", daemon=True)
        self.pending.start()
        self.size += self.fill
        self.fill = 0
        if self.spare is None:
            self.spare = _take("chunk", _CHUNK)
        self.buf, self.spare = self.spare, self.buf

    def close(self) -> None:
        try:
            if self.fill:
                self._flush()
            self._wait()
            if self.direct:
                os.ftruncate(self.fd, self.size)
        finally:
            if self.pending is not None:   # failed before its write ended
                self.pending.join()
            os.close(self.fd)
            for buf in (self.buf, self.spare):
                if buf is not None:
                    _give_back("chunk", buf)


def _close_all(writers) -> None:
    """Close every writer (its file descriptor, thread and buffers), even when an earlier
    one's close raises; then raise the first error."""
    first = None
    for w in writers:
        try:
            w.close()
        except BaseException as e:
            first = first or e
    if first is not None:
        raise first


def _read_spilled(out_dir: str, index: int, what: str, dtype, lo: int, hi: int,
                  out: np.ndarray) -> None:
    """Values ``[lo, hi)`` of partition ``index``'s spill ``what`` (raw ``dtype``) into
    ``out`` (``hi - lo`` long, converted to its dtype): only those bytes are read, in
    aligned chunks through a pooled buffer."""
    if hi <= lo:
        return
    size = np.dtype(dtype).itemsize
    fd, direct = _open_spill(_spill_path(out_dir, index, what), os.O_RDONLY)
    buf = _take("chunk", _CHUNK)
    try:
        pos, end = lo * size, hi * size
        filled = 0
        while pos < end:
            start = pos // _ALIGN * _ALIGN if direct else pos
            n = min(_CHUNK, -(-(end - start) // _ALIGN) * _ALIGN if direct else end - start)
            got = os.preadv(fd, [memoryview(buf)[:n]], start)
            take = min(got, end - start) - (pos - start)
            take -= take % size
            if take <= 0:
                raise JobError(f"the spill {_spill_path(out_dir, index, what)!r} ends "
                               f"before byte {end}: delete the output and rerun the job")
            vals = buf[pos - start:pos - start + take].view(dtype)
            out[filled:filled + len(vals)] = vals
            filled += len(vals)
            pos += take
    finally:
        os.close(fd)
        _give_back("chunk", buf)


_held_lock = threading.Lock()
#: :class:`PartitionUnits` alive in this process (each until dask drops it: its write, its
#: count and its head are done).
_held = 0


def _unhold() -> None:
    global _held
    with _held_lock:
        _held -= 1


def units_held() -> int:
    """How many partitions' units this process holds in memory now."""
    return _held


class PartitionUnits:
    """A partition's document units held in memory by pass 1 of a fresh run (not spilled):
    its slices' units in the spill dtype (``ids``), its documents' unit lengths (``lens``,
    int32 slices) and its statistics (``stats``: what :func:`spill_partition` returns).
    Counted while alive (:func:`units_held`)."""

    def __init__(self, ids: list, lens: list, stats: dict):
        global _held
        self.ids, self.lens, self.stats = ids, lens, stats
        self.ends = np.cumsum([0] + [len(a) for a in ids], dtype=np.int64)
        with _held_lock:
            _held += 1
        weakref.finalize(self, _unhold)

    def read(self, lo: int, hi: int, out: np.ndarray) -> None:
        """Units ``[lo, hi)`` into ``out`` (``hi - lo`` long, converted to its dtype)."""
        filled = 0
        k = int(np.searchsorted(self.ends, lo, side="right")) - 1
        while lo < hi:
            a, s = self.ids[k], int(self.ends[k])
            n = min(hi, s + len(a)) - lo
            out[filled:filled + n] = a[lo - s:lo - s + n]
            filled += n
            lo += n
            k += 1

    def lengths(self) -> np.ndarray:
        return np.concatenate(self.lens) if self.lens else np.zeros(0, np.int32)

    def head(self, n: int) -> np.ndarray:
        """The first ``n`` units (all of them when fewer), in the spill dtype."""
        n = min(int(n), int(self.ends[-1]))
        out = np.empty(n, self.ids[0].dtype if self.ids else np.int32)
        self.read(0, n, out)
        return out


class _SpilledUnits:
    """Partition ``index``'s units in its spill files (:func:`spill_partition`): the
    interface of :class:`PartitionUnits`' ``read`` and ``lengths``."""

    def __init__(self, out_dir: str, index: int, dtype):
        self.out_dir, self.index, self.dtype = out_dir, index, dtype

    def read(self, lo: int, hi: int, out: np.ndarray) -> None:
        _read_spilled(self.out_dir, self.index, "ids", self.dtype, lo, hi, out)

    def lengths(self) -> np.ndarray:
        lens = np.empty(os.path.getsize(_spill_path(self.out_dir, self.index, "lens")) // 4,
                        np.int32)
        _read_spilled(self.out_dir, self.index, "lens", np.int32, 0, len(lens), lens)
        return lens


def _spill_files(out_dir: str, index: int, pieces) -> float:
    """Write ``(units, lens int32)`` pieces (an iterable: a generator's own work between
    them is not counted) as partition ``index``'s spill files (``.ids``, ``.lens``),
    atomically (temporary names, then renamed); returns the CPU seconds of the writing."""
    tmp = {what: os.path.join(out_dir, f"{TMP_PREFIX}pack-w-{uuid.uuid4().hex}.{what}")
           for what in ("ids", "lens")}
    spent = 0.0
    try:
        writers = {}
        try:
            c = stage_cpu_seconds()
            for what, path in tmp.items():
                writers[what] = _SpillWriter(path)
            spent += stage_cpu_seconds() - c
            for units, lens in pieces:
                c = stage_cpu_seconds()
                writers["ids"].write(units)
                writers["lens"].write(lens)
                spent += stage_cpu_seconds() - c
        finally:
            c = stage_cpu_seconds()
            _close_all(writers.values())
            spent += stage_cpu_seconds() - c
        c = stage_cpu_seconds()
        for what, path in tmp.items():
            os.replace(path, _spill_path(out_dir, index, what))
        spent += stage_cpu_seconds() - c
    finally:
        for path in tmp.values():
            if os.path.exists(path):
                os.unlink(path)
    return spent


def _spill_units(units: PartitionUnits, out_dir: str, index: int) -> dict:
    """Partition ``index``'s units held in memory written to its spill files (a write
    that runs after the pass, :func:`_write_when_placed`); returns its statistics."""
    spill_cpu = _spill_files(out_dir, index, zip(units.ids, units.lens))
    stats = dict(units.stats)
    cpu = dict(stats["cpu_seconds"])
    cpu["spill"] = cpu.get("spill", 0.0) + spill_cpu
    stats["cpu_seconds"] = cpu
    return stats


@naming_partition
def spill_partition(spec, out_dir: str, tokenizer, options: dict, device: str = "cpu",
                    documents: int | None = None, keep: int = 0):
    """Pass 1 of a packed job: tokenize partition ``spec``, spill its documents' units
    (``.ids``, raw, in the vocabulary's token dtype: uint16 below 65,500 ids, as Megatron's
    ``.bin``, else int32) and their lengths (``.lens``, raw int32), atomically; return its
    counts and statistics (rejected rows: the row policy, listed at write time). With
    ``keep`` (a number of partitions) and fewer than that held in this process
    (:func:`units_held`), nothing is written: the units are returned in memory, a
    :class:`PartitionUnits` (a fresh run's, whose write follows within the pass; dask's
    threads may run the spills ahead of the writes: the bound spills the rest).

    Memory: the partition's text and the ids of a slice of it at a time
    (:func:`daskwp.frames.megatron.document_slices`), appended to the spill (kept: the
    partition's units, in the token dtype, and their lengths)."""
    keep = bool(keep) and units_held() < keep
    texts, _, (bad_bytes, bad_docs), bad, read_cpu = timed_read(spec, documents, options)
    c1 = stage_cpu_seconds()
    tok = cached_tokenizer(tokenizer)
    dev = worker_device(device)
    special = bool(options.get("add_special_tokens"))
    dtype = token_dtype(len(tok.vocab))
    n_docs, n_bytes = len(texts), text_bytes(texts)
    counts = {"units": 0, "tokens": 0, "unknown_tokens": 0}
    doc_lengths = []
    kept_ids, kept_lens = [], []

    def pieces():
        nonlocal texts
        for piece in document_slices(texts):
            enc = tok.encode(worker_series(piece, dev) if dev != "cpu" else piece)
            ids = enc.token_ids.get() if hasattr(enc.token_ids, "get") else \
                np.asarray(enc.token_ids)
            offsets = enc.offsets.get() if hasattr(enc.offsets, "get") else \
                np.asarray(enc.offsets)
            # the [UNK] the CPU kernel counted as it wrote the ids (no pass over them)
            counts["unknown_tokens"] += enc.count_id(tok.vocab.unk_id)
            del enc
            units, lens = document_units(ids, offsets,
                                         tok.vocab.cls_id if special else None,
                                         tok.vocab.sep_id if special else None, dtype)
            counts["tokens"] += len(ids)
            counts["units"] += len(units)
            doc_lengths.append(np.diff(offsets))
            del ids, offsets
            # a document's units: < 2**31 (the kernel's int32 ids)
            yield units, lens.astype(np.int32)
        texts = None

    if keep:
        for units, lens in pieces():
            kept_ids.append(units)
            kept_lens.append(lens)
        spill_cpu = 0.0
    else:
        spill_cpu = _spill_files(out_dir, spec.index, pieces())
    lengths = np.concatenate(doc_lengths) if doc_lengths else np.zeros(0, np.int64)
    stats = {"index": spec.index, **counts, "documents": n_docs, "text_bytes": n_bytes,
             "invalid_utf8_bytes": bad_bytes, "invalid_utf8_documents": bad_docs,
             "bad": bad, "length_counts": LengthCounts.of(lengths).to_json(),
             "spill_dtype": dtype.str,
             "cpu_seconds": {"read": read_cpu,
                             "tokenize": stage_cpu_seconds() - c1 - spill_cpu,
                             "spill": spill_cpu}}
    return PartitionUnits(kept_ids, kept_lens, stats) if keep else stats


def _block_range(i: int, starts, block_size: int, pad_last: bool) -> tuple[int, int]:
    """The blocks partition i owns: those starting in ``[starts[i], starts[i+1])`` (and
    that exist: whole blocks, plus the padded last one with ``pad_last``)."""
    total = int(starts[-1])
    n_blocks = total // block_size + (1 if pad_last and total % block_size else 0)
    b0 = -(-int(starts[i]) // block_size)
    b1 = -(-int(starts[i + 1]) // block_size)
    return min(b0, n_blocks), min(b1, n_blocks)


def _gather(out_dir: str, i: int, starts, lo: int, hi: int, out: np.ndarray,
            spill_dtype, units=None, tail=None) -> int:
    """Global token positions ``[lo, hi)`` from partition i's units (``units``: a
    :class:`PartitionUnits` in memory, else its spill) and the units that follow it
    (``tail``: an array of the units from ``starts[i + 1]`` on, else read from the spills
    of partitions i+1, i+2, ...: only the tokens asked for), copied into the front of
    ``out``; returns how many."""
    j, filled = i, 0
    while lo < hi and j < len(starts) - 1:
        s, e = int(starts[j]), int(starts[j + 1])
        if j > i and tail is not None:   # (lo is starts[i + 1])
            if hi - lo > len(tail):
                raise JobError(f"partition {i}'s last block takes {hi - lo} tokens of the "
                               f"partitions after it, {len(tail)} were given")
            out[filled:filled + hi - lo] = tail[:hi - lo]
            return filled + hi - lo
        if e > lo:
            k = min(hi, e) - lo
            dst = out[filled:filled + k]
            if j == i and units is not None:
                units.read(lo - s, lo - s + k, dst)
            else:
                _read_spilled(out_dir, j, "ids", spill_dtype, lo - s, lo - s + k, dst)
            filled += k
            lo += k
        j += 1
    return filled


def block_table(out_dir: str, i: int, starts, logid_offset: int, block_size: int,
                pad_last: bool, pad_id: int | None, spill_dtype, dtype=np.int32,
                input_ids: bool = True, hold: list | None = None,
                units: "PartitionUnits | None" = None, tail: np.ndarray | None = None):
    """The blocks partition i owns as an Arrow table ``block, logID, offset``, +
    ``input_ids`` (when ``input_ids``) and ``attention_mask`` (with ``pad_last``), and as a
    blocks x block_size matrix in ``dtype`` (the partition's tokens, ``spill_dtype``, copied
    once, into it; with ``hold``, into a pooled buffer appended to ``hold``: the caller
    gives it back, :func:`_give_back`, once done with the table and the matrix). The
    tokens: ``units`` (in memory) or partition i's spill, then ``tail`` or the following
    partitions' spills (:func:`_gather`)."""
    b0, b1 = _block_range(i, starts, block_size, pad_last)
    s = int(starts[i])
    total = int(starts[-1])
    shape = (b1 - b0, block_size)
    if hold is not None:
        n = shape[0] * shape[1] * np.dtype(dtype).itemsize
        hold.append(_take("blocks", n))
        blocks = hold[-1][:n].view(dtype).reshape(shape)
    else:
        blocks = np.empty(shape, dtype)
    if b1 > b0:
        flat = blocks.reshape(-1)
        k = _gather(out_dir, i, starts, b0 * block_size, min(b1 * block_size, total), flat,
                    spill_dtype, units, tail)
        if k < len(flat):   # the padded last block
            flat[k:] = pad_id
    lens = (units if units is not None else _SpilledUnits(out_dir, i, spill_dtype)).lengths()
    ends = np.cumsum(lens, dtype=np.int64)
    pos = np.arange(b0, b1, dtype=np.int64) * block_size - s
    doc = np.searchsorted(ends, pos, side="right")
    offset = pos - (ends[doc] - lens[doc]) if len(pos) else pos
    # arrow_of_numpy, not pa.array: its pandas check imports pandas, ~0.25 s of CPU in each
    # cluster worker's first packed partition (the driver's process has it already)
    cols = {"block": arrow_of_numpy(np.arange(b0, b1, dtype=np.int64)),
            "logID": arrow_of_numpy(doc.astype(np.int64) + int(logid_offset)),
            "offset": arrow_of_numpy(offset.astype(np.int64))}
    if input_ids:
        cols["input_ids"] = pa.FixedSizeListArray.from_arrays(
            arrow_of_numpy(blocks.reshape(-1)), block_size).cast(pa.list_(pa.int32()))
    if pad_last and input_ids:
        real = np.clip(total - np.arange(b0, b1, dtype=np.int64) * block_size, 0, block_size)
        mask = (np.arange(block_size)[None, :] < real[:, None]).astype(np.int32)
        cols["attention_mask"] = pa.FixedSizeListArray.from_arrays(
            arrow_of_numpy(mask.reshape(-1)), block_size).cast(pa.list_(pa.int32()))
    return pa.table(cols), blocks


@naming_partition
def write_packed_partition(spec, starts, logid_offset: int, out_dir: str, tokenizer,
                           options: dict, job_id: str, n_partitions: int, spill,
                           file_offset: int | None = None,
                           tail: np.ndarray | None = None) -> dict:
    """Pass 2: the blocks partition ``spec.index`` owns, cut here and handed to a commit
    thread (:func:`_commit_in_thread`) that writes them in the job's output format with a
    record (:func:`_commit_packed`). ``spill``: the partition's statistics
    (:func:`spill_partition`; its units read from its spill), or its
    :class:`PartitionUnits` (in memory). ``tail``: the units from ``starts[i + 1]`` on that
    its last block takes (else read from the following partitions' spills). Returns
    ``{"committing": i, "spill": ...}``: the part's statistics come from
    :func:`collect_commits`; its spill's statistics (None for units in memory) let the
    driver write it again if the commit is lost with its worker.

    Memory: the blocks of two partitions per task thread (this one's, and the previous
    one's while its commit runs)."""
    t0 = stage_cpu_seconds()
    units = spill if isinstance(spill, PartitionUnits) else None
    if units is not None:
        spill = units.stats
    tok = cached_tokenizer(tokenizer)
    packing = options["packing"]
    fmt = options["output_format"]
    megatron = fmt == "megatron"
    dtype = token_dtype(len(tok.vocab))
    # Megatron's .bin takes the blocks in its token dtype as they are; the other formats'
    # input_ids are int32
    held = []
    table, blocks = block_table(out_dir, spec.index, starts, logid_offset,
                                packing["block_size"], packing["pad_last"],
                                tok.vocab.pad_id if packing["pad_last"] else None,
                                dtype, dtype if megatron else np.int32,
                                input_ids=not megatron, hold=held, units=units, tail=tail)
    in_memory = units is not None
    del units   # copied into the blocks: its memory goes while the part is written
    i, n = spec.index, n_partitions
    stats = {k: spill[k] for k in ("documents", "tokens", "unknown_tokens", "text_bytes",
                                   "invalid_utf8_bytes", "invalid_utf8_documents",
                                   "length_counts")}
    stats.update(partition=i, logid_offset=int(logid_offset), rows=table.num_rows,
                 token_offset=int(starts[i]), units=spill["units"], rejected=len(spill["bad"] or ()),
                 blocks=[int(table.column("block")[0].as_py()) if table.num_rows else None,
                         table.num_rows])
    rejects = write_part_rejects(out_dir, spec, n, spill["bad"], logid_offset, file_offset)
    stats["cpu_seconds"] = dict(spill["cpu_seconds"], write=stage_cpu_seconds() - t0)
    commit = functools.partial(_commit_packed, out_dir, spec, n, job_id, fmt, options, dtype,
                               stats, table, blocks, held, rejects)
    del table, blocks   # (the commit's now: its thread gives the buffer back)
    _commit_in_thread(job_id, spec, commit)
    # a part's commit lost with its worker is written again from its spill
    return {"committing": i, "spill": None if in_memory else spill}


def _commit_packed(out_dir: str, spec, n: int, job_id: str, fmt: str, options: dict, dtype,
                   stats: dict, table, blocks, held: list, rejects: tuple) -> dict:
    """Write partition ``spec.index``'s blocks (``table``, ``blocks``: what
    :func:`block_table` gave; ``held``: their pooled buffer, given back here) as its part
    in the job's output format, fsync'ed, and commit it with its record
    (:func:`.records.commit_part`: renamed, the record last); returns ``stats`` completed
    (``files``). Runs in a commit thread (:func:`_commit_in_thread`)."""
    from .datasets import shard_name, write_shard
    i = spec.index
    packing = options["packing"]
    tmp = temporary_path(out_dir, i, "packed-")
    digests = {}   # the checksums of files hashed as they were written
    try:
        if fmt == "megatron":
            # one sequence and one document a block; as a cluster's Megatron parts: without
            # the page cache where the file system allows it, hashed as written
            k = table.num_rows
            prefix = part_stem(i, n)
            hashes = {ext: checksum_hash() for ext in (".bin", ".idx")}
            write_pair_from(tmp, [(blocks.reshape(-1),
                                   np.full(k, packing["block_size"], np.int32),
                                   np.arange(k + 1, dtype=np.int64), {})], dtype,
                            fsync=True, digests=hashes, direct=True)
            digests.update({prefix + ext: checksum_hex(h) for ext, h in hashes.items()})
            stats.update(dtype=str(dtype), tokens_written=int(blocks.size))
            files = {prefix + ".bin": tmp + ".bin", prefix + ".idx": tmp + ".idx"}
        elif fmt == "datasets":
            from .datasets import features_of
            table = write_shard(table, tmp)
            stats["features"] = features_of(table.schema)
            files = {shard_name(i, n): tmp}
        else:
            name = part_stem(i, n) + ".parquet"
            files = {name: tmp}
            digest = _write_parquet(table, tmp, options.get("compression"))
            if digest is not None:
                digests[name] = digest
        commit_part(out_dir, i, n, job_id, stats, files, rejects, digests)
    finally:
        for t in (tmp, tmp + ".bin", tmp + ".idx"):
            if os.path.exists(t):
                os.unlink(t)
        del table, blocks   # written: their buffer goes to the next partition
        _give_back("blocks", held.pop())
    return stats


_commit_lock = threading.Lock()
#: The commit thread each task thread of this process started last (by thread id).
_commit_threads: dict[int, threading.Thread] = {}
#: Commits ended in this process and not yet collected, by job id: ``{partition: stats}``,
#: or the error (a :class:`JobError` naming the partition) that ended it.
_commits: dict[str, dict] = {}


def _commit_in_thread(job_id: str, spec, commit) -> None:
    """Run ``commit()`` (:func:`_commit_packed`: a part's write, fsync and renames) in a
    thread of its own while the calling task thread goes on to its next task; its outcome
    is kept for :func:`collect_commits`. At most one commit per task thread is in flight:
    this waits for the calling thread's previous one (its part's buffer goes back to the
    pool then), and raises the error of a commit of this job that failed in this process
    (the job stops at the next write, not at the end)."""
    me = threading.get_ident()
    with _commit_lock:
        previous = _commit_threads.pop(me, None)
    if previous is not None:
        previous.join()
    with _commit_lock:
        failed = [e for e in _commits.get(job_id, {}).values() if isinstance(e, BaseException)]
    if failed:
        raise failed[0]
    thread = threading.Thread(target=_run_commit, args=(job_id, spec, commit),
                              name=f"daskwp-commit-{spec.index}", daemon=True)
    with _commit_lock:
        _commit_threads[me] = thread
    thread.start()


def _run_commit(job_id: str, spec, commit) -> None:
    c = stage_cpu_seconds()
    try:
        outcome = commit()
        cpu = outcome["cpu_seconds"]   # (the write stage: the task's and this thread's)
        cpu["write"] += stage_cpu_seconds() - c
    except BaseException as e:   # kept for the driver (collect_commits)
        outcome = partition_failure(e, spec)
    with _commit_lock:
        _commits.setdefault(job_id, {})[spec.index] = outcome


def collect_commits(job_id: str) -> dict:
    """Wait for this process's commit threads; return the commits of ``job_id`` that
    ended here (``{partition: stats}``) and forget them, or raise the first error."""
    with _commit_lock:
        threads = list(_commit_threads.values())
        _commit_threads.clear()
    for t in threads:
        t.join()
    with _commit_lock:
        done = _commits.pop(job_id, {})
    for i in sorted(done):
        if isinstance(done[i], BaseException):
            raise done[i]
    return done


class _CountingWriter(HashingWriter):
    """:class:`~daskwp.frames.megatron.HashingWriter` that keeps its own position (the
    direct file of :func:`~daskwp.frames.megatron.create_file` has no ``tell``)."""

    def __init__(self, fh, digest):
        super().__init__(fh, digest)
        self.pos = 0

    def write(self, data) -> int:
        n = super().write(data)
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos


def _write_parquet(table: pa.Table, path: str, compression) -> str | None:
    """``table`` as a Parquet file at ``path`` (fsync'ed), in the layout of the job's parts
    (:func:`daskwp.frames.part_writer.parquet_write_options`: no dictionaries, statistics
    only for logID), by daskwp's own writer where it takes the table (integer columns and
    lists of them), else Arrow's. Returns the file's part checksum when daskwp's writer
    wrote it (hashed as written), else None. daskwp's writer writes it without the page
    cache where the file system allows it (:func:`~daskwp.frames.megatron.create_file`),
    as the unpacked job's parts are: nothing is read back, and fresh page-cache pages cost
    more CPU than the copy into the aligned buffer."""
    from ..frames import parquet_writer
    from ..frames.part_writer import LIST_ENCODING, parquet_write_options
    opts = parquet_write_options(table.schema, compression)
    if not parquet_writer.supports(table.schema, opts["compression"]):
        import pyarrow.parquet as pq
        with open(path, "wb") as fh:
            pq.write_table(table, fh, **opts)
            fh.flush()
            os.fsync(fh.fileno())
        return None
    digest = checksum_hash()
    fh = create_file(path, direct=True)
    try:
        if not getattr(fh, "direct", False):   # (pages of the writer: buffered here)
            fh.close()
            fh = open(path, "wb", buffering=1 << 16)
        writer = parquet_writer.NativeParquetWriter(
            _CountingWriter(fh, digest), table.schema, opts["compression"],
            byte_stream_split=LIST_ENCODING == "BYTE_STREAM_SPLIT")
        writer.write_table(table)
        writer.close()
        if not getattr(fh, "direct", False):
            fh.flush()
        complete_file(fh, fsync=True)
    finally:
        fh.close()
    return checksum_hex(digest)


def _spill_stats(spill) -> dict:
    return spill.stats if isinstance(spill, PartitionUnits) else spill


def _spill_counts(spill) -> tuple[int, int]:
    """``(units, documents)`` of a partition's spill or units (what the following writes
    take)."""
    spill = _spill_stats(spill)
    return int(spill["units"]), int(spill["documents"])


def _units_head(spill, block_size: int, out_dir: str) -> np.ndarray:
    """The first ``block_size - 1`` units of a partition (all when fewer; from memory or
    from its spill): all that the blocks of the partitions before it take of it (a block
    starts before it)."""
    if isinstance(spill, PartitionUnits):
        return spill.head(block_size - 1)
    n = min(block_size - 1, int(spill["units"]))
    out = np.empty(n, np.dtype(spill["spill_dtype"]))
    _SpilledUnits(out_dir, spill["index"], out.dtype).read(0, n, out)
    return out


def _tail_of(heads, starts, i: int, block_size: int) -> np.ndarray:
    """The units from ``starts[i + 1]`` on that partition i's last block takes, from the
    heads (:func:`_units_head`) of the partitions after it."""
    total = int(starts[-1])
    end = min(-(-int(starts[i + 1]) // block_size) * block_size, total)
    need, got, j = end - int(starts[i + 1]), [], i + 1
    while need > 0:
        got.append(heads[j][:need])
        need -= len(got[-1])
        j += 1
    return np.concatenate(got) if got else np.zeros(0, np.int32)


def _prefix_sums(counts) -> tuple[np.ndarray, np.ndarray]:
    """The units and the documents before each partition (and in all, last), of their
    ``(units, documents)`` counts (:func:`_spill_counts`)."""
    units, docs = (np.concatenate([[0], np.cumsum([c[k] for c in counts])]) for k in (0, 1))
    return units, docs


def _write_when_placed(spec, spill, n_partitions: int, out_dir: str, tokenizer,
                       options: dict, job_id: str, file_start: int, head, *counts) -> dict:
    """Pass 2 for partition ``spec.index`` as soon as the counts of partitions 0..i+1
    (``counts``, :func:`_spill_counts`; all of them for the last two) place its blocks:
    what :func:`write_packed_partition` returns, or ``{"later": stats}`` when its last
    block reaches past partition i+1 (a following partition shorter than the rest of the
    block), to be written once every count is known. ``spill``: its statistics (its units
    spilled), or its :class:`PartitionUnits` in memory (spilled, :func:`_spill_units`,
    when the write waits). ``head``: partition i+1's (:func:`_units_head`) where the run
    keeps units in memory (its last block's tail taken from it: the next partition may
    have no spill), else None (the tail read from the next spills; and for the last
    partition, whose blocks end in it). The blocks written are
    those the whole pass gives: ``_block_range`` and ``block_table`` read ``starts`` only
    up to the end of the partition's last block."""
    i = spec.index
    starts, docs = _prefix_sums(counts)
    size = options["packing"]["block_size"]
    in_memory = isinstance(spill, PartitionUnits)
    if len(counts) < n_partitions:
        if int(starts[-1]) < -(-int(starts[i + 1]) // size) * size:
            return {"later": _spill_units(spill, out_dir, i) if in_memory else spill}
    tail = None if head is None else _tail_of({i + 1: head}, starts, i, size)
    return write_packed_partition(spec, starts.tolist(), int(docs[i]), out_dir, tokenizer,
                                  options, job_id, n_partitions, spill, int(docs[file_start]),
                                  tail=tail)


def _run_tasks(client, dsk: dict, keys: list, first=()) -> list:
    """The values of ``keys``. On a cluster, with ``first`` (pass 1's keys, indexed
    ``(name, partition)``): every task of partition i goes to worker ``i % workers``
    (loosely: dask may still move it) and pass 1's tasks run before the writes whenever
    both are ready. Without this, the scheduler queued pass 1 (root tasks) and sent each
    write as soon as its counts were in, so the writes ran as they came and none were left
    at the end: a worker done with its last partitions waited, idle, for the other's last
    pass 1 that every remaining write needed (0.9-1.9 s of a 19-partition job's 17-24 s at
    load 20), and the second worker started late (every pass 1 task first went to the
    worker that held the tokenizer, till dask stole half of them)."""
    from ..distributed.lending import scheduler_workers
    from ..distributed.local import InProcess
    if client is None:
        from dask.local import get_sync
        return list(get_sync(dsk, keys)) if keys else []
    if not keys:
        return []
    workers = sorted(scheduler_workers(client, on_error="raise")) \
        if first and not isinstance(client, InProcess) else []
    if not workers:
        return client.get(dsk, keys, sync=True)
    import dask
    # (a restricted task is not a root task: sent to its worker at once, not queued)
    with dask.annotate(priority=functools.partial(_priority, frozenset(first)),
                       workers=functools.partial(_placement, workers),
                       allow_other_workers=True):
        return client.get(dsk, keys, sync=True)


def _run_committing(client, job_id: str, dsk: dict, keys: list, first=()) -> list:
    """:func:`_run_tasks` of a graph whose writes commit their parts in threads
    (:func:`_commit_in_thread`): where the graph fails, the commit threads it started are
    waited for (none writes in the output after the job has ended) and their outcomes
    dropped."""
    try:
        return _run_tasks(client, dsk, keys, first)
    except BaseException:
        try:
            _commits_of(client, job_id)
        except Exception:   # (the graph's error is the one to raise)
            pass
        raise


def _commits_of(client, job_id: str) -> dict:
    """:func:`collect_commits` of ``job_id`` in every process that ran its tasks (this one,
    or each worker of a cluster)."""
    from ..distributed.local import InProcess
    if client is None or isinstance(client, InProcess):
        return collect_commits(job_id)
    done = {}
    for got in client.run(collect_commits, job_id).values():
        done.update(got)
    return done


def _collect_commits(client, job_id: str, committing: dict, stats: list,
                     later: dict | None = None) -> None:
    """Once every commit thread of the job has ended, the statistics of the parts that the
    writes handed to them (``committing``: partition to its spill's statistics, or None
    for units held in memory) into ``stats``. A part whose commit ended with its worker (a
    worker lost after its write task returned) is written again from its spill: it goes
    to ``later``; JobError where it cannot be (no ``later``, or no spill)."""
    if not committing:
        return
    done = _commits_of(client, job_id)
    for i, spill in committing.items():
        if i in done:
            stats[i] = done[i]
        elif later is not None and spill is not None:
            later[i] = spill
        else:
            raise JobError(f"partition {i}'s part was not committed: the worker that wrote "
                           f"it was lost before its part was complete; rerun the job (its "
                           f"complete parts are kept)")


def _priority(first: frozenset, key) -> int:
    return 1 if key in first else 0


def _placement(workers: list, key) -> list:
    """Partition i's tasks (keys ``(name, i)``) on worker ``i % len(workers)``; the others
    (the tokenizer) anywhere."""
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], int):
        return [workers[key[1] % len(workers)]]
    return workers


def run_packed_job(cfg, tok, specs, out: str, job_id: str, client, log,
                   device: str) -> tuple[list, list, list]:
    """Both passes of a packed job (the driver prepared the output directory). Returns
    ``(stats, offsets, missing)``: every part's statistics, the logID offsets (n + 1) and
    the parts this run wrote."""
    from ..distributed.dask_compat import Task, TaskRef
    from ..distributed.local import InProcess
    from ..distributed.offset_pass import tokenizer_layer

    n = len(specs)
    stats = [check_part_record(out, i, n, job_id, None) for i in range(n)]
    missing = [i for i in range(n) if stats[i] is None]
    options = {"add_special_tokens": cfg.add_special_tokens, "on_bad_row": cfg.on_bad_row,
               "packing": cfg.packing, "output_format": cfg.output_format,
               "compression": cfg.compression}
    size = cfg.packing["block_size"]
    if missing:
        fresh = len(missing) == n
        # A fresh run in this process keeps each partition's units in memory: its write
        # follows within the graph. On a cluster they are spilled: the scheduler would move
        # them to a less busy worker for the write (half the partitions in a two-worker
        # run, the whole units each time), where a spill is read by whichever worker
        # writes. A rerun spills them: the complete parts are checked before any write.
        keep = 0
        if fresh and (client is None or isinstance(client, InProcess)):
            # (at most this many partitions' units in memory; the spills of dask's threads
            # can run ahead of the writes: the others are spilled)
            keep = max(4, 2 * (client.num_workers if client is not None else 1))
        file_start = []
        for i, s in enumerate(specs):
            file_start.append(file_start[i - 1] if i and specs[i - 1].path == s.path else i)
        tok_key, dsk = tokenizer_layer(tok)
        spill_keys, count_keys, head_keys = [], [], []
        for s in specs:
            key = (f"daskwp-spill-{job_id[:8]}", s.index)
            dsk[key] = Task(key, spill_partition, s, out, TaskRef(tok_key), options, device,
                            None, keep)
            count = (f"daskwp-spill-count-{job_id[:8]}", s.index)
            dsk[count] = Task(count, _spill_counts, TaskRef(key))
            spill_keys.append(key)
            count_keys.append(count)
            if keep:
                head = (f"daskwp-spill-head-{job_id[:8]}", s.index)
                dsk[head] = Task(head, _units_head, TaskRef(key), size, out)
                head_keys.append(head)
        heads = {}
        if fresh:
            # One graph: partition i's write waits only for the counts of partitions
            # 0..i+1, which place its blocks (the last one ends inside partition i+1 unless
            # that partition is shorter than the rest of the block), and for partition
            # i+1's head in memory (the units its last block takes): the writes run while
            # later partitions are still tokenized, as an unpacked job's do. A write that
            # needs more of the following counts hands its spill back ({"later": ...}; its
            # units in memory are spilled then) and runs after the pass, its tail from the
            # heads in memory, else from the following spills.
            write_keys = []
            for i in missing:
                key = (f"daskwp-pack-{job_id[:8]}", i)
                dsk[key] = Task(key, _write_when_placed, specs[i], TaskRef(spill_keys[i]), n,
                                out, TaskRef(tok_key), options, job_id, file_start[i],
                                TaskRef(head_keys[i + 1]) if keep and i + 1 < n else None,
                                *(TaskRef(k) for k in count_keys[:min(i + 2, n)]))
                write_keys.append(key)
            got = _run_committing(client, job_id, dsk, count_keys + head_keys + write_keys,
                                  first=spill_keys + count_keys)
            k = n + len(head_keys)
            counts, heads, written = got[:n], dict(enumerate(got[n:k])), got[k:]
            later = {i: st["later"] for i, st in zip(missing, written) if "later" in st}
            _collect_commits(client, job_id, {i: st["spill"] for i, st in zip(missing, written)
                                              if "committing" in st}, stats, later)
        else:
            # A rerun: the complete parts are checked against the counts before any write
            got = _run_tasks(client, dsk, count_keys + [spill_keys[i] for i in missing])
            counts, later = got[:n], dict(zip(missing, got[n:]))
        starts, doc_offsets = _prefix_sums(counts)
        for i in range(n):
            if stats[i] is not None and stats[i].get("token_offset") != int(starts[i]):
                raise JobError(f"part {i} of {out!r} starts at token {stats[i]['token_offset']}"
                               f", the input now at {int(starts[i])}: delete the output and "
                               f"rerun the job")
        if later:   # every count is known now
            tok_key, dsk = tokenizer_layer(tok)
            keys = []
            for i, spill in later.items():
                key = (f"daskwp-pack-{job_id[:8]}", i)
                dsk[key] = Task(key, write_packed_partition, specs[i], starts.tolist(),
                                int(doc_offsets[i]), out, TaskRef(tok_key), options, job_id,
                                n, spill, int(doc_offsets[file_start[i]]),
                                _tail_of(heads, starts, i, size) if heads else None)
                keys.append(key)
            _collect_commits(client, job_id, {st["committing"]: st["spill"] for st in
                                              _run_committing(client, job_id, dsk, keys)},
                             stats)
    offsets = np.concatenate([[0], np.cumsum([s["documents"] for s in stats])]).tolist()
    release_buffers()   # those of the tasks that ran in this process
    return stats, offsets, missing


def verify_packed_output(stats, cfg) -> int:
    """The parts' tokens follow each other from 0, their blocks too, and the blocks add up
    to what the tokens give (``total // block_size``, one more for a padded remainder);
    returns the number of blocks."""
    nxt = start = 0
    for s in stats:
        first, k = s["blocks"]
        if (k and first != nxt) or s["token_offset"] != start:
            raise JobError(f"packed part {s['partition']} starts at block {first} and token "
                           f"{s['token_offset']}; block {nxt} and token {start} were "
                           f"expected: delete it and rerun the job")
        nxt += k
        start += s["units"]
    size = cfg.packing["block_size"]
    want = start // size + (1 if cfg.packing["pad_last"] and start % size else 0)
    if nxt != want:
        raise JobError(f"the packed parts hold {nxt} blocks, their {start} tokens make "
                       f"{want}: delete the output and rerun the job")
    return nxt


def packing_summary(stats, cfg) -> dict:
    """The summary's ``packing`` entry (the blocks checked, :func:`verify_packed_output`)."""
    return {"block_size": cfg.packing["block_size"], "pad_last": cfg.packing["pad_last"],
            "blocks": verify_packed_output(stats, cfg)}
