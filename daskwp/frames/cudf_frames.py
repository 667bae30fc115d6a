"""The cudf side of the ``.wordpiece`` accessor: partitions stay on their GPU.

Written against the documented cudf / pylibcudf API only (``cudf.DataFrame``,
``cudf.Series.from_pylibcudf``, ``Series.list.leaves``, ``pylibcudf.Column``,
``pylibcudf.Column.from_cuda_array_interface``). Imported only when a partition is a cudf
object, so nothing here runs, or needs to import, on a machine without cudf.

The tokenizer runs cudf input on the GPU (``daskwp.backends.cuda.windows_cuda``): the kernel reads the
cudf column's device buffers (offsets + chars) and returns CuPy arrays with the same layout
as the CPU path: ``input_ids`` and ``attention_mask`` (rows x max_length int32, or ragged
rows with ``padding=False``) and ``metadata`` (rows x 3 int64, logIDs 0-based within the
batch); this module turns them into a cudf partition frame. The vocabulary blob is
uploaded once per (vocabulary hash, device) and cached by the launcher, so it stays resident
on each worker's GPU across tasks and computations.
"""

from __future__ import annotations

import math

import cudf
import cupy
import pylibcudf as plc

from .schema import MAX_LIST_VALUES, position_outputs_of, window_index


def list_column(matrix) -> cudf.Series:
    """Rows as a cudf ``list<...>`` Series, on the device: a 2-D CuPy array (one list per
    row) or ragged rows (flat ``values`` + ``rows + 1`` ``offsets``).

    Memory: the values are the matrix's own device buffer (no copy when it is
    C-contiguous); only the row offsets are allocated.
    """
    if hasattr(matrix, "offsets") and hasattr(matrix, "values"):
        offsets = cupy.asarray(matrix.offsets)
        flat = cupy.ascontiguousarray(cupy.asarray(matrix.values))
        if flat.ndim > 1:   # k values per position (offset_mapping), stored flat
            per = math.prod(flat.shape[1:])
            flat, offsets = flat.reshape(-1), offsets * per
        rows = int(offsets.shape[0]) - 1
        total = int(offsets[-1]) if rows >= 0 else 0
    else:
        rows = matrix.shape[0]
        width = math.prod(matrix.shape[1:])
        total = rows * width
        flat = cupy.ascontiguousarray(matrix).reshape(-1)
        offsets = cupy.arange(rows + 1, dtype=cupy.int64) * width
    if total > MAX_LIST_VALUES:
        raise ValueError(
            f"a partition of {rows} rows holds {total} token values, more than the 2**31 - 1 "
            f"that one list<int32> column stores; repartition into smaller partitions")
    values = plc.Column.from_cuda_array_interface(flat)
    offsets = plc.Column.from_cuda_array_interface(offsets.astype(cupy.int32))
    col = plc.Column(plc.DataType(plc.TypeId.LIST), rows, None, None, 0, 0,
                     [offsets, values])
    return cudf.Series.from_pylibcudf(col)


def frame_from_output(out) -> cudf.DataFrame:
    """The GPU launcher's CuPy output as a partition frame (columns as on the CPU)."""
    meta = cupy.asarray(out["metadata"], dtype=cupy.int64).reshape(-1, 3)
    logid = cupy.ascontiguousarray(meta[:, 0])
    columns = {
        "logID": logid,
        "start": cupy.ascontiguousarray(meta[:, 1]),
        "stop": cupy.ascontiguousarray(meta[:, 2]),
        "input_ids": list_column(out["input_ids"]),
        "attention_mask": list_column(out["attention_mask"]),
        "window": window_index(logid, cupy),
    }
    for name in position_outputs_of(out.keys()):   # token_type_ids, sequence_ids, ...
        columns[name] = list_column(out[name])
    return cudf.DataFrame(columns)


def matrix_from_list_column(series, width: int):
    """A cudf list Series of equal-length rows as a (rows, width) CuPy array (a view of the
    column's values)."""
    values = series.list.leaves.values
    rows = len(series)
    if values.shape[0] != rows * width:
        raise ValueError(f"column {series.name!r} does not hold rows of {width} values each")
    return values.reshape(rows, width)
