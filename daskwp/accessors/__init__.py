"""Layer 5 (docs/design.md §8): the ``.wordpiece`` accessor, eager (pandas, cudf) and lazy
(Dask)."""


def __getattr__(name: str):
    """``daskwp.accessors.eager`` and ``.lazy`` on first use: ``import daskwp`` does not import
    them (pandas and dask.dataframe come with them; see :mod:`.register`)."""
    if name in ("eager", "lazy"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
