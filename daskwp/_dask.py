"""Dask glue: the lazy ``.wordpiece`` result, the global logID offset pass, and the tokenizer
that travels once per worker.

No tokenization logic lives here: every task calls a partition-level function of
``daskwp.accessor``. Two small dask-expr expressions build the graph:

``_Tokenize(frame, tokenizer, options)``
    Task i runs ``tokenize_partition(frame_i, tokenizer, options, partition=i)``. The
    tokenizer is ONE graph key, ``daskwp-tokenizer-<token>`` (the token is the vocabulary's
    content hash plus the settings), that every task depends on: the compiled vocabulary
    travels to the scheduler once and to each worker once, never inside a task, and
    ``accessor.cached_tokenizer`` keeps one instance per vocabulary in each worker process
    (where the GPU launcher's device-resident vocabulary lives).

``_GlobalLogID(frame, source)``
    Adds the global offset to the logIDs of partition i: the number of input rows in
    partitions 0..i-1. The counts are ``len`` of the SOURCE partitions (the input is read
    once: the same source tasks feed the tokenizer and the counts). Prefix sums come from a
    binary tree of partial sums over aligned ranges of partitions (a Fenwick-style
    decomposition): the task of partition i depends on at most log2(i) + 1 tree nodes, the
    tree adds about n tasks in all, and its depth is log2(n), so nothing is sequential in n
    and no shuffle happens.

Culling: ``res.metadata.partitions[3]`` rewrites (at simplify time, like dask's own
``Partitions`` push-down) into ``_SelectedLogID``: partition 3 of the tokenized frame plus the
prefix ``source.partitions[0:3]``, whose total row count is the offset. So the result keeps
its global logIDs (``partition_info["number"]`` would be renumbered to 0 there), only
partition 3 is tokenized and only partitions 0..2 are read for the count. The offset is
the count of the whole prefix, so it stays right when the optimizer later merges the
prefix's Parquet partitions (dask-expr's IO fusion). Selecting k partitions reads each of
their prefixes (partitions may be read more than once then).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from dask._collections import new_collection
from dask._task_spec import DataNode, Task, TaskRef
from dask.base import tokenize
from dask.dataframe.dask_expr._expr import Blockwise, Expr, Partitions
from dask.dataframe.dispatch import make_meta, meta_nonempty

from . import accessor as _acc

__all__ = ["DaskWordPieceAccessor", "DaskWordPieceResult", "register_dask_accessor"]


# -- expressions --------------------------------------------------------------------------

def _positions(expr) -> tuple:
    """Original partition numbers of ``expr``'s partitions (for messages); when the
    optimizer has merged partitions (Parquet fusion), the current numbers."""
    pos = expr.operand("positions")
    n = expr.frame.npartitions
    return tuple(range(n)) if pos is None or len(pos) != n else tuple(pos)


def _sample_partition(meta):
    """A two-document partition of the same type and dtype as ``meta`` (dask's own
    ``meta_nonempty`` fills object columns with ``object()``, which is no text)."""
    try:
        return meta._constructor(["daskwp sample text", None], dtype=meta.dtype,
                                 name=meta.name)
    except Exception:
        return meta_nonempty(meta)


class _Tokenize(Expr):
    """Tokenize every partition of ``frame`` (a text Series) into a partition frame."""

    _parameters = ["frame", "tokenizer", "options", "positions"]
    _defaults = {"positions": None}

    @functools.cached_property
    def _name(self):
        return f"daskwp-tokenize-{self.deterministic_token}"

    @functools.cached_property
    def _meta(self):
        # The partition function itself, run on a two-row sample partition.
        sample = _sample_partition(self.frame._meta)
        return make_meta(_acc.tokenize_partition(sample, self.tokenizer, self.options)
                         .iloc[:0])

    def _divisions(self):
        return (None,) * (self.frame.npartitions + 1)

    @property
    def tokenizer_key(self) -> str:
        return f"daskwp-tokenizer-{tokenize(self.tokenizer)}"

    def _layer(self) -> dict:
        tok_key = self.tokenizer_key
        dsk = {tok_key: DataNode(tok_key, self.tokenizer)}
        opts = dict(self.options)
        for k, p in enumerate(_positions(self)):
            key = (self._name, k)
            dsk[key] = Task(key, _acc.tokenize_partition, TaskRef((self.frame._name, k)),
                            TaskRef(tok_key), opts, p)
        return dsk

    def _simplify_up(self, parent, dependents):
        if isinstance(parent, Partitions):
            parts = list(parent.partitions)
            pos = _positions(self)
            return _Tokenize(Partitions(self.frame, parts), self.tokenizer, self.options,
                             tuple(pos[p] for p in parts))


def _prefix_count_refs(dsk: dict, source, p: int) -> list:
    """TaskRefs whose sum is the number of rows in partitions 0..p-1 of ``source``, adding
    to ``dsk`` the nodes of a binary tree of partial counts over aligned ranges (a
    Fenwick-style decomposition: at most log2(p) + 1 refs, nodes shared between prefixes)."""
    name = f"daskwp-count-{tokenize(source._name)}"

    def node(level: int, j: int):
        # Rows in source partitions [j * 2**level, (j + 1) * 2**level).
        key = (name, level, j)
        if key not in dsk:
            if level == 0:
                dsk[key] = Task(key, _acc.count_documents, TaskRef((source._name, j)))
            else:
                a, b = node(level - 1, 2 * j), node(level - 1, 2 * j + 1)
                dsk[key] = Task(key, _acc.add_counts, TaskRef(a), TaskRef(b))
        return key

    refs, base = [], 0
    for level in reversed(range(p.bit_length())):
        if p >> level & 1:
            refs.append(TaskRef(node(level, base >> level)))
            base += 1 << level
    return refs


class _GlobalLogID(Expr):
    """``frame`` (partition frames with 0-based logIDs, partitioned as ``source``) with
    global logIDs: partition i is offset by the rows of ``source`` partitions 0..i-1.

    ``frame`` and ``source`` may be repartitioned together by the optimizer (dask-expr fuses
    small Parquet partitions, identically for both): the offsets follow.
    """

    _parameters = ["frame", "source"]

    @functools.cached_property
    def _name(self):
        return f"daskwp-logid-{self.deterministic_token}"

    @functools.cached_property
    def _meta(self):
        return self.frame._meta

    def _divisions(self):
        return (None,) * (self.frame.npartitions + 1)

    def _layer(self) -> dict:
        dsk: dict = {}
        for i in range(self.frame.npartitions):
            refs = _prefix_count_refs(dsk, self.source, i)
            key = (self._name, i)
            dsk[key] = Task(key, _acc.add_logid_offset, TaskRef((self.frame._name, i)), *refs)
        return dsk

    def _simplify_up(self, parent, dependents):
        if isinstance(parent, Partitions):
            pieces = []
            for p in parent.partitions:
                prefix = Partitions(self.source, list(range(p))) if p else None
                pieces += [Partitions(self.frame, [p]), prefix]
            return _SelectedLogID(tuple(parent.partitions), *pieces)


class _SelectedLogID(Expr):
    """Selected partitions of a ``_GlobalLogID`` (what culling turns it into).

    Operands after ``positions``: for each selected ORIGINAL partition p, the one-partition
    frame of p and the prefix ``source.partitions[0:p]`` (None for p = 0). The offset of p is
    the row count of the whole prefix, however the optimizer partitions it, so a cull keeps
    the global logIDs; only partitions 0..p-1 are read for it, and only p is tokenized.
    """

    _parameters = ["positions"]

    @functools.cached_property
    def _name(self):
        return f"daskwp-logid-{self.deterministic_token}"

    @property
    def _pieces(self):
        ops = self.operands[len(self._parameters):]
        return list(zip(ops[0::2], ops[1::2]))

    @functools.cached_property
    def _meta(self):
        return self._pieces[0][0]._meta

    def _divisions(self):
        return (None,) * (len(self.operand("positions")) + 1)

    def _layer(self) -> dict:
        dsk: dict = {}
        for k, (frame, prefix) in enumerate(self._pieces):
            refs = [] if prefix is None else \
                _prefix_count_refs(dsk, prefix, prefix.npartitions)
            key = (self._name, k)
            dsk[key] = Task(key, _acc.add_logid_offset, TaskRef((frame._name, 0)), *refs)
        return dsk

    def _simplify_up(self, parent, dependents):
        if isinstance(parent, Partitions):
            pieces, positions = self._pieces, self.operand("positions")
            chosen = list(parent.partitions)
            ops = [op for k in chosen for op in pieces[k]]
            return _SelectedLogID(tuple(positions[k] for k in chosen), *ops)


def _partition_local(expr) -> bool:
    """Whether ``expr``'s partitions are still the tokenizer's (only partition-wise steps
    since ``_GlobalLogID``), so that every document's rows are in one partition."""
    seen, stack = set(), [expr]
    found = False
    while stack:
        e = stack.pop()
        if e._name in seen:
            continue
        seen.add(e._name)
        if isinstance(e, (_GlobalLogID, _SelectedLogID, _Tokenize)):
            found = True
            continue
        if isinstance(e, (Blockwise, Partitions)):
            stack.extend(d for d in e.dependencies() if d.ndim > 0)
            continue
        return False
    return found


