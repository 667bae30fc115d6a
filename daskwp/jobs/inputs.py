"""Job inputs: listing files, planning partitions, reading a partition as an Arrow array.

A partition is a byte range of a text or JSON Lines file (split at line ends), a whole CSV
file, or row groups of a Parquet file (docs/batch-jobs.md). Reading and counting a partition
are partition tasks: they import no Dask and run on workers.
"""

from __future__ import annotations

import dataclasses
import glob as _glob
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from ..core.options import INPUT_FORMATS
from ..core.strings import to_arrow
from .errors import InputError, JobError

__all__ = ["INPUT_FORMATS", "InputFile", "PartitionSpec", "count_partition",
           "input_fingerprint", "lines_to_arrow", "list_input_files", "plan_partitions",
           "read_partition"]

_EXTENSION_FORMATS = {
    ".parquet": "parquet", ".pq": "parquet", ".parq": "parquet",
    ".csv": "csv", ".tsv": "tsv",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
}


@dataclasses.dataclass(frozen=True)
class InputFile:
    path: str
    format: str
    size: int
    mtime_ns: int


@dataclasses.dataclass(frozen=True)
class PartitionSpec:
    """One partition: a byte range of a text/JSON Lines file, a whole CSV file, or row groups
    of a Parquet file. ``documents`` is known at planning time for Parquet only."""

    index: int
    path: str
    format: str
    column: str
    byte_start: int = 0
    byte_end: int = 0
    row_groups: tuple = ()
    documents: int | None = None

    def describe(self) -> str:
        if self.format == "parquet":
            rg = (f"row group {self.row_groups[0]}" if len(self.row_groups) == 1 else
                  f"row groups {self.row_groups[0]}-{self.row_groups[-1]}")
            return f"{self.path} ({rg})"
        if self.format in ("csv", "tsv"):
            return self.path
        return f"{self.path} (bytes {self.byte_start}-{self.byte_end})"

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["row_groups"] = list(self.row_groups)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "PartitionSpec":
        d = dict(d)
        d["row_groups"] = tuple(d.get("row_groups") or ())
        return cls(**d)


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith((".crc", "~"))


def _file_format(path: str, input_format: str) -> str:
    if input_format != "auto":
        return input_format
    return _EXTENSION_FORMATS.get(os.path.splitext(path)[1].lower(), "text")


def list_input_files(inputs, input_format: str = "auto",
                     exclude: Sequence[str] = ()) -> list[InputFile]:
    """Expand paths, globs and directories into files. A directory is walked recursively
    (names starting with '.' or '_' are skipped, as Spark/Dask metadata files); each path or
    pattern contributes its files in sorted order; list items keep their order. Nothing
    inside the folders ``exclude`` (a job's output directory) is an input."""
    items = [inputs] if isinstance(inputs, str) else list(inputs)
    skip = tuple(os.path.join(os.path.realpath(d), "") for d in exclude)

    def excluded(p: str) -> bool:
        return bool(skip) and os.path.join(os.path.realpath(p), "").startswith(skip)

    files: list[str] = []
    for item in items:
        if any(c in item for c in "*?["):
            found = sorted(p for p in _glob.glob(item, recursive=True)
                           if os.path.isfile(p) and not excluded(p))
            if not found:
                raise InputError(f"no input file matches {item!r}")
            files.extend(found)
        elif os.path.isdir(item):
            found = []
            for root, dirs, names in os.walk(item):
                dirs[:] = [d for d in dirs
                           if not _is_hidden(d) and not excluded(os.path.join(root, d))]
                found.extend(os.path.join(root, n) for n in names if not _is_hidden(n))
            found.sort(key=lambda p: Path(os.path.relpath(p, item)).as_posix())
            if not found:
                raise InputError(f"input directory {item!r} holds no files")
            files.extend(found)
        elif os.path.exists(item):
            files.append(item)
        else:
            raise InputError(f"input not found: {item!r}")
    out = []
    for p in files:
        try:
            st = os.stat(p)
            with open(p, "rb") as f:
                f.read(1)
        except OSError as e:
            raise InputError(f"cannot read input {p!r}: {e.strerror or e}") from None
        out.append(InputFile(path=os.path.abspath(p), format=_file_format(p, input_format),
                             size=st.st_size, mtime_ns=st.st_mtime_ns))
    return out


