"""Batch jobs that write Megatron indexed datasets (``output_format: megatron``).

Each partition becomes a ``.bin`` / ``.idx`` pair (:mod:`daskwp.frames.megatron`), written as a
Parquet part is (:mod:`.parts`): under hidden temporary names, fsync'ed, renamed, and
``part-NNNNN.json`` last, recording the job, the partition, its logID offset, its statistics
and the SHA-256 of both files. A rerun keeps every pair whose record matches the job and
whose files match their checksums. When all parts are there, the driver merges them into
``OUTPUT/<column>_document.{bin,idx}`` (``<column>_sentence`` with a
``document_separator``: Megatron's ``preprocess_data.py`` names), or, with
``merge_parts: false``, lists the parts' prefixes in ``_megatron_data_args.txt``. A job in
this process (threads, no cluster) writes no part pairs: its partitions go from memory into
the merged pair, each recorded as its range of it (:class:`InlineMerge`).

Sequences follow ``preprocess_data.py`` (docs/batch-jobs.md "Megatron indexed datasets"):
the ids of a document (or of each piece of it between ``document_separator`` strings), with
``[CLS]``/``[SEP]`` around each sequence when ``add_special_tokens`` is on, ``eod_token``
after the last sequence of each document with ``append_eod``; a piece without tokens is left
out, a document without any stays a document of no sequences, so document k is logID k.

These functions import no Dask: the driver runs them as tasks.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
import uuid

import numpy as np

from ..core.cpu_clock import stage_cpu_seconds
from ..backends.memory import host_pool_info, trim_host_memory
from ..core.lengths import LengthCounts
from ..distributed.state import cached_tokenizer
from ..distributed.tasks import text_bytes
from ..frames import storage
from ..frames.part_writer import checksum_hash, checksum_hex
from ..frames.megatron import (PairAppender, gather_pieces, index_size, megatron_slices,
                               merge_pairs, merge_pairs_in, merged_range_digest, read_index,
                               token_dtype, unfinish_pair, write_pair_from)
from .errors import ConfigError, JobError, OutputConflictError
from .parts import (PART_PREFIX, REJECTS_PREFIX, REJECTS_SUFFIX, TMP_PREFIX, part_name,
                    rejects_path, remove_temporary_files, worker_device, worker_series,
                    write_rejects)
from .records import (RECORD_SUFFIX, commit_part, file_digest, naming_partition, part_stem,
                      publish_part, refuse_set_options, temporary_path, timed_read,
                      write_part_rejects)

__all__ = ["DATA_ARGS_FILE", "HOST_POOL_KEEP", "InlineMerge", "LOCAL_REJECTS_SUFFIX",
           "MEGATRON_ONLY", "MEGATRON_OPTIONS",
           "PART_SLICE_BYTES",
           "MERGED_KEY", "MERGE_TMP_PREFIX", "merged_resume_state",
           "PART_FILES", "PartMerger", "remove_merge_temporaries",
           "check_megatron_config", "check_output_format_options",
           "finish_megatron", "is_megatron_file", "megatron_options",
           "megatron_prefix", "verify_megatron_output",
           "write_local_rejects", "write_megatron_partition"]

#: The job keys of Megatron output, passed to the write tasks.
MEGATRON_OPTIONS = ("add_special_tokens", "append_eod", "eod_token", "document_separator")
#: Megatron's ``--data-args-path`` file: the dataset prefixes (weighted by tokens when there
#: are several).
DATA_ARGS_FILE = "_megatron_data_args.txt"
#: The merged pair while the driver writes it (:class:`PartMerger`): not ``TMP_PREFIX``,
#: whose files the driver removes when the parts are written, before the merge is done.
MERGE_TMP_PREFIX = ".tmp-merge-"
#: What a Megatron part is made of: ``part-NNNNN`` + each of these.
PART_FILES = (".bin", ".idx", ".json")
#: Window, pair and per-position options that do not apply to whole-document sequences:
#: refused when set to anything but their default.
_NOT_APPLICABLE = ("max_length", "stride", "truncation", "padding", "bucket_widths",
                   "return_overflowing_tokens", "return_token_type_ids",
                   "return_sequence_ids", "return_offsets_mapping", "return_word_ids",
                   "return_special_tokens_mask", "column_pair", "keep_columns",
                   "parquet_compat")


def megatron_prefix(cfg) -> str:
    """The merged dataset's file name prefix: ``<column>_document``, or ``<column>_sentence``
    with a ``document_separator`` (what ``preprocess_data.py`` writes for ``--json-keys``)."""
    level = "sentence" if cfg.document_separator is not None else "document"
    return f"{cfg.column}_{level}"


#: ``part-NNNNN``: the prefix of partition ``index``'s pair.
part_prefix = part_stem


def is_megatron_file(name: str, cfg=None) -> bool:
    """Whether ``name`` (in an output directory) is one of the files a Megatron job writes."""
    if name == DATA_ARGS_FILE or name.startswith((TMP_PREFIX, MERGE_TMP_PREFIX)):
        return True
    if name.startswith(PART_PREFIX) and name.endswith(PART_FILES):
        return True
    if name.startswith(REJECTS_PREFIX) and name.endswith(REJECTS_SUFFIX + LOCAL_REJECTS_SUFFIX):
        return True   # (a partition-local write's rows)
    return cfg is not None and name in (megatron_prefix(cfg) + ".bin",
                                        megatron_prefix(cfg) + ".idx")


def check_megatron_config(cfg, tokenizer, default_value) -> None:
    """Refuse, by name, what a Megatron job cannot honour: window, pair and per-position
    options set to anything but their default (``default_value(key)``: the configured
    default), and an ``eod_token`` the vocabulary lacks."""
    refuse_set_options(cfg, _NOT_APPLICABLE, default_value, "output_format 'megatron' (one "
                       "whole sequence per document or piece, no windows)",
                       "leave it unset, or use output_format 'parquet'")
    eod = cfg.eod_token or tokenizer.vocab.sep_token
    if tokenizer.vocab.token_to_id(eod) is None:
        raise ConfigError(f"eod_token {eod!r} is not a token of the vocabulary "
                          f"{tokenizer.vocab.source!r}; name one of its tokens")


#: The keys that only Megatron output takes: refused with another format.
MEGATRON_ONLY = ("append_eod", "eod_token", "document_separator", "merge_parts")


def check_output_format_options(cfg, tokenizer, default_value) -> None:
    """Refuse, by name, the options the job's ``output_format`` cannot honour: for
    ``megatron`` :func:`check_megatron_config`; for the others the Megatron-only keys, and
    ``parquet_compat`` for ``datasets``, set to anything but their default."""
    if cfg.output_format == "megatron":
        check_megatron_config(cfg, tokenizer, default_value)
        return
    keys = MEGATRON_ONLY + (("parquet_compat",) if cfg.output_format == "datasets" else ())
    for key in keys:
        value = getattr(cfg, key)
        if value != default_value(key):
            raise ConfigError(f"{key}={value!r} does not apply to output_format "
                              f"{cfg.output_format!r}"
                              + ("; it is an option of output_format 'megatron'"
                                 if key in MEGATRON_ONLY else ""))


def megatron_options(cfg) -> dict:
    """The options the write tasks of a Megatron job take."""
    return {k: getattr(cfg, k) for k in MEGATRON_OPTIONS}


#: The partitions being written in this process now (the threads of an in-process job or
#: of a worker), and the most there were at once: each keeps the host pool's blocks for
#: the next one. (The most, not the number now: between two tasks a thread holds none,
#: and a bound taken then dropped blocks the next partition of two threads needed.)
_in_flight = [0, 0]
_in_flight_lock = threading.Lock()


def _counted(task):
    """``task``, counted in :data:`_in_flight` while it runs."""
    @functools.wraps(task)
    def run(*args, **kwargs):
        with _in_flight_lock:
            _in_flight[0] += 1
            _in_flight[1] = max(_in_flight)
        try:
            return task(*args, **kwargs)
        finally:
            with _in_flight_lock:
                _in_flight[0] -= 1
    return run


@naming_partition
@_counted
def write_megatron_partition(spec, logid_offset: int, out_dir: str, tokenizer, options: dict,
                             job_id: str, n_partitions: int, device: str = "cpu",
                             documents: int | None = None,
                             file_offset: int | None = None) -> dict:
    """Read, tokenize and write one partition's ``.bin`` / ``.idx`` pair atomically; return
    its statistics (the signature of :func:`.parts.write_partition`). The row policy as
    there: a row that cannot be read is an empty document (no sequence), listed in the
    partition's rejects file (``file_offset``: the first logID of its input file).

    Both files go to hidden temporary names, the ``.bin`` written without the page cache
    where the file system allows it (``O_DIRECT``: the driver's merge reads it so, once;
    cached, each 4 KB written took a fresh page), and renamed (not fsync'ed, the ``.idx``
    through the page cache: :data:`PART_FSYNC`);
    ``part-NNNNN.json``, the record that makes the pair complete, is renamed last. A
    retried task writes the same bytes. Errors name the partition and its file.

    ``logid_offset`` None (with ``documents`` and ``file_offset`` None): a partition-local
    write, which takes no value of the global-offset pass (a cluster's, whose driver takes
    the partition's count from the statistics returned: ``driver.job_graph``'s
    ``local``); its record holds ``logid_offset`` null, which the driver fills in from
    the pass (``_job.json`` records every offset). Its documents' logIDs appear nowhere
    else in a Megatron part: only a rejects file needs them. Its rejected rows (the row
    policy ``reject``) go to the part's file ``_rejects-NNNNN.jsonl.local`` instead (the
    rejects file's lines with logIDs and rows counted from the partition's first
    document, :data:`LOCAL_REJECTS_SUFFIX`), from which the driver writes the rejects
    file once it has the offsets (:func:`write_local_rejects`).

    Memory: the partition's text and the ``.idx`` arrays; the ids and ``.bin`` data of a
    slice of it at a time (:func:`daskwp.frames.megatron.megatron_slices`)."""
    t0 = time.perf_counter()
    texts, _, (bad_bytes, bad_docs), bad, read_cpu = timed_read(spec, documents, options)
    dev = worker_device(device)
    to_device = None if dev == "cpu" else functools.partial(worker_series, device=dev)
    tok = cached_tokenizer(tokenizer)
    n_bytes = text_bytes(texts)
    dtype = token_dtype(len(tok.vocab))
    clock: dict = {}
    c1 = stage_cpu_seconds()
    merge = _INLINE_MERGES.get(options.get("inline_merge"))
    if merge is not None and spec.index == merge.n - 1 and documents is not None:
        merge.expect_documents(int(logid_offset) + int(documents))
    slices = megatron_slices(tok, texts, options, to_device, clock,
                             None if merge is not None else PART_SLICE_BYTES)
    del texts   # (the slices hold it until the last is made)

    def complete(stats, folder_path):   # once the partition is tokenized and framed
        stats["length_counts"] = LengthCounts.of(stats.pop("document_lengths")).to_json()
        stats.update(partition=spec.index,
                     logid_offset=None if logid_offset is None else int(logid_offset),
                     text_bytes=n_bytes, invalid_utf8_bytes=bad_bytes,
                     invalid_utf8_documents=bad_docs, dtype=str(dtype),
                     rejected=len(bad or ()))
        _bound_partition_memory(n_bytes)
        if logid_offset is None:   # a partition-local write: numbered from 0 here
            path = _local_rejects_path(folder_path, spec.index, n_partitions)
            write_rejects(path, bad or (), spec, 0, 0)   # (none: an earlier one removed)
            if not bad:
                return stats, ()
            stats["rejects_local"] = os.path.basename(path)
            return stats, (stats["rejects_local"],)
        return stats, write_part_rejects(folder_path, spec, n_partitions, bad,
                                         logid_offset, file_offset)
    if merge is None:
        stats = _write_part(spec, out_dir, options, n_partitions, job_id, dtype, slices,
                            complete)
    else:   # in this process: appended to the merged pair from memory (InlineMerge)
        tokens, lengths, docs, stats = gather_pieces(slices, dtype)
        del slices
        stats, rejects = complete(stats, out_dir)
        if not merge.offer(spec.index, (tokens, lengths, docs, dict(stats), rejects)):
            # too many partitions held already: its pair is written as a part's
            whole = [(np.concatenate(tokens) if len(tokens) > 1 else tokens[0], lengths,
                      docs, {})]
            del tokens
            _write_part(spec, out_dir, options, n_partitions, job_id, dtype, iter(whole),
                        lambda _, __: (stats, rejects))
    work = stage_cpu_seconds() - c1
    stats["cpu_seconds"] = {"read": read_cpu, "tokenize": clock.get("tokenize", 0.0),
                            "frame": clock.get("frame", 0.0),
                            "write": work - sum(clock.values())}
    stats["seconds"] = time.perf_counter() - t0
    return stats


#: Text bytes of a slice of a part written by its own task (a cluster's worker): half the
#: in-process job's (:data:`daskwp.frames.megatron.SLICE_BYTES`), whose partitions wait in
#: memory whole for the merge anyway. A slice's ids, framed tokens and the kernel's buffers
#: are the host pool's blocks that neither the next read nor the partition's text can
#: reuse: with 8 MB slices a 1-thread worker's peak RSS grew 266 MB over its warm, idle
#: size on 64 MB partitions, with 4 MB 250 MB, at the same CPU seconds (in-process, 4 MB
#: slices cost ~3% more CPU: more pieces to gather and append).
PART_SLICE_BYTES = 4 << 20


#: Whether a part's pair and record are fsync'ed before their renames. They are not: a
#: part is an intermediate file, read by the driver's merge (whose merged pair is fsync'ed)
#: and kept for a rerun, which takes a part only if every file of it has the size and the
#: checksum its record gives (``records.check_part_record``): a part that a crash of the
#: system (not of a process: the kernel keeps what it wrote) left short or stale is written
#: again. Its ``.bin`` is written with ``O_DIRECT`` (the device has the bytes when a write
#: returns), its ``.idx`` through the page cache (``write_pair_from(index_direct=False)``):
#: the merge reads it back at once, from memory. Why: at the end of each part its task
#: thread waited for the device, its worker's core idle: a 64 MB partition's direct ``.idx``
#: (~17 MB) blocked it ~7 ms more than a buffered one at the same CPU, and its fsyncs
#: (.bin, .idx, record) ~1.5 ms (benchmarks/results/megatron_cluster_tail.md).
PART_FSYNC = False


def _write_part(spec, out_dir: str, options: dict, n_partitions: int, job_id: str, dtype,
                slices, complete) -> dict:
    """Write partition ``spec.index``'s pair from ``slices`` and commit it; returns its
    statistics: ``complete(stats of the slices, folder)`` gives them and the names of the
    part's other files (its rejects file), written to ``folder``."""
    # on an object store the part is committed in a local staging folder, then uploaded
    # file by file, its record last (records.publish_part)
    prefix = part_prefix(spec.index, n_partitions)
    folder = storage.Folder(out_dir, options.get("storage_options"))
    with folder.staging() as staging:
        tmp = temporary_path(staging, spec.index)
        try:
            # the slices' sequences streamed into the pair: tokenize, frame, write
            # the files' part checksums computed as they are written (commit_part's)
            # not fsync'ed (PART_FSYNC)
            hashes = {ext: checksum_hash() for ext in (".bin", ".idx")}
            stats, rejects = complete(write_pair_from(tmp, slices, dtype, fsync=PART_FSYNC,
                                                      digests=hashes, direct=True,
                                                      index_direct=False), staging)
            commit_part(staging, spec.index, n_partitions, job_id, stats,
                        {prefix + ".bin": tmp + ".bin", prefix + ".idx": tmp + ".idx"},
                        rejects, {prefix + ext: checksum_hex(h) for ext, h in hashes.items()},
                        fsync=PART_FSYNC)
        finally:
            _remove_pair(tmp)
        publish_part(folder, staging, spec.index, n_partitions)
    return stats


