"""Layer 1 (docs/design.md §8): the option table, dask.config defaults, bounded caches, the
vocabulary, normalizer tables, text input as Arrow buffers, ragged containers, window
parameters and fill plan, stitching and decoding. Imports no backend, no frames, no Dask
graph code."""
