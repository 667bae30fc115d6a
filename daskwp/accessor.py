"""The ``.wordpiece`` accessor, and the partition-level functions behind it.

``series.wordpiece.tokenize(...)`` is registered on pandas Series (eager), on cudf Series
when cudf imports (eager, on the GPU) and on Dask Series (lazy; see ``daskwp._dask``) when
``daskwp`` is imported.

Everything above the registration section is partition-level: it runs on one pandas (or
cudf) partition, imports no Dask and calls the single-machine tokenizer, so the Dask glue
only wires these functions into graphs. One partition becomes one frame::

    logID  start  stop  input_ids       attention_mask  window
    int64  int64  int64 list<int32>     list<int32>     int32

``logID`` is 0-based within the partition (the Dask layer adds the global offset), ``start``
and ``stop`` are the SPEC section 2 metadata (``stop`` inclusive), and ``window`` numbers the
rows of one document 0, 1, 2, ... so that rows can be put back in order after a shuffle.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from . import _config
from .tokenizer import WordPieceTokenizer
from .vocab import Vocabulary

#: Columns of a tokenized partition, in order.
FRAME_COLUMNS = ("logID", "start", "stop", "input_ids", "attention_mask", "window")
#: Columns of ``metadata``.
METADATA_COLUMNS = ("logID", "start", "stop")
#: Names of the window options, as the tokenizer's ``__call__`` spells them.
WINDOW_OPTIONS = ("max_length", "stride", "truncation", "add_special_tokens", "padding")
#: Tokenizer options accepted by ``tokenize`` besides ``vocab`` and ``lowercase``.
TOKENIZER_OPTIONS = ("strip_accents", "clean_text", "handle_chinese_chars",
                     "max_input_chars_per_word")

_MAX_LIST_VALUES = 2**31 - 1  # list<int32> has int32 offsets


# -- resolving parameters -----------------------------------------------------------------

_VOCAB_CACHE: "OrderedDict[tuple, Vocabulary]" = OrderedDict()
_VOCAB_CACHE_LOCK = threading.Lock()


def _vocabulary_from_path(path) -> Vocabulary:
    """``Vocabulary.from_file``, cached by path, size and modification time."""
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        return Vocabulary.from_file(p)  # raises the reader's clear error
    with _VOCAB_CACHE_LOCK:
        v = _VOCAB_CACHE.get(key)
        if v is not None:
            _VOCAB_CACHE.move_to_end(key)
            return v
    v = Vocabulary.from_file(p)
    with _VOCAB_CACHE_LOCK:
        _VOCAB_CACHE[key] = v
        while len(_VOCAB_CACHE) > 8:
            _VOCAB_CACHE.popitem(last=False)
    return v


def resolve_tokenizer(vocab=None, lowercase=None, **options) -> WordPieceTokenizer:
    """The tokenizer that ``tokenize(vocab=..., lowercase=..., ...)`` describes.

    ``vocab`` is a :class:`WordPieceTokenizer` (used as is), a :class:`Vocabulary`, a path to
    ``vocab.txt`` / ``tokenizer.json``, a model folder (read with
    :meth:`WordPieceTokenizer.from_pretrained`, so its ``tokenizer_config.json`` applies), or
    None for ``daskwp.vocab`` in ``dask.config`` (default: the bundled bert-base-uncased).
    """
    unknown = sorted(set(options) - set(TOKENIZER_OPTIONS))
    if unknown:
        raise TypeError(f"tokenize() got unexpected keyword argument(s) {unknown}; allowed: "
                        f"vocab, lowercase, {', '.join(TOKENIZER_OPTIONS)}, "
                        f"{', '.join(WINDOW_OPTIONS)}")
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(vocab, WordPieceTokenizer):
        if lowercase is not None or given:
            names = (["lowercase"] if lowercase is not None else []) + sorted(given)
            raise ValueError(f"vocab is already a WordPieceTokenizer; options {names} cannot "
                             f"be applied to it (build the tokenizer with them instead)")
        return vocab
    vocab = _config.get("vocab", vocab)
    if vocab is not None and not isinstance(vocab, (Vocabulary, str, os.PathLike)):
        raise TypeError(f"vocab must be a WordPieceTokenizer, a Vocabulary, a path to "
                        f"vocab.txt / tokenizer.json / a model folder, or None; got "
                        f"{type(vocab).__name__} ({vocab!r:.60})")
    if vocab is not None and not isinstance(vocab, Vocabulary) and Path(vocab).is_dir():
        if lowercase is not None:
            given["lowercase"] = lowercase
        return WordPieceTokenizer.from_pretrained(vocab, **given)
    if vocab is None:
        vocab = Vocabulary.default()
    elif not isinstance(vocab, Vocabulary):  # a path (checked above)
        vocab = _vocabulary_from_path(vocab)
    return WordPieceTokenizer(vocab, lowercase=_config.get("lowercase", lowercase), **given)


def resolve_window_options(max_length=None, stride=None, truncation=None,
                           add_special_tokens=None, padding=None) -> dict:
    """Window options with ``None`` resolved through ``dask.config`` (``daskwp.<name>``).

    The tokenizer validates the values themselves (L >= 1, 0 <= stride < L, ...); this only
    fills in defaults and rejects what the accessor cannot store.
    """
    opts = {
        "max_length": _config.get("max_length", max_length),
        "stride": _config.get("stride", stride),
        "truncation": _config.get("truncation", truncation),
        "add_special_tokens": _config.get("add_special_tokens", add_special_tokens),
        "padding": _config.get("padding", padding),
    }
    for name in ("max_length", "stride"):
        v = opts[name]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {v!r}")
        opts[name] = int(v)
    if not _fixed_width(opts["padding"]) and opts["padding"] not in (False, "longest",
                                                                      "do_not_pad"):
        raise ValueError(f"padding must be 'max_length' (or True), 'longest', or False / "
                         f"'do_not_pad' (ragged rows), got {opts['padding']!r}")
    return opts


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
    if dtype == object or text == "str" or text.startswith("string") or (
            isinstance(dtype, pd.ArrowDtype) and (
                pa.types.is_string(dtype.pyarrow_dtype)
                or pa.types.is_large_string(dtype.pyarrow_dtype)
                or pa.types.is_binary(dtype.pyarrow_dtype)
                or pa.types.is_large_binary(dtype.pyarrow_dtype))):
        return
    raise TypeError(f"wordpiece.tokenize needs a column of strings; {what} has dtype {dtype} "
                    f"(allowed: object, str, string, or an Arrow string/binary dtype)")


# -- per-worker tokenizer cache -----------------------------------------------------------

_TOKENIZERS: "OrderedDict[tuple, WordPieceTokenizer]" = OrderedDict()
_TOKENIZERS_LOCK = threading.Lock()
_TOKENIZERS_MAX = 4


def tokenizer_key(tok: WordPieceTokenizer) -> tuple:
    """Identity of a tokenizer: its vocabulary's content hash and its settings."""
    return (tok.vocab.hash, tuple(sorted(tok.settings.items())))