_STRINGLIKE = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
               pa.types.is_large_binary, pa.types.is_null)


def _is_stringlike(t: pa.DataType) -> bool:
    if any(f(t) for f in _STRINGLIKE):
        return True
    if pa.types.is_dictionary(t):
        return _is_stringlike(t.value_type)
    return getattr(pa.types, "is_string_view", lambda _: False)(t)


def _next_line_start(f, pos: int, size: int, chunk: int = 1 << 20) -> int:
    """The position just after the first b"\\n" at or after ``pos - 1`` (or ``size``)."""
    f.seek(pos - 1)
    while True:
        buf = f.read(chunk)
        if not buf:
            return size
        i = buf.find(b"\n")
        if i >= 0:
            return f.tell() - len(buf) + i + 1
        # keep scanning: a very long line


def _csv_options(spec_format: str, column: str, size: int):
    import pyarrow.csv as pacsv
    read = pacsv.ReadOptions(block_size=int(min(max(size + 1, 1 << 20), 2**31 - 1)),
                             use_threads=False)
    parse = pacsv.ParseOptions(delimiter="\t" if spec_format == "tsv" else ",",
                               newlines_in_values=True)
    convert = pacsv.ConvertOptions(include_columns=[column],
                                   column_types={column: pa.large_string()})
    return read, parse, convert


def _columns_found(f: InputFile, column: str) -> tuple[list[str], pa.DataType | None]:
    """(column names of the file, type of ``column`` or None); raises InputError."""
    try:
        if f.format == "parquet":
            import pyarrow.parquet as pq
            schema = pq.ParquetFile(f.path).schema_arrow
            names = schema.names
            return names, (schema.field(column).type if column in names else None)
        if f.format in ("csv", "tsv"):
            import pyarrow.csv as pacsv
            read, parse, _ = _csv_options(f.format, column, min(f.size, 1 << 20))
            with pacsv.open_csv(f.path, read_options=read, parse_options=parse) as r:
                names = r.schema.names
            return names, (pa.large_string() if column in names else None)
        if f.format == "jsonl":
            # The keys of the first objects (up to 1,000 lines): an object without the
            # column is an empty document, a file where none has it is an error.
            names: dict = {}
            with open(f.path, "rb") as fh:
                for k, line in enumerate(fh):
                    if k >= 1000:
                        break
                    if line.strip():
                        obj = json.loads(line)
                        if not isinstance(obj, dict):
                            raise ValueError(f"JSON Lines holds one object per line; line "
                                             f"{k + 1} holds a {type(obj).__name__}")
                        names.update(dict.fromkeys(obj))
                        if column in names:
                            break
            return list(names), (pa.large_string() if column in names else None)
    except (OSError, ValueError, pa.ArrowException) as e:
        raise InputError(f"cannot read input {f.path!r} as {f.format}: {e}") from None
    raise AssertionError(f.format)


def plan_partitions(files: Sequence[InputFile], column: str,
                    partition_size: int) -> list[PartitionSpec]:
    """Split the input into partitions of about ``partition_size`` bytes, in input order.

    Text and JSON Lines files split at line ends; a CSV/TSV file is one partition (quoted
    values may hold newlines); a Parquet file splits between row groups.
    """
    specs: list[PartitionSpec] = []

    def add(**kw):
        specs.append(PartitionSpec(index=len(specs), column=column, **kw))

    for f in files:
        if f.format in ("parquet", "csv", "tsv", "jsonl") and f.size > 0:
            names, dtype = _columns_found(f, column)
            if f.format != "jsonl" or names:
                if dtype is None:
                    raise InputError(f"input {f.path!r} has no column {column!r}; columns "
                                     f"found: {', '.join(map(repr, names)) or '(none)'}")
                if not _is_stringlike(dtype):
                    raise InputError(f"column {column!r} of {f.path!r} holds {dtype}, not "
                                     f"text; tokenize a string column")
        if f.size == 0:
            continue
        if f.format == "parquet":
            import pyarrow.parquet as pq
            try:
                md = pq.ParquetFile(f.path).metadata
            except (OSError, pa.ArrowException) as e:
                raise InputError(f"cannot read input {f.path!r} as parquet: {e}") from None
            ci = md.schema.to_arrow_schema().get_field_index(column)
            group, rows, size = [], 0, 0
            for rg in range(md.num_row_groups):
                g = md.row_group(rg)
                leaf = [g.column(j) for j in range(g.num_columns)
                        if g.column(j).path_in_schema.split(".")[0] == column]
                size += sum(c.total_uncompressed_size for c in leaf) if ci >= 0 else 0
                group.append(rg)
                rows += g.num_rows
                if size >= partition_size:
                    add(path=f.path, format="parquet", row_groups=tuple(group), documents=rows)
                    group, rows, size = [], 0, 0
            if group:
                add(path=f.path, format="parquet", row_groups=tuple(group), documents=rows)
        elif f.format in ("csv", "tsv"):
            add(path=f.path, format=f.format, byte_start=0, byte_end=f.size)
        else:
            start = 0
            with open(f.path, "rb") as fh:
                while start < f.size:
                    end = f.size if start + partition_size >= f.size else \
                        _next_line_start(fh, start + partition_size, f.size)
                    add(path=f.path, format=f.format, byte_start=start, byte_end=end)
                    start = end
    return specs


