"""The graph of a tokenized Dask collection: tokenizing every partition, and the ONE global
logID offset pass (docs/design.md §2, §8).

No tokenization logic lives here: every task calls a partition task of
:mod:`daskwp.distributed.tasks`. Two small dask-expr expressions build the graph:

``Tokenize(frame, tokenizer, options)``
    Task i runs ``tokenize_partition(frame_i, tokenizer, options, partition=i)``. The
    tokenizer is ONE graph key, ``daskwp-tokenizer-<token>`` (the token is the vocabulary's
    content hash plus the settings), that every task depends on: the compiled vocabulary
    travels to the scheduler once and to each worker once, never inside a task, and
    the per-worker state (:mod:`daskwp.distributed.state`) keeps one instance per vocabulary in each worker process
    (where the GPU launcher's device-resident vocabulary lives).

``GlobalLogID(frame, source)``
    Adds the global offset to the logIDs of partition i: the number of input rows in
    partitions 0..i-1. The counts are ``len`` of the SOURCE partitions (the input is read
    once: the same source tasks feed the tokenizer and the counts).

The pass itself is :class:`PartitionCounts`: one graph node per partition that yields its
document count (``count_documents`` of a source partition for the accessor; for batch jobs a
count read from the input, or one already known from the plan or a complete part), and a
binary tree of partial sums over aligned ranges of partitions above them (a Fenwick-style
decomposition): the offset of partition i depends on at most log2(i) + 1 tree nodes, the tree
adds about n tasks in all, and its depth is log2(n), so nothing is sequential in n and no
shuffle happens. The accessor's expressions and the batch jobs' graph both build their
offsets with it.

Culling: ``res.metadata.partitions[3]`` rewrites (at simplify time, like dask's own
``Partitions`` push-down) into ``SelectedLogID``: partition 3 of the tokenized frame plus the
prefix ``source.partitions[0:3]``, whose total row count is the offset. So the result keeps
its global logIDs (``partition_info["number"]`` would be renumbered to 0 there), only
partition 3 is tokenized and only partitions 0..2 are read for the count. The offset is
the count of the whole prefix, so it stays right when the optimizer later merges the
prefix's Parquet partitions (dask-expr's IO fusion). Selecting k partitions reads each of
their prefixes (partitions may be read more than once then).
"""


from __future__ import annotations

import functools

from dask.dataframe.dispatch import make_meta, meta_nonempty

from .dask_compat import (Blockwise, DataNode, Expr, Fused, FusedIO, Lengths, Literal,
                          Partitions, Projection, Task, TaskRef, optimize_blockwise_fusion)

from .offset_pass import (PartitionCounts, prefix_count_refs, tokenizer_graph_key,  # noqa: F401
                          tokenizer_layer)
from .tasks import add_logid_offset, finish_parts, tokenize_global, tokenize_partition, \
    write_partition_part

__all__ = ["GlobalLogID", "GlobalTokenize", "PartitionCounts", "SelectedLogID", "Tokenize",
           "TokenizerNode", "WriteParts", "WritePartitions", "partition_local", "prefix_count_refs", "static_offsets",
           "tokenizer_graph_key", "tokenizer_layer"]


def _positions(expr) -> tuple:
    """Original partition numbers of ``expr``'s partitions (for messages); when the
    optimizer has merged partitions (Parquet fusion), the current numbers."""
    pos = expr.operand("positions")
    n = expr.frame.npartitions
    return tuple(range(n)) if pos is None or len(pos) != n else tuple(pos)


def _sample_partition(meta, options: dict):
    """A two-document partition of the same type and dtypes as ``meta`` (dask's own
    ``meta_nonempty`` fills object columns with ``object()``, which is no text). A frame's
    text columns (all but the kept columns, ``options["keep_columns"]``, at its end) get
    the sample text."""
    if getattr(meta, "ndim", 1) == 2:
        sample = meta_nonempty(meta)
        n = meta.shape[1] - len(options.get("keep_columns") or ())
        for j in range(n):
            try:
                col = meta.iloc[:, j]
                sample.isetitem(j, col._constructor(["daskwp sample text", None][:len(sample)],
                                                    dtype=col.dtype, index=sample.index))
            except Exception:
                pass
        return sample
    sample = meta_nonempty(meta)   # its index has the dtype of meta's (input_index)
    try:
        return meta._constructor(["daskwp sample text", None], dtype=meta.dtype,
                                 name=meta.name, index=sample.index[:2])
    except Exception:
        return sample


