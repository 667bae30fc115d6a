"""Registering the ``.wordpiece`` accessor on pandas, Dask and (when it imports) cudf Series."""

from __future__ import annotations

import warnings

import pandas as pd

from .eager import WordPieceAccessor
from .lazy import register_dask_accessor

__all__ = ["register_accessors"]

_REGISTERED = False


def register_accessors() -> None:
    """Register the ``.wordpiece`` accessor on pandas, Dask and (when it imports) cudf
    Series.

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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # re-registration on module reload
        pd.api.extensions.register_series_accessor("wordpiece")(WordPieceAccessor)
        register_dask_accessor()
        try:
            import cudf
        except Exception:  # ImportError, or a CUDA driver error on a machine without a GPU
            cudf = None
        if cudf is not None:
            cudf.api.extensions.register_series_accessor("wordpiece")(WordPieceAccessor)
    _REGISTERED = True
