"""The eager ``.wordpiece`` accessor of pandas and cudf Series.

``series.wordpiece.tokenize(...)`` tokenizes the whole Series now, as one partition, through
the same partition task as the Dask accessor (:func:`daskwp.distributed.tasks.tokenize_partition`),
and returns a :class:`WordPieceResult` with the same attributes as the lazy Dask result.
"""

from __future__ import annotations

from ..backends.tokenizer import WordPieceTokenizer, resolve_tokenizer
from ..core.options import check as check_option
from ..core.outputs import ResultMapping
from ..core.windows import resolve_window_options
from ..distributed.tasks import CALL_OPTIONS, tokenize_partition
from ..frames.partition import (attention_mask_block, check_text_dtype, input_ids_block,
                                is_fixed_width, rows_of_buckets, unpadded_block, is_cudf,
                                position_block, require_fixed_width, select_metadata)
from ..frames.part_writer import write_parquet
from ..frames.stitching import stitch_frame, stitch_rows, value_column
from ..frames.schema import (FRAME_COLUMNS, INPUT_INDEX_COLUMN, POSITION_OUTPUTS,
                             position_outputs_of)

__all__ = ["TEXT_COLUMNS", "WordPieceAccessor", "WordPieceResult", "check_kept_names",
           "resolve_call", "source_frame", "split_call_options", "token_count_part"]

#: Names of the text columns of an accessor's source frame when it carries kept columns
#: (reserved: a kept column may be the text column itself).
TEXT_COLUMNS = ("__daskwp_text__", "__daskwp_text_pair__")


def resolve_call(vocab, lowercase, max_length, stride, truncation, add_special_tokens,
                 padding, bucket_widths, return_overflowing_tokens, tokenizer_options: dict):
    """``(tokenizer, options)`` of an accessor's ``tokenize(...)`` call, eager or lazy alike:
    the window options resolved (``dask.config`` for those left None), the call options among
    the keywords moved into them (:func:`split_call_options`), the tokenizer resolved from
    the rest."""
    options = resolve_window_options(max_length, stride, truncation, add_special_tokens,
                                     padding, bucket_widths)
    if return_overflowing_tokens is not None:
        options["return_overflowing_tokens"] = return_overflowing_tokens
    tokenizer_options = split_call_options(options, tokenizer_options)
    return resolve_tokenizer(vocab, lowercase, **tokenizer_options), options


def split_call_options(options: dict, tokenizer_options: dict) -> dict:
    """Move the call options among ``tokenizer_options`` (the keywords that are not
    tokenizer settings: ``return_token_type_ids``, ``return_sequence_ids``, ``mask_dtype``
    and any other option of ``tok(...)``, :data:`~daskwp.distributed.tasks.CALL_OPTIONS`)
    into ``options``; returns the tokenizer settings left."""
    rest = dict(tokenizer_options)
    for k in CALL_OPTIONS:
        if k in rest:
            value = rest.pop(k)
            if value is not None:
                options[k] = value
    return rest


def check_kept_names(names) -> list:
    """The ``keep_columns`` of an accessor call as a list of names (the option's validator:
    the job option's meaning), refusing the names of the result's own columns."""
    names = check_option("keep_columns", names) or []
    own = (*FRAME_COLUMNS, "bucket", INPUT_INDEX_COLUMN, *(o.name for o in POSITION_OUTPUTS))
    taken = [c for c in names if c in own]
    if taken:
        raise ValueError(f"keep_columns: {taken[0]!r} is a column of the result "
                         f"({', '.join(own)}); got {names!r}")
    bad = [c for c in names if c in TEXT_COLUMNS]
    if bad:
        raise ValueError(f"keep_columns: {bad[0]!r} is a name daskwp reserves; got {names!r}")
    return names


