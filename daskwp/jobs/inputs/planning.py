"""Planning partitions: each listed file is checked for the text column (and the pair and kept
columns, one type across files), then cut into partitions of about ``partition_size`` bytes
in input order: text and JSON Lines at line ends (found when a partition is read), CSV/TSV
at record boundaries, Parquet between row groups, a compressed or JSON array file whole
(with a warning when it is big).
"""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import pyarrow as pa

from ...core.options import JOB_OUTPUT_COLUMNS, QUOTING
from ...frames import storage
from ...frames.storage import is_url
from ..errors import InputError, JobError
from .columns import is_stringlike, normalized_type
from .compression import READ_ERRORS, open_stream
from .csv_format import csv_options, plan_csv
from .json_format import json_sample, json_type
from .parquet_format import parquet_source
from .specs import InputFile, InputWarning, POSITION_OUTPUT_NAMES, PartitionSpec


def _columns_found(f: InputFile, column: str, keep: Sequence[str] = (),
                   quoting: str = "csv",
                   lenient: bool = False) -> tuple[list | None, pa.DataType | None, dict]:
    """(column names of the file, or None for a JSON array of strings; type of ``column``
    or None; the type of every kept column, as a string); raises InputError. ``lenient``:
    bad rows among the first ones are passed over (the row policy)."""
    try:
        if f.format == "parquet":
            import pyarrow.parquet as pq
            schema = pq.ParquetFile(parquet_source(f.path)).schema_arrow
            names = schema.names
            kept = {k: str(normalized_type(schema.field(k).type)) for k in keep
                    if k in names}
            return names, (schema.field(column).type if column in names else None), kept
        if f.format in ("csv", "tsv"):
            import pyarrow.csv as pacsv
            read, parse, _ = csv_options(f.format, [column], min(f.size, 1 << 20), quoting)
            if lenient:
                parse.invalid_row_handler = lambda row: "skip"
            with open_stream(f.path, f.compression) as fh, \
                    pacsv.open_csv(fh, read_options=read, parse_options=parse) as r:
                names = r.schema.names
            return names, (pa.large_string() if column in names else None), {
                k: "large_string" for k in keep if k in names}
        if f.format in ("jsonl", "json"):
            # The keys of the first objects: an object without the column is an empty
            # document, a file where none has it is an error.
            names, samples = json_sample(f, column, keep, lenient=lenient)
            if names is None:
                return None, pa.large_string(), {}
            return names, (pa.large_string() if column in names else None), {
                k: json_type(samples[k], k, f.path) for k in keep if k in names}
    except JobError:
        raise
    except READ_ERRORS as e:
        raise InputError(f"cannot read input {f.path!r} as {f.format}: {e}") from None
    raise AssertionError(f.format)


def _default_warn(msg: str) -> None:
    warnings.warn(msg, InputWarning, stacklevel=3)


@storage.caching_heads()   # an object's first MB: fetched once (listing looked at it too)
def plan_partitions(files: Sequence[InputFile], column: str, partition_size: int, *,
                    quoting: str = "csv", keep_columns: Sequence[str] | None = None,
                    warn: Callable[[str], None] | None = None,
                    column_pair: str | None = None,
                    lenient: bool = False) -> list[PartitionSpec]:
    """Split the input into partitions of about ``partition_size`` bytes, in input order.

    Text and JSON Lines files are cut into equal byte ranges, each partition from the first
    line start at or after its first cut to the first at or after its last (found when it
    is read: a line longer than a range may leave a partition empty); CSV/TSV files at
    record boundaries (see :func:`_csv_boundary`; ``quoting: none`` at any newline); a
    Parquet file between row groups; a compressed file or a JSON array file is one
    partition. ``keep_columns`` are read with the text
    (:func:`read_partition_with_columns`): each must exist in every file with one type.
    ``warn`` receives what the job should tell the user (a big file read as one
    partition); default: :class:`InputWarning`. ``column_pair``: the column of the
    second sequences of sentence pairs, a text column of every file (Parquet, CSV/TSV,
    JSON Lines or a JSON array of objects; not plain text), read with ``column``.
    ``lenient``: the row policy (``on_bad_row: reject``): the lines and records that the
    columns are found in may hold bad rows, which are passed over (they are rejected when
    the partition is read).
    """
    versions = {f.path: f.version for f in files if f.version is not None}
    with storage.pinned(versions):
        return _plan(files, column, partition_size, versions, quoting=quoting,
                     keep_columns=keep_columns, warn=warn, column_pair=column_pair,
                     lenient=lenient)


