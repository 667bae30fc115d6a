"""Partition frames: one tokenized partition as a pandas (or cudf) frame, Arrow list columns,
the frame schema, portable Parquet metadata, and stitching frames (docs/design.md §2, §3).

Everything here runs on one partition and imports no Dask. One partition becomes one
frame::

    logID  start  stop  input_ids       attention_mask  window
    int64  int64  int64 list<int32>     list<int32>     int32

``logID`` is 0-based within the partition (the distributed layer adds the global offset),
``start`` and ``stop`` are the metadata of docs/design.md §2 (``stop`` inclusive), and
``window`` numbers the rows of one document 0, 1, 2, ... so that rows can be put back in
order after a shuffle.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.buckets import BucketedWindows
from ..core.ragged import RaggedRows
from ..core.stitch import stitch_flat
from .schema import (FRAME_COLUMNS, MAX_LIST_VALUES, METADATA_COLUMNS, is_cudf, is_cupy,
                     window_index)

def _fixed_width(padding) -> bool:
    """Whether rows are padded to max_length (so ids form a rows x max_length matrix)."""
    return padding is True or padding == "max_length"


def require_fixed_width(options: dict, what: str) -> None:
    """Raise unless rows are padded to max_length (a matrix needs equal row widths)."""
    if not _fixed_width(options["padding"]):
        raise ValueError(f"{what} as a rows x max_length array needs padding='max_length', "
                         f"got padding={options['padding']!r}; use to_frame() for list "
                         f"columns of ragged rows")


def check_text_dtype(dtype, what: str = "the column") -> None:
    """Raise a TypeError unless ``dtype`` holds strings (object, str, string, Arrow string)."""
    text = str(dtype)
    if isinstance(dtype, pd.CategoricalDtype):
        check_text_dtype(dtype.categories.dtype, f"{what} (its categories)")
        return
    if dtype == object or text == "str" or text.startswith("string") or (
            isinstance(dtype, pd.ArrowDtype) and (
                pa.types.is_string(dtype.pyarrow_dtype)
                or pa.types.is_large_string(dtype.pyarrow_dtype)
                or pa.types.is_binary(dtype.pyarrow_dtype)
                or pa.types.is_large_binary(dtype.pyarrow_dtype))):
        return
    raise TypeError(f"wordpiece.tokenize needs a column of strings; {what} has dtype {dtype} "
                    f"(allowed: object, str, string, or an Arrow string/binary dtype)")



def list_column(matrix) -> pd.Series:
    """Rows as a pandas Series of Arrow ``list<...>`` values (one list per row).

    ``matrix`` is a 2-D numpy array (rows x width) or ragged rows (an object with flat
    ``values`` and ``rows + 1`` ``offsets``, e.g. ``daskwp.RaggedRows``).

    Memory: the values are shared with ``matrix`` (no copy when it is C-contiguous).
    """
    if hasattr(matrix, "offsets") and hasattr(matrix, "values"):
        offsets = np.asarray(matrix.offsets, dtype=np.int64)
        values = np.asarray(matrix.values)
        rows, total = len(offsets) - 1, int(offsets[-1]) if len(offsets) else 0
    else:
        rows, width = matrix.shape
        total = rows * width
        offsets = np.arange(0, total + 1, width, dtype=np.int64) if width \
            else np.zeros(rows + 1, dtype=np.int64)
        values = np.ascontiguousarray(matrix).reshape(-1)
    if total > MAX_LIST_VALUES:
        raise ValueError(
            f"a partition of {rows} rows holds {total} token values, more than the 2**31 - 1 "
            f"that one Arrow list<int32> column stores; repartition into smaller partitions")
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(values))))


def _merge_buckets(out: BucketedWindows):
    """Bucketed windows as one set of rows in document and window order: (ids rows, mask
    rows as RaggedRows of each row's bucket width, metadata, window, bucket width per row)."""
    parts = out.buckets
    meta = np.concatenate([np.asarray(b["metadata"], dtype=np.int64).reshape(-1, 3)
                           for _, b in parts]) if parts else np.zeros((0, 3), np.int64)
    window = np.concatenate([np.asarray(b["window"]) for _, b in parts]) if parts else \
        np.zeros(0, np.int32)
    width = np.concatenate([np.full(b.num_rows, w, dtype=np.int32) for w, b in parts]) \
        if parts else np.zeros(0, np.int32)
    ids = np.concatenate([np.asarray(b["input_ids"]).reshape(-1) for _, b in parts]) \
        if parts else np.zeros(0, np.int32)
    mask = np.concatenate([np.asarray(b["attention_mask"]).reshape(-1) for _, b in parts]) \
        if parts else np.zeros(0, np.int32)
    starts = np.concatenate([[0], np.cumsum(width, dtype=np.int64)])
    order = np.lexsort((window, meta[:, 0]))
    lens = width[order].astype(np.int64)
    new_off = np.concatenate([[0], np.cumsum(lens)])
    # gather each row's cells in the new order
    src = np.repeat(starts[:-1][order], lens) + (np.arange(int(new_off[-1]), dtype=np.int64)
                                                  - np.repeat(new_off[:-1], lens))
    return (RaggedRows(ids[src], new_off), RaggedRows(mask[src], new_off), meta[order],
            window[order].astype(np.int32), width[order])


def frame_from_output(out) -> pd.DataFrame:
    """The tokenizer's numpy output as a partition frame (columns ``FRAME_COLUMNS``; with
    ``padding="bucket"`` also ``bucket``, each row's width, rows in document order)."""
    if isinstance(out, BucketedWindows):
        ids, mask, meta, window, width = _merge_buckets(out)
        frame = pd.DataFrame(np.ascontiguousarray(meta.T).T, columns=list(METADATA_COLUMNS),
                             copy=False)
        frame["input_ids"] = list_column(ids)
        frame["attention_mask"] = list_column(mask)
        frame["window"] = window
        frame["bucket"] = width
        return frame
    meta = np.asarray(out["metadata"], dtype=np.int64).reshape(-1, 3)
    # One pass makes the three metadata columns contiguous; the frame keeps them as one block.
    frame = pd.DataFrame(np.ascontiguousarray(meta.T).T, columns=list(METADATA_COLUMNS),
                         copy=False)
    frame["input_ids"] = list_column(out["input_ids"])
    frame["attention_mask"] = list_column(out["attention_mask"])
    # The row number inside each document, from the rows each document starts at.
    starts = np.asarray(out.doc_row_offsets, dtype=np.int64)
    frame["window"] = (np.arange(len(meta), dtype=np.int64) -
                       np.repeat(starts[:-1], np.diff(starts))).astype(np.int32)
    return frame



def matrix_from_frame(frame, column: str, width: int):
    """A list column of equal-length rows as a 2-D array (numpy, or CuPy for cudf).

    Memory: a view of the column's values when it is one contiguous chunk.
    """
    if is_cudf(frame):
        from .cudf_frames import matrix_from_list_column
        return matrix_from_list_column(frame[column], width)
    arr = pa.array(frame[column].array)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    values = arr.flatten().to_numpy(zero_copy_only=False)
    if len(values) != len(arr) * width:
        raise ValueError(f"column {column!r} does not hold rows of {width} values each")
    return values.reshape(len(arr), width)


def input_ids_block(frame, width: int):
    """``input_ids`` of a partition frame as a (rows, width) array."""
    return matrix_from_frame(frame, "input_ids", width)


def attention_mask_block(frame, width: int):
    """``attention_mask`` of a partition frame as a (rows, width) array."""
    return matrix_from_frame(frame, "attention_mask", width)


def select_metadata(frame):
    """The ``(logID, start, stop)`` columns of a partition frame."""
    return frame[list(METADATA_COLUMNS)]



# -- Parquet ------------------------------------------------------------------------------

def portable_pandas_metadata(table: pa.Table) -> pa.Table:
    """``table`` with pandas metadata that every pandas can read back.

    pandas records an ``ArrowDtype`` list column as ``numpy_type
    "list<item: int32>[pyarrow]"``, a string that ``pandas.read_parquet`` then fails to parse
    (pandas-dev/pandas#57411, apache/arrow#39914, open). Nested columns are recorded as
    ``"object"`` instead: ``pd.read_parquet(path)`` gives object columns of numpy arrays,
    ``pd.read_parquet(path, dtype_backend="pyarrow")`` gives ``list<int32>`` columns. The
    Parquet schema itself (``list<int32>``) is unchanged.
    """
    md = table.schema.pandas_metadata
    if not md:
        return table
    changed = False
    for col in md.get("columns", []):
        name = col.get("field_name", col.get("name"))
        if name not in table.schema.names:
            continue
        typ = table.schema.field(name).type
        if pa.types.is_nested(typ) and str(col.get("numpy_type", "")).endswith("[pyarrow]"):
            col["numpy_type"] = "object"
            changed = True
    if not changed:
        return table
    meta = dict(table.schema.metadata or {})
    meta[b"pandas"] = json.dumps(md).encode("utf-8")
    return table.replace_schema_metadata(meta)


def write_parquet(frame: pd.DataFrame, path, **kwargs) -> None:
    """Write a partition frame to one Parquet file (list<int32> columns, no index)."""
    import pyarrow.parquet as pq

    if is_cudf(frame):
        kwargs.setdefault("index", False)
        frame.to_parquet(path, **kwargs)
        return
    index = kwargs.pop("index", False)
    table = pa.Table.from_pandas(frame, preserve_index=index)
    pq.write_table(portable_pandas_metadata(table), path, **kwargs)


# -- stitching ----------------------------------------------------------------------------

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
    if is_cudf(metadata):
        metadata = metadata.to_pandas()
    return _stitched_frame(*stitch_flat(values, metadata[list(METADATA_COLUMNS)]), name)


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
    rows = RaggedRows(values[offsets[0]:], offsets - offsets[0])
    return _stitched_frame(*stitch_flat(rows, frame[list(METADATA_COLUMNS)]), column)



def value_column(frame, column: str | None) -> str:
    if column is not None:
        return column
    others = [c for c in frame.columns if c not in (*METADATA_COLUMNS, "window")]
    if len(others) != 1:
        raise ValueError(f"name the column to stitch with column=...; candidates: {others}")
    return others[0]