#: The host pool's freed blocks kept after a partition, in bytes of the partition's text
#: for each partition this process writes at once: above what the next one takes from it
#: (the reader's buffer of its input bytes, its slices' ids, the kernel's buffers, the .bin
#: data: 3.2x its text on a 1-thread worker with 64 MB JSON Lines partitions), so that
#: they come from memory already touched. Above it the oldest blocks are freed, not all of
#: them: the next partition's outputs would come from fresh memory, whose first touch on a
#: virtual machine can cost more than tokenizing it (a bound of 3 dropped the reader's
#: buffer every partition: +0.6 CPU s per GB in the read stage). The bound before, 8 x one
#: partition whatever the threads, released everything above it.
HOST_POOL_KEEP = 4


def _bound_partition_memory(text_bytes: int) -> bool:
    """Hand back what Arrow's allocator keeps of freed buffers (the partition's text, the
    JSON reader's blocks) before the next partition is read, and trim the host pool's cache
    to :data:`HOST_POOL_KEEP` x ``text_bytes`` x the most partitions this process has
    written at once (its oldest blocks freed). Returns whether the host pool was
    trimmed."""
    import pyarrow as pa
    pa.default_memory_pool().release_unused()
    keep = HOST_POOL_KEEP * max(int(text_bytes), 1) * max(_in_flight[1], 1)
    if host_pool_info()["cached"] > keep:
        trim_host_memory(keep)
        return True
    return False


