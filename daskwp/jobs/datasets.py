"""Batch jobs that write a HuggingFace ``datasets`` dataset on disk
(``output_format: datasets``): what ``datasets.load_from_disk(OUTPUT)`` opens.

The layout is ``Dataset.save_to_disk``'s: one Arrow shard per partition,
``data-NNNNN-of-MMMMM.arrow`` (the Arrow IPC stream format, the features in the schema's
``huggingface`` metadata), then ``dataset_info.json`` (the features) and ``state.json`` (the
shards, in order) once every shard is there. A shard holds the partition's rows as the
accessor's ``to_frame()`` has them (``logID``, ``start``, ``stop``, ``input_ids``,
``attention_mask``, ``window``, the per-position outputs asked for, the kept input
columns): padded rows stay padded, so ``ds.with_format("torch")`` gives fixed-width tensors.

Shards are written as Megatron pairs are (:mod:`.records`): temporary names, fsync, rename,
the record ``part-NNNNN.json`` last; a rerun keeps the shards whose records match.
These functions import no Dask: the driver runs them as tasks.
"""

from __future__ import annotations

import functools
import json
import os
import time

import numpy as np
import pyarrow as pa

from ..core.cpu_clock import stage_cpu_seconds
from ..core.lengths import LengthCounts
from ..distributed.tasks import text_bytes as partition_text_bytes
from ..frames import storage
from .errors import JobError
from .inputs import attach_kept_columns
from .parts import empty_rows, refused_rows, tokenize_job_partition
from .records import (commit_part, naming_partition, publish_part, temporary_path,
                      timed_read, write_part_rejects)

__all__ = ["DATASET_FILES", "features_of", "finish_datasets",
           "is_datasets_file", "shard_name", "verify_datasets_output",
           "write_datasets_partition", "write_shard"]

#: The metadata files of ``save_to_disk``.
DATASET_FILES = ("dataset_info.json", "state.json")


def shard_name(index: int, n_partitions: int) -> str:
    """``data-NNNNN-of-MMMMM.arrow``, ``save_to_disk``'s shard names."""
    return f"data-{index:05d}-of-{n_partitions:05d}.arrow"


def is_datasets_file(name: str) -> bool:
    """Whether ``name`` (in an output directory) is a file a datasets job writes (besides the
    records and the job files)."""
    return name in DATASET_FILES or (name.startswith("data-") and name.endswith(".arrow"))


_VALUE_TYPES = {pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32",
                pa.int64(): "int64", pa.uint8(): "uint8", pa.uint16(): "uint16",
                pa.uint32(): "uint32", pa.uint64(): "uint64", pa.float32(): "float32",
                pa.float64(): "float64", pa.bool_(): "bool", pa.string(): "string",
                pa.large_string(): "large_string", pa.binary(): "binary",
                pa.large_binary(): "large_binary"}


def _feature(t: pa.DataType, name: str) -> dict:
    if t in _VALUE_TYPES:
        return {"dtype": _VALUE_TYPES[t], "_type": "Value"}
    if pa.types.is_list(t):
        return {"feature": _feature(t.value_type, name), "_type": "List"}
    if pa.types.is_large_list(t):
        return {"feature": _feature(t.value_type, name), "_type": "LargeList"}
    raise JobError(f"column {name!r} of type {t} has no datasets feature daskwp writes "
                   f"(integers, floats, bool, strings, binary and lists of them); leave it "
                   f"out of keep_columns or use output_format 'parquet'")


def features_of(schema: pa.Schema) -> dict:
    """The ``datasets`` features of an Arrow schema, as ``Features.to_dict()`` gives them
    (datasets 4 and later: ``List`` for list columns)."""
    return {f.name: _feature(f.type, f.name) for f in schema}


def _hf_schema(table: pa.Table) -> pa.Table:
    meta = {b"huggingface": json.dumps({"info": {"features": features_of(table.schema)}})
            .encode()}
    return table.replace_schema_metadata(meta)


