"""The partition frame's schema and the helpers both frame kinds (pandas, cudf) share."""

from __future__ import annotations

import numpy as np

from ..core.outputs import BY_NAME, POSITION_OUTPUTS, PositionOutput, position_output

__all__ = ["FRAME_COLUMNS", "INPUT_INDEX_COLUMN", "MAX_LIST_VALUES", "METADATA_COLUMNS", "POSITION_OUTPUTS",
           "PositionOutput", "is_cudf", "is_cupy", "position_output", "position_outputs_of",
           "window_index"]

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
