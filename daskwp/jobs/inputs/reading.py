"""Reading a partition on a worker: the documents (and kept columns) of any format, the row
policy's bad rows as empty documents, the invalid-UTF-8 counts for the job summary, and
counting a partition's documents without holding them. These are partition tasks: they
import no Dask and run on workers, under the storage options of a URL partition. A URL
partition's count fetches its bytes once into a spool file that its write reads
(:mod:`.fetch_spool`).
"""

from __future__ import annotations

import pyarrow as pa

from ...frames import storage
from ..errors import InputError, JobError
from .byte_ranges import (exact_range, map_range, mapped_pieces, read_bytes,
                          read_counted_bytes, read_partition_bytes, read_pieces)
from .columns import partition_documents
from .compression import READ_ERRORS
from .csv_format import read_csv
from .fetch_spool import fetched, spooled
from .json_format import count_jsonl_documents, read_json_array, read_jsonl
from .parquet_format import read_parquet
from .specs import PartitionSpec
from .text import count_text_lines, read_text_lines
from .utf8 import count_invalid_utf8


def _read_documents(spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    """``(documents, kept, invalid)``: ``invalid`` is :func:`count_invalid_utf8` of the
    documents where reading found it (text, JSON Lines read natively), else None. ``bad``: the row policy
    (``on_bad_row: reject``): a row that cannot be read (a JSON Lines line that is not a
    JSON object, a CSV record with another number of fields, a non-text value in the text
    column) is an empty document (null) and ``(its index in the partition, the reason)`` is
    appended to ``bad``; None: such a row is an error."""
    try:
        if spec.format == "text":
            lines, invalid = read_text_lines(spec)
            if spec.column_pair is not None:
                # only the empty partition of an input without documents (planning refuses
                # column_pair for text input)
                return partition_documents(spec, [lines, lines]), None, None
            return lines, None, invalid
        if spec.format == "jsonl":
            # the arrays it returns are copies (native: into host pool buffers): the bytes
            # go into a host pool buffer, reused by the next partition once freed
            return read_jsonl(read_partition_bytes(spec), spec, with_kept, bad)
        if spec.format == "json":
            return (*read_json_array(read_bytes(spec), spec, with_kept, bad), None)
        if spec.format in ("csv", "tsv"):
            return (*read_csv(spec, with_kept, bad), None)
        if spec.format == "parquet":
            return (*read_parquet(spec, with_kept), None)
    except JobError:
        raise
    except READ_ERRORS as e:
        raise InputError(f"cannot read {spec.describe()} as {spec.format}: {e}") from None
    raise AssertionError(spec.format)


def _read(spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    """:func:`_read_documents` with the storage options of a URL partition, from the
    spool file of its count when there is one on this host; a range planned with
    ``cut_at_lines`` from the line starts at its cuts (:func:`.byte_ranges.exact_range`)."""
    if spec.storage_options is None:
        return _read_documents(exact_range(spec), with_kept, bad)
    with storage.using(spec.storage_options), _pinned(spec), spooled(spec):
        return _read_documents(exact_range(spec), with_kept, bad)


def read_partition(spec: PartitionSpec, bad: list | None = None):
    """The documents of one partition as an Arrow string/binary array (nulls are empty
    documents; invalid UTF-8 stays as it is, for every format); for sentence pairs
    (``column_pair``) a two-column table of them, one row per pair. ``bad``: the row
    policy (:func:`_read`)."""
    return _read(spec, False, bad)[0]


def read_partition_with_columns(spec: PartitionSpec) -> tuple[pa.Array, pa.Table | None]:
    """``(documents, kept)``: the documents as :func:`read_partition` gives them, and a
    table of the partition's ``keep_columns`` (one row per document, with the types
    planned for every partition), or None when the job keeps no column."""
    return _read(spec, bool(spec.keep_columns))[:2]


def read_partition_with_counts(spec: PartitionSpec, bad: list | None = None) -> tuple:
    """``(documents, kept, (invalid_bytes, invalid_documents))``: what
    :func:`read_partition_with_columns` gives, and :func:`count_invalid_utf8` of the
    documents. A text partition's counts come from the pass that splits its lines (no
    second pass over the bytes); every other format counts after reading. ``bad``: the
    row policy (:func:`_read`)."""
    texts, kept, invalid = _read(spec, bool(spec.keep_columns), bad)
    return texts, kept, invalid if invalid is not None else count_invalid_utf8(texts)


def count_partition(spec: PartitionSpec, lenient: bool = False, keep: bool = True) -> int:
    """Documents in a partition (the same rule as :func:`read_partition`); ``lenient``:
    under the row policy, where a bad row is a document too. A URL partition of a job with
    a spool is fetched into its spool file first and counted from there. ``keep`` False:
    its bytes are never kept for the write (:func:`read_counted_bytes`: a count run well
    before its partition's write)."""
    if spec.documents is not None:
        return spec.documents
    with _pinned(spec), fetched(spec), storage.using(spec.storage_options):
        return _count(exact_range(spec), lenient, keep)


def _pinned(spec: PartitionSpec):
    """Within the block the partition's object is read at the version planning listed
    (:func:`~daskwp.frames.storage.pinned`): no HEAD, and an object replaced since is an
    error, never bytes of another version than those counted."""
    return storage.pinned({spec.path: spec.object_version})


def _count(spec: PartitionSpec, lenient: bool, keep: bool = True) -> int:
    if spec.format == "text":
        try:
            with storage.using(spec.storage_options):
                return count_text_lines(spec)
        except JobError:
            raise
        except READ_ERRORS as e:
            raise InputError(f"cannot read {spec.describe()} as text: {e}") from None
    if spec.format == "jsonl":
        # a document per non-blank line, counted without parsing (the count pass of a job
        # parsed every partition once more than its write): whole when the write that
        # follows in this process takes the bytes, else from a memory map of the file (a
        # local one, or a URL's fetch spool file) piece by piece, else in pieces into one
        # kept buffer
        try:
            with storage.using(spec.storage_options):
                whole = read_counted_bytes(spec) if keep else None
                if whole is not None:
                    return count_jsonl_documents((whole,))
                mapped = map_range(spec)
                return count_jsonl_documents(read_pieces(spec) if mapped is None
                                             else mapped_pieces(mapped))
        except JobError:
            raise
        except READ_ERRORS as e:
            raise InputError(f"cannot read {spec.describe()} as jsonl: {e}") from None
    return len(read_partition(spec, [] if lenient else None))