def source_frame(texts, kept):
    """The accessor's source: ``texts`` (a Series, or a frame of two text columns) alone
    when ``kept`` is None, else one frame of the text columns (renamed
    :data:`TEXT_COLUMNS`) followed by the ``kept`` columns (pandas, cudf or Dask alike)."""
    if kept is None:
        return texts
    if getattr(texts, "ndim", 1) == 1:
        frame = texts.rename(TEXT_COLUMNS[0]).to_frame()
    else:
        frame = texts.rename(columns=dict(zip(texts.columns, TEXT_COLUMNS)))
    return frame.assign(**{c: kept[c] for c in kept.columns})


class WordPieceResult(ResultMapping):
    """Tokenized windows of a pandas (or cudf) Series, computed eagerly; also a mapping of
    its outputs (``r["input_ids"]``, ``keys()``, ``in``, ``items()``).

    The same attributes as the lazy Dask result: ``metadata`` (frame ``logID, start,
    stop``), ``input_ids`` and ``attention_mask`` (arrays rows x max_length: numpy, or CuPy
    for cudf), each per-position output asked for (``token_type_ids``, ``sequence_ids``,
    ...: rows x max_length [x k]), ``to_frame()``, ``to_parquet(path)`` and
    ``stitch(values)``.
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

    @property
    def position_outputs(self) -> list[str]:
        """The per-position outputs this result carries (columns of :meth:`to_frame`)."""
        kept = self.options.get("keep_columns") or ()
        return position_outputs_of(c for c in self._frame.columns
                                   if c not in ("logID", "start", "stop") and c not in kept)

    def output(self, key: str):
        """``r[key]``: the attribute for rows padded to max_length; otherwise the output as
        the tokenizer gives it for this padding (:func:`unpadded_block`: RaggedRows, one
        matrix per bucket, or the ``longest`` matrix)."""
        if key == "metadata" or is_fixed_width(self.options):
            return getattr(self, key)
        return unpadded_block(self._frame, key, self.options["padding"])

    def __getattr__(self, name):
        if not name.startswith("_") and name in self.position_outputs:
            require_fixed_width(self.options, name)
            return position_block(self._frame, self.max_length, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def to_frame(self):
        """``logID, start, stop, input_ids, attention_mask, window`` (list columns), then one
        list column per per-position output asked for (docs/design.md §3.3), then
        ``input_index`` (the index label of the row's document in the input Series) and the
        ``keep_columns`` (their values in every row of the document), which join the rows
        back to their source: ``frame.merge(df, left_on="input_index", right_index=True)``."""
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
            return stitch_frame(values, value_column(values, column))
        if isinstance(values, list) and self.options["padding"] == "bucket":
            # r["input_ids"] of buckets: one matrix per width, back to row order
            values = rows_of_buckets(values, self._frame["bucket"])
        return stitch_rows(values, self.metadata, column or "values")

    def __len__(self) -> int:
        return len(self._frame)

    def __repr__(self) -> str:
        return f"WordPieceResult(rows={len(self)}, max_length={self.max_length})"


def _pair_frame(texts, text_pair):
    """The two columns (text, text_pair) as one frame, row for row (the partition tasks read
    a two-column partition as sentence pairs)."""
    pair = text_pair.reset_index(drop=True)
    pair.index = texts.index
    return texts.rename("text").to_frame().assign(text_pair=pair)


def token_count_part(series, tokenizer):
    """The partition task of ``count()``: its :class:`~daskwp.core.lengths.TokenCounts`."""
    from ..core.lengths import count_tokens
    from ..core.strings import to_arrow
    from ..distributed.state import cached_tokenizer

    tok = cached_tokenizer(tokenizer)
    if is_cudf(series):
        return count_tokens(tok, series, int(series.str.byte_count().sum()))
    import pyarrow.compute as pc
    texts = to_arrow(series)
    return count_tokens(tok, texts, int(pc.sum(pc.binary_length(texts)).as_py() or 0))


class WordPieceAccessor:
    """``series.wordpiece`` on pandas and cudf Series (eager)."""

    def __init__(self, series):
        self._series = series

    def tokenize(self, vocab=None, *, lowercase=None, max_length=None, stride=None,
                 truncation=None, add_special_tokens=None, padding=None,
                 bucket_widths=None, text_pair=None, return_overflowing_tokens=None,
                 keep_columns=None, **tokenizer_options) -> WordPieceResult:
        """Tokenize the column into windows (see :class:`WordPieceResult`).

        ``keep_columns``: input columns copied into every row of their document (as for
        batch jobs), given as a DataFrame (or Series) with one row per row of the Series,
        matched by position: ``df["text"].wordpiece.tokenize(keep_columns=df[["id"]])``
        (a pandas Series does not know the frame it came from; the Dask accessor also takes
        names). ``to_frame()`` always carries ``input_index``, the Series' index label of
        each row's document.

        Parameters left at None come from ``dask.config`` (``daskwp.<name>``, defaults in
        ``core/options.py``). ``vocab``: a WordPieceTokenizer, Vocabulary, path or model
        folder; other keywords (``strip_accents``, ``clean_text``, ``handle_chinese_chars``,
        ``max_input_chars_per_word``) go to :class:`WordPieceTokenizer`. ``text_pair``: a
        Series of second sequences, one per row (sentence pairs, docs/design.md §2.8);
        ``return_overflowing_tokens`` and the per-position outputs (``return_token_type_ids``,
        ``return_sequence_ids``, ...: any option of ``tok(...)``, given as keywords) as for
        :meth:`WordPieceTokenizer.__call__`; each output becomes a list column of
        :meth:`WordPieceResult.to_frame` and an attribute of the result.
        """
        check_text_dtype(self._series.dtype, f"Series {self._series.name!r}")
        tok, options = resolve_call(vocab, lowercase, max_length, stride, truncation,
                                    add_special_tokens, padding, bucket_widths,
                                    return_overflowing_tokens, tokenizer_options)
        texts = self._series
        if text_pair is not None:
            check_text_dtype(text_pair.dtype, f"text_pair Series {text_pair.name!r}")
            if len(text_pair) != len(texts):
                raise ValueError(f"text_pair must have one row per row of the Series: got "
                                 f"{len(texts)} rows and {len(text_pair)}")
            texts = _pair_frame(texts, text_pair)
        kept = _kept_frame(self._series, keep_columns)
        options["keep_columns"] = [] if kept is None else list(kept.columns)
        frame = tokenize_partition(source_frame(texts, kept), tok, options)
        return WordPieceResult(frame, options, tok)

    def count(self, vocab=None, *, lowercase=None, **tokenizer_options):
        """Count the Series' WordPiece tokens now: a
        :class:`~daskwp.core.lengths.TokenCounts` (documents, tokens, ``[UNK]`` rate, the
        distribution of document lengths), as the Dask accessor's ``count()``."""
        check_text_dtype(self._series.dtype, f"Series {self._series.name!r}")
        return token_count_part(self._series,
                                resolve_tokenizer(vocab, lowercase, **tokenizer_options))


def _kept_frame(series, keep_columns):
    """``keep_columns`` of the eager accessor as a frame aligned with ``series`` row for
    row, or None."""
    if keep_columns is None:
        return None
    if not hasattr(keep_columns, "ndim") or keep_columns.ndim not in (1, 2):
        check_kept_names(keep_columns)   # a valid list of names: say why names do not do
        raise TypeError(f"keep_columns of a pandas or cudf Series must be the columns "
                        f"themselves (a DataFrame or Series with one row per row of the "
                        f"Series, e.g. df[{keep_columns!r}]): the Series does not know the "
                        f"frame it came from; got {keep_columns!r}")
    kept = keep_columns.to_frame() if keep_columns.ndim == 1 else keep_columns
    check_kept_names(list(kept.columns))
    if len(kept) != len(series):
        raise ValueError(f"keep_columns must have one row per row of the Series: got "
                         f"{len(series)} rows and {len(kept)}")
    kept = kept.reset_index(drop=True)
    kept.index = series.index
    return kept
