"""The task-graph pieces a batch job shares with the accessor, without ``dask.dataframe``:
the tokenizer as one graph key, and the one global-offset pass (docs/design.md §8.5).

They are plain task specs (``Task``, ``TaskRef``, ``DataNode``), so a job's graph is built
without importing dask's dataframe layer (a small job in this process never pays for it,
docs/batch-jobs.md "Clusters"); :mod:`daskwp.distributed.graph` builds the accessor's
expressions on them and exports the same names.
"""

from __future__ import annotations

import functools

from dask.base import tokenize

from .dask_compat import DataNode, Task, TaskRef
from .tasks import add_counts, count_documents, sum_counts

__all__ = ["PartitionCounts", "prefix_count_refs", "tokenizer_graph_key", "tokenizer_layer"]


def tokenizer_graph_key(tokenizer) -> str:
    """The one graph key of ``tokenizer``: ``daskwp-tokenizer-<dask token>`` (the token is
    the vocabulary's content hash plus the settings, so equal tokenizers share the key)."""
    return f"daskwp-tokenizer-{tokenize(tokenizer)}"


def tokenizer_layer(tokenizer) -> tuple[str, dict]:
    """``(key, {key: DataNode})``: the tokenizer as one graph key that tasks depend on
    (``TaskRef(key)``) and resolve through the per-worker state
    (:func:`daskwp.distributed.state.cached_tokenizer`). The compiled vocabulary travels to
    the scheduler once and to each worker once, never inside a task."""
    key = tokenizer_graph_key(tokenizer)
    return key, {key: DataNode(key, tokenizer)}


class PartitionCounts:
    """The one global-offset pass (docs/design.md §8.5) over the document counts of
    partitions 0..n-1.

    Parameters
    ----------
    name : str
        Prefix of the pass's keys: ``(name, level, j)`` is the number of documents in
        partitions ``[j * 2**level, (j + 1) * 2**level)``; level 0 are the counts themselves.
    leaf : callable
        ``leaf(q)`` describes the count of partition q: an ``int`` when it is already known
        (a ``DataNode``), or ``(func, *args)`` for a task that returns it (arguments may be
        ``TaskRef``s). Both the accessor (:meth:`of_source`) and batch jobs give one.

    The offset of partition p, the sum of counts 0..p-1, is the sum of at most
    log2(p) + 1 tree nodes (:meth:`prefix_refs`); nodes are shared between prefixes, so the
    offsets of all n partitions add about n tasks in all, of depth log2(n).
    """

    def __init__(self, name: str, leaf):
        self.name = name
        self.leaf = leaf

    @classmethod
    def of_source(cls, source) -> "PartitionCounts":
        """The counts of a Dask collection's partitions: ``count_documents`` of each
        partition of ``source`` (the same source tasks feed the tokenizer)."""
        return cls(f"daskwp-count-{tokenize(source._name)}",
                   functools.partial(_source_count, source._name))

    def node(self, dsk: dict, level: int, j: int) -> tuple:
        """The key of tree node ``(level, j)``, added to ``dsk`` with its subtree."""
        key = (self.name, level, j)
        if key not in dsk:
            if level == 0:
                spec = self.leaf(j)
                if isinstance(spec, tuple):
                    func, *args = spec
                    dsk[key] = Task(key, func, *args)
                else:
                    dsk[key] = DataNode(key, int(spec))
            else:
                a, b = self.node(dsk, level - 1, 2 * j), self.node(dsk, level - 1, 2 * j + 1)
                dsk[key] = Task(key, add_counts, TaskRef(a), TaskRef(b))
        return key

    def count_ref(self, dsk: dict, q: int) -> TaskRef:
        """A TaskRef to the document count of partition q."""
        return TaskRef(self.node(dsk, 0, q))

    def prefix_refs(self, dsk: dict, p: int) -> list:
        """TaskRefs whose sum is the number of documents in partitions 0..p-1."""
        refs, base = [], 0
        for level in reversed(range(p.bit_length())):
            if p >> level & 1:
                refs.append(TaskRef(self.node(dsk, level, base >> level)))
                base += 1 << level
        return refs

    def offset_task(self, dsk: dict, key, p: int) -> Task:
        """The task ``key`` whose result is the offset of partition p (``p = n``: the total)."""
        return Task(key, sum_counts, *self.prefix_refs(dsk, p))


def _source_count(source_name: str, q: int) -> tuple:
    return (count_documents, TaskRef((source_name, q)))


def prefix_count_refs(dsk: dict, source, p: int) -> list:
    """TaskRefs whose sum is the number of rows in partitions 0..p-1 of ``source``, adding
    to ``dsk`` the nodes of the pass (:meth:`PartitionCounts.of_source`)."""
    return PartitionCounts.of_source(source).prefix_refs(dsk, p)
