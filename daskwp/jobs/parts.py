"""Job output: the partition tasks of a job (counting a partition's documents; reading,
tokenizing and writing one part atomically) and the checks that let a rerun keep complete
parts (resume) and verify the whole dataset.

Layout of an output directory: ``part-NNNNN.parquet`` per partition (the accessor's partition
frame with global logIDs; Parquet key-value metadata ``daskwp`` records the job id, the
partition, its logID offset and its statistics, and ``daskwp.data_hash128`` a checksum of the
file's bytes before the footer, i.e. its data pages), ``_job.json`` (what the job is) and
``_summary.json`` (what it did; present only while the dataset is complete), and for a
partition with rows it rejected (the row policy, ``on_bad_row: reject``)
``_rejects-NNNNN.jsonl``, written atomically before its part.

These functions import no Dask: the driver runs them as tasks of one graph
(:func:`daskwp.jobs.driver.job_graph`), on workers or in this process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import struct
import time
import uuid
from typing import Sequence

import numpy as np
import pyarrow as pa

from ..backends.memory import host_pool_mark, release_idle_host_memory
from ..core.cpu_clock import stage_cpu_seconds
from ..core.cache import BoundedCache
from ..distributed.state import cached_tokenizer
from ..distributed.tasks import (add_logid_offset, call_options, owned_unknown_tokens,
                                 tokenize_partition, write_tokenized_part)
from ..frames.part_writer import CHECKSUM_KEY, PART_METADATA_KEY, SHA256_CHECKSUM_KEY, \
    checksum_hash, checksum_hex, native_for_kept
from ..frames.schema import is_cudf, numpy_of_arrow
from ..frames import storage
from ..frames.storage import is_url, open_input
from .errors import InputError, JobError
from .inputs import (PartitionSpec, attach_kept_columns, count_partition, read_partition,
                     read_partition_with_counts)

__all__ = ["CHECKSUM_KEY", "JOB_FILE", "JOB_FORMAT", "METADATA_KEY", "PART_PREFIX",
           "PART_SUFFIX", "REJECTS_PREFIX", "REJECTS_SUFFIX", "SUMMARY_FILE", "TMP_PREFIX",
           "checksum_of",
           "check_part", "count_job_partition", "rejects_path",
           "data_checksum", "empty_partition", "part_name", "partition_failure",
           "partition_statistics", "read_counted_partition", "remove_temporary_files",
           "tokenize_job_partition", "verify_output", "worker_device", "worker_series",
           "write_partition", "write_rejects", "refused_rows", "empty_rows", "LogidCheck",
           "read_footer", "verify_parquet_output"]

JOB_FILE = "_job.json"
SUMMARY_FILE = "_summary.json"
PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"
TMP_PREFIX = storage.TMP_PREFIX
#: The rows a partition rejected: ``_rejects-NNNNN.jsonl`` beside ``part-NNNNN.parquet``
#: (a name readers of the dataset skip, as they skip every ``_`` file).
REJECTS_PREFIX = "_rejects-"
REJECTS_SUFFIX = ".jsonl"
METADATA_KEY = PART_METADATA_KEY
JOB_FORMAT = 2
_CHECKSUM_PLACEHOLDER = b"0" * 32
_READ_CHUNK = 1 << 22


def part_name(index: int, n_partitions: int) -> str:
    width = max(5, len(str(max(n_partitions - 1, 0))))
    return f"{PART_PREFIX}{index:0{width}d}{PART_SUFFIX}"


def rejects_path(part_path: str) -> str:
    """The rejects file of the part at ``part_path`` (``_rejects-NNNNN.jsonl``)."""
    folder, name = os.path.split(part_path)
    return os.path.join(folder, REJECTS_PREFIX + name[len(PART_PREFIX):-len(PART_SUFFIX)]
                        + REJECTS_SUFFIX)


_WORKER_DEVICES = BoundedCache("job_worker_devices", 4)


def _worker_device(device: str) -> str:
    """The device of this process ('auto' resolved here, on the worker; cached)."""
    if device != "auto":
        return device
    from ..distributed.cluster import resolve_device
    return _WORKER_DEVICES.get_or_create(device, lambda: resolve_device("auto"))


def _as_series(texts, device: str):
    """A partition's documents as the Series type the tokenizer runs on: cudf on a GPU
    worker (when the text is valid UTF-8), else pandas backed by the Arrow array. Pairs (a
    two-column Arrow table: the texts, then the second sequences, ``column_pair``) become a
    two-column frame of the same kind."""
    if isinstance(texts, pa.Table):
        if _worker_device(device) == "gpu":
            import cudf
            try:
                return cudf.DataFrame({f"c{j}": cudf.Series.from_arrow(
                    texts.column(j).combine_chunks().cast(pa.large_string()))
                    for j in range(2)})
            except pa.ArrowInvalid:
                pass
        import pandas as pd
        return pd.DataFrame({f"c{j}": pd.arrays.ArrowExtensionArray(
            texts.column(j).combine_chunks()) for j in range(2)})
    if _worker_device(device) == "gpu":
        import cudf
        try:
            return cudf.Series.from_arrow(texts.cast(pa.large_string()))
        except pa.ArrowInvalid:
            pass  # not UTF-8: the CPU path gives the defined ids (U+FFFD, see docs/differences-hf.md)
    import pandas as pd
    return pd.Series(pd.arrays.ArrowExtensionArray(texts))


#: Public names of the two helpers above for the other output formats (jobs/megatron.py).
worker_device = _worker_device
worker_series = _as_series


def _frame_to_arrow(frame) -> pa.Table:
    if is_cudf(frame):
        return frame.to_arrow()
    return pa.Table.from_pandas(frame, preserve_index=False)


def tokenize_job_partition(tokenizer, texts: pa.Array, options: dict, logid_offset: int,
                           device: str = "cpu", partition: int | None = None):
    """Tokenize one partition into the output table and its statistics.

    The table is the partition frame of the ``.wordpiece`` accessor
    (:func:`daskwp.distributed.tasks.tokenize_partition`: logID, start, stop, input_ids,
    attention_mask, window) with the global offset added to its logIDs
    (:func:`~daskwp.distributed.tasks.add_logid_offset`), so a job writes the same columns as
    ``ddf[col].wordpiece.tokenize(...).to_parquet(...)``. ``tokenizer`` is resolved through
    the per-worker state: the worker's one instance of it.

    Memory: the tokenizer's arrays for the partition and the Arrow table sharing them.
    """
    tokenizer = cached_tokenizer(tokenizer)
    frame = tokenize_partition(_as_series(texts, device), tokenizer, call_options(options),
                               partition=partition)
    frame = add_logid_offset(frame, int(logid_offset))
    table = _frame_to_arrow(frame)
    return table, partition_statistics(table, tokenizer.vocab.unk_id)


def partition_statistics(table: pa.Table, unk_id: int) -> dict:
    """Rows, document tokens (each counted once: a document's [start, stop] slices tile its
    tokens) and unknown tokens among them, from a partition table."""
    rows = table.num_rows
    if rows == 0:
        return {"rows": 0, "tokens": 0, "unknown_tokens": 0}
    tokens = (np.asarray(table.column("stop").to_numpy(), dtype=np.int64)
              - table.column("start").to_numpy() + 1)
    return {"rows": int(rows), "tokens": int(tokens.sum()),
            "unknown_tokens": owned_unknown_tokens(table, unk_id)}


def partition_failure(exc: BaseException, spec: PartitionSpec, what: str = "partition"):
    """``exc`` as a JobError naming the partition and its file: an InputError or other
    JobError keeps its type (the CLI's exit status depends on it), anything else becomes a
    JobError with the original type in the message."""
    where = spec.describe()
    name = f"{what} {spec.index}" + ("" if where in str(exc) else f" ({where})")
    if isinstance(exc, JobError):
        return type(exc)(f"{name} failed: {exc}")
    return JobError(f"{name} failed: {type(exc).__name__}: {exc}")


def count_job_partition(spec: PartitionSpec, on_bad_row: str = "error",
                        keep: bool = True) -> int:
    """Documents of one partition, read from the input: a leaf of the global-offset pass
    (:class:`daskwp.distributed.graph.PartitionCounts`) for a partition whose count is not
    known yet. ``on_bad_row='reject'``: a bad row is a document too. ``keep`` False: its
    bytes are not kept for its write (a count run ahead of it). Errors name the
    partition."""
    try:
        return int(count_partition(spec, lenient=on_bad_row == "reject", keep=keep))
    except Exception as e:
        raise partition_failure(e, spec, "counting partition") from e


def empty_partition(path: str, column: str, column_pair: str | None = None) -> PartitionSpec:
    """The one partition of an input that holds no document: zero bytes of ``path`` read as
    text (as no pair for sentence pairs). Its part is an empty table with the full schema,
    so ``dd.read_parquet(OUTPUT)`` works on the output of an empty input."""
    return PartitionSpec(index=0, path=path, format="text", column=column, byte_start=0,
                         byte_end=0, documents=0, column_pair=column_pair)


def _footer_start(fh) -> int:
    """Where the Parquet footer begins (``size - 8 - footer length``)."""
    size = fh.seek(0, os.SEEK_END)
    if size < 12:
        raise ValueError("not a Parquet file (too short)")
    fh.seek(size - 8)
    tail = fh.read(8)
    if tail[4:] != b"PAR1":
        raise ValueError("not a Parquet file (no footer magic)")
    start = size - 8 - struct.unpack("<i", tail[:4])[0]
    if start < 4:
        raise ValueError("not a Parquet file (bad footer length)")
    return start


def checksum_of(fh, end: int, key: bytes = SHA256_CHECKSUM_KEY) -> str:
    """The checksum of ``fh``'s first ``end`` bytes, read in 4 MB pieces: SHA-256 (first 128
    bits, hex), or the part checksum recorded under ``key``
    (:func:`~daskwp.frames.part_writer.checksum_hash`)."""
    h = checksum_hash(key)
    fh.seek(0)
    left = end
    while left > 0:
        buf = fh.read(min(_READ_CHUNK, left))
        if not buf:
            raise ValueError("file shorter than its footer says")
        h.update(buf)
        left -= len(buf)
    return checksum_hex(h)


def data_checksum(path: str, key: bytes = CHECKSUM_KEY) -> str:
    """The checksum (32 hex digits) of a Parquet file's bytes before its footer: the pages,
    dictionary pages and page headers of every column chunk; of the kind a part records
    under ``key`` (:data:`CHECKSUM_KEY`, or ``daskwp.data_sha256`` of older parts).

    Memory: reads the file in 4 MB pieces."""
    with open_input(path) as fh:
        return checksum_of(fh, _footer_start(fh), key)


def write_partition(spec: PartitionSpec, logid_offset: int, out_dir: str, tokenizer,
                    options: dict, job_id: str, n_partitions: int,
                    device: str = "cpu", documents: int | None = None,
                    file_offset: int | None = None) -> dict:
    """Read, tokenize and write one partition atomically; return its statistics.

    ``logid_offset`` comes from the global-offset pass; ``documents`` (the pass's count of
    this partition, or ``spec.documents``) is checked against what is read. The table goes
    to a hidden temporary file in ``out_dir``, with the checksum of its data pages in the
    footer, that is fsync'ed and renamed to ``part-NNNNN.parquet``: a part exists complete
    or not at all, and a retried task (a worker died) simply replaces it with the same
    bytes. Errors name the partition and its file.

    The row policy (``options["on_bad_row"] == "reject"``): a row that cannot be read, or
    that the tokenizer refuses, is tokenized as an empty document (its logID keeps its
    place) and listed in the partition's rejects file, written atomically before the part
    (:func:`write_rejects`); ``file_offset`` is the first logID of the partition's file (a
    rejected row's ``row`` in it). Otherwise such a row fails the partition.
    """
    mark = host_pool_mark()
    try:
        return _write_partition(spec, logid_offset, out_dir, tokenizer, options, job_id,
                                n_partitions, device, documents, file_offset)
    except Exception as e:
        raise partition_failure(e, spec) from e
    finally:
        # the host pool keeps what this partition used (docs/design.md §3.5)
        release_idle_host_memory(mark)


#: The position prefix of the tokenizer's messages about one row ("pair 0 (logID 0): "),
#: which in a rejects file's reason would name the row's place in a one-row call.
_ROW_PREFIX = re.compile(r"^(pair|text|document) \d+ \(logID \d+\): ")


def refused_rows(tokenizer, texts, options: dict, device: str = "cpu") -> list:
    """``[(row, reason)]``: the rows of ``texts`` (an Arrow array, or a table of pairs) that
    the tokenizer refuses on their own (``ValueError`` / ``TypeError``), found by halving
    the ranges it refuses: one refused row costs about three tokenizations of the range in
    all, r of them about ``log2(r) + 3``."""
    def refusal(lo: int, hi: int) -> str | None:
        try:
            tokenize_job_partition(tokenizer, texts.slice(lo, hi - lo), options, 0, device)
        except (ValueError, TypeError) as e:
            return str(e)
        return None

    found = []
    todo = [(0, len(texts))]
    while todo:
        lo, hi = todo.pop()
        why = refusal(lo, hi) if hi > lo else None
        if why is None:
            continue
        if hi - lo == 1:
            found.append((lo, _ROW_PREFIX.sub("", why)))
        else:
            mid = (lo + hi) // 2
            todo += [(mid, hi), (lo, mid)]
    return sorted(found)


def _empty_rows(texts, rows: Sequence[int]):
    """``texts`` (an Arrow array, or a table of pairs) with ``rows`` made null (empty
    documents)."""
    import pyarrow.compute as pc
    mask = np.zeros(len(texts), dtype=bool)
    mask[list(rows)] = True
    mask = pa.array(mask)

    def blank(a):
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        return pc.if_else(mask, pa.scalar(None, a.type), a)
    if isinstance(texts, pa.Table):
        return pa.Table.from_arrays([blank(c) for c in texts.columns],
                                    names=texts.column_names)
    return blank(texts)


#: Public name of the above for the other output formats (jobs/datasets.py).
empty_rows = _empty_rows


def write_rejects(path: str, bad: Sequence[tuple], spec: PartitionSpec, logid_offset: int,
                  file_offset: int | None) -> None:
    """The rejects file of a partition at ``path``: one JSON object per rejected row,
    ``{"file", "row", "logID", "partition", "reason"}`` in row order (``row``: 0-based
    document of ``file``, as logIDs count them), written to a temporary file, fsync'ed and
    renamed. No rejected row: no file (one left by an earlier attempt is removed)."""
    if not bad:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    first = logid_offset if file_offset is None else int(file_offset)
    tmp = os.path.join(os.path.dirname(path), f"{TMP_PREFIX}{spec.index}-rejects-"
                                              f"{uuid.uuid4().hex}{REJECTS_SUFFIX}")
    with open(tmp, "w", encoding="utf-8") as fh:
        for i, reason in sorted(bad):
            logid = int(logid_offset) + int(i)
            fh.write(json.dumps({"file": spec.path, "row": logid - first, "logID": logid,
                                 "partition": spec.index, "reason": reason},
                                ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_counted_partition(spec: PartitionSpec, documents: int | None,
                           bad: list | None = None) -> tuple:
    """:func:`.inputs.read_partition_with_counts` of a partition to write, its documents
    checked against ``documents`` (the pass's count, else ``spec.documents``): an
    InputError when the input changed since it was counted. ``bad``: the row policy
    (:func:`.inputs.read_partition`)."""
    # each invalid byte is read as U+FFFD (docs/differences-hf.md); text counts them as it splits lines
    texts, kept, invalid = read_partition_with_counts(spec, bad)
    expected = spec.documents if documents is None else documents
    if expected is not None and len(texts) != expected:
        raise InputError(f"{spec.describe()} now holds {len(texts)} documents, "
                         f"{expected} when they were counted: the input changed "
                         f"during the job")
    return texts, kept, invalid


def _write_partition(spec, logid_offset, out_dir, tokenizer, options, job_id, n_partitions,
                     device, documents, file_offset=None) -> dict:
    t0 = time.perf_counter()
    c0 = stage_cpu_seconds()
    reject = options.get("on_bad_row") == "reject"
    bad = [] if reject else None
    texts, kept, (bad_bytes, bad_docs) = read_counted_partition(spec, documents, bad)
    read_cpu = stage_cpu_seconds() - c0
    name = part_name(spec.index, n_partitions)
    logids = None
    # An object store has no rename: the part is written complete to a local staging
    # folder, then uploaded under its name (one put, or a multipart upload that the store
    # completes only with its last part); its rejects file first, the same way.
    folder = storage.Folder(out_dir, options.get("storage_options"))
    with folder.staging() as staging:
        path = os.path.join(staging, name)
        kept_hook = None if kept is None else functools.partial(
            attach_kept_columns, kept=kept, logid_offset=int(logid_offset))

        def write(texts, bad):
            nonlocal logids
            write_rejects(rejects_path(path), bad or (), spec, logid_offset, file_offset)
            if folder.remote:
                rejects = os.path.basename(rejects_path(path))
                if bad:
                    folder.publish(rejects_path(path), rejects)
                elif rejects in options.get("listed_rejects", (rejects,)):
                    # one an earlier run left (the driver's listing says which exist)
                    folder.remove(rejects)
            logids = LogidCheck(int(logid_offset), kept_hook)
            if _worker_device(device) == "gpu":
                texts = _as_series(texts, device)
            tmp = os.path.join(staging, f"{TMP_PREFIX}{spec.index}-{uuid.uuid4().hex}.parquet")
            meta = {"job_id": job_id, "partition": spec.index, "logid_offset": int(logid_offset),
                    "invalid_utf8_bytes": bad_bytes, "invalid_utf8_documents": bad_docs,
                    "rejected": len(bad or ())}
            return write_tokenized_part(texts, tokenizer, options, path, tmp,
                                        logid_offset=int(logid_offset),
                                        compression=options["compression"], metadata=meta,
                                        table_hook=logids, native=native_for_kept(kept),
                                        parquet_compat=bool(options.get("parquet_compat")),
                                        drop_cache=not folder.remote)

        try:
            stats = write(texts, bad)
        except (ValueError, TypeError):
            refused = refused_rows(tokenizer, texts, options, device) if reject else []
            if not refused:
                raise
            bad = sorted(bad + refused)
            stats = write(_empty_rows(texts, [i for i, _ in refused]), bad)
        logids.finish(len(texts), path)
        if folder.remote:
            folder.publish(path, name)
        stats["cpu_seconds"]["read"] = read_cpu
        stats.update(partition=spec.index, logid_offset=int(logid_offset),
                     invalid_utf8_bytes=bad_bytes, invalid_utf8_documents=bad_docs,
                     rejected=len(bad or ()))
        stats["seconds"] = time.perf_counter() - t0
        return stats


class LogidCheck:
    """The logIDs of a part, checked in the tables its writer takes, before it is published:
    they run from ``first`` up, each document's rows together and in order (a step of 0 or
    1 from row to row); :meth:`finish` checks that the last is ``first + documents - 1``. The
    stored part's footer then records them per row group (min and max, checked by
    :func:`verify_parquet_output`). ``then``: another table hook (the kept columns), run
    first."""

    def __init__(self, first: int, then=None):
        self.first, self.then, self.last = int(first), then, None

    def __call__(self, table: pa.Table) -> pa.Table:
        if self.then is not None:
            table = self.then(table)
        ids = numpy_of_arrow(table.column("logID"))
        if len(ids):
            prev = self.first - 1 if self.last is None else self.last
            # every step 0 or 1: as unsigned integers a step back is larger than 1, so one
            # reduction checks both (np.diff's prepend= of a Python int concatenated a copy
            # at about 12x the CPU of the check: 6 ms of a 64 MB partition's write stage)
            steps = np.diff(ids)
            steps = steps.view(np.dtype(f"u{steps.dtype.itemsize}"))
            if not 0 <= int(ids[0]) - prev <= 1 or (len(steps) and steps.max() > 1) or \
                    (self.last is None and ids[0] != self.first):
                raise JobError(f"the logIDs written from {self.first} are not in order: "
                               f"{prev}, then {ids[:8].tolist()}...")
            self.last = int(ids[-1])
        return table

    def finish(self, documents: int, path: str) -> None:
        want = self.first + documents - 1 if documents else None
        if self.last != want:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)   # (a local part is renamed to its name as it is written)
            raise JobError(f"the part's logIDs end at {self.last}, its {documents} "
                           f"documents from {self.first} at {want}")


def check_part(path: str, index: int, job_id: str, documents: int | None,
               logid_offset: int | None) -> dict | None:
    """The statistics of a complete, valid part of this job, or None (missing, unreadable,
    written by another job or for another partition, or its data pages do not match the
    checksum recorded when it was written).

    Reads the footer and the file's bytes once (no decompression)."""
    import pyarrow.parquet as pq
    try:
        if is_url(path):
            with open_input(path) as fh:
                md = pq.read_metadata(fh)
        else:
            md = pq.read_metadata(path)
        kv = md.metadata or {}
        meta = json.loads(kv.get(METADATA_KEY, b"{}"))
        # parts of older daskwp versions record SHA-256 under its own key
        key = CHECKSUM_KEY if CHECKSUM_KEY in kv else SHA256_CHECKSUM_KEY
        checksum = kv.get(key, b"").decode("ascii", "replace")
    except (OSError, ValueError, pa.ArrowException):
        return None
    ok = (meta.get("job_id") == job_id and meta.get("partition") == index
          and meta.get("rows") == md.num_rows
          and (documents is None or meta.get("documents") == documents)
          and (logid_offset is None or meta.get("logid_offset") == logid_offset))
    if not ok or len(checksum) != len(_CHECKSUM_PLACEHOLDER):
        return None
    try:
        if data_checksum(path, key) != checksum:
            return None
    except (OSError, ValueError):
        return None
    rejected = int(meta.get("rejected", 0))
    if rejected:   # its rejects file, written before it, lists that many rows
        try:
            with open_input(rejects_path(path)) as fh:
                if sum(1 for _ in fh) != rejected:
                    return None
        except OSError:
            return None
    out = {k: meta[k] for k in ("partition", "documents", "rows", "tokens",
                                "unknown_tokens", "text_bytes", "logid_offset")}
    out.update(invalid_utf8_bytes=meta.get("invalid_utf8_bytes", 0),
               invalid_utf8_documents=meta.get("invalid_utf8_documents", 0),
               length_counts=meta.get("length_counts"),
               rejected=rejected)
    return out