class Tokenize(Expr):
    """Tokenize every partition of ``frame`` (a text Series) into a partition frame."""

    _parameters = ["frame", "tokenizer", "options", "positions"]
    _defaults = {"positions": None}

    @functools.cached_property
    def _name(self):
        return f"daskwp-tokenize-{self.deterministic_token}"

    @functools.cached_property
    def _meta(self):
        # The partition function itself, run on a two-row sample partition.
        sample = _sample_partition(self.frame._meta, self.options)
        return make_meta(tokenize_partition(sample, self.tokenizer, self.options)
                         .iloc[:0])

    def _divisions(self):
        return (None,) * (self.frame.npartitions + 1)

    @property
    def tokenizer_key(self) -> str:
        return tokenizer_graph_key(self.tokenizer)

    def _layer(self) -> dict:
        tok_key, dsk = tokenizer_layer(self.tokenizer)
        opts = dict(self.options)
        for k, p in enumerate(_positions(self)):
            key = (self._name, k)
            dsk[key] = Task(key, tokenize_partition, TaskRef((self.frame._name, k)),
                            TaskRef(tok_key), opts, p)
        return dsk

    def _simplify_up(self, parent, dependents):
        if isinstance(parent, Partitions):
            parts = list(parent.partitions)
            pos = _positions(self)
            return Tokenize(Partitions(self.frame, parts), self.tokenizer, self.options,
                             tuple(pos[p] for p in parts))


def static_offsets(expr) -> tuple | None:
    """The global logID offset of each partition of ``expr`` (``n + 1`` entries, the last
    the total) when its partition lengths are known without computing anything (a pandas
    frame's partitions, Parquet row counts from the footers: dask's own ``Lengths``
    simplification), else None."""
    try:
        lengths = Lengths(expr).simplify()
    except Exception:
        return None
    if not isinstance(lengths, Literal):
        return _fused_io_offsets(expr)
    values = lengths.operand("value")
    if not isinstance(values, tuple) or len(values) != expr.npartitions:
        return None
    out, total = [0], 0
    for n in values:
        total += int(n)
        out.append(total)
    return tuple(out)


def _fused_io_offsets(expr) -> tuple | None:
    """``static_offsets`` of dask-expr's IO fusion, which ``Lengths`` does not see through: a
    read whose small partitions (a wide Parquet dataset read for one column) are fused in
    consecutive groups (``FusedIO``), or a column of one. The offsets are those of the
    unfused read at each group's first partition."""
    if isinstance(expr, Projection):   # a column selection keeps every partition's length
        return static_offsets(expr.frame)
    if not isinstance(expr, FusedIO):
        return None
    inner = expr.operand("_expr")
    if "_partitions" not in inner._parameters or inner.operand("_partitions") is not None:
        return None
    offsets = static_offsets(inner)
    buckets = expr._fusion_buckets
    if offsets is None or [p for b in buckets for p in b] != list(range(inner.npartitions)):
        return None
    return tuple(offsets[b[0]] for b in buckets) + (offsets[-1],)


def _unfused_name(expr) -> str:
    """The name of ``expr``, or of the top expression of a blockwise-fused group (which
    behaves as it does: same partitions), so that offsets computed before fusion stay valid."""
    return expr.exprs[0]._name if isinstance(expr, Fused) else expr._name


