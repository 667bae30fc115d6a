"""The lazy ``.wordpiece`` accessor of Dask (and dask_cudf) Series.

``ddf["text"].wordpiece.tokenize(...)`` returns a :class:`DaskWordPieceResult`: nothing is
computed until asked. Its graph comes from :mod:`daskwp.distributed.graph` (the partition
task and the global logID offset pass); the tokenizer, with its compiled vocabulary, is one
graph key shipped once per worker.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from ..core.options import DEFAULT_COMPRESSION, check
from ..core.outputs import ResultMapping
from ..distributed.dask_compat import Projection, Scalar, new_collection
from ..distributed.graph import GlobalLogID, GlobalTokenize, Tokenize, WriteParts, \
    partition_local
from .parquet_source import direct_text_source
from .eager import (WordPieceResult, check_kept_names, resolve_call, source_frame,
                    token_count_part)
from ..frames.partition import (METADATA_COLUMNS, attention_mask_block, check_text_dtype,
                                input_ids_block, is_cudf, is_fixed_width, metadata_block,
                                rows_of_buckets, position_block, require_fixed_width,
                                select_metadata)
from ..frames.part_writer import portable_pandas_metadata
from ..frames.stitching import stitch_frame, stitch_rows, value_column
from ..frames.schema import position_output, position_outputs_of

__all__ = ["DaskWordPieceAccessor", "DaskWordPieceResult", "PartsWrite",
           "compute_lending_idle_threads", "register_dask_accessor"]


# -- lazy result --------------------------------------------------------------------------

class DaskWordPieceResult(ResultMapping):
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
        self._tokenized = Tokenize(self._source, tokenizer, self.options)

    @property
    def npartitions(self) -> int:
        return self._source.npartitions

    @property
    def max_length(self) -> int:
        return self.options["max_length"]

    @property
    def metadata(self):
        cols = list(METADATA_COLUMNS)
        return new_collection(GlobalLogID(self._tokenized[cols], self._source))

    def _frame_array(self, func, *args, shape=(), dtype=np.int32):
        """``func(partition, *args)`` of every partition of :meth:`to_frame` as a dask
        Array with one block per partition. Every array of this result (ids, mask, outputs
        and the metadata :meth:`stitch` pairs them with) comes from this one frame, so the
        optimizer partitions them all alike (dask-expr fuses small Parquet partitions when
        the graph is built)."""
        xp = np
        if is_cudf(self._tokenized._meta):
            import cupy as xp  # blocks stay on the GPU
        return self.to_frame().map_partitions(func, *args,
                                              meta=xp.empty((0,) + shape, dtype=dtype))

    def _block_array(self, func, what: str, dtype=np.int32, tail=()):
        require_fixed_width(self.options, what)
        width = self.max_length
        return self._frame_array(func, width, shape=(width,) + tuple(tail), dtype=dtype)

    @property
    def position_outputs(self) -> list[str]:
        """The per-position outputs this result carries (columns of :meth:`to_frame`)."""
        kept = self.options.get("keep_columns") or ()
        return position_outputs_of(c for c in self._tokenized._meta.columns
                                   if c not in METADATA_COLUMNS and c not in kept)

    def __getattr__(self, name):
        """A per-position output asked for (``token_type_ids``, ``sequence_ids``, ...) as a
        dask Array rows x max_length [x k], one block per partition."""
        if name.startswith("_") or name not in self.position_outputs:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        col = self._tokenized._meta[name]
        try:
            dtype = np.dtype(col.dtype.pyarrow_dtype.value_type.to_pandas_dtype())
        except AttributeError:   # cudf: a list dtype
            dtype = np.dtype(col.dtype.element_type)
        per = position_output(name).values
        return self._block_array(functools.partial(position_block, column=name), name,
                                 dtype, (per,) if per != 1 else ())

    def output(self, key: str):
        """``r[key]``: the dask Array for rows padded to max_length; otherwise the list
        column of :meth:`to_frame` (a dask Series, one list per row: rows of other widths
        make no dask Array), whose ``compute()`` is the eager result's ``r[key]`` rows."""
        if key == "metadata" or is_fixed_width(self.options):
            return getattr(self, key)
        return self.to_frame()[key]

    @property
    def input_ids(self):
        return self._block_array(input_ids_block, "input_ids")

    @property
    def attention_mask(self):
        return self._block_array(attention_mask_block, "attention_mask")

    def to_frame(self):
        """dask DataFrame ``logID, start, stop, input_ids, attention_mask, window``:
        Arrow ``list<int32>`` columns that survive a Parquet round trip; ``window`` numbers
        the rows of each document (0, 1, ...). Then one list column per per-position output
        asked for, then ``input_index``, the index label of the row's document in the input
        Series, and the ``keep_columns`` (their values in every row of the document).

        Joining rows back to their source: logIDs are positions in the Series tokenized
        (after a filter, in the filtered frame), so join on a kept id column
        (``tokenize(keep_columns=["id"])``, then ``frame.merge(ddf, on="id")``) or, where
        the input's index is unique, on ``input_index`` (``frame.merge(ddf,
        left_on="input_index", right_index=True)``). ``dd.read_parquet`` without an index
        numbers each partition's rows from 0, so its ``input_index`` is not unique.

        Dask operations: ``groupby``, ``set_index`` and task-based ``shuffle`` / ``merge``
        work on it. dask's P2P shuffle (the default ``shuffle`` / ``merge`` method on a
        distributed cluster) cannot carry Arrow list columns today: it round-trips
        partitions through Arrow with pandas metadata that pandas cannot read back
        (pandas-dev/pandas#57411), and fails with "data type 'list<item: int32>[pyarrow]'
        not understood". Pass ``shuffle_method="tasks"``, or set
        ``dask.config.set({"dataframe.shuffle.method": "tasks"})``.
        """
        return new_collection(GlobalLogID(self._tokenized, self._source))

    def compute(self, **kwargs):
        """Tokenize every partition once and return the eager result
        (:class:`~daskwp.accessors.eager.WordPieceResult`: ``metadata``, ``input_ids``,
        ``attention_mask``, ``to_frame()``, ``stitch``), with global logIDs.

        ``dask.compute(res.metadata, res.input_ids)`` also tokenizes once, but dask warns
        there about computing expression-backed frames with graph-backed arrays together;
        this avoids both. ``kwargs`` go to ``to_frame().compute``.
        """
        return WordPieceResult(self.to_frame().compute(**kwargs), self.options,
                               self.tokenizer)

    def to_parquet(self, path, *, compression=DEFAULT_COMPRESSION, compute: bool = True,
                   overwrite: bool = False, parquet_compat: bool = False,
                   pause_worker_profiler: bool | None = None, **kwargs):
        """Write the tokenized partitions to ``path``, one Parquet part per partition
        (``part.<i>.parquet``), with daskwp's part writer: the layout of ``daskwp tokenize``
        (docs/batch-jobs.md "Output": global logIDs, ``input_ids`` as ``list<int32>``, the
        mask stored for padded rows only, the vocabulary's ``pad_id`` in each part's
        ``daskwp`` metadata so ``daskwp.read_tokenized(path)`` pads ragged rows without the
        tokenizer). Each partition is tokenized and written in one task, atomically (a part
        exists complete or not at all, so a killed worker loses nothing); no frame goes
        through pandas.

        Read it back with ``daskwp.read_tokenized(path)``, ``dd.read_parquet(path,
        dtype_backend="pyarrow")`` (list<int32> columns) or ``pd.read_parquet(path)``
        (object columns of numpy arrays); the pandas metadata is written so that any pandas
        reads it (``portable_pandas_metadata``, pandas-dev/pandas#57411).

        The parts also carry ``input_index`` and the ``keep_columns``, as :meth:`to_frame`.

        ``compression``: as for batch jobs (default ``lz4``; ``zstd`` for smaller parts,
        ``snappy``, ``none``, ...).
        ``path`` may be an fsspec URL (``s3://bucket/out``; ``storage_options``: the options
        of its filesystem, credentials otherwise from its usual sources): each part is
        uploaded complete under its name (docs/batch-jobs.md "Object storage"); the bucket
        must exist.
        ``parquet_compat``: list values PLAIN instead of BYTE_STREAM_SPLIT, parts that
        fastparquet and older Spark/Hive read (the batch jobs' option).
        ``overwrite``: remove ``path`` first. ``compute=False`` returns the lazy result
        (:class:`PartsWrite`: its ``.compute()`` writes, with the profiler paused as here,
        and returns the summed statistics).
        ``pause_worker_profiler``: on a distributed cluster, its workers' statistical
        profiler is paused while the parts are written and restored after (default: the
        ``daskwp.pause_worker_profiler`` config, true; the batch jobs' option). Other keywords
        (``write_metadata_file``, ``name_function``, ``partition_on``, ``engine``, ...)
        and dask_cudf frames go through ``dask.dataframe.to_parquet`` of
        :meth:`to_frame` instead.
        """
        import os
        from ..distributed.profiler import computing_paused
        pause = _pause_profiler(pause_worker_profiler)
        if kwargs.pop("write_index", False):
            raise ValueError("to_parquet writes no index: the rows are numbered by logID and "
                             "window")
        from ..frames import storage
        frame = self.to_frame()
        storage_options = kwargs.pop("storage_options", None)
        ours = isinstance(path, (str, os.PathLike)) and (
            "://" not in str(path) or storage.is_url(str(path)))
        if kwargs or not ours or not isinstance(frame._meta, pd.DataFrame):
            kwargs.setdefault("engine", _parquet_engine())
            if storage_options is not None:
                kwargs["storage_options"] = storage_options
            with computing_paused(frame, pause and compute):
                return frame.to_parquet(path, write_index=False, compression=compression,
                                        compute=compute, overwrite=overwrite, **kwargs)
        write = {"path": storage.local_path(os.fspath(path)), "compression": compression,
                 "parquet_compat": check("parquet_compat", parquet_compat)}
        if storage.is_url(write["path"]):
            # an object store: each part uploaded complete (one put or a completed
            # multipart upload); the bucket must exist
            write["path"] = write["path"].rstrip("/")
            write["storage_options"] = check("storage_options", storage_options) or {}
            folder = storage.Folder(write["path"], write["storage_options"])
            try:
                if overwrite:
                    for name in folder.listdir():
                        folder.remove(name)
                folder.check_writable()
            except storage.StorageError as e:
                raise OSError(str(e)) from None
        else:
            path = write["path"] = os.path.abspath(write["path"])
            if overwrite and os.path.isdir(path):
                import shutil
                shutil.rmtree(path)
            os.makedirs(path, exist_ok=True)
        # a plain dd.read_parquet(...)["text"] is read by daskwp straight into Arrow
        # (parquet_source: the same partitions and rows; anything else: dask's read)
        source = direct_text_source(self._source)
        parts = GlobalTokenize(source, self.tokenizer, self.options, None, None, None,
                               None, write)
        out = PartsWrite(WriteParts(parts), pause)
        if not compute:
            return out
        out.compute()
        return None

    def stitch(self, values, column: str | None = None, how: str = "auto"):
        """Per-row values back to one row per document (logID), cluster-wide.

        Parameters
        ----------
        values : dask Array or dask DataFrame
            An Array of shape (rows, max_length, ...): one of this result's arrays
            (``input_ids``, ``attention_mask``, a per-position output) or anything computed
            from them block by block (a model's per-token output, ``map_blocks``,
            elementwise operations), whatever the input's partitioning (several Parquet
            files, which dask fuses into fewer partitions; filtered or repartitioned
            frames); or an Array of known row sizes blocked otherwise (after
            ``compute_chunk_sizes()``; stitch then computes the metadata's block sizes to
            align them), or a computed (NumPy) array of all rows in order. Or a DataFrame
            (Dask, or a computed pandas one) carrying ``logID, start, stop`` (and
            ``window``, which orders a document's rows) and a list column of per-token
            values. For rows not padded to max_length (``padding`` False, "bucket",
            "longest"): ``res["input_ids"]`` or a ``to_frame()`` list column (a dask
            Series), or what ``res.compute()[name]`` gives (RaggedRows, one matrix per
            bucket).
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
        import dask.array as da
        import dask.dataframe as dd

        if how not in ("auto", "partition", "groupby"):
            raise ValueError(f"how must be 'auto', 'partition' or 'groupby', got {how!r}")
        values, column = self._rows_as_frame(values, column)
        if isinstance(values, pd.DataFrame):   # computed: one partition
            values = dd.from_pandas(values, npartitions=1, sort=False)
        elif not hasattr(values, "dask") and getattr(values, "ndim", 0) >= 2 and \
                hasattr(values, "shape"):     # a computed array: rows of known sizes
            values = da.from_array(values, chunks=(-1,) * values.ndim)
        if hasattr(values, "columns"):
            return self._stitch_frame(values, column, how)
        return self._stitch_array(values, column or "values", how)

    def _rows_as_frame(self, values, column):
        """Values of rows of other widths than max_length (``padding`` False, "bucket",
        "longest"), as this result gives them, in a frame with the rows' metadata: a list
        column (``res["input_ids"]``, ``res.to_frame()[name]``: a dask Series of this
        result's rows), or what ``res.compute()[name]`` gives (RaggedRows, one matrix per
        bucket). Anything else is returned as it is."""
        from ..core.ragged import RaggedRows
        keys = ["logID", "start", "stop", "window"]
        if isinstance(values, RaggedRows) or (
                isinstance(values, list) and self.options["padding"] == "bucket"):
            frame = self.to_frame()[keys + (["bucket"] if isinstance(values, list) else [])]
            frame = frame.compute().reset_index(drop=True)
            if not isinstance(values, RaggedRows):   # one matrix per bucket: row order
                values = rows_of_buckets(values, frame.pop("bucket").to_numpy())
            rows = [values[i] for i in range(len(values))]
            if len(rows) != len(frame):
                raise ValueError(f"values hold {len(rows)} rows; this result has "
                                 f"{len(frame)}")
            name = column or "values"
            import pyarrow as pa   # a list column, as to_frame() gives (not object)
            column_values = pd.arrays.ArrowExtensionArray(pa.array(rows))
            return frame.assign(**{name: pd.Series(column_values, index=frame.index)}), name
        import dask.dataframe as dd
        if isinstance(values, dd.Series):   # a list column of rows
            name = column or values.name or "values"
            return self.to_frame()[keys].assign(**{name: values}), name
        return values, column

    def _stitch_array(self, values, name: str, how: str):
        import dask
        import dask.dataframe as dd

        if how == "groupby":
            raise ValueError("how='groupby' needs a DataFrame carrying logID, start, stop; an "
                             "Array is stitched partition by partition")
        if getattr(values, "ndim", 0) < 2 or not hasattr(values, "numblocks"):
            raise ValueError(f"values must be a dask Array of shape (rows, max_length, ...) "
                             f"or a dask DataFrame; got {type(values).__name__} of ndim "
                             f"{getattr(values, 'ndim', None)}")
        if any(n != 1 for n in values.numblocks[1:]):
            values = values.rechunk({axis: -1 for axis in range(1, values.ndim)})
        # The metadata as an Array made like input_ids: the same blocks as any array of
        # this result and what is computed from it block by block, however the input is
        # partitioned (several Parquet files fused, filtered or repartitioned frames).
        metadata = self._frame_array(metadata_block, shape=(len(METADATA_COLUMNS),),
                                     dtype=np.int64)
        if values.numblocks[0] != metadata.numblocks[0]:
            if any(np.isnan(c) for c in values.chunks[0]):
                raise ValueError(
                    f"values must have the row blocks of this result's arrays "
                    f"(res.input_ids: {metadata.numblocks[0]} blocks); got "
                    f"{values.numblocks[0]} blocks of unknown sizes. Compute it block by "
                    f"block from res.input_ids (map_blocks, elementwise operations), call "
                    f"values.compute_chunk_sizes() to let stitch align its rows, or stitch "
                    f"a DataFrame")
            # Rows of known sizes, blocked otherwise (rechunked): aligned with the
            # metadata's blocks, whose sizes this computes (the metadata only).
            metadata = metadata.compute_chunk_sizes()
            if values.shape[0] != metadata.shape[0]:
                raise ValueError(f"values has {values.shape[0]} rows, this result "
                                 f"{metadata.shape[0]}")
            values = values.rechunk({0: metadata.chunks[0]})
        meta = stitch_rows(np.empty((0,) + values.shape[1:], dtype=values.dtype),
                           select_metadata(self._tokenized._meta), name)
        # Unoptimized: dask's linear fusion of array graphs fails on from_delayed inputs
        # (an Alias keyed apart from its graph key); the frames are optimized already.
        blocks = values.to_delayed(optimize_graph=False).reshape(-1)
        parts = metadata.to_delayed(optimize_graph=False).reshape(-1)
        stitched = [dask.delayed(stitch_rows, pure=True)(b, m, name)
                    for b, m in zip(blocks, parts, strict=True)]
        return dd.from_delayed(stitched, meta=meta, verify_meta=False,
                               prefix="daskwp-stitch")

    def _stitch_frame(self, values, column, how: str):
        column = value_column(values._meta, column)
        # Rows still in the partitions and order tokenization gave them need no 'window'.
        ordered = partition_local(values.expr)
        meta = stitch_frame(values._meta, column, ordered)
        if how == "auto":
            how = "partition" if ordered else "groupby"
        if how == "groupby":
            # The task-based shuffle: P2P round-trips partitions through Arrow with pandas
            # metadata, which pandas cannot read back for list columns (pandas#57411).
            values = values.shuffle(on="logID", shuffle_method="tasks")
        return values.map_partitions(stitch_frame, column, ordered and how == "partition",
                                     meta=meta)

    def __repr__(self) -> str:
        return (f"DaskWordPieceResult(npartitions={self.npartitions}, "
                f"max_length={self.max_length}, tokenizer={self.tokenizer!r})")


@functools.cache
def _pause_profiler(value) -> bool:
    """The option ``pause_worker_profiler`` of a write (None: its configured default)."""
    from ..core import config as dask_defaults
    return check("pause_worker_profiler", dask_defaults.get("pause_worker_profiler", value))


def _parquet_engine():
    """dask's pyarrow Parquet engine, writing pandas metadata that pandas can read back."""
    from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

    class PortableArrowEngine(ArrowDatasetEngine):
        @classmethod
        def _pandas_to_arrow_table(cls, df, preserve_index=False, schema=None):
            table = super()._pandas_to_arrow_table(df, preserve_index=preserve_index,
                                                   schema=schema)
            return portable_pandas_metadata(table)

    return PortableArrowEngine


