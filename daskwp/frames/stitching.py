"""Stitching: the rows of tokenized windows joined back into one row per document.

Each row carries ``logID, start, stop`` (docs/design.md §2) and ``window`` (its index within
its document); :func:`stitch_frame` orders a frame's rows by them and keeps each row's owned
slice ``[start, stop]`` of a per-token column (``daskwp.stitch_flat``), whatever shuffle,
sort or merge moved the rows. :func:`stitch_rows` does the same for arrays aligned with
metadata rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.ragged import RaggedRows
from ..core.stitch import stitch_flat
from .schema import INPUT_INDEX_COLUMN, MAX_LIST_VALUES, METADATA_COLUMNS, is_cudf, is_cupy, \
    position_output


def _stitched_frame(flat, offsets, logids, name: str) -> pd.DataFrame:
    """``stitch_flat``'s output as a frame ``logID, <name>`` (a list column)."""
    flat, offsets = np.asarray(flat), np.asarray(offsets, dtype=np.int64)
    if flat.ndim == 1:
        child = pa.array(flat)
    else:
        inner = int(np.prod(flat.shape[1:]))
        child = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), inner)
    if offsets[-1] > MAX_LIST_VALUES:
        col = pa.LargeListArray.from_arrays(pa.array(offsets), child)
    else:
        col = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), child)
    return pd.DataFrame({"logID": np.asarray(logids, dtype=np.int64),
                         name: pd.Series(pd.arrays.ArrowExtensionArray(col))})


def stitch_rows(values, metadata, name: str = "values") -> pd.DataFrame:
    """Per-row values aligned with the rows of ``metadata`` (an array rows x width [x ...],
    or ragged rows) joined into one row per logID: the owned slices
    ``values[r, start:stop+1]`` of its rows, in order (``daskwp.stitch_flat``).

    Returns a frame ``logID, <name>`` (a list column), sorted by logID.
    """
    if is_cupy(values):
        values = values.get()
    if is_cupy(metadata):
        metadata = metadata.get()
    if is_cudf(metadata):
        metadata = metadata.to_pandas()
    if hasattr(metadata, "columns"):
        metadata = metadata[list(METADATA_COLUMNS)]
    return _stitched_frame(*stitch_flat(values, metadata), name)


def stitch_frame(frame: pd.DataFrame, column: str, ordered: bool = False) -> pd.DataFrame:
    """Rows carrying ``logID, start, stop``, ``window`` (the row's index within its document)
    and a list column ``column`` of per-token values, joined into one row per logID. All rows
    of a document must be in ``frame``.

    ``window`` orders each document's rows, so the frame may have been shuffled, sorted or
    merged. Without it the order of the rows cannot be known, and stitching would be
    silently wrong once they moved: it is required unless ``ordered`` (the caller knows the
    rows are still in window order, as tokenized).
    """
    if is_cudf(frame):
        frame = frame.to_pandas()
    missing = [c for c in (*METADATA_COLUMNS, column) if c not in frame.columns]
    if missing:
        raise ValueError(f"stitching needs columns {[*METADATA_COLUMNS, column]}; missing "
                         f"{missing} (columns: {list(frame.columns)})")
    if "window" not in frame.columns:
        if not ordered:
            raise ValueError(f"stitching a frame needs its 'window' column (each row's index "
                             f"within its document), which orders a document's rows once "
                             f"they may have moved; keep it when selecting columns "
                             f"(columns: {list(frame.columns)})")
    elif len(frame) > 1:
        frame = frame.sort_values(["logID", "window"], kind="stable")
    col = frame[column]
    arr = pa.array(col.array) if isinstance(col.dtype, pd.ArrowDtype) \
        else pa.array(list(col))
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type):
        arr = arr.cast(pa.large_list(arr.type.value_type))
    if not pa.types.is_large_list(arr.type):
        raise TypeError(f"column {column!r} must hold one sequence per row, got {arr.type}")
    offsets = arr.offsets.to_numpy()
    values = arr.values.to_numpy(zero_copy_only=False)
    values, offsets = values[offsets[0]:], offsets - offsets[0]
    per = position_output(column).values
    if per != 1:    # k values per position (offset_mapping): rows of positions x k
        values, offsets = values[:int(offsets[-1])].reshape(-1, per), offsets // per
    rows = RaggedRows(values, offsets)
    return _stitched_frame(*stitch_flat(rows, frame[list(METADATA_COLUMNS)]), column)


def value_column(frame, column: str | None) -> str:
    if column is not None:
        return column
    others = [c for c in frame.columns
              if c not in (*METADATA_COLUMNS, "window", INPUT_INDEX_COLUMN)]
    if len(others) != 1:
        raise ValueError(f"name the column to stitch with column=...; candidates: {others}")
    return others[0]