def _plan(files: Sequence[InputFile], column: str, partition_size: int, versions: dict, *,
          quoting: str, keep_columns, warn, column_pair, lenient) -> list[PartitionSpec]:
    """plan_partitions with the objects' ``versions`` (``{path: version}``) pinned (each
    read of an object while planning is of the version listed, without a HEAD); each
    partition carries its object's."""
    if quoting not in QUOTING:
        raise InputError(f"quoting must be one of {', '.join(map(repr, QUOTING))}, "
                         f"got {quoting!r}")
    keep = tuple(keep_columns or ())
    taken = [k for k in keep if k in JOB_OUTPUT_COLUMNS or k in POSITION_OUTPUT_NAMES]
    if taken:
        raise InputError(f"keep_columns: {taken[0]!r} is a column of the output")
    if column_pair is not None and column_pair == column:
        raise InputError(f"column_pair names the text column {column!r} itself; name the "
                         f"column of the second sequences")
    warn = warn or _default_warn
    specs: list[PartitionSpec] = []
    kept_types: dict[str, tuple[str, str]] = {}
    spec_types: tuple = ()

    def add(**kw):
        specs.append(PartitionSpec(index=len(specs), column=column, quoting=quoting,
                                   keep_columns=keep, keep_types=spec_types,
                                   column_pair=column_pair, storage_options=(
                                       storage.current_options() if is_url(kw["path"])
                                       else None),
                                   object_version=versions.get(kw["path"]), **kw))

    for f in files:
        if f.size == 0:
            continue
        if column_pair is not None and f.format == "text":
            raise InputError(f"column_pair {column_pair!r}: input {f.path!r} is read as text "
                             f"(one document per line), which has no columns; sentence pairs "
                             f"are two columns of Parquet, CSV/TSV or JSON Lines input")
        if keep and f.format == "text":
            raise InputError(f"keep_columns {list(keep)!r}: input {f.path!r} is read as text "
                             f"(one document per line), which has no columns; keep columns "
                             f"of Parquet, CSV/TSV or JSON input")
        spec_types = ()
        if f.format in ("parquet", "csv", "tsv", "jsonl", "json"):
            names, dtype, types = _columns_found(f, column, keep, quoting, lenient)
            if names is None:  # a JSON array of strings: the strings are the documents
                if column_pair is not None:
                    raise InputError(f"column_pair {column_pair!r}: input {f.path!r} is a "
                                     f"JSON array of strings, which has no columns")
                if keep:
                    raise InputError(f"keep_columns {list(keep)!r}: input {f.path!r} is a "
                                     f"JSON array of strings, which has no columns")
            elif f.format not in ("jsonl", "json") or names:
                if dtype is None:
                    raise InputError(f"input {f.path!r} has no column {column!r}; columns "
                                     f"found: {', '.join(map(repr, names)) or '(none)'}")
                if not is_stringlike(dtype):
                    raise InputError(f"column {column!r} of {f.path!r} holds {dtype}, not "
                                     f"text; tokenize a string column")
            if column_pair is not None:
                p_names, p_dtype, _ = _columns_found(f, column_pair, (), quoting, lenient)
                if p_dtype is None:
                    raise InputError(f"column_pair: input {f.path!r} has no column "
                                     f"{column_pair!r}; columns found: "
                                     f"{', '.join(map(repr, p_names or [])) or '(none)'}")
                if not is_stringlike(p_dtype):
                    raise InputError(f"column_pair {column_pair!r} of {f.path!r} holds "
                                     f"{p_dtype}, not text; pair two string columns")
            if keep:
                missing = [k for k in keep if k not in types]
                if missing:
                    raise InputError(f"keep_columns: input {f.path!r} has no column "
                                     f"{missing[0]!r}; columns found: "
                                     f"{', '.join(map(repr, names or [])) or '(none)'}")
                for k in keep:
                    t = types[k]
                    if k in kept_types and kept_types[k][0] != t:
                        raise InputError(
                            f"keep_columns: column {k!r} is {t} in {f.path!r} but "
                            f"{kept_types[k][0]} in {kept_types[k][1]!r}; a kept column has "
                            f"one type in every input file")
                    kept_types.setdefault(k, (t, f.path))
                spec_types = tuple(types[k] for k in keep)
        if f.format == "parquet":
            import pyarrow.parquet as pq
            try:
                md = pq.ParquetFile(parquet_source(f.path)).metadata
            except (OSError, pa.ArrowException) as e:
                raise InputError(f"cannot read input {f.path!r} as parquet: {e}") from None
            ci = md.schema.to_arrow_schema().get_field_index(column)
            group, rows, size = [], 0, 0
            for rg in range(md.num_row_groups):
                g = md.row_group(rg)
                leaf = [g.column(j) for j in range(g.num_columns)
                        if g.column(j).path_in_schema.split(".")[0] in (column, column_pair)]
                size += sum(c.total_uncompressed_size for c in leaf) if ci >= 0 else 0
                group.append(rg)
                rows += g.num_rows
                if size >= partition_size:
                    add(path=f.path, format="parquet", row_groups=tuple(group), documents=rows)
                    group, rows, size = [], 0, 0
            if group:
                add(path=f.path, format="parquet", row_groups=tuple(group), documents=rows)
        elif f.format in ("csv", "tsv"):
            plan_csv(f, partition_size, quoting, add, warn)
        elif f.compression or f.format == "json":
            if f.size > partition_size:
                what = ("a compressed file (" + f.compression + ")" if f.compression else
                        "a JSON array file")
                warn(f"daskwp: {f.path}: {what} is read as one partition ({f.size:,} bytes "
                     f"on disk, more than partition_size {partition_size:,})"
                     + ("; write JSON Lines (one object per line) to split it"
                        if f.format == "json" else
                        "; decompress it or split it into several files for smaller "
                        "partitions"))
            add(path=f.path, format=f.format, byte_start=0, byte_end=f.size,
                compression=f.compression)
        else:
            # Cut into equal ranges of at most partition_size bytes; each partition moves
            # its cuts to the next line start when it is read (byte_ranges.exact_range), so
            # planning reads nothing here (an object store: no GET per cut, one after the
            # other on the driver), and the same on local files.
            n = -(-f.size // partition_size)
            cuts = [f.size * k // n for k in range(n + 1)]
            for start, end in zip(cuts, cuts[1:]):
                add(path=f.path, format=f.format, byte_start=start, byte_end=end,
                    cut_at_lines=True)
    return specs