class PartsWrite(Scalar):
    """What ``to_parquet(..., compute=False)`` returns: the lazy write of the parts (a dask
    Scalar of their summed statistics). Its :meth:`compute` runs as ``to_parquet`` does:
    on a ``distributed`` cluster, the workers' profiler paused (``pause_worker_profiler``;
    the lazy write computed with it running took more of the workers' CPU), and the last
    parts, fewer than the cluster's threads, given the idle threads of their host
    (:func:`compute_lending_idle_threads`). ``dask.compute`` of it with other
    collections runs it as it is."""

    def __init__(self, expr, pause_worker_profiler: bool = True):
        super().__init__(expr)
        self.pause_worker_profiler = bool(pause_worker_profiler)

    def compute(self, **kwargs):
        from ..distributed.profiler import compute_client, computing_paused
        client = None if kwargs else compute_client(self)
        with computing_paused(self, self.pause_worker_profiler):
            if client is None:
                return super().compute(**kwargs)
            return compute_lending_idle_threads(self, client)


def compute_lending_idle_threads(collection, client):
    """``collection.compute()`` (a :class:`PartsWrite`) on ``client`` (a synchronous
    ``distributed.Client``), giving the part writes still running, once fewer are left than
    the cluster has threads, the idle threads of their host, as a batch job's driver does
    (:func:`daskwp.distributed.lending.give_idle_threads`, asked again as each part completes): the
    last partition, alone on one worker, tokenizes on its host's idle cores too (a thread
    lent by another worker process takes a small word memo of its own, not a copy).

    The graph is the one ``compute`` runs (the optimized collection's); the final task's
    value is returned. The threads lent are given back after (the parts' keys come again
    when the same write is computed again; a batch job's carry its run's id)."""
    from distributed import as_completed

    from ..distributed.state import set_task_threads
    from ..distributed.lending import cluster_workers, give_idle_threads

    opt = collection.optimize()
    dsk = dict(opt.__dask_graph__())
    (key,) = opt.__dask_keys__()
    parts = sorted(dsk[key].dependencies, key=str)   # the parts the final task takes
    futures = client.get(dsk, [key, *parts], sync=False)
    out, writes = futures[0], futures[1:]
    lent: dict = {}   # worker -> keys given threads
    try:
        workers = cluster_workers(client)
        threads = sum(t for _, t in workers.values())
        left, tail_at = len(writes), None
        for fut in as_completed(writes):
            if fut.status != "finished":   # its error comes with the final task's
                break
            left -= 1
            if workers and left != tail_at and 0 < left < threads:
                tail_at = left
                sent = give_idle_threads(client, {f.key for f in writes if not f.done()},
                                         workers)
                for w, keys in sent.items():
                    lent.setdefault(w, set()).update(keys)
        finalize, args = opt.__dask_postcompute__()
        return finalize([out.result()], *args)
    finally:
        try:
            client.cancel([f for f in futures if not f.done()])
            for w, keys in lent.items():
                client.run(set_task_threads, dict.fromkeys(keys, 1), workers=[w],
                           on_error="ignore")
        except OSError:   # the scheduler is gone
            pass


