"""The columns of a partition: which text columns it reads (``column``, and ``column_pair``
for sentence pairs), its documents as one array or a two-column table of pairs, and the
kept columns (``keep_columns``) as a table with the types planned for every partition.
Every format's reader builds its result with these.
"""

from __future__ import annotations

import pyarrow as pa

from .specs import PartitionSpec
from .utf8 import valid_strings


_STRINGLIKE = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
               pa.types.is_large_binary, pa.types.is_null)


def is_stringlike(t: pa.DataType) -> bool:
    if any(f(t) for f in _STRINGLIKE):
        return True
    if pa.types.is_dictionary(t):
        return is_stringlike(t.value_type)
    return getattr(pa.types, "is_string_view", lambda _: False)(t)


def normalized_type(t: pa.DataType) -> pa.DataType:
    """The type a kept column is written with: dictionaries decoded, strings and binaries
    as their large forms."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return pa.large_string()
    if pa.types.is_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
        return pa.large_binary()
    if pa.types.is_null(t):
        return pa.large_string()
    return t


def type_from_str(s: str) -> pa.DataType | None:
    try:
        return pa.type_for_alias(s)
    except (ValueError, KeyError):
        return None


def kept_table(columns: dict, spec: PartitionSpec) -> pa.Table:
    out = {}
    for name, t in zip(spec.keep_columns, spec.keep_types or (None,) * len(spec.keep_columns)):
        col = columns[name]
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        want = type_from_str(t) if t else None
        if want is not None and pa.types.is_large_string(want):
            col = valid_strings(col)
        elif pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if want is not None and col.type != want:
            col = col.cast(want)
        out[name] = col
    return pa.table(out)


def text_columns_of(spec: PartitionSpec) -> list[str]:
    """The text columns a partition reads: ``column``, then ``column_pair`` for pairs."""
    return [spec.column] + ([spec.column_pair] if spec.column_pair is not None else [])


def partition_documents(spec: PartitionSpec, columns: list):
    """A partition's documents from its text columns: the one array, or for sentence pairs
    a two-column table named after the columns (the texts, then the second sequences)."""
    if spec.column_pair is None:
        return columns[0]
    return pa.Table.from_arrays(columns[:2], names=[spec.column, spec.column_pair])