class GlobalTokenize(Expr):
    """Partition i of ``frame`` (a text Series) tokenized with its global logIDs in ONE task
    per partition (``tokenize_global``): what ``GlobalLogID(Tokenize(frame), frame)``
    becomes when simplified. ``columns`` keeps only those columns (a projection pushed into
    the task, so e.g. ``res.metadata`` builds no list columns).

    The offsets: when the partition lengths of ``frame`` are known without computing
    (:func:`static_offsets`, recomputed whenever ``frame`` changes: ``lengths_of`` is the
    name they were computed for), each task gets its offset as a constant and the graph has
    no counting tasks at all; otherwise the global-offset pass over ``frame``'s partitions
    (:class:`PartitionCounts`).

    ``write``: a dict (``path``, ``compression``, ``digits``) to write each partition as a
    Parquet part with daskwp's writer instead (``write_partition_part``); the task then
    returns the part's statistics.
    """

    _parameters = ["frame", "tokenizer", "options", "columns", "positions", "offsets",
                   "lengths_of", "write"]
    _defaults = {"columns": None, "positions": None, "offsets": None, "lengths_of": None,
                 "write": None}

    @functools.cached_property
    def _name(self):
        return f"daskwp-tokenize-{self.deterministic_token}"

    @functools.cached_property
    def _meta(self):
        sample = _sample_partition(self.frame._meta, self.options)
        meta = make_meta(tokenize_partition(sample, self.tokenizer, self.options).iloc[:0])
        columns = self.operand("columns")
        return meta if columns is None else meta[columns]

    def _divisions(self):
        return (None,) * (self.frame.npartitions + 1)

    def _known_offsets(self):
        offs = self.operand("offsets")
        if offs is None or self.operand("lengths_of") != _unfused_name(self.frame) or \
                len(offs) != self.frame.npartitions + 1:
            return None
        return offs

    def _simplify_down(self):
        if self.operand("positions") is not None:
            return None  # culled: the offsets were fixed for the original partitions
        if self.operand("lengths_of") != self.frame._name:
            return self.substitute_parameters({"offsets": static_offsets(self.frame),
                                               "lengths_of": self.frame._name})

    def _simplify_up(self, parent, dependents):
        if self.operand("write") is not None:
            return None
        if isinstance(parent, Projection) and hasattr(self._meta, "columns"):
            cols = parent.operand("columns")
            if isinstance(cols, (list, tuple)) or cols in self._meta.columns:
                return self.substitute_parameters(
                    {"columns": list(cols) if isinstance(cols, (list, tuple)) else cols})
        if isinstance(parent, Partitions):
            parts = list(parent.partitions)
            pos = _positions(self)
            offs = self._known_offsets()
            if offs is not None:
                return GlobalTokenize(Partitions(self.frame, parts), self.tokenizer,
                                      self.options, self.operand("columns"),
                                      tuple(pos[p] for p in parts),
                                      tuple(offs[p] for p in parts), None)
            # unknown lengths: the prefix of each selected partition is counted
            tokenized = Tokenize(self.frame, self.tokenizer, self.options)
            if self.operand("columns") is not None:
                tokenized = tokenized[self.operand("columns")]
            return GlobalLogID(tokenized, self.frame)._simplify_up(parent, dependents)

    def _lower(self):
        write = self.operand("write")
        if write is None or self.operand("positions") is not None:
            return None
        frame = self.frame.lower_completely()
        offsets = static_offsets(frame)
        if offsets is None:
            return None
        return WritePartitions(frame, TokenizerNode(self.tokenizer), dict(self.options),
                               write, offsets)

    def _layer(self) -> dict:
        tok_key, dsk = tokenizer_layer(self.tokenizer)
        opts = dict(self.options)
        offsets = self._known_offsets()
        culled = self.operand("positions") is not None
        if culled:
            offsets = self.operand("offsets")
        counts = None if offsets is not None else PartitionCounts.of_source(self.frame)
        write = self.operand("write")
        columns = self.operand("columns")
        for k, p in enumerate(_positions(self)):
            key = (self._name, k)
            refs = [offsets[k]] if offsets is not None else counts.prefix_refs(dsk, k)
            if write is not None:
                dsk[key] = Task(key, write_partition_part, TaskRef((self.frame._name, k)),
                                TaskRef(tok_key), opts, write, p, *refs)
            else:
                dsk[key] = Task(key, tokenize_global, TaskRef((self.frame._name, k)),
                                TaskRef(tok_key), opts, p, columns, *refs)
        return dsk


class TokenizerNode(Expr):
    """The tokenizer as a one-partition expression (its one key holds the tokenizer's
    DataNode): the broadcast dependency of :class:`WritePartitions`, which a blockwise
    expression needs, since a fused task carries only the keys of expressions."""

    _parameters = ["tokenizer"]

    @functools.cached_property
    def _name(self):
        return tokenizer_graph_key(self.tokenizer)

    @property
    def _meta(self):
        return 0

    def _divisions(self):
        return (None, None)

    def _layer(self) -> dict:
        key = (self._name, 0)
        return {key: DataNode(key, self.tokenizer)}


class WritePartitions(Blockwise):
    """What a ``to_parquet``'s :class:`GlobalTokenize` becomes at lowering when the
    offset of every partition of its (lowered) frame is known without computing anything
    (:func:`static_offsets`): one ``write_partition_part`` per partition as a blockwise
    expression, so dask-expr fuses it with the blockwise tasks that produce the partition
    (a Parquet read and its projection). Each partition is then read, tokenized and written
    in one task: no partition of text waits in a worker's memory for its write, or moves
    to another worker for it (docs/design.md §8.5)."""

    _parameters = ["frame", "tokenizer_node", "options", "write", "offsets"]

    @functools.cached_property
    def _name(self):
        return f"daskwp-tokenize-{self.deterministic_token}"

    @property
    def _meta(self):
        return 0

    def _divisions(self):
        return (None,) * (self.frame.npartitions + 1)

    def _broadcast_dep(self, dep) -> bool:
        return isinstance(dep, TokenizerNode)

    def _task(self, name, index: int) -> Task:
        return Task(name, write_partition_part, TaskRef((self.frame._name, index)),
                    TaskRef((self.tokenizer_node._name, 0)), self.options,
                    self.operand("write"), index, self.offsets[index])