def remove_temporary_files(out_dir, prefix: str = TMP_PREFIX, names=None) -> None:
    """Remove the temporary files of part writes that did not finish (a killed worker or
    job, an interrupt): those whose names start with ``prefix``. ``out_dir``: a path, or a
    :class:`daskwp.frames.storage.Folder` (an object store's parts are staged outside it:
    only temporary objects of other writers are found there); ``names``: what it holds, if
    the caller just listed it."""
    if isinstance(out_dir, storage.Folder):
        if out_dir.remote:
            for name in out_dir.listdir() if names is None else names:
                if name.startswith(prefix):
                    out_dir.remove(name)
            return
        out_dir = out_dir.location
    try:
        names = os.listdir(out_dir) if names is None else names
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(out_dir, name))
            except FileNotFoundError:
                pass


def _parquet_logids(path: str) -> np.ndarray:
    import pyarrow.parquet as pq
    source = open_input(path) if is_url(path) else path
    # ParquetFile, not read_table: pyarrow.dataset (read_table's) imports pandas
    return numpy_of_arrow(pq.ParquetFile(source).read(columns=["logID"]).column("logID"))


#: Bytes of a part's end read at once for its footer (a longer footer: one read more).
FOOTER_READ = 1 << 16
#: The logID check reads this many parts' ends together on an object store (their GETs at
#: once; at most 4 MiB held). A local folder's parts are read one at a time: a batch held
#: 64 ends in the driver, its peak RSS growing with the job's partitions (benchmarks'
#: soak: ~7 MiB more at 160 partitions than at 16).
FOOTER_BATCH = 64


