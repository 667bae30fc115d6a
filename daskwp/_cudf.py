"""The cudf side of the ``.wordpiece`` accessor: partitions stay on their GPU.

Written against the documented cudf / pylibcudf API only (``cudf.DataFrame``,
``cudf.Series.from_pylibcudf``, ``Series.list.leaves``, ``pylibcudf.Column``,
``pylibcudf.Column.from_cuda_array_interface``). Imported only when a partition is a cudf
object, so nothing here runs, or needs to import, on a machine without cudf.

Assumption (the GPU launcher, ``daskwp/cuda.py``, is written separately): calling the
tokenizer on a cudf string Series, ``tok(series, ..., return_tensors="cp")``, reads the
column's device buffers (offsets + chars) with the CUDA kernel and returns CuPy arrays with
the same layout as the CPU path: ``input_ids`` and ``attention_mask`` (rows, max_length)
int32 and ``metadata`` (rows, 3) int64, logIDs 0-based within the batch. The vocabulary
blob is uploaded once per tokenizer instance; ``accessor.cached_tokenizer`` keeps that
instance for the life of the worker process, so it stays resident on the device.
"""

from __future__ import annotations

import cudf
import cupy
import pylibcudf as plc

_MAX_LIST_VALUES = 2**31 - 1


def list_column(matrix) -> cudf.Series:
    """A 2-D CuPy array as a cudf ``list<...>`` Series, one list per row, on the device.

    Memory: the values are the matrix's own device buffer (no copy when it is
    C-contiguous); only the row offsets are allocated.
    """
    rows, width = matrix.shape
    if rows * width > _MAX_LIST_VALUES:
        raise ValueError(
            f"a partition of {rows} rows x {width} tokens holds more than 2**31 - 1 values, "
            f"the most one list<int32> column stores; repartition into smaller partitions")
    values = plc.Column.from_cuda_array_interface(cupy.ascontiguousarray(matrix).reshape(-1))
    offsets = plc.Column.from_cuda_array_interface(
        cupy.arange(0, rows * width + 1, max(width, 1), dtype=cupy.int32)[: rows + 1]
        if width else cupy.zeros(rows + 1, dtype=cupy.int32))
    col = plc.Column(plc.DataType(plc.TypeId.LIST), rows, None, None, 0, 0,
                     [offsets, values])
    return cudf.Series.from_pylibcudf(col)


def window_index(logid):
    """0, 1, 2, ... within each run of equal logIDs (CuPy version of the CPU helper)."""
    n = int(logid.shape[0])
    if n == 0:
        return cupy.zeros(0, dtype=cupy.int32)
    first = cupy.empty(n, dtype=bool)
    first[0] = True
    cupy.not_equal(logid[1:], logid[:-1], out=first[1:])
    starts = cupy.flatnonzero(first)
    run_start = starts[cupy.cumsum(first) - 1]
    return (cupy.arange(n) - run_start).astype(cupy.int32)


def frame_from_output(out) -> cudf.DataFrame:
    """The GPU launcher's CuPy output as a partition frame (columns as on the CPU)."""
    meta = cupy.asarray(out["metadata"], dtype=cupy.int64).reshape(-1, 3)
    logid = cupy.ascontiguousarray(meta[:, 0])
    return cudf.DataFrame({
        "logID": logid,
        "start": cupy.ascontiguousarray(meta[:, 1]),
        "stop": cupy.ascontiguousarray(meta[:, 2]),
        "input_ids": list_column(cupy.asarray(out["input_ids"])),
        "attention_mask": list_column(cupy.asarray(out["attention_mask"])),
        "window": window_index(logid),
    })


def tokenize_partition(texts, tok, options: dict) -> cudf.DataFrame:
    """One cudf partition through the GPU kernel; the outputs stay on the device."""
    out = tok(texts, max_length=options["max_length"], stride=options["stride"],
              truncation=options["truncation"],
              add_special_tokens=options["add_special_tokens"],
              padding=options["padding"], return_tensors="cp")
    return frame_from_output(out)


def matrix_from_list_column(series, width: int):
    """A cudf list Series of equal-length rows as a (rows, width) CuPy array (a view of the
    column's values)."""
    values = series.list.leaves.values
    rows = len(series)
    if values.shape[0] != rows * width:
        raise ValueError(f"column {series.name!r} does not hold rows of {width} values each")
    return values.reshape(rows, width)
