"""Partition frames: one tokenized partition as a pandas (or cudf) frame, Arrow list columns,
the frame schema, portable Parquet metadata, and stitching frames (docs/design.md §2, §3).

Everything here runs on one partition and imports no Dask. One partition becomes one
frame::

    logID  start  stop  input_ids       attention_mask  window
    int64  int64  int64 list<int32>     list<int32>     int32

``logID`` is 0-based within the partition (the distributed layer adds the global offset),
``start`` and ``stop`` are the metadata of docs/design.md §2 (``stop`` inclusive), and
``window`` numbers the rows of one document 0, 1, 2, ... so that rows can be put back in
order after a shuffle. With ``padding="bucket"`` a ``bucket`` column (int32) follows.

Then one list column per per-position output the call returned (``token_type_ids``,
``sequence_ids``, ... :data:`~daskwp.frames.schema.POSITION_OUTPUTS`), in that list's order:
``list<T>`` rows of the same lengths as ``input_ids`` (``T`` the output's dtype), the values
of a multi-valued output (``offset_mapping``) flat, ``k`` per position (docs/design.md §3.3).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.buckets import BucketedWindows
from ..core.options import DEFAULT_COMPRESSION
from ..core.ragged import RaggedRows
from ..core.stitch import stitch_flat
from .schema import (FRAME_COLUMNS, INPUT_INDEX_COLUMN, MAX_LIST_VALUES, METADATA_COLUMNS,
                     is_cudf,
                     is_cupy, position_output, position_outputs_of, window_index)

def _fixed_width(padding) -> bool:
    """Whether rows are padded to max_length (so ids form a rows x max_length matrix)."""
    return padding is True or padding == "max_length"


def require_fixed_width(options: dict, what: str) -> None:
    """Raise unless rows are padded to max_length (a matrix needs equal row widths)."""
    if not _fixed_width(options["padding"]):
        raise ValueError(f"{what} as a rows x max_length array needs padding='max_length', "
                         f"got padding={options['padding']!r}; use to_frame() for list "
                         f"columns of ragged rows")


def unpadded_block(frame, column: str, padding):
    """A list column of a result frame whose rows are not padded to ``max_length``, as the
    tokenizer gives that output for this ``padding``: a list of one matrix per bucket width
    (``"bucket"``, widths ascending, rows in frame order), a matrix (``"longest"``: every
    row one width), else :class:`RaggedRows` (ragged rows)."""
    col = frame[column]
    col = col.to_pandas() if hasattr(col, "to_pandas") else col   # cudf: on the host
    rows = [np.asarray(v) for v in col]
    if padding == "bucket":
        widths = frame["bucket"]
        widths = np.asarray(widths.to_pandas() if hasattr(widths, "to_pandas") else widths)
        return [np.stack([rows[i] for i in np.flatnonzero(widths == w)])
                for w in sorted(set(widths.tolist()))]
    if padding == "longest" and rows:
        return np.stack(rows)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.concatenate(rows) if rows else np.empty(0, dtype=np.int32)
    return RaggedRows(values, offsets)


def rows_of_buckets(values, widths) -> RaggedRows:
    """The rows of one matrix per bucket width (``padding="bucket"``: widths ascending, as
    :func:`unpadded_block` and the tokenizer give them) back in row order as RaggedRows,
    ``widths`` the width of every row; a ValueError when the buckets do not hold those
    rows."""
    widths = np.asarray(widths)
    places = [np.flatnonzero(widths == w) for w in sorted(set(widths.tolist()))]
    if [len(b) for b in values] != [len(p) for p in places]:
        raise ValueError(f"values hold {sum(len(b) for b in values)} rows in buckets of "
                         f"{[len(b) for b in values]} rows; this result has {len(widths)} "
                         f"rows in buckets of {[len(p) for p in places]}")
    if not len(widths):
        return RaggedRows(np.empty(0, dtype=np.int32), np.zeros(1, dtype=np.int64))
    blocks = [np.asarray(b) for b in values]
    if any(b.ndim != 2 for b in blocks):
        raise ValueError("values must hold one matrix (rows x width) per bucket")
    lengths = np.empty(len(widths), dtype=np.int64)
    for where, block in zip(places, blocks):
        lengths[where] = block.shape[1]
    offsets = np.zeros(len(widths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.result_type(*blocks))
    for where, block in zip(places, blocks):   # one scatter per bucket, not per row
        out[offsets[where][:, None] + np.arange(block.shape[1])] = block
    return RaggedRows(out, offsets)


def is_fixed_width(options: dict) -> bool:
    """Whether a result's rows are padded to max_length (its outputs are matrices)."""
    return _fixed_width(options["padding"])


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