def read_footer(folder: storage.Folder, name: str, size: int, tail=None):
    """The Parquet footer (``FileMetaData``) of ``name`` (``size`` bytes) in ``folder``, from
    its end: one read (one ranged GET on an object store) of its last :data:`FOOTER_READ`
    bytes (``tail``: those bytes already read, or the error reading them), a second for a
    longer footer. ValueError: not a Parquet file of that size."""
    import pyarrow.parquet as pq
    if size < 12:
        raise ValueError(f"not a Parquet file ({size} bytes)")
    if isinstance(tail, BaseException):
        raise tail
    if tail is None:
        tail = folder.read_range(name, max(0, size - FOOTER_READ), size)
    if len(tail) != min(size, FOOTER_READ) or tail[-4:] != b"PAR1":
        raise ValueError("not a Parquet file (no footer magic at its end)")
    length = struct.unpack("<i", tail[-8:-4])[0]
    if not 0 < length <= size - 12:
        raise ValueError(f"not a Parquet file (footer length {length})")
    if length + 8 > len(tail):
        tail = folder.read_range(name, size - 8 - length, size)
    return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-(length + 8):]))


def verify_parquet_output(out_dir: str, plan: Sequence[dict],
                          sizes: dict | None = None, ends: dict | None = None) -> None:
    """:func:`verify_output`'s checks of a job's Parquet parts from their footers: one
    listing of the folder (the parts' sizes) and one read of each part's end
    (:func:`read_footer`; on an object store the GETs of :data:`FOOTER_BATCH` parts sent
    together, in a local folder one part at a time), not its logID column (``sizes``: that listing, if the caller
    made it; ``ends``: ``{name: its last bytes}`` of parts whose end the caller holds as
    the folder does, :data:`FOOTER_READ` of them, or all of a smaller part: the driver's
    uploads, :meth:`~daskwp.frames.storage.Uploads.stored_ends`, not read again). A part
    must be there, its ``daskwp``
    metadata must record its partition, documents, rows (= the footer's) and logID offset of
    the plan, and its logID statistics must run from offset_i to offset_i + documents_i - 1:
    each row group's min and max at most its rows - 1 apart, each next one starting at the
    last one's max or one past it. Within a row group the order was checked as the part was
    written (:class:`LogidCheck`); its bytes are those of its checksum (a rerun verifies
    it, :func:`check_part`). Raises JobError naming the first bad part."""
    folder = storage.Folder(out_dir, storage.current_options())
    sizes = folder.sizes() if sizes is None else sizes
    expected_offset = 0
    n = len(plan)
    tails: dict = {}
    batch_parts = FOOTER_BATCH if folder.remote else 1
    ends = {m: e for m, e in (ends or {}).items()
            if len(e) == min(sizes.get(m, -1), FOOTER_READ)}
    for k, p in enumerate(plan):
        if k % batch_parts == 0:   # the next parts' ends read together (their GETs at once)
            batch = [m for m in (part_name(q["index"], n) for q in plan[k:k + batch_parts])
                     if sizes.get(m, 0) >= 12 and m not in ends]
            tails = dict(zip(batch, folder.read_ranges(
                [(m, max(0, sizes[m] - FOOTER_READ), sizes[m]) for m in batch])))
        name = part_name(p["index"], n)
        path = folder.join(name)
        if p["logid_offset"] != expected_offset:
            raise JobError(f"job plan of {out_dir!r} is inconsistent at partition "
                           f"{p['index']}")
        docs, first = p["documents"], p["logid_offset"]
        expected_offset += docs
        if name not in sizes:
            raise JobError(f"output part {path!r} is missing; rerun the job")
        try:
            md = read_footer(folder, name, sizes[name], ends.get(name, tails.get(name)))
            meta = json.loads((md.metadata or {}).get(METADATA_KEY, b"{}"))
        except (OSError, ValueError, pa.ArrowException) as e:
            raise JobError(f"output part {path!r} cannot be read back: {e}") from None
        bad = _footer_logids_problem(md, meta, p)
        if bad:
            raise JobError(f"output part {path!r} does not hold exactly the logIDs "
                           f"{first}..{first + docs - 1} in order ({bad}); delete it and "
                           f"rerun the job")