# -- accessor -----------------------------------------------------------------------------

def _pair_source(series, text_pair):
    """``series`` and ``text_pair`` as one two-column Dask frame, partition for partition."""
    import dask.dataframe as dd

    if not isinstance(text_pair, dd.Series):
        raise TypeError(f"text_pair must be a Dask Series (a column of the same DataFrame), got "
                        f"{type(text_pair).__name__}")
    check_text_dtype(text_pair._meta.dtype, f"text_pair Series {text_pair.name!r}")
    if text_pair.npartitions != series.npartitions:
        raise ValueError(f"text_pair must have the partitions of the Series: it has "
                         f"{text_pair.npartitions}, the Series {series.npartitions} (pass two "
                         f"columns of one DataFrame)")
    try:
        return series.rename("text").to_frame().assign(text_pair=text_pair)
    except Exception as e:   # dask refuses columns whose partitions it cannot align
        raise ValueError(f"text_pair must be aligned with the Series partition for partition "
                         f"(two columns of one Dask DataFrame); dask could not align them: "
                         f"{e}") from None


def _kept_frame(series, keep_columns):
    """``keep_columns`` of the Dask accessor as a Dask DataFrame partitioned as
    ``series``, or None: names are columns of the frame ``series`` was selected from."""
    import dask.dataframe as dd

    if keep_columns is None:
        return None
    if isinstance(keep_columns, (dd.DataFrame, dd.Series)):
        kept = keep_columns.to_frame() if isinstance(keep_columns, dd.Series) \
            else keep_columns
        check_kept_names(list(kept.columns))
    else:
        names = check_kept_names(keep_columns)
        if not names:
            return None
        expr = series.expr
        if not isinstance(expr, Projection) or expr.frame.ndim != 2:
            raise ValueError(f"keep_columns={names!r} names columns of the DataFrame the "
                             f"Series was selected from, but this Series is not a column of "
                             f"a DataFrame (select it as ddf[\"text\"], or pass the columns "
                             f"themselves: keep_columns=ddf[{names!r}])")
        parent = new_collection(expr.frame)
        missing = [c for c in names if c not in parent.columns]
        if missing:
            raise ValueError(f"keep_columns: the DataFrame has no column {missing[0]!r} "
                             f"(columns: {list(parent.columns)})")
        kept = parent[names]
    if kept.npartitions != series.npartitions:
        raise ValueError(f"keep_columns must have the partitions of the Series: it has "
                         f"{kept.npartitions}, the Series {series.npartitions}")
    return kept


