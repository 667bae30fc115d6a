"""Partition tasks: the functions every Dask graph of daskwp runs, one partition at a time.

The accessor's lazy result and the batch jobs build their graphs from these same functions
(docs/design.md §8): tokenizing a partition into a partition frame, counting its documents,
and the nodes of the global-offset pass (:class:`daskwp.distributed.graph.PartitionCounts`).
They import no Dask, so they run on any worker, in threads, or in the calling process.
"""

from __future__ import annotations

from ..frames.partition import frame_from_output, is_cudf
from .state import cached_tokenizer

__all__ = ["add_counts", "add_logid_offset", "count_documents", "partition_error",
           "sum_counts", "tokenize_partition"]


def partition_error(exc: BaseException, partition) -> BaseException:
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


def tokenize_partition(texts, tokenizer, options: dict, partition=None):
    """Tokenize one partition (pandas or cudf Series) into a partition frame.

    The tokenizer is the worker's one instance of ``tokenizer`` (per-worker state). logIDs
    are 0-based within the partition. An empty partition gives an empty frame with the same
    columns and dtypes; an error is raised again naming ``partition``.
    """
    tok = cached_tokenizer(tokenizer)
    try:
        if is_cudf(texts):  # the tokenizer runs cudf input on the GPU; outputs stay there
            from ..frames.cudf_frames import frame_from_output as cudf_frame_from_output
            return cudf_frame_from_output(tok(texts, **options, return_tensors="cp"))
        return frame_from_output(tok(texts, **options, return_tensors="np"))
    except Exception as e:
        if partition is None:
            raise
        raise partition_error(e, partition) from e


def count_documents(texts) -> int:
    """Documents in a partition: its number of rows (every row is one document)."""
    return len(texts)


def add_counts(a: int, b: int) -> int:
    """Sum of two partial document counts (a node of the prefix-sum tree)."""
    return a + b


def sum_counts(*counts) -> int:
    """Sum of partial document counts: a partition's global offset from its prefix nodes."""
    return int(sum(counts))


def add_logid_offset(frame, *counts):
    """``frame`` with ``sum(counts)`` added to its logIDs (the global offset pass)."""
    offset = sum(counts)
    if offset == 0:
        return frame
    return frame.assign(logID=frame["logID"] + offset)