def cached_tokenizer(tok: WordPieceTokenizer) -> WordPieceTokenizer:
    """The first instance of an equal tokenizer this process has seen.

    Every task that receives a (deserialized) tokenizer goes through here, so a process keeps
    one instance per vocabulary: whatever that instance holds (the GPU launcher's
    device-resident copy of the vocabulary, for one) is built once per worker and reused by
    later tasks and later computations.
    """
    key = tokenizer_key(tok)
    with _TOKENIZERS_LOCK:
        cached = _TOKENIZERS.get(key)
        if cached is not None:
            _TOKENIZERS.move_to_end(key)
            return cached
        _TOKENIZERS[key] = tok
        while len(_TOKENIZERS) > _TOKENIZERS_MAX:
            _TOKENIZERS.popitem(last=False)
    return tok


def cached_tokenizer_keys() -> list[tuple]:
    """Keys (vocabulary hash, settings) of the tokenizers cached in this process."""
    with _TOKENIZERS_LOCK:
        return list(_TOKENIZERS)


# -- one partition ------------------------------------------------------------------------

def _is_cudf(obj) -> bool:
    return type(obj).__module__.split(".")[0] == "cudf"


def _partition_error(exc: BaseException, partition) -> BaseException:
    """``exc`` again, its message prefixed with the partition it came from."""
    msg = f"daskwp: tokenizing partition {partition} of the input failed: " \
          f"{type(exc).__name__}: {exc}"
    try:
        new = type(exc)(msg)
        if str(new) != msg:
            raise TypeError
    except Exception:
        new = RuntimeError(msg)
    return new


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
    if total > _MAX_LIST_VALUES:
        raise ValueError(
            f"a partition of {rows} rows holds {total} token values, more than the 2**31 - 1 "
            f"that one Arrow list<int32> column stores; repartition into smaller partitions")
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(values))))


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


