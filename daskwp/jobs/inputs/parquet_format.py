"""Parquet inputs: a partition is a run of row groups, read with only the text columns (and
the kept ones); dictionary, null and string_view columns become plain strings, as on the
tokenizer's own input path. An object URL is opened as a file object, so only the footer and
the needed column chunks are fetched.
"""

from __future__ import annotations

from ...core.strings import to_arrow
from ...frames.storage import is_url, open_input
from ..errors import InputError
from .columns import is_stringlike, kept_table, partition_documents, text_columns_of
from .specs import PartitionSpec


def parquet_source(path: str):
    """What ``pq.ParquetFile`` opens: a local path, or a URL's file object (it reads the
    footer and the column chunks it needs by byte ranges)."""
    return open_input(path) if is_url(path) else path


def read_parquet(spec: PartitionSpec, with_kept: bool):
    import pyarrow.parquet as pq
    keep = spec.keep_columns if with_kept else ()
    text_columns = text_columns_of(spec)
    columns = text_columns + [k for k in keep if k not in text_columns]
    table = pq.ParquetFile(parquet_source(spec.path)).read_row_groups(list(spec.row_groups), columns=columns)
    docs = []
    for c in text_columns:
        col = table.column(c)
        if not is_stringlike(col.type):
            raise InputError(f"column {c!r} of {spec.path!r} holds {col.type}, not text")
        # Dictionary, null and string_view columns become plain strings, as the tokenizer's
        # own input path does.
        docs.append(to_arrow(col).combine_chunks())
    texts = partition_documents(spec, docs)
    kept = kept_table({k: table.column(k) for k in keep}, spec) if keep else None
    return texts, kept
