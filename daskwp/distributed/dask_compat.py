"""The one door to dask's private modules (docs/design.md §8.2).

daskwp builds its graphs from dask's own expression and task classes: the partition task,
the global logID offset pass and the part writer are dask-expr expressions
(``distributed/graph.py``), whose layers are ``Task`` / ``TaskRef`` / ``DataNode`` objects,
and the accessor wraps them back into collections (``accessors/lazy.py``). None of these
names is public API of dask: they live in ``dask._task_spec``, ``dask._collections``
and ``dask.dataframe.dask_expr``, and may move in any release. Every other
daskwp module imports them from here, so a dask release that moves one is fixed in this
file alone, and an unsupported dask fails on import with the version it found and the range
daskwp is tested with, not with a bare ImportError deep in a graph build.

The tested range is ``TESTED_DASK`` (the bounds of the requirement in pyproject.toml): this
module is what the bounds protect. Moving to a newer dask means running the Dask tests on it,
fixing this file if a name moved, and raising both bounds.
"""

from __future__ import annotations

import dask

#: The dask (and distributed) releases daskwp's graphs are tested with: the bounds of both
#: requirements in pyproject.toml. 2026.6 lacks what they need; 2026.9 is not tested yet.
TESTED_DASK = ">=2026.7.0,<2026.9"


def _unsupported(e: ImportError) -> ImportError:
    return ImportError(
        f"daskwp needs dask {TESTED_DASK} (its graphs use dask's expression and task "
        f"classes); dask {dask.__version__} is installed and lacks one of them: {e}")


try:
    from dask._task_spec import DataNode, Task, TaskRef
except ImportError as e:  # pragma: no cover - depends on the installed dask
    raise _unsupported(e) from e

#: The names that live in dask.dataframe, imported on first use (PEP 562): task graphs
#: alone (a batch job's) need only the task classes above, and ``dask.dataframe`` (with
#: pandas and dask.array) costs most of ``import daskwp``'s time.
_DATAFRAME_NAMES = {
    "new_collection": "dask._collections",
    **dict.fromkeys(("Blockwise", "Expr", "Fused", "Lengths", "Literal", "Partitions",
                     "Projection", "optimize_blockwise_fusion"),
                    "dask.dataframe.dask_expr._expr"),
    "FusedIO": "dask.dataframe.dask_expr.io.io",
    "Scalar": "dask.dataframe.dask_expr._collection",
    "ReadParquetFSSpec": "dask.dataframe.dask_expr.io.parquet",
}


def __getattr__(name: str):
    module = _DATAFRAME_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:  # pragma: no cover - the installed dask
        raise _unsupported(ImportError(str(e))) from e
    globals()[name] = value
    return value

__all__ = ["Blockwise", "DataNode", "Expr", "Fused", "FusedIO", "Lengths",
           "Literal", "Partitions", "Projection", "ReadParquetFSSpec", "Scalar", "TESTED_DASK", "Task", "TaskRef",
           "new_collection", "optimize_blockwise_fusion"]