def frame_from_output(out) -> pd.DataFrame:
    """The tokenizer's numpy output as a partition frame (columns ``FRAME_COLUMNS``)."""
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


def tokenize_partition(texts, tokenizer: WordPieceTokenizer, options: dict,
                       partition=None):
    """Tokenize one partition (pandas or cudf Series) into a partition frame.

    logIDs are 0-based within the partition. An empty partition gives an empty frame with the
    same columns and dtypes; an error is raised again naming ``partition``.
    """
    tok = cached_tokenizer(tokenizer)
    try:
        if _is_cudf(texts):  # the tokenizer runs cudf input on the GPU; outputs stay there
            from . import _cudf
            return _cudf.frame_from_output(tok(texts, **options, return_tensors="cp"))
        return frame_from_output(tok(texts, **options, return_tensors="np"))
    except Exception as e:
        if partition is None:
            raise
        raise _partition_error(e, partition) from e


def count_documents(texts) -> int:
    """Documents in a partition: its number of rows (every row is one document)."""
    return len(texts)


def add_counts(a: int, b: int) -> int:
    """Sum of two partial document counts (a node of the prefix-sum tree)."""
    return a + b


def add_logid_offset(frame, *counts):
    """``frame`` with ``sum(counts)`` added to its logIDs (the global offset pass)."""
    offset = sum(counts)
    if offset == 0:
        return frame
    return frame.assign(logID=frame["logID"] + offset)


def matrix_from_frame(frame, column: str, width: int):
    """A list column of equal-length rows as a 2-D array (numpy, or CuPy for cudf).

    Memory: a view of the column's values when it is one contiguous chunk.
    """
    if _is_cudf(frame):
        from . import _cudf
        return _cudf.matrix_from_list_column(frame[column], width)
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

    if _is_cudf(frame):
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
    if offsets[-1] > _MAX_LIST_VALUES:
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
    from .windows import stitch_flat

    if _is_cupy(values):
        values = values.get()
    if _is_cudf(metadata):
        metadata = metadata.to_pandas()
    return _stitched_frame(*stitch_flat(values, metadata[list(METADATA_COLUMNS)]), name)


