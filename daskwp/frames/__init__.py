"""Layer 3 (docs/design.md §8): partition frames (pandas, cudf) and Arrow list columns
(``partition``), the frame schema (``schema``), Parquet parts (``part_writer``, daskwp's own
writer ``parquet_writer``; ``thrift_compact``, the protocol of Parquet's footers and page
headers, written there and read by the accessor's page reader), stitching frames
(``stitching``), Megatron datasets (``megatron``), local paths and fsspec URLs
(``storage``). Imports no Dask."""