def list_array(matrix) -> pa.ListArray:
    """Rows as an Arrow ``list<...>`` array (one list per row), built from the buffers.

    ``matrix`` is an array rows x width [x k] (NumPy) or ragged rows (an object with flat
    ``values``, ``(tokens,)`` or ``(tokens, k)``, and ``rows + 1`` ``offsets``, e.g.
    ``daskwp.RaggedRows``). A row's list holds its values flat: ``width * k`` of them
    (``offset_mapping``: ``begin, end`` of each position in turn).

    Memory: the values are shared with ``matrix`` (no copy when it is C-contiguous); only
    the ``rows + 1`` int32 offsets are new.
    """
    if hasattr(matrix, "offsets") and hasattr(matrix, "values"):
        offsets = np.asarray(matrix.offsets, dtype=np.int64)
        values = np.asarray(matrix.values)
        per = int(np.prod(values.shape[1:], dtype=np.int64)) if values.ndim > 1 else 1
        values = values.reshape(-1) if values.ndim > 1 else values
        rows = len(offsets) - 1
        if rows < 0:
            offsets, rows = np.zeros(1, dtype=np.int64), 0
        if per != 1:
            offsets = offsets * per
        first, total = int(offsets[0]), int(offsets[-1] - offsets[0])
        if first:
            values, offsets = values[first:int(offsets[-1])], offsets - first
        else:
            values = values[:total]
    else:
        rows = matrix.shape[0]
        width = int(np.prod(matrix.shape[1:], dtype=np.int64))
        total = rows * width
        offsets = np.arange(0, total + 1, width, dtype=np.int64) if width \
            else np.zeros(rows + 1, dtype=np.int64)
        values = np.ascontiguousarray(matrix).reshape(-1)
    if total > MAX_LIST_VALUES:
        raise ValueError(
            f"a partition of {rows} rows holds {total} token values, more than the 2**31 - 1 "
            f"that one Arrow list<int32> column stores; repartition into smaller partitions")
    child = pa.array(np.ascontiguousarray(values))
    return pa.ListArray.from_buffers(pa.list_(child.type), rows,
                                     [None, pa.py_buffer(offsets.astype(np.int32))],
                                     children=[child])


def list_column(matrix) -> pd.Series:
    """Rows as a pandas Series of Arrow ``list<...>`` values (one list per row): the
    :func:`list_array` of ``matrix`` (its values shared, not copied)."""
    return pd.Series(pd.arrays.ArrowExtensionArray(list_array(matrix)))


def _merge_buckets(out: BucketedWindows):
    """Bucketed windows as one set of rows in document and window order: (per-position
    rows as RaggedRows of each row's bucket width: ``input_ids``, ``attention_mask`` and
    every per-position output, metadata, window, bucket width per row)."""
    parts = out.buckets
    meta = np.concatenate([np.asarray(b["metadata"], dtype=np.int64).reshape(-1, 3)
                           for _, b in parts]) if parts else np.zeros((0, 3), np.int64)
    window = np.concatenate([np.asarray(b["window"]) for _, b in parts]) if parts else \
        np.zeros(0, np.int32)
    width = np.concatenate([np.full(b.num_rows, w, dtype=np.int32) for w, b in parts]) \
        if parts else np.zeros(0, np.int32)
    starts = np.concatenate([[0], np.cumsum(width, dtype=np.int64)])
    order = np.lexsort((window, meta[:, 0]))
    lens = width[order].astype(np.int64)
    new_off = np.concatenate([[0], np.cumsum(lens)])
    # gather each row's cells in the new order
    src = np.repeat(starts[:-1][order], lens) + (np.arange(int(new_off[-1]), dtype=np.int64)
                                                  - np.repeat(new_off[:-1], lens))
    keys = ["input_ids", "attention_mask"] + position_outputs_of(parts[0][1] if parts else ())
    rows = {}
    for key in keys:
        cells = [np.asarray(b[key]) for _, b in parts]
        tail = cells[0].shape[2:] if cells and cells[0].ndim > 2 else ()
        flat = np.concatenate([c.reshape((-1,) + tail) for c in cells]) if parts else \
            np.zeros(0, np.int32)
        rows[key] = RaggedRows(flat[src], new_off)
    return rows, meta[order], window[order].astype(np.int32), width[order]


def _position_columns(out) -> list[str]:
    """The per-position outputs of a (non-bucketed) tokenizer output, in column order."""
    return position_outputs_of(out.keys())


