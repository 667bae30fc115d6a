"""The partition frame's schema and the helpers both frame kinds (pandas, cudf) share."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..core.outputs import BY_NAME, POSITION_OUTPUTS, PositionOutput, position_output

__all__ = ["FRAME_COLUMNS", "INPUT_INDEX_COLUMN", "MAX_LIST_VALUES", "METADATA_COLUMNS", "POSITION_OUTPUTS",
           "PositionOutput", "arrow_of_numpy", "empty_texts", "is_cudf", "is_cupy",
           "numpy_of_arrow", "position_output", "position_outputs_of", "window_index"]

#: Columns of a tokenized partition, in order.
FRAME_COLUMNS = ("logID", "start", "stop", "input_ids", "attention_mask", "window")
#: The accessors' column holding each row's document's index label in the input Series
#: (``to_frame()``; docs/design.md §3.3), so that rows join back to their source.
INPUT_INDEX_COLUMN = "input_index"
#: Columns of ``metadata``.
METADATA_COLUMNS = ("logID", "start", "stop")
#: Values one list<int32> column can hold (its offsets are int32).
MAX_LIST_VALUES = 2**31 - 1
#: Keys of a tokenizer output and partition-frame columns that are not per-position outputs.
_ROW_KEYS = ("input_ids", "attention_mask", "metadata", "window", "bucket", "logID", "start",
             "stop", INPUT_INDEX_COLUMN)


def position_outputs_of(names) -> list[str]:
    """The per-position outputs among ``names`` (keys of a tokenizer output, or columns of
    a frame or table), in column order: those of :data:`POSITION_OUTPUTS` first, in its
    order, then any others in the order given. Row metadata, ids, mask, ``window`` and
    ``bucket`` are not per-position outputs; nor is anything else a frame holds (kept input
    columns): callers pass the keys of a tokenizer output, or list columns."""
    names = list(names)
    known = [o.name for o in POSITION_OUTPUTS if o.name in names]
    return known + [n for n in names if n not in BY_NAME and n not in _ROW_KEYS]


def is_cudf(obj) -> bool:
    """Whether ``obj`` is a cudf object (checked by module name: cudf is never imported)."""
    return type(obj).__module__.split(".")[0] == "cudf"


def is_cupy(obj) -> bool:
    return type(obj).__module__.split(".")[0] == "cupy"


def window_index(logid, xp=np):
    """0, 1, 2, ... within each run of equal logIDs (the row number inside its document).

    ``xp`` is the array module: NumPy, or CuPy for device metadata."""
    n = int(logid.shape[0])
    if n == 0:
        return xp.zeros(0, dtype=xp.int32)
    first = xp.empty(n, dtype=bool)
    first[0] = True
    xp.not_equal(logid[1:], logid[:-1], out=first[1:])
    starts = xp.flatnonzero(first)
    return (xp.arange(n) - starts[xp.cumsum(first) - 1]).astype(xp.int32)


# pyarrow's ``pa.array``, ``Array.to_numpy`` and ``np.asarray(array)`` import pandas (its
# pandas check), about 0.2 s of CPU at a small job's start: the batch job's Arrow path, which
# needs no pandas, converts with these two instead.

def arrow_of_numpy(values) -> pa.Array:
    """A 1-D numeric numpy array as an Arrow array sharing its buffer (copied only when not
    contiguous), as ``pa.array(values)`` gives, without importing pandas. Other arrays go
    through ``pa.array``."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iuf" or not values.dtype.isnative:
        return pa.array(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [None, pa.py_buffer(values)])


def numpy_of_arrow(arr) -> np.ndarray:
    """The values of a numeric Arrow array without nulls as a read-only numpy view, as
    ``arr.to_numpy(zero_copy_only=True)`` gives, without importing pandas (a chunked array
    of several chunks: their values concatenated). Other arrays go through ``to_numpy``."""
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks != 1:
            if not arr.num_chunks:
                return np.zeros(0, dtype=arr.type.to_pandas_dtype())
            return np.concatenate([numpy_of_arrow(c) for c in arr.chunks])
        arr = arr.chunk(0)
    t = arr.type
    if arr.null_count or not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return arr.to_numpy(zero_copy_only=False)
    dtype = np.dtype(t.to_pandas_dtype())
    data = arr.buffers()[1]
    if data is None:   # an empty array may have no data buffer
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=len(arr) + arr.offset)[arr.offset:]


def empty_texts(n: int = 1) -> pa.Array:
    """``n`` empty documents as an Arrow ``large_string`` array (without pandas, see
    :func:`arrow_of_numpy`)."""
    return pa.Array.from_buffers(pa.large_string(), n,
                                 [None, pa.py_buffer(np.zeros(n + 1, dtype=np.int64)),
                                  pa.py_buffer(b"")])
