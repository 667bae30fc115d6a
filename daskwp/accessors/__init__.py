"""Layer 5 (docs/design.md §8): the ``.wordpiece`` accessor, eager (pandas, cudf) and lazy
(Dask)."""