def _read_bytes(spec: PartitionSpec) -> bytes:
    with open(spec.path, "rb") as fh:
        fh.seek(spec.byte_start)
        data = fh.read(spec.byte_end - spec.byte_start)
    if len(data) != spec.byte_end - spec.byte_start:
        raise InputError(f"{spec.describe()}: the file is shorter than when the job was "
                         f"planned (it changed during the job)")
    return data


def lines_to_arrow(data: bytes) -> pa.Array:
    """Split UTF-8 bytes on b"\\n" only (one document per line; a final line without a
    newline is a document too) into an Arrow large_binary array, with the newlines removed.
    Bytes are not validated: invalid UTF-8 decodes to U+FFFD in the tokenizer."""
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    n = len(nl) + (1 if len(buf) and buf[-1] != 10 else 0)
    if n == 0:
        return pa.array([], type=pa.large_binary())
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl[:n - 1] + 1
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[:n] = starts - np.arange(n, dtype=np.int64)
    offsets[n] = len(buf) - len(nl)
    values = buf[buf != 10] if len(nl) else buf
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [
        None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(values))])


def read_partition(spec: PartitionSpec) -> pa.Array:
    """The documents of one partition as an Arrow string/binary array (nulls are empty
    documents)."""
    try:
        if spec.format == "text":
            return lines_to_arrow(_read_bytes(spec))
        if spec.format == "jsonl":
            import pyarrow.json as pj
            data = _read_bytes(spec)
            schema = pa.schema([(spec.column, pa.large_string())])
            table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(
                use_threads=False, block_size=int(min(max(len(data) + 1, 1 << 20), 2**31 - 1))),
                parse_options=pj.ParseOptions(explicit_schema=schema,
                                              unexpected_field_behavior="ignore"))
            return table.column(spec.column).combine_chunks()
        if spec.format in ("csv", "tsv"):
            import pyarrow.csv as pacsv
            read, parse, convert = _csv_options(spec.format, spec.column,
                                                os.path.getsize(spec.path))
            table = pacsv.read_csv(spec.path, read_options=read, parse_options=parse,
                                   convert_options=convert)
            return table.column(spec.column).combine_chunks()
        if spec.format == "parquet":
            import pyarrow.parquet as pq
            table = pq.ParquetFile(spec.path).read_row_groups(list(spec.row_groups),
                                                              columns=[spec.column])
            col = table.column(spec.column)
            if not _is_stringlike(col.type):
                raise InputError(f"column {spec.column!r} of {spec.path!r} holds {col.type}, "
                                 f"not text")
            # Dictionary, null and string_view columns become plain strings, as the
            # tokenizer's own input path does.
            return to_arrow(col).combine_chunks()
    except JobError:
        raise
    except (OSError, ValueError, pa.ArrowException) as e:
        raise InputError(f"cannot read {spec.describe()} as {spec.format}: {e}") from None
    raise AssertionError(spec.format)


def count_partition(spec: PartitionSpec) -> int:
    """Documents in a partition (the same rule as :func:`read_partition`)."""
    if spec.documents is not None:
        return spec.documents
    if spec.format == "text":
        data = _read_bytes(spec)
        return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return len(read_partition(spec))


def input_fingerprint(files: Sequence[InputFile]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        h.update(json.dumps([f.path, f.format, f.size, f.mtime_ns]).encode())
    return h.hexdigest()