def frame_from_output(out, columns=None) -> pd.DataFrame:
    """The tokenizer's numpy output as a partition frame (columns ``FRAME_COLUMNS``; with
    ``padding="bucket"`` also ``bucket``, each row's width, rows in document order).

    ``columns``: build only these (in frame order; None: all), e.g. the metadata alone
    without its list columns."""
    if columns is not None and not isinstance(out, BucketedWindows):
        return _frame_columns(out, list(columns))
    if isinstance(out, BucketedWindows):
        rows, meta, window, width = _merge_buckets(out)
        frame = pd.DataFrame(np.ascontiguousarray(meta.T).T, columns=list(METADATA_COLUMNS),
                             copy=False)
        frame["input_ids"] = list_column(rows.pop("input_ids"))
        frame["attention_mask"] = list_column(rows.pop("attention_mask"))
        frame["window"] = window
        frame["bucket"] = width
        for name, r in rows.items():
            frame[name] = list_column(r)
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
    for name in _position_columns(out):
        frame[name] = list_column(out[name])
    return frame



def window_numbers(doc_row_offsets, rows: int) -> np.ndarray:
    """Each row's number inside its document (0, 1, ...), from the rows each document
    starts at (``doc_row_offsets``, ``documents + 1`` entries), as int32."""
    starts = np.asarray(doc_row_offsets, dtype=np.int64)
    return (np.arange(rows, dtype=np.int64) -
            np.repeat(starts[:-1], np.diff(starts))).astype(np.int32)


def _int64_column(a) -> pa.Array:
    return pa.array(np.ascontiguousarray(a, dtype=np.int64))


#: Schema metadata that :func:`table_from_output` and :func:`frame_to_table` put on a table
#: of padded rows stored trimmed (docs/design.md §3.3): a JSON object ``{"width": W,
#: "mask_dtype": "int32"}``. :class:`PartWriter` moves it into the part's ``daskwp`` footer
#: metadata as ``padded`` (the table written carries no schema metadata of its own).
PADDED_KEY = b"daskwp.padded"


