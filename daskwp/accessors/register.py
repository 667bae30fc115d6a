"""Registering the ``.wordpiece`` accessor on pandas, Dask and cudf Series.

Each library gets it when it is imported: at once when it already is, else right after its
import (an import hook, :func:`after_import`). ``import daskwp`` therefore imports neither
pandas nor ``dask.dataframe`` (nor tries ``import cudf``): the ``daskwp`` command's small
jobs do not pay for them (docs/batch-jobs.md "Clusters"). The registered classes are
stand-ins that build the accessor of :mod:`.eager` or :mod:`.lazy` on first use, so that a
registration imports nothing of daskwp while the library's own import is still running.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import warnings

__all__ = ["after_import", "register_accessors"]

_REGISTERED = False
_LOCK = threading.Lock()


class _EagerAccessor:
    """``.wordpiece`` of pandas and cudf Series: :class:`daskwp.accessors.eager.WordPieceAccessor`."""

    def __new__(cls, series):
        from .eager import WordPieceAccessor
        return WordPieceAccessor(series)


class _DaskAccessor:
    """``.wordpiece`` of Dask Series: :class:`daskwp.accessors.lazy.DaskWordPieceAccessor`."""

    def __new__(cls, series):
        from .lazy import DaskWordPieceAccessor
        return DaskWordPieceAccessor(series)


def _register_pandas() -> None:
    import pandas as pd
    pd.api.extensions.register_series_accessor("wordpiece")(_EagerAccessor)


def _register_dask() -> None:
    from dask.dataframe.extensions import register_series_accessor
    register_series_accessor("wordpiece")(_DaskAccessor)


def _register_cudf() -> None:
    import cudf
    cudf.api.extensions.register_series_accessor("wordpiece")(_EagerAccessor)


class _ThenCall(importlib.abc.Loader):
    """A module's loader, then ``callback()`` once the module has run."""

    def __init__(self, loader, callback):
        self.loader, self.callback = loader, callback

    def __getattr__(self, name):   # get_resource_reader, is_package, ... of the module's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self.loader   # the module's own again
        self.callback()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds module ``name`` with the other finders, its loader wrapped in ``_ThenCall``."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        with _LOCK:
            if self not in sys.meta_path:
                return None
            sys.meta_path.remove(self)   # once; the search below skips this finder
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self.callback)
        return spec


def after_import(name: str, callback) -> None:
    """Call ``callback()`` once module ``name`` is imported: now when it is, else right after
    its import, before the importing statement gets the module."""
    if name in sys.modules:
        callback()
        return
    with _LOCK:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def register_accessors() -> None:
    """Register the ``.wordpiece`` accessor on pandas, Dask and cudf Series: on each library
    imported already, and on the others as they are imported.

    Importing daskwp calls it; calling it again does nothing. The accessor's methods are in
    the user guide (docs/guide/dask.md).

    Examples
    --------
    >>> import pandas as pd
    >>> import daskwp
    >>> daskwp.register_accessors()              # importing daskwp already did
    >>> out = pd.Series(["Hello world!"]).wordpiece.tokenize(max_length=8)
    >>> out.input_ids
    array([[ 101, 7592, 2088,  999,  102,    0,    0,    0]], dtype=int32)
    """
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    for name, register in (("pandas", _register_pandas), ("dask.dataframe", _register_dask),
                           ("cudf", _register_cudf)):
        after_import(name, _quietly(register))


def _quietly(register):
    def run() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)   # re-registration on reload
            register()
    return run