def _footer_logids_problem(md, meta: dict, p: dict) -> str | None:
    """What in a part's footer ``md`` (``meta``: its daskwp metadata) differs from plan entry
    ``p``, or None."""
    docs, first = p["documents"], p["logid_offset"]
    for key, want in (("partition", p["index"]), ("documents", docs),
                      ("logid_offset", first), ("rows", md.num_rows)):
        if meta.get(key) != want:
            return f"its metadata records {key} {meta.get(key)}, not {want}"
    if docs == 0:
        return "it holds rows for no documents" if md.num_rows else None
    # The logID leaf found by the row groups' column paths, not ``md.schema``: building a
    # part's ParquetSchema (and its Arrow schema) left ~65 KB per part in the driver's
    # heap, 10 MiB over a 10 GB job's 157 parts checked after the cluster closed, which set
    # its peak RSS; and a leaf index is what ``rg.column`` takes (an Arrow field index is
    # not, after a nested column).
    if md.num_row_groups:
        rg0 = md.row_group(0)
        col = next((c for c in range(rg0.num_columns)
                    if rg0.column(c).path_in_schema == "logID"), -1)
        if col < 0:
            return "no logID column"
    last = first - 1
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        if rg.num_rows == 0:
            continue
        st = rg.column(col).statistics
        if st is None or not st.has_min_max:
            return f"row group {g} has no logID statistics"
        lo, hi = int(st.min), int(st.max)
        if lo - last not in (0, 1) or (last < first and lo != first) or hi < lo \
                or hi - lo > rg.num_rows - 1:
            return f"row group {g} holds logIDs {lo}..{hi} after {last}"
        last = hi
    if last != first + docs - 1:
        return f"its logIDs end at {last}"
    return None