class DaskWordPieceAccessor:
    """``ddf["text"].wordpiece`` on Dask (and dask_cudf) Series (lazy)."""

    def __init__(self, series):
        self._series = series

    def tokenize(self, vocab=None, *, lowercase=None, max_length=None, stride=None,
                 truncation=None, add_special_tokens=None, padding=None,
                 bucket_widths=None, text_pair=None, return_overflowing_tokens=None,
                 keep_columns=None, **tokenizer_options) -> DaskWordPieceResult:
        """Tokenize the column into windows with global logIDs (see
        :class:`DaskWordPieceResult`). Nothing is computed.

        Parameters left at None come from ``dask.config`` (``daskwp.<name>``, defaults in
        ``core/options.py``). ``vocab``: a WordPieceTokenizer, Vocabulary, path or model
        folder; other keywords (``strip_accents``, ``clean_text``, ``handle_chinese_chars``,
        ``max_input_chars_per_word``) go to :class:`WordPieceTokenizer`. ``text_pair``: a
        column of the same Dask DataFrame (aligned partitions) holding the second sequences
        (sentence pairs, docs/design.md §2.8); logIDs are the rows' global positions.
        ``return_overflowing_tokens`` and the per-position outputs (``return_token_type_ids``,
        ``return_sequence_ids``, ...: any option of ``tok(...)``, given as keywords) as for
        :meth:`WordPieceTokenizer.__call__`: each output is a list column of ``to_frame()``
        and of the parts ``to_parquet`` writes, and an attribute (a dask Array).
        ``keep_columns``: input columns copied into every row of their document, as for
        batch jobs: a name or a list of names of columns of the DataFrame the Series was
        selected from (``ddf["text"].wordpiece.tokenize(keep_columns=["id"])``, also after
        a filter of ``ddf``), or a Dask DataFrame (Series) of them with the Series'
        partitions. ``to_frame()`` always carries ``input_index`` as well.
        """
        check_text_dtype(self._series._meta.dtype, f"Series {self._series.name!r}")
        tok, options = resolve_call(vocab, lowercase, max_length, stride, truncation,
                                    add_special_tokens, padding, bucket_widths,
                                    return_overflowing_tokens, tokenizer_options)
        source = self._series
        if text_pair is not None:
            source = _pair_source(self._series, text_pair)
        kept = _kept_frame(self._series, keep_columns)
        options["keep_columns"] = [] if kept is None else list(kept.columns)
        if kept is not None:
            try:
                source = source_frame(source, kept)
            except Exception as e:   # dask refuses columns whose partitions it cannot align
                raise ValueError(f"keep_columns must be aligned with the Series partition "
                                 f"for partition (columns of the same Dask DataFrame); dask "
                                 f"could not align them: {e}") from None
        result = DaskWordPieceResult(source, tok, options)
        result._tokenized._meta  # validates the options now, on a two-row sample
        return result


    def count(self, vocab=None, *, lowercase=None, compute: bool = True,
              **tokenizer_options):
        """Count the column's WordPiece tokens (no special tokens): a
        :class:`~daskwp.core.lengths.TokenCounts` with ``documents``, ``tokens``,
        ``unknown_tokens``, ``unknown_token_rate``, ``text_bytes`` and ``lengths`` (the
        exact distribution of document lengths: ``lengths.percentile(99)``,
        ``lengths.summary()``, ``lengths.histogram()``), as ``daskwp count`` reports. One
        task per partition, then one that merges; ``compute=False`` returns the Delayed."""
        import dask
        from ..backends.tokenizer import resolve_tokenizer
        from ..core.lengths import TokenCounts

        check_text_dtype(self._series._meta.dtype, f"Series {self._series.name!r}")
        tok = resolve_tokenizer(vocab, lowercase, **tokenizer_options)
        tok_d = dask.delayed(tok, pure=True)
        parts = [dask.delayed(token_count_part, pure=True)(block, tok_d)
                 for block in self._series.to_delayed()]
        out = dask.delayed(TokenCounts.merge, pure=True)(parts)
        return out.compute() if compute else out

    def to_megatron(self, prefix, vocab=None, *, lowercase=None, add_special_tokens=None,
                    append_eod=False, eod_token=None, document_separator=None,
                    merge_parts=True, compute=True, storage_options=None,
                    pause_worker_profiler=None, **tokenizer_options):
        """Write the column as a Megatron indexed dataset (``prefix.bin`` + ``prefix.idx``,
        what ``megatron.core.datasets.indexed_dataset.IndexedDataset(prefix)`` opens): one
        sequence per document (or per piece with ``document_separator``), documents in row
        order, document k = row k. The options are those of ``output_format: megatron``
        jobs (docs/batch-jobs.md "Megatron indexed datasets"; ``add_special_tokens`` left
        None takes ``daskwp.add_special_tokens``, True by default: pass False for
        ``preprocess_data.py``'s sequences).

        Each partition writes ``prefix-part-NNNNN.{bin,idx}`` atomically; then one task
        merges them into ``prefix.{bin,idx}`` and removes them (``merge_parts=False``: they
        stay, and the result lists them). Returns a dict (``prefix`` or ``prefixes``,
        ``documents``, ``sequences``, ``tokens_written``, ``dtype``), or with
        ``compute=False`` the dask Delayed that writes and returns it.

        ``prefix`` may be an fsspec URL (``s3://bucket/data/text``; ``storage_options``:
        the options of its filesystem): each pair is uploaded complete, the merge runs on
        copies downloaded to a temporary folder and uploads the merged pair.
        ``pause_worker_profiler``: as :meth:`DaskWordPieceResult.to_parquet`'s.
        """
        import dask
        from ..core import config as dask_defaults
        from ..core.options import OPTIONS
        from ..backends.tokenizer import resolve_tokenizer
        from ..distributed.profiler import computing_paused

        check_text_dtype(self._series._meta.dtype, f"Series {self._series.name!r}")
        pause = _pause_profiler(pause_worker_profiler)
        if add_special_tokens is None:
            add_special_tokens = dask_defaults.get("add_special_tokens")
        options = {k: OPTIONS[k].check(k, v) for k, v in (
            ("add_special_tokens", add_special_tokens), ("append_eod", append_eod),
            ("eod_token", eod_token), ("document_separator", document_separator),
            ("merge_parts", merge_parts))}
        tok = resolve_tokenizer(vocab, lowercase, **tokenizer_options)
        eod = options["eod_token"] or tok.vocab.sep_token
        if options["append_eod"] and tok.vocab.token_to_id(eod) is None:
            raise ValueError(f"eod_token {eod!r} is not a token of the vocabulary "
                             f"{tok.vocab.source!r}")
        import os

        from ..frames import storage
        prefix = storage.local_path(os.fspath(prefix))
        if storage.is_url(prefix):
            storage_options = check("storage_options", storage_options) or {}
            try:
                _prefix_folder(prefix, storage_options)[0].check_writable()
            except storage.StorageError as e:
                raise OSError(str(e)) from None
        else:
            storage_options = None
            prefix = os.path.abspath(prefix)
            os.makedirs(os.path.dirname(prefix), exist_ok=True)
        n = self._series.npartitions
        width = max(5, len(str(n - 1)))
        tok_d = dask.delayed(tok, pure=True)
        parts = [dask.delayed(megatron_part, pure=True)(
            block, tok_d, options, f"{prefix}-part-{i:0{width}d}", storage_options)
            for i, block in enumerate(self._series.to_delayed())]
        out = dask.delayed(megatron_merge, pure=True)(parts, prefix, options["merge_parts"],
                                                      storage_options)
        if not compute:
            return out
        with computing_paused(out, pause):
            return out.compute()