# -- lazy result --------------------------------------------------------------------------

class DaskWordPieceResult:
    """Tokenized windows of a Dask Series, lazy.

    Attributes
    ----------
    metadata : dask DataFrame
        ``logID`` (global: the document's row position in the input, across partitions),
        ``start``, ``stop`` (inclusive), int64.
    input_ids, attention_mask : dask Array
        int32, shape (rows, max_length); one block per input partition (row counts unknown
        until computed: ``arr.compute_chunk_sizes()``).
    tokenizer : WordPieceTokenizer
    options : dict
        The resolved window options.

    Notes
    -----
    ``to_frame()`` / ``to_parquet()`` carry ids, mask and metadata in one frame, so every
    partition is tokenized once. Computing ``metadata`` and ``input_ids`` separately runs the
    tokenizer once for each.
    """

    def __init__(self, series, tokenizer, options: dict):
        self.tokenizer = tokenizer
        self.options = dict(options)
        self._source = series.expr
        self._tokenized = _Tokenize(self._source, tokenizer, self.options)

    @property
    def npartitions(self) -> int:
        return self._source.npartitions

    @property
    def max_length(self) -> int:
        return self.options["max_length"]

    @property
    def metadata(self):
        cols = list(_acc.METADATA_COLUMNS)
        return new_collection(_GlobalLogID(self._tokenized[cols], self._source))

    def _block_array(self, func, what: str):
        _acc.require_fixed_width(self.options, what)
        width = self.max_length
        xp = np
        if _acc._is_cudf(self._tokenized._meta):
            import cupy as xp  # blocks stay on the GPU
        return new_collection(self._tokenized).map_partitions(
            func, width, meta=xp.empty((0, width), dtype=np.int32))

    @property
    def input_ids(self):
        return self._block_array(_acc.input_ids_block, "input_ids")

    @property
    def attention_mask(self):
        return self._block_array(_acc.attention_mask_block, "attention_mask")

    def to_frame(self):
        """dask DataFrame ``logID, start, stop, input_ids, attention_mask, window``:
        Arrow ``list<int32>`` columns that survive a Parquet round trip; ``window`` numbers
        the rows of each document (0, 1, ...)."""
        return new_collection(_GlobalLogID(self._tokenized, self._source))

    def to_parquet(self, path, **kwargs):
        """``to_frame().to_parquet(path, write_index=False, **kwargs)``: each partition is
        tokenized once, ids and metadata are written together.

        The Parquet columns are ``list<int32>``. Read them back as such with
        ``dd.read_parquet(path, dtype_backend="pyarrow")`` (or ``pd.read_parquet``; without
        ``dtype_backend`` they come back as object columns of numpy arrays). The pandas
        metadata is written so that any pandas can read it (see
        ``accessor.portable_pandas_metadata``): writing ``to_frame()`` with plain
        ``to_parquet`` gives files that ``pd.read_parquet`` currently fails to read
        (pandas-dev/pandas#57411).
        """
        kwargs.setdefault("write_index", False)
        frame = self.to_frame()
        if "engine" not in kwargs and isinstance(frame._meta, pd.DataFrame):
            kwargs["engine"] = _parquet_engine()
        return frame.to_parquet(path, **kwargs)

    def stitch(self, values, column: str | None = None, how: str = "auto"):
        """Per-row values back to one row per document (logID), cluster-wide.

        Parameters
        ----------
        values : dask Array or dask DataFrame
            An Array of shape (rows, max_length, ...) with the same row blocks as
            ``input_ids`` (for example a model's per-token output computed block-wise from
            it), or a DataFrame carrying ``logID, start, stop`` (and ``window``, which orders
            a document's rows) and a list column of per-token values.
        column : str, optional
            The DataFrame's value column; default: its one column besides the metadata.
            For an Array, the name of the output column (default ``"values"``).
        how : {"auto", "partition", "groupby"}
            "partition" stitches each partition on its own (valid while every document's
            rows are still in the partition that tokenization put them in); "groupby"
            shuffles on logID first (after a repartition or any reordering). "auto" picks
            "partition" for Arrays and for frames derived from this result by
            partition-wise steps only, else "groupby".

        Returns
        -------
        dask DataFrame ``logID, <column>``: one row per logID, the owned slices
        ``values[r, start:stop+1]`` of its rows joined in order (a list column). Sorted by
        logID within each partition; partitions are in logID order unless "groupby" ran.
        """
        if how not in ("auto", "partition", "groupby"):
            raise ValueError(f"how must be 'auto', 'partition' or 'groupby', got {how!r}")
        if hasattr(values, "columns"):
            return self._stitch_frame(values, column, how)
        return self._stitch_array(values, column or "values", how)

    def _stitch_array(self, values, name: str, how: str):
        import dask
        import dask.dataframe as dd

        if how == "groupby":
            raise ValueError("how='groupby' needs a DataFrame carrying logID, start, stop; an "
                             "Array is stitched partition by partition")
        if values.ndim < 2:
            raise ValueError(f"values must have shape (rows, max_length, ...), got ndim "
                             f"{values.ndim}")
        if values.numblocks[0] != self.npartitions or any(n != 1 for n in values.numblocks[1:]):
            raise ValueError(
                f"values must have one block per partition ({self.npartitions}) along the "
                f"rows and one along every other axis; got blocks {values.numblocks} "
                f"(rechunk with values.rechunk({{1: -1}}), or stitch a DataFrame)")
        meta = _acc.stitch_rows(np.empty((0,) + values.shape[1:], dtype=values.dtype),
                                _acc.select_metadata(self._tokenized._meta), name)
        blocks = values.to_delayed().reshape(-1)
        parts = self.metadata.to_delayed()
        stitched = [dask.delayed(_acc.stitch_rows, pure=True)(b, m, name)
                    for b, m in zip(blocks, parts)]
        return dd.from_delayed(stitched, meta=meta, verify_meta=False,
                               prefix="daskwp-stitch")

    def _stitch_frame(self, values, column, how: str):
        column = _acc._value_column(values._meta, column)
        meta = _acc.stitch_frame(values._meta, column)
        if how == "auto":
            how = "partition" if _partition_local(values.expr) else "groupby"
        if how == "groupby":
            # The task-based shuffle: P2P round-trips partitions through Arrow with pandas
            # metadata, which pandas cannot read back for list columns (pandas#57411).
            values = values.shuffle(on="logID", shuffle_method="tasks")
        return values.map_partitions(_acc.stitch_frame, column, meta=meta)

    def __repr__(self) -> str:
        return (f"DaskWordPieceResult(npartitions={self.npartitions}, "
                f"max_length={self.max_length}, tokenizer={self.tokenizer!r})")


