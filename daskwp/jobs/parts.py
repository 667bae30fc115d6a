"""Job output: the partition task that reads, tokenizes and writes one part atomically, and
the checks that let a rerun keep complete parts (resume) and verify the whole dataset.

Layout of an output directory: ``part-NNNNN.parquet`` per partition (the accessor's partition
frame with global logIDs; Parquet key-value metadata ``daskwp`` records the job id, the
partition, its logID offset and its statistics), ``_job.json`` (what the job is) and
``_summary.json`` (what it did; present only while the dataset is complete).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Sequence

import numpy as np
import pyarrow as pa

from ..core.cache import BoundedCache
from ..distributed.tasks import add_logid_offset, tokenize_partition
from ..frames.partition import is_cudf
from ..core.windows import WINDOW_OPTIONS
from .errors import InputError, JobError
from .inputs import PartitionSpec, read_partition

__all__ = ["JOB_FILE", "JOB_FORMAT", "METADATA_KEY", "PART_PREFIX", "PART_SUFFIX",
           "SUMMARY_FILE", "TMP_PREFIX", "check_part", "part_name", "partition_statistics",
           "tokenize_job_partition", "verify_output", "write_partition"]

JOB_FILE = "_job.json"
SUMMARY_FILE = "_summary.json"
PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"
TMP_PREFIX = ".tmp-part-"
METADATA_KEY = b"daskwp"
JOB_FORMAT = 1


def share(obj):
    """Identity: a task whose result (the tokenizer) other tasks depend on."""
    return obj


def part_name(index: int, n_partitions: int) -> str:
    width = max(5, len(str(max(n_partitions - 1, 0))))
    return f"{PART_PREFIX}{index:0{width}d}{PART_SUFFIX}"


_WORKER_DEVICES = BoundedCache("job_worker_devices", 4)


def _worker_device(device: str) -> str:
    """The device of this process ('auto' resolved here, on the worker; cached)."""
    if device != "auto":
        return device
    from ..distributed.cluster import resolve_device
    return _WORKER_DEVICES.get_or_create(device, lambda: resolve_device("auto"))


def _as_series(texts: pa.Array, device: str):
    """A partition's documents as the Series type the tokenizer runs on: cudf on a GPU
    worker (when the text is valid UTF-8), else pandas backed by the Arrow array."""
    if _worker_device(device) == "gpu":
        import cudf
        try:
            return cudf.Series.from_arrow(texts.cast(pa.large_string()))
        except pa.ArrowInvalid:
            pass  # not UTF-8: the CPU path gives the defined ids (U+FFFD, see the README)
    import pandas as pd
    return pd.Series(pd.arrays.ArrowExtensionArray(texts))


def _frame_to_arrow(frame) -> pa.Table:
    if is_cudf(frame):
        return frame.to_arrow()
    return pa.Table.from_pandas(frame, preserve_index=False)


def tokenize_job_partition(tokenizer, texts: pa.Array, options: dict, logid_offset: int,
                           device: str = "cpu", partition: int | None = None):
    """Tokenize one partition into the output table and its statistics.

    The table is the partition frame of the ``.wordpiece`` accessor
    (``daskwp.distributed.tasks.tokenize_partition``: logID, start, stop, input_ids, attention_mask,
    window) with the global offset added to its logIDs (``accessor.add_logid_offset``), so a
    job writes the same columns as ``ddf[col].wordpiece.tokenize(...).to_parquet(...)``.

    Memory: the tokenizer's arrays for the partition and the Arrow table sharing them.
    """
    window_options = {k: options[k] for k in WINDOW_OPTIONS}
    frame = tokenize_partition(_as_series(texts, device), tokenizer, window_options,
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
    ids = table.column("input_ids").combine_chunks()
    offsets = ids.offsets.to_numpy().astype(np.int64)
    values = ids.values.to_numpy(zero_copy_only=False)
    start = table.column("start").to_numpy()
    stop = table.column("stop").to_numpy()
    lo, hi = offsets[:-1] + start, offsets[:-1] + stop + 1
    unk = np.flatnonzero(values == unk_id)  # few: count those inside the owned slices
    return {"rows": int(rows), "tokens": int(np.sum(hi - lo)),
            "unknown_tokens": int(np.sum(np.searchsorted(unk, hi) - np.searchsorted(unk, lo)))}


def write_partition(spec: PartitionSpec, logid_offset: int, out_dir: str, tokenizer,
                    options: dict, job_id: str, n_partitions: int,
                    device: str = "cpu") -> dict:
    """Read, tokenize and write one partition atomically; return its statistics.

    The table goes to a hidden temporary file in ``out_dir`` that is fsync'ed and renamed to
    ``part-NNNNN.parquet``: a part exists complete or not at all, and a retried task (a
    worker died) simply replaces it with the same bytes.
    """
    import pyarrow.parquet as pq
    t0 = time.perf_counter()
    texts = read_partition(spec)
    if spec.documents is not None and len(texts) != spec.documents:
        raise InputError(f"{spec.describe()} now holds {len(texts)} documents, "
                         f"{spec.documents} when the job was planned: the input changed "
                         f"during the job")
    import pyarrow.compute as pc
    text_bytes = int(pc.sum(pc.binary_length(texts)).as_py() or 0) if len(texts) else 0
    table, stats = tokenize_job_partition(tokenizer, texts, options, logid_offset, device,
                                          partition=spec.index)
    stats.update(partition=spec.index, documents=len(texts), text_bytes=text_bytes,
                 logid_offset=int(logid_offset))
    meta = {"job_id": job_id, **stats}
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
    name = part_name(spec.index, n_partitions)
    tmp = os.path.join(out_dir, f"{TMP_PREFIX}{spec.index}-{uuid.uuid4().hex}.parquet")
    try:
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh, compression=options["compression"],
                           row_group_size=65536)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(out_dir, name))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    stats["seconds"] = time.perf_counter() - t0
    return stats


def check_part(path: str, index: int, job_id: str, documents: int | None,
               logid_offset: int | None) -> dict | None:
    """The statistics of a complete, valid part of this job, or None (missing, unreadable,
    written by another job or for another partition)."""
    import pyarrow.parquet as pq
    try:
        md = pq.read_metadata(path)
        meta = json.loads((md.metadata or {}).get(METADATA_KEY, b"{}"))
    except (OSError, ValueError, pa.ArrowException):
        return None
    ok = (meta.get("job_id") == job_id and meta.get("partition") == index
          and meta.get("rows") == md.num_rows
          and (documents is None or meta.get("documents") == documents)
          and (logid_offset is None or meta.get("logid_offset") == logid_offset))
    if not ok:
        return None
    return {k: meta[k] for k in ("partition", "documents", "rows", "tokens",
                                 "unknown_tokens", "text_bytes", "logid_offset")}


def verify_output(out_dir: str, plan: Sequence[dict]) -> None:
    """Read the logID column of every part back and check that part i holds the logIDs
    offset_i .. offset_i + documents_i - 1, each document's rows together and in order; the
    offsets tile 0..N-1. Raises JobError naming the first bad part."""
    import pyarrow.parquet as pq
    expected_offset = 0
    n = len(plan)
    for p in plan:
        path = os.path.join(out_dir, part_name(p["index"], n))
        if p["logid_offset"] != expected_offset:
            raise JobError(f"job plan of {out_dir!r} is inconsistent at partition "
                           f"{p['index']}")
        docs = p["documents"]
        expected_offset += docs
        try:
            ids = pq.read_table(path, columns=["logID"]).column("logID").to_numpy()
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