def _prefix_folder(prefix: str, storage_options: dict | None):
    """``(Folder, name)`` of a dataset prefix (a path or a URL)."""
    from ..frames.storage import Folder
    folder, name = prefix.rstrip("/").rsplit("/", 1)
    return Folder(folder or "/", storage_options), name


def megatron_part(series, tokenizer, options: dict, prefix: str,
                  storage_options: dict | None = None) -> dict:
    """The accessor's partition task of ``to_megatron``: the partition's ``.bin`` / ``.idx``
    pair at ``prefix``, written under temporary names and renamed (atomic; on an object
    store written in a local staging folder and uploaded)."""
    import os
    import uuid

    from ..core.strings import to_arrow
    from ..distributed.state import cached_tokenizer
    from ..frames.megatron import megatron_sequences, write_pair

    to_device = None
    if is_cudf(series):
        import cudf
        texts = series.to_arrow()
        to_device = cudf.Series.from_arrow
    else:
        texts = to_arrow(series)
    tokens, lengths, docs, stats = megatron_sequences(cached_tokenizer(tokenizer), texts,
                                                      options, to_device)
    folder, name = _prefix_folder(prefix, storage_options)
    with folder.staging() as staging:
        tmp = os.path.join(staging, f"{name}.tmp-{uuid.uuid4().hex}")
        try:
            write_pair(tmp, tokens, lengths, docs, fsync=True)
            folder.publish(tmp + ".bin", name + ".bin")
            folder.publish(tmp + ".idx", name + ".idx")
        finally:
            for ext in (".bin", ".idx"):
                if os.path.exists(tmp + ext):
                    os.unlink(tmp + ext)
    stats.pop("document_lengths")
    return {"prefix": prefix, **stats}