@functools.cache
def _parquet_engine():
    """dask's pyarrow Parquet engine, writing pandas metadata that pandas can read back."""
    from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

    class PortableArrowEngine(ArrowDatasetEngine):
        @classmethod
        def _pandas_to_arrow_table(cls, df, preserve_index=False, schema=None):
            table = super()._pandas_to_arrow_table(df, preserve_index=preserve_index,
                                                   schema=schema)
            return _acc.portable_pandas_metadata(table)

    return PortableArrowEngine


# -- accessor -----------------------------------------------------------------------------

class DaskWordPieceAccessor:
    """``ddf["text"].wordpiece`` on Dask (and dask_cudf) Series (lazy)."""

    def __init__(self, series):
        self._series = series

    def tokenize(self, vocab=None, *, lowercase=None, max_length=None, stride=None,
                 truncation=None, add_special_tokens=None, padding=None,
                 **tokenizer_options) -> DaskWordPieceResult:
        """Tokenize the column into windows with global logIDs (see
        :class:`DaskWordPieceResult`). Nothing is computed.

        Parameters left at None come from ``dask.config`` (``daskwp.<name>``, defaults in
        ``daskwp/config.yaml``). ``vocab``: a WordPieceTokenizer, Vocabulary, path or model
        folder; other keywords (``strip_accents``, ``clean_text``, ``handle_chinese_chars``,
        ``max_input_chars_per_word``) go to :class:`WordPieceTokenizer`.
        """
        _acc.check_text_dtype(self._series._meta.dtype, f"Series {self._series.name!r}")
        tok = _acc.resolve_tokenizer(vocab, lowercase, **tokenizer_options)
        options = _acc.resolve_window_options(max_length, stride, truncation,
                                              add_special_tokens, padding)
        result = DaskWordPieceResult(self._series, tok, options)
        result._tokenized._meta  # validates the options now, on a two-row sample
        return result


def register_dask_accessor() -> None:
    from dask.dataframe.extensions import register_series_accessor

    register_series_accessor("wordpiece")(DaskWordPieceAccessor)