def trim_padded(mask, *cells):
    """Padded rows (``rows x width [x k]`` arrays, real tokens first, padding after them: the
    layout of ``padding="max_length"``) trimmed to their real tokens, as RaggedRows: the
    cells of each row where ``mask`` is not 0. Returns one RaggedRows per array of
    ``cells``, in order (shared offsets: each row's length is its mask's count of ones).

    Memory: one boolean copy of ``mask`` and the kept cells of each array.
    """
    real = np.asarray(mask) != 0
    lengths = np.count_nonzero(real, axis=1) if real.size else np.zeros(len(real), np.int64)
    offsets = np.zeros(len(real) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return tuple(RaggedRows(np.asarray(c)[real], offsets) for c in cells)


def _padded_metadata(width: int, mask_dtype) -> dict:
    return {PADDED_KEY: json.dumps({"width": int(width),
                                    "mask_dtype": np.dtype(mask_dtype).name}).encode()}


def table_from_output(out, *, attention_mask: bool | None = None,
                      padded_width: int | None = None, mask_dtype="int32") -> pa.Table:
    """The tokenizer's numpy output as an Arrow table with the partition-frame columns
    (``FRAME_COLUMNS``; with ``padding="bucket"`` also ``bucket``), built from its buffers:
    no pandas, no per-row Python, the id and mask values shared with ``out`` (ragged rows)
    or gathered once (padded rows stored trimmed).

    ``attention_mask``: whether to include the mask column (docs/design.md §3.3). False:
    ragged rows as they are (their mask is 1 on every stored token); padded
    (``rows x width``) rows **trimmed** to their real tokens, the row width and mask dtype
    in the table's schema metadata (:data:`PADDED_KEY`), so that a reader pads them back to
    exactly the arrays ``tok(...)`` returned. True: the mask column, padded rows as they
    are. None: without the mask for ragged rows, with it for padded ones (the partition
    frame's columns). The part writer's callers choose with :func:`stores_mask`.

    ``padded_width`` (with ragged rows, ``attention_mask=False``): the rows are the trimmed
    form of rows padded to that width (mask dtype ``mask_dtype``) — the same table as
    padded rows give, without padding them first (the part writer's ``max_length`` path).
    """
    padded = None
    if isinstance(out, BucketedWindows):
        rows, meta, window, width = _merge_buckets(out)
        ids, mask = rows.pop("input_ids"), rows.pop("attention_mask")
        extra = {"bucket": pa.array(np.ascontiguousarray(width, dtype=np.int32))}
        ragged = False
        if attention_mask is None:
            attention_mask = True
    else:
        meta = np.asarray(out["metadata"], dtype=np.int64).reshape(-1, 3)
        ids, mask = out["input_ids"], out["attention_mask"]
        window = window_numbers(out.doc_row_offsets, len(meta))
        extra = {}
        ragged = isinstance(ids, RaggedRows)
        names = _position_columns(out)
        if attention_mask is None:
            attention_mask = not ragged
        if ragged and padded_width is not None and not attention_mask:
            padded = _padded_metadata(padded_width, mask_dtype)
        if not ragged and not attention_mask:
            ids = np.asarray(ids)
            padded = _padded_metadata(ids.shape[1], np.asarray(mask).dtype)
            trimmed = trim_padded(mask, ids, *(out[n] for n in names))
            ids, rows = trimmed[0], dict(zip(names, trimmed[1:]))
        else:
            rows = {name: out[name] for name in names}
    cols = {name: _int64_column(meta[:, k]) for k, name in enumerate(METADATA_COLUMNS)}
    cols["input_ids"] = list_array(ids)
    if attention_mask:
        cols["attention_mask"] = list_array(mask)
    cols["window"] = pa.array(np.ascontiguousarray(window, dtype=np.int32))
    cols.update(extra)
    for name, r in rows.items():
        cols[name] = list_array(r)
    return pa.table(cols, metadata=padded)


def stores_mask(padding) -> bool:
    """Whether the stored layout keeps ``attention_mask`` (and the padding) for rows of this
    ``padding`` (docs/design.md §3.3): no for ragged rows, whose mask is 1 on every stored
    token, and no for rows padded to ``max_length``, stored trimmed to their real tokens with
    the row width in the footer (the mask and padding are derived when read,
    ``daskwp.read_tokenized``); yes for ``longest`` and ``bucket`` rows."""
    return not (padding is False or padding == "do_not_pad" or _fixed_width(padding))


def _trim_table(table: pa.Table) -> pa.Table:
    """A table of padded rows with their ``attention_mask`` (every list column of the same
    row lengths as ``input_ids``) trimmed to the real tokens, without the mask; the width in
    :data:`PADDED_KEY` when rows were padded (equal lengths and some padding)."""
    ids = table.column("input_ids").combine_chunks()
    mask = table.column("attention_mask").combine_chunks()
    offsets = ids.offsets.to_numpy().astype(np.int64)
    lengths = np.diff(offsets)
    m_values = mask.values.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
    if m_values.all():          # ragged rows (or full ones): the mask is derivable as is
        return table.drop_columns(["attention_mask"])
    if len(lengths) and not (lengths == lengths[0]).all():
        raise ValueError("rows of unequal widths with padding cannot be stored trimmed")
    width = int(lengths[0])
    real = m_values != 0
    new_off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.count_nonzero(real.reshape(len(lengths), width), axis=1), out=new_off[1:])
    lists = [n for n in table.column_names if pa.types.is_list(table.schema.field(n).type)
             or pa.types.is_large_list(table.schema.field(n).type)]
    trim = {"input_ids", *position_outputs_of(lists)}
    cols = {}
    for name in table.column_names:
        if name == "attention_mask":
            continue
        col = table.column(name).combine_chunks()
        if name in trim:
            per = position_output(name).values if name != "input_ids" else 1
            off = col.offsets.to_numpy().astype(np.int64)
            vals = col.values.to_numpy(zero_copy_only=False)[off[0]:off[-1]]
            vals = vals.reshape(-1, per) if per != 1 else vals
            col = list_array(RaggedRows(vals[real], new_off))
        cols[name] = col
    return pa.table(cols, metadata=_padded_metadata(width, m_values.dtype))


def frame_to_table(frame, attention_mask: bool = True) -> pa.Table:
    """A partition frame (pandas or cudf, e.g. a GPU worker's) as the Arrow table
    :func:`table_from_output` makes, with or without its mask column (without it, padded
    rows are trimmed to their real tokens, as :func:`table_from_output` stores them)."""
    table = frame.to_arrow() if is_cudf(frame) else \
        pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata(None)
    if not attention_mask and "attention_mask" in table.column_names:
        table = _trim_table(table)
    return table