def megatron_merge(parts: list, prefix: str, merge: bool,
                   storage_options: dict | None = None) -> dict:
    """The accessor's last task of ``to_megatron``: merge the parts into ``prefix``
    (atomic) and remove them, or list them."""
    import os
    import uuid

    from ..frames.megatron import merge_pairs, merge_pairs_in, read_index

    prefixes = [p["prefix"] for p in parts]
    folder, name = _prefix_folder(prefix, storage_options)
    with folder.local_copies([_prefix_folder(prefixes[0], None)[1] + ".idx"]) as (idx,):
        dtype = str(read_index(idx).dtype)
    out = {"documents": sum(p["documents"] for p in parts),
           "sequences": sum(p["rows"] for p in parts),
           "tokens_written": sum(p["tokens_written"] for p in parts), "dtype": dtype}
    if not merge:
        return {"prefixes": prefixes, **out}
    if folder.remote:
        names = [_prefix_folder(p, None)[1] for p in prefixes]
        merge_pairs_in(folder, names, name)
        for n in names:
            folder.remove(n + ".bin")
            folder.remove(n + ".idx")
        return {"prefix": prefix, **out}
    tmp = f"{prefix}.tmp-{uuid.uuid4().hex}"
    merge_pairs(prefixes, tmp, fsync=True)
    os.replace(tmp + ".bin", prefix + ".bin")
    os.replace(tmp + ".idx", prefix + ".idx")
    for p in prefixes:
        for ext in (".bin", ".idx"):
            os.unlink(p + ext)
    return {"prefix": prefix, **out}


def register_dask_accessor() -> None:
    from dask.dataframe.extensions import register_series_accessor

    register_series_accessor("wordpiece")(DaskWordPieceAccessor)
