"""Layer 3 (docs/design.md §8): partition frames (pandas, cudf), Arrow list columns, the frame
schema, portable Parquet metadata, stitching frames. Imports no Dask."""