def write_shard(table: pa.Table, path: str) -> pa.Table:
    """``table`` with its features in the schema's ``huggingface`` metadata, written to
    ``path`` as an Arrow IPC stream (a ``save_to_disk`` shard) and fsync'ed; returns the
    table written."""
    table = _hf_schema(table)
    with pa.OSFile(path, "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())
    return table


@naming_partition
def write_datasets_partition(spec, logid_offset: int, out_dir: str, tokenizer,
                             options: dict, job_id: str, n_partitions: int,
                             device: str = "cpu", documents: int | None = None,
                             file_offset: int | None = None) -> dict:
    """Read, tokenize and write one partition's Arrow shard atomically; return its
    statistics (the signature of :func:`.parts.write_partition`). The row policy as there:
    a row that cannot be read, or that the tokenizer refuses, is an empty document, listed
    in the partition's rejects file (``file_offset``: the first logID of its input file).

    Memory: the partition's text and its rows (as the accessor's frame)."""
    t0 = time.perf_counter()
    texts, kept, (bad_bytes, bad_docs), bad, read_cpu = timed_read(spec, documents, options)
    c1 = stage_cpu_seconds()
    try:
        table, stats = tokenize_job_partition(tokenizer, texts, options, logid_offset, device,
                                              spec.index)
    except (ValueError, TypeError):
        refused = refused_rows(tokenizer, texts, options, device) if bad is not None else []
        if not refused:
            raise
        bad = sorted(bad + refused)
        texts = empty_rows(texts, [i for i, _ in refused])
        table, stats = tokenize_job_partition(tokenizer, texts, options, logid_offset, device,
                                              spec.index)
    if kept is not None:
        table = attach_kept_columns(table, kept, int(logid_offset))
    c2 = stage_cpu_seconds()
    text_bytes = partition_text_bytes(texts)   # both sides of sentence pairs
    stats.update(documents=len(texts), partition=spec.index, logid_offset=int(logid_offset),
                 text_bytes=text_bytes, invalid_utf8_bytes=bad_bytes,
                 invalid_utf8_documents=bad_docs,
                 length_counts=LengthCounts.of_rows(
                     table.column("logID").to_numpy(),
                     table.column("stop").to_numpy() - table.column("start").to_numpy()
                     + 1).to_json(),
                 features=features_of(table.schema), rejected=len(bad or ()))
    # on an object store the shard is committed in a local staging folder, then uploaded,
    # its record last (records.publish_part)
    folder = storage.Folder(out_dir, options.get("storage_options"))
    with folder.staging() as staging:
        tmp = temporary_path(staging, spec.index, "shard-")
        try:
            write_shard(table, tmp)
            rejects = write_part_rejects(staging, spec, n_partitions, bad, logid_offset,
                                         file_offset)
            commit_part(staging, spec.index, n_partitions, job_id, stats,
                        {shard_name(spec.index, n_partitions): tmp}, rejects)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        publish_part(folder, staging, spec.index, n_partitions)
    stats["cpu_seconds"] = {"read": read_cpu, "tokenize": c2 - c1,
                            "write": stage_cpu_seconds() - c2}
    stats["seconds"] = time.perf_counter() - t0
    return stats


def _shard_logids(path: str) -> np.ndarray:
    with (pa.PythonFile(storage.open_input(path), mode="r") if storage.is_url(path)
          else pa.OSFile(path, "rb")) as src:
        reader = pa.ipc.open_stream(src)
        ids = [b.column(reader.schema.get_field_index("logID")).to_numpy() for b in reader]
    return np.concatenate(ids) if ids else np.zeros(0, np.int64)


def verify_datasets_output(out_dir: str, plan) -> None:
    """Every shard's logIDs read back (:func:`.parts.verify_output`'s checks)."""
    from .parts import verify_output
    verify_output(out_dir, plan, read_logids=_shard_logids,
                  name=functools.partial(_plan_shard, len(plan)))


def _plan_shard(n: int, index: int, _n: int) -> str:
    return shard_name(index, n)


def finish_datasets(out_dir: str, stats: list, job_id: str) -> dict:
    """Write ``dataset_info.json`` and ``state.json`` (atomically) once every shard is
    there; returns the summary's ``datasets`` entry."""
    n = len(stats)
    features = stats[0]["features"]
    for s in stats[1:]:
        if s["features"] != features:
            raise JobError(f"shards 0 and {s['partition']} of {out_dir!r} have different "
                           f"features; delete the output and rerun the job")
    shards = [shard_name(i, n) for i in range(n)]
    info = {"citation": "", "description": "", "features": features, "homepage": "",
            "license": ""}
    state = {"_data_files": [{"filename": s} for s in shards], "_fingerprint": job_id[:16],
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
             "_output_all_columns": False, "_split": None}
    folder = storage.Folder(out_dir, storage.current_options())
    for name, obj in (("dataset_info.json", info), ("state.json", state)):
        folder.write_bytes(name, json.dumps(obj, indent=2).encode("utf-8"))   # atomically
    return {"path": out_dir, "shards": n, "rows": sum(s["rows"] for s in stats),
            "features": sorted(features)}