def verify_output(out_dir: str, plan: Sequence[dict], *, read_logids=_parquet_logids,
                  name=part_name) -> None:
    """Read the logID column of every part back and check that part i holds the logIDs
    offset_i .. offset_i + documents_i - 1, each document's rows together and in order; the
    offsets tile 0..N-1. Raises JobError naming the first bad part. ``read_logids(path)``
    and ``name(index, n)``: another format's reader and file names."""
    expected_offset = 0
    n = len(plan)
    for p in plan:
        path = storage.Folder(out_dir).join(name(p["index"], n))
        if p["logid_offset"] != expected_offset:
            raise JobError(f"job plan of {out_dir!r} is inconsistent at partition "
                           f"{p['index']}")
        docs = p["documents"]
        expected_offset += docs
        try:
            ids = read_logids(path)
        except (OSError, pa.ArrowException) as e:
            raise JobError(f"output part {path!r} cannot be read back: {e}") from None
        if docs == 0:
            if len(ids):
                raise JobError(f"output part {path!r} holds rows for no documents")
            continue
        d = np.diff(ids)
        if (len(ids) < docs or ids[0] != p["logid_offset"]
                or ids[-1] != p["logid_offset"] + docs - 1 or (len(d) and (d.min() < 0 or
                                                                     d.max() > 1))):
            raise JobError(f"output part {path!r} does not hold exactly the logIDs "
                           f"{p['logid_offset']}..{p['logid_offset'] + docs - 1} in order; "
                           f"delete it and rerun the job")