#: What a partition-local write (:func:`write_megatron_partition` without a logID offset)
#: adds to its rejects file's name: the rows it rejected, numbered from the partition's
#: first document; one of the part's files (in its record, checksummed).
LOCAL_REJECTS_SUFFIX = ".local"


def _local_rejects_path(folder: str, index: int, n: int) -> str:
    return rejects_path(os.path.join(folder, part_name(index, n))) + LOCAL_REJECTS_SUFFIX


def write_local_rejects(out_dir: str, specs, stats: list, offsets: list) -> None:
    """The rejects files of the partitions written partition-local that rejected rows
    (``rejects_local`` in their statistics): each line of the part's
    ``_rejects-NNNNN.jsonl.local`` with the logID of the job's pass (``offsets``: every
    partition's, the total last) and its row in its file, written as the part's writer
    writes a rejects file (:func:`.parts.write_rejects`: the same bytes), atomically; a
    rerun that keeps the part writes them again. Streamed: a line at a time."""
    first = []   # the logID of the first document of each partition's file
    for i, s in enumerate(specs):
        first.append(first[i - 1] if i and specs[i - 1].path == s.path else offsets[i])
    for i, st in enumerate(stats):
        name = st.get("rejects_local")
        if not name:
            continue
        path = rejects_path(os.path.join(out_dir, part_name(i, len(specs))))
        tmp = os.path.join(out_dir, f"{TMP_PREFIX}{i}-rejects-{uuid.uuid4().hex}")
        try:
            with open(os.path.join(out_dir, name), encoding="utf-8") as src, \
                    open(tmp, "w", encoding="utf-8") as fh:
                for line in src:
                    row = json.loads(line)
                    row["logID"] = int(offsets[i]) + int(row["logID"])
                    row["row"] = row["logID"] - int(first[i])
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def verify_megatron_output(out_dir: str, plan) -> None:
    """Read every part's index back: part i holds ``documents_i`` documents (its logIDs
    offset_i .. offset_i + documents_i - 1, in order) and its ``.bin`` the tokens its
    lengths add up to; a partition in the merged pair of an in-process job
    (:class:`InlineMerge`), by its record: its range holds ``documents_i`` documents and
    its tokens' bytes (the range's checksum was checked when it was written or kept).
    Raises JobError naming the first bad part."""
    n = len(plan)
    folder = storage.Folder(out_dir, storage.current_options())
    for p in plan:
        prefix = folder.join(part_prefix(p["index"], n))
        rec = None if folder.remote else _read_record(out_dir, p["index"], n)
        if isinstance(rec, dict) and isinstance(rec.get(MERGED_KEY), dict):
            # in the merged pair (InlineMerge): its range, checked by its checksum
            rng = rec[MERGED_KEY]
            docs = rng["documents"][1] - rng["documents"][0]
            size = rng["bin_bytes"][1] - rng["bin_bytes"][0]
            want = rec["tokens_written"] * np.dtype(rec["dtype"]).itemsize
            if docs != p["documents"] or size != want:
                raise JobError(f"output part {prefix!r} is recorded with {docs} documents "
                               f"and {size} bytes of tokens in the merged dataset; the job "
                               f"expects {p['documents']} and {want}: delete it and rerun "
                               f"the job")
            continue
        try:
            with folder.local_copies([part_prefix(p["index"], n) + ".idx"]) as (idx,):
                ix = read_index(idx)
            size = storage.size(prefix + ".bin")
        except (OSError, ValueError) as e:
            raise JobError(f"output part {prefix}.idx cannot be read back: {e}") from None
        if ix.documents != p["documents"] or size != ix.tokens * ix.dtype.itemsize:
            raise JobError(f"output part {prefix!r} holds {ix.documents} documents and "
                           f"{size} bytes of tokens; the job expects {p['documents']} and "
                           f"{ix.tokens * ix.dtype.itemsize}: delete it and rerun the job")