def _frame_columns(out, columns: list) -> pd.DataFrame:
    meta = np.asarray(out["metadata"], dtype=np.int64).reshape(-1, 3)
    if all(c in METADATA_COLUMNS for c in columns):  # one int64 block, no list columns
        idx = [METADATA_COLUMNS.index(c) for c in columns]
        block = meta if idx == [0, 1, 2] else meta[:, idx]
        return pd.DataFrame(np.ascontiguousarray(block.T).T, columns=columns, copy=False)
    data = {}
    for c in columns:
        if c in METADATA_COLUMNS:
            data[c] = meta[:, METADATA_COLUMNS.index(c)]
        elif c in ("input_ids", "attention_mask") or c in _position_columns(out):
            data[c] = list_column(out[c])
        elif c == "window":
            data[c] = window_numbers(out.doc_row_offsets, len(meta))
        else:
            raise KeyError(c)
    return pd.DataFrame(data, columns=columns)


def matrix_from_frame(frame, column: str, width: int):
    """A list column of equal-length rows as a 2-D array rows x width (numpy, or CuPy for
    cudf); a per-position output of ``k > 1`` values per position (``offset_mapping``) as
    rows x width x k.

    Memory: a view of the column's values when it is one contiguous chunk.
    """
    per = position_output(column).values
    if is_cudf(frame):
        from .cudf_frames import matrix_from_list_column
        m = matrix_from_list_column(frame[column], width * per)
        return m.reshape(m.shape[0], width, per) if per != 1 else m
    arr = pa.array(frame[column].array)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    values = arr.flatten().to_numpy(zero_copy_only=False)
    if len(values) != len(arr) * width * per:
        raise ValueError(f"column {column!r} does not hold rows of {width * per} values each")
    return values.reshape((len(arr), width) + ((per,) if per != 1 else ()))


def input_ids_block(frame, width: int):
    """``input_ids`` of a partition frame as a (rows, width) array."""
    return matrix_from_frame(frame, "input_ids", width)


def attention_mask_block(frame, width: int):
    """``attention_mask`` of a partition frame as a (rows, width) array."""
    return matrix_from_frame(frame, "attention_mask", width)


def position_block(frame, width: int, column: str):
    """A per-position output column of a partition frame as rows x width (x k)."""
    return matrix_from_frame(frame, column, width)


def select_metadata(frame):
    """The ``(logID, start, stop)`` columns of a partition frame."""
    return frame[list(METADATA_COLUMNS)]


def split_source(texts, keep_columns):
    """``(texts, kept, index)`` of an accessor's source partition.

    ``keep_columns`` None: ``texts`` is the text (a Series, or two columns of sentence
    pairs) and nothing is carried (``kept`` and ``index`` None). A list: the partition's
    last ``len(keep_columns)`` columns are kept input columns (``kept``, a frame; None when
    the list is empty), the columns before them the text, and ``index`` is the partition's
    index, each row's input index label."""
    if keep_columns is None:
        return texts, None, None
    index = texts.index
    if not keep_columns:
        return texts, None, index
    n = texts.shape[1] - len(keep_columns)
    body = texts.iloc[:, 0] if n == 1 else texts.iloc[:, :n]
    return body, texts.iloc[:, n:], index


def _source_values(values, pos):
    """``values`` (an Index or a Series) at positions ``pos``, as an array of their dtype."""
    if is_cudf(values):   # a Series on the frame's RangeIndex
        taken = values.take(pos)
        if not hasattr(taken, "reset_index"):
            taken = taken.to_series()
        return taken.reset_index(drop=True)
    if isinstance(values, pd.MultiIndex):   # one tuple per row
        values = values.to_flat_index()
    return values.array.take(pos)


def attach_source(frame, index, kept, logid_offset: int = 0, columns=None):
    """``frame`` (a partition frame, logIDs ``logid_offset`` + the row's position in the
    source partition) with :data:`INPUT_INDEX_COLUMN` (``index``'s label of each row's
    document) and the ``kept`` columns (its values in every row of the document) appended;
    ``columns``: only those of them. ``index`` None: ``frame`` as it is."""
    if index is None:
        return frame
    extra = {INPUT_INDEX_COLUMN: index}
    if kept is not None:
        extra.update((c, kept[c]) for c in kept.columns)
    extra = {k: v for k, v in extra.items() if columns is None or k in columns}
    if not extra:
        return frame
    logid = frame["logID"]
    pos = (logid.values if is_cudf(frame) else logid.to_numpy()) - int(logid_offset)
    frame = frame.copy(deep=False)
    for name, values in extra.items():
        frame[name] = _source_values(values, pos)
    return frame


def attach_kept_columns(table: pa.Table, kept: pa.Table | None,
                        logid_offset: int) -> pa.Table:
    """The output table of a partition with the kept columns appended: every row carries
    the values of its document (row ``logID - logid_offset`` of ``kept``)."""
    if kept is None or kept.num_columns == 0:
        return table
    idx = np.asarray(table.column("logID").to_numpy(), dtype=np.int64) - int(logid_offset)
    take = pa.array(idx)
    for name in kept.column_names:
        table = table.append_column(name, kept.column(name).take(take))
    return table


