"""Partition frames: one tokenized partition as a pandas (or cudf) frame, its Arrow table and
Arrow list columns, the blocks the accessors read back, and the source columns kept beside
them (docs/design.md §2, §3). Parts are written by :mod:`.part_writer`; frames are joined
back into documents by :mod:`.stitching`.

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

import numpy as np
import pyarrow as pa

from ..core.buckets import BucketedWindows
from ..core.ragged import RaggedRows
from .schema import (FRAME_COLUMNS, INPUT_INDEX_COLUMN, MAX_LIST_VALUES, METADATA_COLUMNS,
                     arrow_of_numpy, is_cudf, is_cupy, position_output, position_outputs_of,
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
    import pandas as pd
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
    child = arrow_of_numpy(values)
    return pa.ListArray.from_buffers(pa.list_(child.type), rows,
                                     [None, pa.py_buffer(offsets.astype(np.int32))],
                                     children=[child])


def list_column(matrix) -> pd.Series:
    """Rows as a pandas Series of Arrow ``list<...>`` values (one list per row): the
    :func:`list_array` of ``matrix`` (its values shared, not copied)."""
    import pandas as pd
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
    import pandas as pd
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
    frame["window"] = window_numbers(out.doc_row_offsets, len(meta))
    for name in _position_columns(out):
        frame[name] = list_column(out[name])
    return frame



def window_numbers(doc_row_offsets, rows: int) -> np.ndarray:
    """Each row's number inside its document (0, 1, ...), from the rows each document
    starts at (``doc_row_offsets``, ``documents + 1`` entries), as int32."""
    starts = np.asarray(doc_row_offsets, dtype=np.int64)
    out = np.zeros(rows, dtype=np.int32)   # a document's first row is its window 0
    per_doc = np.diff(starts)
    multi = np.flatnonzero(per_doc > 1)
    if len(multi) == 0:
        return out
    # only the rows after the first of documents of several rows are written
    k = per_doc[multi] - 1
    first = np.cumsum(k) - k
    total = int(first[-1] + k[-1])
    within = np.arange(1, total + 1, dtype=np.int64) - np.repeat(first, k)
    out[np.repeat(starts[multi] - starts[0], k) + within] = within
    return out


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
        extra = {"bucket": arrow_of_numpy(np.asarray(width, dtype=np.int32))}
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
    columns = np.ascontiguousarray(meta.T, dtype=np.int64)   # one pass: three int64 columns
    cols = {name: arrow_of_numpy(columns[k]) for k, name in enumerate(METADATA_COLUMNS)}
    cols["input_ids"] = list_array(ids)
    if attention_mask:
        cols["attention_mask"] = list_array(mask)
    cols["window"] = arrow_of_numpy(np.asarray(window, dtype=np.int32))
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
    import pandas as pd
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
    import pandas as pd
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


def attach_range_index(table: pa.Table, start: int, step: int, logid_offset: int) -> pa.Table:
    """The output table of a partition with :data:`INPUT_INDEX_COLUMN` appended, the labels
    of a ``RangeIndex(start, ..., step)`` source partition with no kept columns (int64, as
    :func:`source_table` gives them): ``start + step * (logID - logid_offset)``, computed
    from the rows' logIDs. :func:`attach_kept_columns` of :func:`source_table` gives the
    same column by gathering the labels from the index made an Arrow table: ~5 ms of the
    writer thread's CPU for the 0.8 M rows of a 64 MB partition, against ~1 here."""
    logid = table.column("logID").to_numpy()
    labels = np.asarray(logid, dtype=np.int64) - int(logid_offset)
    if step != 1:
        labels *= step
    if start:
        labels += start
    return table.append_column(INPUT_INDEX_COLUMN, pa.array(labels, type=pa.int64()))


def source_table(index, kept) -> pa.Table:
    """:data:`INPUT_INDEX_COLUMN` and the kept columns of a source partition
    (:func:`split_source`) as an Arrow table, one row per document, for
    :func:`attach_kept_columns`."""
    import pandas as pd
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
