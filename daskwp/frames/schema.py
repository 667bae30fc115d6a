"""The partition frame's schema and the helpers both frame kinds (pandas, cudf) share."""

from __future__ import annotations

import numpy as np

__all__ = ["FRAME_COLUMNS", "MAX_LIST_VALUES", "METADATA_COLUMNS", "is_cudf", "is_cupy",
           "window_index"]

#: Columns of a tokenized partition, in order.
FRAME_COLUMNS = ("logID", "start", "stop", "input_ids", "attention_mask", "window")
#: Columns of ``metadata``.
METADATA_COLUMNS = ("logID", "start", "stop")
#: Values one list<int32> column can hold (its offsets are int32).
MAX_LIST_VALUES = 2**31 - 1


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