def source_table(index, kept) -> pa.Table:
    """:data:`INPUT_INDEX_COLUMN` and the kept columns of a source partition
    (:func:`split_source`) as an Arrow table, one row per document, for
    :func:`attach_kept_columns`."""
    if is_cudf(index):
        index = index.to_pandas()
        kept = None if kept is None else kept.to_pandas()
    columns = {INPUT_INDEX_COLUMN: pd.Series(index.array, copy=False)}
    if kept is not None:
        columns.update((c, kept[c].reset_index(drop=True)) for c in kept.columns)
    return pa.Table.from_pandas(pd.DataFrame(columns, copy=False), preserve_index=False)


def metadata_block(frame):
    """The ``(logID, start, stop)`` columns of a partition frame as a (rows, 3) int64 array
    (numpy, or CuPy for cudf)."""
    meta = frame[list(METADATA_COLUMNS)]
    if is_cudf(meta):
        return meta.astype(np.int64).values
    return meta.to_numpy(dtype=np.int64)



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


#: Parquet key-value metadata of a part that daskwp writes: a JSON object (the part's rows,
#: documents, logID offset, the vocabulary's ``pad_id``, ...; batch jobs add their job id).
PART_METADATA_KEY = b"daskwp"
#: Key-value metadata of a part: a 128-bit checksum (32 hex digits) of the file's bytes
#: before the footer, :class:`daskwp._ext.PartHash` (docs/design.md §4.2). It replaced the
#: first 128 bits of SHA-256 (:data:`SHA256_CHECKSUM_KEY`): the checksum tells a rerun whether
#: a part's data pages are the ones written (damage, a foreign or half-copied file), which
#: needs no collision resistance against an attacker (who could rewrite the footer too), and
#: SHA-256 cost about a tenth of the tokenizer's CPU on the writer thread even on the CPU's
#: SHA instructions (1.2 GB/s here, against 7 GB/s).
CHECKSUM_KEY = b"daskwp.data_hash128"
#: The checksum key of parts written by daskwp before :data:`CHECKSUM_KEY`: the first 128
#: bits of the SHA-256 of the same bytes; such parts are still verified when a job resumes.
SHA256_CHECKSUM_KEY = b"daskwp.data_sha256"


def checksum_hash(key: bytes = CHECKSUM_KEY):
    """A new hash object of a part checksum recorded under ``key`` (:data:`CHECKSUM_KEY`,
    or :data:`SHA256_CHECKSUM_KEY` for SHA-256); ``checksum_hex(h)`` gives its value as
    recorded."""
    if key == CHECKSUM_KEY:
        from .. import _ext
        return _ext.PartHash()
    if key != SHA256_CHECKSUM_KEY:
        raise ValueError(f"unknown part checksum key {key!r}: {CHECKSUM_KEY!r} or "
                         f"{SHA256_CHECKSUM_KEY!r}")
    import hashlib
    return hashlib.sha256()


def checksum_hex(h) -> str:
    return h.hexdigest()[:32]
_CHECKSUM_PLACEHOLDER = b"0" * 32
#: Rows per Parquet row group of a part.
ROW_GROUP_ROWS = 65536
#: Encodings of the stored layout (docs/batch-jobs.md "Output"): the int64/int32 scalar
#: columns (sorted or small: logID, start, stop, window, bucket) delta-encoded; the values of
#: the list columns BYTE_STREAM_SPLIT (their bytes transposed: the high bytes of token ids
#: are nearly constant, so zstd compresses them with ~25% fewer instructions and ~5% smaller,
#: callgrind in benchmarks/results/pipeline_bench.md; readers need Parquet's INT32
#: byte-stream-split: pyarrow >= 17, parquet-java >= 1.14, DuckDB >= 1.1). No dictionaries
#: (ids have tens of thousands of values; hashing each costs more than it saves), statistics
#: for logID only (per-value min/max of list columns is pure cost).
SCALAR_ENCODING = "DELTA_BINARY_PACKED"
LIST_ENCODING = "BYTE_STREAM_SPLIT" if int(pa.__version__.split(".")[0]) >= 17 else "PLAIN"