class WriteParts(Expr):
    """The one-task end of a ``to_parquet``: waits for every part of ``parts`` (a
    ``GlobalTokenize`` with ``write``; after lowering, when every offset is static, its
    ``WritePartitions`` fused with the reads), removes the temporary files of attempts that
    did not finish (a killed worker), and returns the parts' summed statistics."""

    _parameters = ["parts"]

    @functools.cached_property
    def _name(self):
        return f"daskwp-to-parquet-{self.deterministic_token}"

    @property
    def _meta(self):
        return 0

    def _divisions(self):
        return (None, None)

    def _lower(self):
        # The parts lowered and fused here: ``compute`` of this (scalar) collection runs
        # dask's optimizer without its blockwise fusion, which would leave every partition's
        # read a task of its own (held in memory, and moved between workers, until its write).
        if isinstance(self.parts, Fused):
            return None
        parts = self.parts.lower_completely()
        if not isinstance(parts, WritePartitions):
            return None if parts._name == self.parts._name else WriteParts(parts)
        return WriteParts(optimize_blockwise_fusion(parts))

    def _layer(self) -> dict:
        parts = self.parts
        top = parts.exprs[0] if isinstance(parts, Fused) else parts
        key = (self._name, 0)
        return {key: Task(key, finish_parts, top.operand("write"),
                          *[TaskRef((parts._name, k)) for k in range(parts.npartitions)])}


class GlobalLogID(Expr):
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

    def _simplify_down(self):
        # Tokenize (and a projection of it) over ``source`` itself: one task per partition.
        frame, columns = self.frame, None
        if isinstance(frame, Projection) and isinstance(frame.frame, Tokenize):
            columns = frame.operand("columns")
            columns = list(columns) if isinstance(columns, (list, tuple)) else columns
            frame = frame.frame
        if isinstance(frame, Tokenize) and frame.operand("positions") is None and \
                frame.frame._name == self.source._name:
            return GlobalTokenize(frame.frame, frame.tokenizer, frame.options, columns)

    def _layer(self) -> dict:
        dsk: dict = {}
        for i in range(self.frame.npartitions):
            refs = prefix_count_refs(dsk, self.source, i)
            key = (self._name, i)
            dsk[key] = Task(key, add_logid_offset, TaskRef((self.frame._name, i)), *refs)
        return dsk

    def _simplify_up(self, parent, dependents):
        if isinstance(parent, Partitions):
            pieces = []
            for p in parent.partitions:
                prefix = Partitions(self.source, list(range(p))) if p else None
                pieces += [Partitions(self.frame, [p]), prefix]
            return SelectedLogID(tuple(parent.partitions), *pieces)


class SelectedLogID(Expr):
    """Selected partitions of a ``GlobalLogID`` (what culling turns it into).

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
                prefix_count_refs(dsk, prefix, prefix.npartitions)
            key = (self._name, k)
            dsk[key] = Task(key, add_logid_offset, TaskRef((frame._name, 0)), *refs)
        return dsk

    def _simplify_up(self, parent, dependents):
        if isinstance(parent, Partitions):
            pieces, positions = self._pieces, self.operand("positions")
            chosen = list(parent.partitions)
            ops = [op for k in chosen for op in pieces[k]]
            return SelectedLogID(tuple(positions[k] for k in chosen), *ops)


def partition_local(expr) -> bool:
    """Whether ``expr``'s partitions are still the tokenizer's (only partition-wise steps
    since ``GlobalLogID``), so that every document's rows are in one partition."""
    seen, stack = set(), [expr]
    found = False
    while stack:
        e = stack.pop()
        if e._name in seen:
            continue
        seen.add(e._name)
        if isinstance(e, (GlobalLogID, GlobalTokenize, SelectedLogID, Tokenize)):
            found = True
            continue
        if isinstance(e, (Blockwise, Partitions)):
            stack.extend(d for d in e.dependencies() if d.ndim > 0)
            continue
        return False
    return found