def _remove_pair(prefix: str) -> None:
    """Remove ``prefix.bin`` and ``prefix.idx`` (a temporary pair) where they exist."""
    for ext in (".bin", ".idx"):
        try:
            os.unlink(prefix + ext)
        except FileNotFoundError:
            pass


class PartMerger:
    """The driver's merge of a Megatron job's parts into one pair while the job runs: the
    parts are appended in order as soon as every part before them is complete
    (:meth:`part_done`, from the driver's callback of each written part), so that when the
    last part is written only the end of the ``.idx`` is left to write
    (:class:`daskwp.frames.megatron.PairAppender`). The appends run on a thread of their
    own (``daskwp-merge``): the callback only marks the part, so neither the driver's
    result loop nor the in-process scheduler that calls it waits for a copy or an fsync.
    The pair is written under ``MERGE_TMP_PREFIX`` names in ``out_dir`` (a local folder),
    its ``.bin`` without the page cache (``PairAppender(direct=True)``: the parts' ``.bin``
    read so too), renamed by :meth:`finish`; :meth:`close` removes what is left of it, and the
    constructor what an earlier driver left (killed).

    A part that cannot be appended (it is refused, or the disk is full) stops the merge
    here: :func:`finish_megatron` then merges the parts after the job, which reports the
    error. With ``plannable`` (no ``document_separator``), once the driver has the
    dataset's documents from the pass (:meth:`expect_documents`) the merge thread writes
    the ``.idx``'s pointers and document indices of the parts appended at their final
    places while it waits for the next part, as :class:`InlineMerge` does: :meth:`finish`
    then writes only the last part's. ``cpu_seconds``: the CPU seconds of the appends and
    of that work (the merge thread's). ``state``
    (:func:`merged_resume_state`): an in-process run's merge to go on with is refused
    (OutputConflictError).

    A job in this process merges with :class:`InlineMerge` instead."""

    def __init__(self, out_dir: str, n_partitions: int, state: dict | None = None,
                 plannable: bool = False):
        if state is not None and state["partitions"]:
            # (a run in this process appends to those; this merge starts afresh)
            raise OutputConflictError(
                f"output directory {out_dir!r} holds a Megatron job started in-process: "
                f"its first {state['partitions']} partitions are in its merged dataset, "
                f"unfinished, which only an in-process run goes on with; rerun it without "
                f"a cluster (scheduler_address 'threads', no n_workers or "
                f"threads_per_worker, input within in_process_max_bytes), or pass "
                f"--overwrite to start it again")
        remove_merge_temporaries(out_dir)
        self.n = n_partitions
        self.out_dir = out_dir
        self.prefix = os.path.join(out_dir, f"{MERGE_TMP_PREFIX}{uuid.uuid4().hex}")
        self.appender = PairAppender(self.prefix, fsync=True, direct=True)
        self.complete = [False] * n_partitions
        self.appended = 0
        # the documents of the whole dataset once the driver's pass has them
        # (expect_documents); planned: the .idx's end planned from them
        self.documents: int | None = None
        self._plannable = plannable
        self._planned = False
        self.failed: BaseException | None = None
        self.cpu_seconds = 0.0
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._merge, name="daskwp-merge", daemon=True)
        self._thread.start()

    def part_done(self, index: int) -> None:
        """Part ``index`` is complete: the merge thread appends it once every part before
        it is appended."""
        with self._cond:
            self.complete[index] = True
            self._cond.notify_all()

    def _next(self) -> bool:
        return (self.failed is None and not self._closed and self.appended < self.n
                and self.complete[self.appended])

    def _merge(self) -> None:
        c0 = stage_cpu_seconds()
        while True:
            with self._cond:
                while not (self._closed or self._next() or self._ahead_due()):
                    self._cond.wait()
                if not self._next():
                    if self._closed or self.failed is not None:
                        return
                    index = None   # nothing to append: the .idx's end written ahead
                else:
                    index = self.appended
            try:
                if index is None:
                    self._write_ahead()
                else:
                    self._append(index)
            except BaseException as e:   # refused, disk full: finish_megatron merges
                with self._cond:
                    self.failed = e
                    self._appended(None)
                    self._cond.notify_all()
                return
            with self._cond:
                if index is not None:
                    self._appended(index)
                    self.appended += 1
                self.cpu_seconds = stage_cpu_seconds() - c0
                self._cond.notify_all()

    def _append(self, index: int) -> None:
        self.appender.append(os.path.join(self.out_dir, part_prefix(index, self.n)))

    def total_before(self, missing, counts) -> int | None:
        """The partition whose write is to wait for the job's total document count
        (``driver.job_graph``'s ``total_before``): none here (on a cluster the pass runs
        ahead of the writes: the total comes early, :meth:`expect_documents`)."""
        return None

    #: Of the partitions a run writes, the last ``1 / AHEAD_SHARE`` (at least one) are
    #: counted ahead: on a cluster before the writes (:meth:`counted_ahead`), in this
    #: process before the write of the one before them starts
    #: (:meth:`InlineMerge.total_before`).
    AHEAD_SHARE = 8

    def counted_ahead(self, missing, counts) -> list:
        """Of the partitions a cluster's run writes partition-local (``missing``, their
        counts ``counts``: ``driver.job_graph``'s ``local``), those whose documents the
        pass still counts from the input, ahead of the writes: the last
        ``len(missing) // AHEAD_SHARE`` (at least one) whose count is not known, so that
        the total comes in (:meth:`expect_documents`) once the writes before them are
        done, and the ``.idx``'s end is written ahead while they are written. The others'
        counts come from their writes. None with a ``document_separator`` (no plan) or
        when that would be every partition.

        Why: the writes took their logID offsets from a pass that read every partition
        once more than its write (0.30 CPU s per GB of JSON Lines on a 2-worker cluster),
        a count task and its result per partition on the cluster's event loops too; a
        Megatron part's bytes do not depend on its offset. With no count at all the
        total came with the last partition, and the ``.idx``'s pointers and document
        indices (~0.19 GB per GB of JSON Lines) were all written after it."""
        if not self._plannable:
            return []
        unknown = [i for i in missing if counts[i] is None]
        m = max(1, len(missing) // self.AHEAD_SHARE)
        return unknown[-m:] if len(unknown) > m else []

    def expect_documents(self, documents: int) -> None:
        """The dataset will hold ``documents`` documents (from the driver once the pass
        has them: on a cluster, where the pass runs ahead of the writes, early; in this
        process :meth:`InlineMerge.total_before`, or the last partition's logID offset +
        its count, told by its task when it starts): with ``plannable`` (no
        ``document_separator``), the merge thread, while it waits for partitions, then writes the ``.idx``'s pointers and document indices of
        those appended at their places for that many sequences too (as many as there
        are documents left: without a ``document_separator``, no more), and keeps them
        written as the others are appended (``PairAppender.plan_index``,
        ``write_ahead``); :meth:`finish` then writes only the last ones. A partition with
        an empty document drops the plan (``finish`` writes them all, as without it).

        Why: written after the last partition, they were the job's end, on one thread
        (~0.2 GB per GB of JSON Lines, at the disk's O_DIRECT rate), while the other
        threads have nothing left to do."""
        with self._cond:
            if self.documents is None:
                self.documents = int(documents)
                self._cond.notify_all()

    def _ahead_due(self) -> bool:
        """(Under the lock) whether the merge thread, with nothing to append, has work
        ahead of :meth:`finish` (:meth:`_write_ahead`)."""
        return (self.documents is not None and self._plannable and self.failed is None
                and (not self._planned or self.appender.ahead_pending()))

    #: Entries (pointers, and as many document indices) a step of the work ahead writes
    #: before the merge thread looks for a partition to append again (2 MB of each: the
    #: step's pointers and the lengths read back for them are arrays of its size, touched
    #: while the last partitions are in memory; the writes still go 8 MB at a time).
    AHEAD_ENTRIES = 1 << 18

    def _write_ahead(self) -> None:
        """A step of the work ahead of :meth:`finish` (:meth:`_ahead_due`)."""
        app = self.appender
        try:
            if not self._planned:
                self._planned = True
                # every document left is a sequence at most (no document_separator)
                app.plan_index(app.sequences + self.documents - app.documents,
                               self.documents)
            app.write_ahead(self.AHEAD_ENTRIES)
        except (OSError, ValueError):   # finish writes them all again (and reports it)
            self._plannable = False
            app.drop_plan()

    def _appended(self, index: int | None) -> None:
        """(Under the lock) ``index`` is appended; None: the merge stopped."""

    def drain(self) -> None:
        """Wait until every part that can be appended now is."""
        with self._cond:
            while self._next():
                self._cond.wait()

    def finish(self, merged: str) -> dict | None:
        """Wait for the appends, complete the merged pair and rename it to ``merged`` (a
        prefix); None when not every part could be appended."""
        self.drain()
        with self._cond:
            if self.failed is not None or self.appended != self.n:
                return None
        info = self.appender.finish()
        os.replace(self.prefix + ".bin", merged + ".bin")
        os.replace(self.prefix + ".idx", merged + ".idx")
        return info

    def close(self) -> None:
        """Stop the merge thread (after the append it is in) and remove the unfinished
        pair."""
        with self._cond:
            self._closed = True
            self._appended(None)
            self._cond.notify_all()
        self._thread.join()
        self.appender.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


#: The in-process jobs' merges, by key (``options["inline_merge"]``): how a write task on a
#: thread of the driver's process finds its job's :class:`InlineMerge`.
_INLINE_MERGES: dict = {}
#: A record's key of the range of its partition in the merged pair (:class:`InlineMerge`).
MERGED_KEY = "merged"


def _read_record(out_dir: str, index: int, n: int) -> dict | None:
    try:
        with open(os.path.join(out_dir, part_prefix(index, n) + RECORD_SUFFIX),
                  encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _range_matches(prefix: str, finished: bool, rng: dict) -> bool:
    h = checksum_hash()
    try:
        merged_range_digest(prefix, finished, rng, h)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return checksum_hex(h) == rng.get("hash128")


def _files_match(out_dir: str, rec: dict) -> bool:
    """The files a record lists besides its range (its rejects file) have their size and
    checksum."""
    try:
        for name, f in rec.get("files", {}).items():
            p = os.path.join(out_dir, name)
            if os.path.getsize(p) != f["bytes"] or file_digest(p) != f["hash128"]:
                return False
    except (OSError, KeyError, TypeError, AttributeError):
        return False
    return True


def _settle_pair(tmp: str, merged: str) -> None:
    """Complete a move of the pair that a killed run left half done: ``.bin`` renamed and
    ``.idx`` not (both renames of :meth:`InlineMerge.finish`, tmp -> merged, and of
    :func:`~daskwp.frames.megatron.unfinish_pair`, merged -> tmp, move ``.bin`` first).
    Otherwise the ranges would be checked against a pair whose ``.idx`` is missing, and
    every partition written again."""
    def there(p):
        return os.path.exists(p)
    if not there(tmp + ".bin") and there(merged + ".bin") and there(tmp + ".idx"):
        os.replace(tmp + ".idx", merged + ".idx")      # finish was cut
    elif there(tmp + ".bin") and not there(merged + ".bin") and not there(tmp + ".idx") \
            and there(merged + ".idx"):
        os.replace(merged + ".idx", tmp + ".idx")      # unfinish_pair was cut


def merged_resume_state(out_dir: str, cfg, n: int, job_id: str, counts: list,
                        stats: list) -> dict | None:
    """The partitions of an in-process run of this job already in its merged pair
    (:class:`InlineMerge`): every record holding a range (``MERGED_KEY``) is checked, in
    order, against the merge's unfinished files (``MERGE_TMP_PREFIX`` + the job id) or,
    when there are none, the merged pair; ``stats[i]`` is set to the record of each
    partition whose range follows the one before and whose bytes have its checksum, and to
    None for any other record with a range (it is written again). Returns ``{"finished",
    "partitions", "sequences", "documents", "bin_bytes", "dtype"}`` of that prefix, or None
    when no record holds a range."""
    tmp = os.path.join(out_dir, MERGE_TMP_PREFIX + job_id)
    merged = os.path.join(out_dir, megatron_prefix(cfg))
    _settle_pair(tmp, merged)
    finished = not os.path.exists(tmp + ".bin")
    source = merged if finished else tmp
    at = {"sequences": 0, "documents": 0, "bin_bytes": 0}
    state = None
    going = True   # every partition before is in the merge
    for i in range(n):
        rec = _read_record(out_dir, i, n)
        rng = rec.get(MERGED_KEY) if isinstance(rec, dict) else None
        if not isinstance(rng, dict):   # a part of its own, or nothing
            going = False
            continue
        state = state or {"finished": finished, "partitions": 0, **at, "dtype": None}
        going = (going and rec.get("job_id") == job_id and rec.get("partition") == i
                 and (counts[i] is None or rec.get("documents") == counts[i])
                 and all(rng.get(key, [None])[0] == at[key] for key in at)
                 and _range_matches(source, finished, rng) and _files_match(out_dir, rec))
        if not going:
            stats[i] = None
            continue
        rec.pop("job_id")
        stats[i] = rec
        at = {key: int(rng[key][1]) for key in at}
        state.update(at, partitions=i + 1, dtype=rec.get("dtype"))
    return state


class InlineMerge(PartMerger):
    """The merged pair of a job that runs in this process (threads, no cluster), written
    once: each partition's write task hands its framed tokens and index entries
    (:meth:`offer`), and a thread of its own (``daskwp-merge``) appends them in input order
    to the pair's unfinished files (``MERGE_TMP_PREFIX`` + the job id:
    :class:`daskwp.frames.megatron.PairAppender`), writes them back (``fdatasync``), drops
    their cached pages, and then commits the partition's record ``part-NNNNN.json``: its
    statistics and its range of the three files with their checksum (``MERGED_KEY``). A
    partition that completes before those before it waits in memory, at most ``hold`` of
    them (``hold``, default one a core: the threads of the in-process scheduler); past
    that, its task writes its pair as a part (:func:`write_megatron_partition`),
    which the thread appends in its turn (:meth:`part_done`: a part of a run on a cluster
    too), then records its range and removes its pair. :meth:`finish` completes the pair
    and renames it.

    A rerun after a killed or failed run (``state``: :func:`merged_resume_state`) cuts the
    files to the partitions whose ranges check and goes on; a complete partition is never
    computed again, the bytes are the same. ``cpu_seconds``: the merge thread's."""

    def __init__(self, out_dir: str, cfg, n_partitions: int, job_id: str,
                 state: dict | None = None, hold: int | None = None):
        self.n = n_partitions
        self.out_dir = out_dir
        self.job_id = job_id
        self.merged = os.path.join(out_dir, megatron_prefix(cfg))
        self.prefix = os.path.join(out_dir, MERGE_TMP_PREFIX + job_id)
        ours = os.path.basename(self.prefix)
        for name in os.listdir(out_dir):   # another run's (a cluster's merge)
            if name.startswith(MERGE_TMP_PREFIX) and not name.startswith(ours):
                os.unlink(os.path.join(out_dir, name))
        resume = None
        if state is not None and state["partitions"]:
            if state["finished"]:
                unfinish_pair(self.merged, self.prefix, state["sequences"],
                              state["documents"], state["bin_bytes"])
            resume = (state["sequences"], state["documents"], state["bin_bytes"],
                      state["dtype"])
        self.appender = PairAppender(self.prefix, fsync=True, keep=True, resume=resume,
                                     direct=True)
        self.appended = state["partitions"] if resume else 0
        # one partition a thread (the threaded scheduler's: one per core it may use, as
        # dask counts them: CPU affinity and cgroup quotas, not the host's cores)
        from dask.system import CPU_COUNT
        self.hold = hold if hold is not None else max(int(CPU_COUNT), 1)
        self.held: dict = {}
        self.files: set = set()
        # the documents of the whole dataset, once the last partition's task tells them
        # (expect_documents); planned: the .idx's end planned from them
        self.documents: int | None = None
        self._plannable = cfg.document_separator is None
        self._planned = False
        self.failed: BaseException | None = None
        self.cpu_seconds = 0.0
        self.key = uuid.uuid4().hex
        _INLINE_MERGES[self.key] = self
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._merge, name="daskwp-merge", daemon=True)
        self._thread.start()

    def offer(self, index: int, data: tuple) -> bool:
        """Partition ``index``'s ``(token arrays, sequence_lengths, document_indices,
        statistics, names of its other files)``: True when it is taken (appended in its
        turn), False when its task is to write it as a part (``hold`` partitions wait
        already and one before it is not there yet, or the merge stopped). When every
        partition before it is held, it waits for the merge instead."""
        with self._cond:
            while index != self.appended and len(self.held) >= self.hold:
                if self.failed is not None or self._closed or not all(
                        j in self.held for j in range(self.appended, index)):
                    return False
                # every partition before it is held: the merge goes on without a task's
                # help, so this one waits for it (the appends bound the tasks)
                self._cond.wait()
            if self.failed is not None or self._closed:
                return False
            self.held[index] = data
            self._cond.notify_all()
            return True

    def part_done(self, index: int) -> None:
        """Partition ``index`` is complete: its part (when it is not held) is appended in
        its turn."""
        with self._cond:
            if index >= self.appended and index not in self.held:
                self.files.add(index)
                self._cond.notify_all()

    def total_before(self, missing, counts) -> int | None:
        """The partition (of ``missing``, those this run writes) whose write task is to
        wait for the job's total document count (``driver.job_graph``'s
        ``total_before``; it and the writes after it take their partitions in order),
        so that the merge has it (:meth:`expect_documents`, from the driver) while the
        last ``len(missing) // AHEAD_SHARE`` (at least one) partitions are written, not
        only while the last is; None when that is no use: a ``document_separator`` (no
        plan) or too few partitions. With every count known (a Parquet input's plan, the
        counts a rerun's ``_job.json`` holds) the first of ``missing``: no pass to wait for,
        and every write then takes its partition in order.

        Why: the pointers and document indices to write ahead grow with the dataset
        (~0.2 GB per GB of JSON Lines); with the total only when the last partition's
        task started, a 3 GB job's merge had one partition's time to write ~0.6 GB, and
        its end still wrote what was left. The partitions counted early read their bytes
        again for their writes (not kept: they would be in memory meanwhile). With every
        count known the writes depend on nothing that orders them: the threaded
        scheduler started them as dask.order ranks them (1 GB of JSON Lines in 19
        partitions: 18, 1, 0, 17, 16, 11, 15, ...), and each one past ``hold``
        partitions waiting was written as a part and copied by the merge (15 of 19:
        +0.5-0.9 CPU s per GB, the write stage 4x, the merge's 1.5x)."""
        if not missing:
            return None
        if all(c is not None for c in counts):
            return missing[0]
        if not self._plannable:
            return None
        m = max(1, len(missing) // self.AHEAD_SHARE)
        return missing[-1 - m] if len(missing) > m else None

    def _next(self) -> bool:
        return (self.failed is None and not self._closed and self.appended < self.n
                and (self.appended in self.held or self.appended in self.files))

    def _appended(self, index: int | None) -> None:
        if index is None:
            self.held.clear()
        else:
            self.held.pop(index, None)

    def _append(self, index: int) -> None:
        with self._cond:
            data = self.held.get(index)
        h = checksum_hash()
        part = os.path.join(self.out_dir, part_prefix(index, self.n))
        if data is not None:
            tokens, lengths, docs, stats, others = data
            rng = self.appender.append_data(tokens, lengths, docs[1:], stats["dtype"], h)
        else:   # its part's pair: copied, its range read back for its checksum
            start = {"sequences": self.appender.sequences,
                     "documents": self.appender.documents,
                     "bin_bytes": self.appender.bin_bytes}
            self.appender.append(part)
            rng = {key: [v, getattr(self.appender, key)] for key, v in start.items()}
            merged_range_digest(self.prefix, False, rng, h)
            stats = _read_record(self.out_dir, index, self.n)
            if stats is None or stats.pop("job_id", None) != self.job_id:
                raise JobError(f"output part {part!r} lost its record while it was merged")
            others = tuple(n for n in stats.pop("files", {})
                           if not n.startswith(part_prefix(index, self.n) + "."))
        rng["hash128"] = checksum_hex(h)
        stats[MERGED_KEY] = rng
        stats.pop("files", None)
        commit_part(self.out_dir, index, self.n, self.job_id, stats, {}, others)
        if data is None:
            _remove_pair(part)

    def drain(self) -> None:
        """Wait until every partition that can be appended now is; JobError when the merge
        failed."""
        super().drain()
        if self.failed is not None:
            raise JobError(f"the merge of the Megatron dataset in {self.out_dir!r} "
                           f"failed: {type(self.failed).__name__}: {self.failed}; rerun "
                           f"the job to go on") from self.failed

    def finish(self, merged: str) -> dict:
        """Wait for the appends, complete the merged pair and rename it to ``merged``."""
        self.drain()
        if self.appended != self.n:
            raise JobError(f"the merge of the Megatron dataset in {self.out_dir!r} holds "
                           f"{self.appended} of {self.n} partitions")
        info = self.appender.finish()
        os.replace(self.prefix + ".bin", merged + ".bin")
        os.replace(self.prefix + ".idx", merged + ".idx")
        for i in range(self.n):   # of a run killed after a part's range was recorded
            _remove_pair(os.path.join(self.out_dir, part_prefix(i, self.n)))
        return info

    def close(self) -> None:
        """Stop the merge thread (after the append it is in); the unfinished files stay
        (a rerun goes on from them)."""
        super().close()
        _INLINE_MERGES.pop(self.key, None)


def remove_merge_temporaries(out_dir: str) -> None:
    """Remove the files of a merge that did not finish (``MERGE_TMP_PREFIX``)."""
    remove_temporary_files(out_dir, MERGE_TMP_PREFIX)


def finish_megatron(out_dir: str, cfg, stats: list, rewritten: bool,
                    merger: PartMerger | None = None) -> dict:
    """Merge the parts into one pair (``merge_parts``; kept when nothing was rewritten and
    the merged files have the expected sizes) or list them, and write
    ``_megatron_data_args.txt``. ``merger``: the parts merged while the job ran (used when
    it holds every part). Returns the summary's ``megatron`` entry (with
    ``merge_cpu_seconds``: the CPU seconds of the merge, and ``merge_tail_cpu_seconds``:
    those of this thread, after the parts were written)."""
    n = len(stats)
    folder = storage.Folder(out_dir, storage.current_options())
    prefixes = [folder.join(part_prefix(i, n)) for i in range(n)]
    sequences = sum(s["rows"] for s in stats)
    documents = sum(s["documents"] for s in stats)
    written = sum(s["tokens_written"] for s in stats)
    dtype = np.dtype(stats[0]["dtype"])
    info = {"dtype": str(dtype), "sequences": sequences, "documents": documents,
            "tokens_written": written, "merged": bool(cfg.merge_parts)}
    c0 = stage_cpu_seconds()
    if cfg.merge_parts:
        merged = folder.join(megatron_prefix(cfg))
        sizes = (written * dtype.itemsize, index_size(sequences, documents))
        try:
            have = (storage.size(merged + ".bin"), storage.size(merged + ".idx"))
        except OSError:
            have = None
        if folder.remote:
            if rewritten or have != sizes:
                merge_pairs_in(folder, [part_prefix(i, n) for i in range(n)],
                               megatron_prefix(cfg))
            with folder.local_copies([megatron_prefix(cfg) + ".idx"]) as (idx,):
                ix = read_index(idx)
        elif (merger is None or merger.finish(merged) is None) and \
                (rewritten or have != sizes):
            # no merge ran while the job did: merge the parts now
            tmp = os.path.join(out_dir, f"{TMP_PREFIX}merged-{uuid.uuid4().hex}")
            try:
                merge_pairs(prefixes, tmp, fsync=True)
                os.replace(tmp + ".bin", merged + ".bin")
                os.replace(tmp + ".idx", merged + ".idx")
            finally:
                _remove_pair(tmp)
        if not folder.remote:
            remove_merge_temporaries(out_dir)   # of a driver killed while it merged
            ix = read_index(merged + ".idx")
        if ix.documents != documents or ix.sequences != sequences:
            raise JobError(f"merged dataset {merged!r} holds {ix.documents} documents and "
                           f"{ix.sequences} sequences, the parts {documents} and "
                           f"{sequences}")
        info["prefix"] = merged
        lines = [merged]
    else:
        info["prefixes"] = prefixes
        # Megatron blends several prefixes by weight: the parts' token counts keep their
        # shares; parts without a sequence are left out (a zero weight is refused there).
        lines = [f"{s['tokens_written']} {p}" for s, p in zip(stats, prefixes) if s["rows"]]
        if len(lines) == 1:
            lines = [lines[0].split(" ", 1)[1]]
    path = folder.join(DATA_ARGS_FILE)
    text = "\n".join(lines) + ("\n" if lines else "")
    folder.write_bytes(DATA_ARGS_FILE, text.encode("utf-8"))   # atomically
    info["data_args_path"] = path
    # the driver's CPU seconds of the merge (copy_file_range: the copy itself is the
    # kernel's, counted as this thread's system time)
    tail = stage_cpu_seconds() - c0
    info["merge_tail_cpu_seconds"] = round(tail, 4)
    info["merge_cpu_seconds"] = round(tail + (merger.cpu_seconds if merger else 0.0), 4)
    return info