def parquet_write_options(schema: pa.Schema, compression=DEFAULT_COMPRESSION,
                          compat: bool = False) -> dict:
    """``pyarrow.parquet.ParquetWriter`` keywords of the stored layout for ``schema``
    (measured in benchmarks/results/pipeline_bench.md). ``compat``: list values PLAIN, the
    layout readers without BYTE_STREAM_SPLIT take (fastparquet; the ``parquet_compat``
    option, docs/batch-jobs.md "Output")."""
    codec = None if compression in (None, "none", False) else str(compression)
    encodings = {}
    for f in schema:
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
            if LIST_ENCODING != "PLAIN" and not compat:
                encodings[f"{f.name}.list.element"] = LIST_ENCODING
        elif pa.types.is_integer(f.type):
            encodings[f.name] = SCALAR_ENCODING
    opts = dict(compression=codec, use_dictionary=False, column_encoding=encodings or None,
                write_statistics=[n for n in ("logID",) if n in schema.names])
    if codec == "zstd":
        opts["compression_level"] = 1
    return opts


def _portable_pandas_schema_metadata(schema: pa.Schema) -> dict:
    """The schema metadata ``pandas`` metadata (portable, see :func:`portable_pandas_metadata`)
    that ``pa.Table.from_pandas`` would record for a frame of these columns, no index."""
    empty = schema.empty_table().to_pandas(types_mapper=pd.ArrowDtype)
    for f in schema:  # numpy columns where the partition frame has them
        if pa.types.is_integer(f.type):
            empty[f.name] = empty[f.name].astype(f.type.to_pandas_dtype())
    table = portable_pandas_metadata(pa.Table.from_pandas(empty, preserve_index=False))
    return {b"pandas": table.schema.metadata[b"pandas"]}