def stitch_frame(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Rows carrying ``logID, start, stop`` (and ``window``, which orders the rows of a
    document after a shuffle) and a list column ``column`` of per-token values, joined into
    one row per logID. All rows of a document must be in ``frame``."""
    from .windows import RaggedRows, stitch_flat

    if _is_cudf(frame):
        frame = frame.to_pandas()
    missing = [c for c in (*METADATA_COLUMNS, column) if c not in frame.columns]
    if missing:
        raise ValueError(f"stitching needs columns {[*METADATA_COLUMNS, column]}; missing "
                         f"{missing} (columns: {list(frame.columns)})")
    if "window" in frame.columns and len(frame) > 1:
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


# -- eager result (pandas, cudf) ----------------------------------------------------------

class WordPieceResult:
    """Tokenized windows of a pandas (or cudf) Series, computed eagerly.

    The same attributes as the lazy Dask result: ``metadata`` (frame ``logID, start,
    stop``), ``input_ids`` and ``attention_mask`` (arrays rows x max_length: numpy, or CuPy
    for cudf), ``to_frame()``, ``to_parquet(path)`` and ``stitch(values)``.
    """

    def __init__(self, frame, options: dict, tokenizer: WordPieceTokenizer | None = None):
        self._frame = frame
        self.options = dict(options)
        self.tokenizer = tokenizer

    @property
    def max_length(self) -> int:
        return self.options["max_length"]

    @property
    def metadata(self):
        return select_metadata(self._frame)

    @property
    def input_ids(self):
        require_fixed_width(self.options, "input_ids")
        return input_ids_block(self._frame, self.max_length)

    @property
    def attention_mask(self):
        require_fixed_width(self.options, "attention_mask")
        return attention_mask_block(self._frame, self.max_length)

    def to_frame(self):
        """``logID, start, stop, input_ids, attention_mask, window`` (list columns)."""
        return self._frame

    def to_parquet(self, path, **kwargs):
        """Write ``to_frame()`` to one Parquet file (list<int32> columns, no index).

        ``kwargs`` go to ``pyarrow.parquet.write_table``. Read it back with
        ``pd.read_parquet(path, dtype_backend="pyarrow")`` for list<int32> columns (object
        columns of arrays without it); see :func:`portable_pandas_metadata`.
        """
        write_parquet(self._frame, path, **kwargs)

    def stitch(self, values, column: str | None = None):
        """One row per logID with the owned slices of per-row ``values`` joined in order.

        ``values``: an array (rows, max_length, ...) aligned with the rows, or a frame with
        ``logID, start, stop`` (``window``) and a list column (``column``; default: the one
        column that is not metadata).
        """
        if hasattr(values, "columns"):
            return stitch_frame(values, _value_column(values, column))
        return stitch_rows(values, self.metadata, column or "values")

    def __len__(self) -> int:
        return len(self._frame)

    def __repr__(self) -> str:
        return f"WordPieceResult(rows={len(self)}, max_length={self.max_length})"


def _is_cupy(obj) -> bool:
    return type(obj).__module__.split(".")[0] == "cupy"


def _value_column(frame, column: str | None) -> str:
    if column is not None:
        return column
    others = [c for c in frame.columns if c not in (*METADATA_COLUMNS, "window")]
    if len(others) != 1:
        raise ValueError(f"name the column to stitch with column=...; candidates: {others}")
    return others[0]


class WordPieceAccessor:
    """``series.wordpiece`` on pandas and cudf Series (eager)."""

    def __init__(self, series):
        self._series = series

    def tokenize(self, vocab=None, *, lowercase=None, max_length=None, stride=None,
                 truncation=None, add_special_tokens=None, padding=None,
                 **tokenizer_options) -> WordPieceResult:
        """Tokenize the column into windows (see :class:`WordPieceResult`).

        Parameters left at None come from ``dask.config`` (``daskwp.<name>``, defaults in
        ``daskwp/config.yaml``). ``vocab``: a WordPieceTokenizer, Vocabulary, path or model
        folder; other keywords (``strip_accents``, ``clean_text``, ``handle_chinese_chars``,
        ``max_input_chars_per_word``) go to :class:`WordPieceTokenizer`.
        """
        check_text_dtype(self._series.dtype, f"Series {self._series.name!r}")
        tok = resolve_tokenizer(vocab, lowercase, **tokenizer_options)
        options = resolve_window_options(max_length, stride, truncation, add_special_tokens,
                                         padding)
        frame = tokenize_partition(self._series, tok, options)
        return WordPieceResult(frame, options, tok)


# -- registration -------------------------------------------------------------------------

_REGISTERED = False


def register_accessors() -> None:
    """Register ``.wordpiece`` on pandas, Dask and (when it imports) cudf Series. Idempotent."""
    global _REGISTERED
    if _REGISTERED:
        return
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # re-registration on module reload
        pd.api.extensions.register_series_accessor("wordpiece")(WordPieceAccessor)
        from . import _dask
        _dask.register_dask_accessor()
        try:
            import cudf
        except Exception:  # ImportError, or a CUDA driver error on a machine without a GPU
            cudf = None
        if cudf is not None:
            cudf.api.extensions.register_series_accessor("wordpiece")(WordPieceAccessor)
    _REGISTERED = True


register_accessors()