class _HashingFile:
    """A write-only file for ``ParquetWriter`` that hashes what it writes (the checksum) and,
    once :meth:`hold` is called, keeps the rest (the footer, and pages the writer flushes
    when it closes) in memory so that the footer can be patched before it reaches the file."""

    def __init__(self, path: str):
        # compressed pages (hundreds of KB) go to the file directly, not through the buffer
        self._fh = open(path, "xb", buffering=1 << 16)
        self._hash = checksum_hash()
        self._pos = 0
        self._held: list | None = None
        self.closed = False

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        if self.closed:  # abandoned: what the writer still flushes goes nowhere
            return n
        if self._held is not None:
            self._held.append(bytes(data))
        else:
            self._hash.update(data)
            self._fh.write(data)
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:  # ParquetWriter closes what it was given; finish() does it
        pass

    def hold(self) -> None:
        self._held = []

    def finish(self, path: str) -> None:
        """Hash the held bytes before the footer, write the digest over the placeholder in
        the footer (same length: the footer stays valid), write, fsync and close."""
        import struct
        tail = b"".join(self._held or [])
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise ValueError(f"{path!r}: the Parquet writer wrote no footer")
        start = len(tail) - 8 - struct.unpack("<i", tail[-8:-4])[0]
        if start < 0:
            raise ValueError(f"{path!r}: the footer began before the file was closed")
        self._hash.update(tail[:start])
        footer = tail[start:]
        at = footer.find(CHECKSUM_KEY) + len(CHECKSUM_KEY)
        pos = footer.find(_CHECKSUM_PLACEHOLDER, at)
        if footer.count(CHECKSUM_KEY) != 1 or not 0 < pos - at <= 8:
            raise ValueError(f"{path!r}: cannot place the part's checksum in its footer")
        digest = checksum_hex(self._hash).encode()
        self._fh.write(tail[:start + pos] + digest + tail[start + pos + len(digest):])
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self.closed = True

    def abort(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        self.closed = True


class PartWriter:
    """One Parquet part written atomically, in row groups as tables arrive (daskwp's one
    writer: batch jobs and the lazy accessor's ``to_parquet`` both use it).

    The file is written to ``tmp_path`` (created, must not exist), its data pages hashed as
    they are written; :meth:`close` records ``metadata`` (a JSON object under
    ``PART_METADATA_KEY``) and the checksum of the data pages (``CHECKSUM_KEY``) in the
    footer, fsyncs, and renames the file to ``path``. A part therefore exists complete or not
    at all; a writer that fails or is abandoned (:meth:`abort`) removes its temporary file.

    The stored layout is :func:`parquet_write_options`; the schema is the first table's,
    with portable pandas metadata (``pd.read_parquet`` reads the parts). Tables of integer
    and list<integer> columns (every table daskwp's tokenizer makes) go through daskwp's own
    writer (:mod:`daskwp.frames.parquet_writer`: the same file to every reader, at a third of
    Arrow's writer cost); others (kept input columns, compressions other than zstd and none)
    through ``pyarrow.parquet.ParquetWriter``. ``native`` forces one or the other. A table of padded
    rows stored trimmed (:data:`PADDED_KEY` in its schema metadata, from
    :func:`table_from_output`) records the row width and mask dtype in the footer's
    ``daskwp`` object as ``padded`` (docs/design.md §3.3).
    """

    def __init__(self, path: str, tmp_path: str, compression=DEFAULT_COMPRESSION,
                 row_group_rows: int = ROW_GROUP_ROWS, native: bool | None = None,
                 compat: bool = False):
        self.path, self.tmp_path = str(path), str(tmp_path)
        self.compression = compression
        #: the layout of parquet_write_options(compat=True): list values PLAIN
        self.compat = compat
        #: daskwp's own writer (:mod:`daskwp.frames.parquet_writer`) or Arrow's; None: the
        #: own one wherever it takes the schema and compression
        self.native = native
        self.row_group_rows = row_group_rows
        self._file = None
        self._writer = None
        self.schema = None
        #: ``{"width", "mask_dtype"}`` of padded rows stored trimmed (:data:`PADDED_KEY`)
        self.padded = None
        # A write may run in another thread (the next piece is tokenized meanwhile): the lock
        # makes abort wait for it, and no write starts (or creates the file) after abort.
        import threading
        self._lock = threading.RLock()
        self._done = False

    def _open(self, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        from . import parquet_writer
        schema = schema.with_metadata(_portable_pandas_schema_metadata(schema))
        self._file = _HashingFile(self.tmp_path)
        options = parquet_write_options(schema, self.compression, self.compat)
        native = self.native if self.native is not None else \
            parquet_writer.supports(schema, options["compression"])
        try:
            if native:
                self._writer = parquet_writer.NativeParquetWriter(
                    self._file, schema, options["compression"],
                    byte_stream_split=LIST_ENCODING == "BYTE_STREAM_SPLIT" and not self.compat)
            else:
                self._writer = pq.ParquetWriter(self._file, schema, **options)
        except BaseException:
            self.abort()
            raise
        self.schema = schema

    def write(self, table: pa.Table) -> None:
        """Append ``table`` (the schema of the first one) as row groups."""
        with self._lock:
            if self._done:
                raise RuntimeError(f"{self.path!r}: the part was closed or abandoned")
            padded = (table.schema.metadata or {}).get(PADDED_KEY)
            if padded is not None:
                padded = json.loads(padded)
                if self.padded is not None and padded != self.padded:
                    raise ValueError(f"{self.path!r}: pieces of one part padded alike "
                                     f"expected, got {self.padded} then {padded}")
                self.padded = padded
                table = table.replace_schema_metadata(None)
            if self._writer is None:
                self._open(table.schema)
            elif table.schema.remove_metadata() != self.schema.remove_metadata():
                table = table.cast(self.schema.remove_metadata())
            self._writer.write_table(table.replace_schema_metadata(self.schema.metadata),
                                     row_group_size=self.row_group_rows)

    def close(self, metadata: dict | None = None, schema: pa.Schema | None = None) -> None:
        """Finish the part: metadata and checksum in the footer, fsync, rename to ``path``.
        ``schema`` gives the columns of a part no table was written to."""
        try:
            with self._lock:
                if self._done:
                    raise RuntimeError(f"{self.path!r}: the part was closed or abandoned")
                if self._writer is None:
                    if schema is None:
                        raise ValueError("PartWriter.close: no table written and no schema "
                                         "given")
                    self._open(schema)
                kv = {CHECKSUM_KEY: _CHECKSUM_PLACEHOLDER}
                if self.padded is not None:
                    metadata = dict(metadata or {}, padded=self.padded)
                if metadata is not None:
                    kv[PART_METADATA_KEY] = json.dumps(metadata, sort_keys=True).encode()
                self._writer.add_key_value_metadata(kv)
                self._file.hold()
                self._writer.close()
                self._file.finish(self.tmp_path)
                os.replace(self.tmp_path, self.path)
                self._done = True
        finally:
            self.abort()

    def __enter__(self) -> "PartWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.abort()

    def abort(self) -> None:
        """Drop the part: wait for a write in progress, close and remove the temporary file
        (nothing if the part is complete); later writes are refused."""
        with self._lock:
            self._done = True
            if self._file is not None and not self._file.closed:
                self._file.abort()
            if self._writer is not None:
                writer, self._writer = self._writer, None
                try:
                    writer.close()  # into the abandoned file: nothing is written
                except Exception:
                    pass
            try:
                os.unlink(self.tmp_path)
            except FileNotFoundError:
                pass


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


