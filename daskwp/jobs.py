"""Batch jobs: job configuration, input readers, the resumable Parquet writer and the summary.

A job reads documents from files (plain text, CSV/TSV, JSON Lines or Parquet), splits them
into partitions, tokenizes every partition on a Dask cluster (or in-process) and writes one
Parquet file per partition plus ``_job.json`` (what the job is) and ``_summary.json`` (what
it did). See ``docs/batch-jobs.md`` for the user-facing description.

Layout of this module: configuration (``JobConfig``), inputs (``list_input_files``,
``plan_partitions``, ``read_partition``), partition tasks (``count_partition``,
``write_partition``: they import no dask and run on workers), output checks
(``check_part``, ``verify_output``) and the driver (``run_job``).

Resume design
-------------
* ``_job.json`` is written before any part: job parameters, the input fingerprint (path, size
  and mtime of every file), the daskwp version, the partition plan and, once counted, the
  number of documents of every partition (hence every partition's global logID offset).
* Each part is written to a hidden temporary name in the output folder, flushed, fsync'ed and
  renamed to ``part-NNNNN.parquet`` (atomic on POSIX), so a part file either is complete or
  does not exist. Its Parquet key-value metadata (key ``daskwp``) records the job id, the
  partition index, its logID offset and its statistics.
* A rerun with the same parameters and inputs keeps every part whose footer is readable and
  whose metadata matches the plan, and writes only the others. Different parameters or inputs
  are refused: "output directory holds another job's data".
* At the end the logID column of every part is read back: the logIDs of part i must run from
  its offset to offset + documents - 1 (each document present, in order, exactly once), and the
  documents of all parts must add up to the input's.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import glob as _glob
import hashlib
import io
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa

from ._input import to_arrow

JOB_FILE = "_job.json"
SUMMARY_FILE = "_summary.json"
PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"
TMP_PREFIX = ".tmp-part-"
METADATA_KEY = b"daskwp"
JOB_FORMAT = 1

PACKAGE_PREFIX = "package:"
PACKAGE_DATA = Path(__file__).resolve().parent / "data"

INPUT_FORMATS = ("auto", "text", "csv", "tsv", "jsonl", "parquet")
DEVICES = ("auto", "cpu", "gpu")
LOCAL_SCHEDULERS = ("synchronous",)

_EXTENSION_FORMATS = {
    ".parquet": "parquet", ".pq": "parquet", ".parq": "parquet",
    ".csv": "csv", ".tsv": "tsv",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
}


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------
class JobError(Exception):
    """A batch job cannot run or did not complete; the message says why."""


class ConfigError(JobError):
    """A job configuration value is not allowed (a config key, a parameter, a path)."""


class InputError(JobError):
    """An input cannot be listed or read, or lacks the text column."""


class OutputConflictError(JobError):
    """The output directory holds data this job did not write."""


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------
def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _check_bool(key, v):
    if isinstance(v, bool):
        return v
    raise ValueError(f"{key} must be true or false, got {v!r}")


def _check_opt_bool(key, v):
    return None if v is None else _check_bool(key, v)


def _check_int_min(minimum):
    def check(key, v):
        if _is_int(v) and v >= minimum:
            return int(v)
        raise ValueError(f"{key} must be an integer >= {minimum}, got {v!r}")
    return check


def _check_opt_int_min(minimum):
    inner = _check_int_min(minimum)
    return lambda key, v: None if v is None else inner(key, v)


def _check_choice(choices):
    def check(key, v):
        if v in choices and isinstance(v, str):
            return v
        raise ValueError(f"{key} must be one of {', '.join(map(repr, choices))}; got {v!r}")
    return check


def _check_padding(key, v):
    if v is True or v == "max_length":
        return "max_length"
    if v is False or v in ("do_not_pad", "none", None):
        return "do_not_pad"
    raise ValueError(f"{key} must be 'max_length' (pad every row to max_length) or "
                     f"'do_not_pad' (ragged rows); got {v!r}")


def _check_str(key, v):
    if isinstance(v, str) and v:
        return v
    raise ValueError(f"{key} must be a non-empty string, got {v!r}")


def _check_opt_str(key, v):
    return None if v is None else _check_str(key, v)


def _check_inputs(key, v):
    if isinstance(v, str) and v:
        return v
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, str) and x for x in v):
        return list(v)
    raise ValueError(f"{key} must be a path, a glob or a list of them, got {v!r}")


def _check_bytes(key, v):
    from dask.utils import parse_bytes
    try:
        n = parse_bytes(v) if isinstance(v, str) else (int(v) if _is_int(v) else None)
    except (ValueError, TypeError):
        n = None
    if n is None or n < 1:
        raise ValueError(f"{key} must be a size such as '64MB', '1GiB' or a number of bytes "
                         f">= 1; got {v!r}")
    return int(n)


def _check_scheduler(key, v):
    if v is None or (isinstance(v, str) and v.lower() in ("", "null", "none", "local")):
        return None
    if isinstance(v, str):
        return v
    raise ValueError(f"{key} must be a scheduler address such as 'tcp://host:8786', "
                     f"'synchronous' (no cluster), or null (start a local cluster); got {v!r}")


def _check_compression(key, v):
    allowed = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")
    if isinstance(v, str) and v.lower() in allowed:
        return v.lower()
    if v is None:
        return "none"
    raise ValueError(f"{key} must be one of {', '.join(allowed)}; got {v!r}")


# key -> (default, validator, affects the output?)
_KEYS: dict[str, tuple[Any, Callable, bool]] = {
    "input": (None, _check_inputs, False),
    "output": (None, _check_str, False),
    "column": ("text", _check_str, True),
    "input_format": ("auto", _check_choice(INPUT_FORMATS), True),
    "vocab": (None, _check_opt_str, False),
    "lowercase": (None, _check_opt_bool, True),
    "strip_accents": (None, _check_opt_bool, True),
    "clean_text": (True, _check_bool, True),
    "handle_chinese_chars": (True, _check_bool, True),
    "max_input_chars_per_word": (100, _check_int_min(1), True),
    "max_length": (128, _check_int_min(1), True),
    "stride": (0, _check_int_min(0), True),
    "truncation": (False, _check_bool, True),
    "add_special_tokens": (True, _check_bool, True),
    "padding": ("max_length", _check_padding, True),
    "partition_size": ("64MB", _check_bytes, True),
    "compression": ("zstd", _check_compression, True),
    "device": ("auto", _check_choice(DEVICES), False),
    "scheduler_address": (None, _check_scheduler, False),
    "n_workers": (None, _check_opt_int_min(1), False),
    "threads_per_worker": (None, _check_opt_int_min(1), False),
    "overwrite": (False, _check_bool, False),
    "quiet": (False, _check_bool, False),
}
CONFIG_KEYS = tuple(_KEYS)
PATH_KEYS = ("input", "output", "vocab")
# Output-affecting keys recorded in _job.json (the vocabulary enters through its hash).
JOB_KEYS = tuple(k for k, (_, _, affects) in _KEYS.items() if affects)


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """A validated job configuration; field names are the config keys (see ``CONFIG_KEYS``).

    Paths are absolute once the config is built (``input`` may still hold glob patterns).
    """

    input: Any
    output: str
    column: str = "text"
    input_format: str = "auto"
    vocab: str | None = None
    lowercase: bool | None = None
    strip_accents: bool | None = None
    clean_text: bool = True
    handle_chinese_chars: bool = True
    max_input_chars_per_word: int = 100
    max_length: int = 128
    stride: int = 0
    truncation: bool = False
    add_special_tokens: bool = True
    padding: str = "max_length"
    partition_size: int = 64_000_000
    compression: str = "zstd"
    device: str = "auto"
    scheduler_address: str | None = None
    n_workers: int | None = None
    threads_per_worker: int | None = None
    overwrite: bool = False
    quiet: bool = False



def resolve_path(value: str, base_dir: str | os.PathLike) -> str:
    """``package:NAME`` -> the file bundled in ``daskwp/data``; ``~`` is expanded; a relative
    path is taken relative to ``base_dir``."""
    if value.startswith(PACKAGE_PREFIX):
        name = value[len(PACKAGE_PREFIX):].lstrip("/")
        p = PACKAGE_DATA / name
        if not p.exists():
            found = sorted(x.name for x in PACKAGE_DATA.iterdir() if not x.name.startswith("."))
            raise ConfigError(f"{value!r}: daskwp bundles no file {name!r}; bundled files: "
                              f"{', '.join(found)}")
        return str(p)
    if "://" in value:
        raise ConfigError(f"{value!r}: remote URLs are not supported; use a local or "
                          f"shared-filesystem path")
    p = Path(os.path.expanduser(value))
    if not p.is_absolute():
        p = Path(base_dir) / p
    return os.path.normpath(str(p))


def make_config(values: dict, *, base_dir: str | os.PathLike | None = None,
                source: str = "config", path_base_dirs: dict | None = None) -> JobConfig:
    """Validate a mapping of config keys into a :class:`JobConfig`.

    ``base_dir`` anchors relative paths (default: the current directory);
    ``path_base_dirs`` may give another anchor per path key (used for ``--set`` values).
    """
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: a job configuration is a mapping of keys to values, "
                          f"got {type(values).__name__}")
    base_dir = Path.cwd() if base_dir is None else Path(base_dir)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in _KEYS:
            close = difflib.get_close_matches(str(key), CONFIG_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{source}: unknown config key {key!r}{hint}; allowed keys: "
                              f"{', '.join(CONFIG_KEYS)}")
        try:
            out[key] = _KEYS[key][1](key, value)
        except ValueError as e:
            raise ConfigError(f"{source}: {e}") from None
    for key in ("input", "output"):
        if out.get(key) is None:
            raise ConfigError(f"{source}: the config key {key!r} is required")
    anchors = {k: (path_base_dirs or {}).get(k, base_dir) for k in PATH_KEYS}
    for key in CONFIG_KEYS:
        if key not in out:
            try:
                out[key] = _KEYS[key][1](key, default_value(key))
            except ValueError as e:
                raise ConfigError(f"dask config daskwp.{key}: {e}") from None
            anchors[key] = Path.cwd()
    for key in PATH_KEYS:
        v = out.get(key)
        if v is None:
            continue
        if isinstance(v, list):
            out[key] = [resolve_path(x, anchors[key]) for x in v]
        else:
            out[key] = resolve_path(v, anchors[key])
    return JobConfig(**out)


# Keys whose default comes from dask.config here; the tokenizer keys (vocab, lowercase)
# resolve through dask.config in ``accessor.resolve_tokenizer``, where None also lets a
# model folder's own settings apply.
_DASK_CONFIG_KEYS = ("max_length", "stride", "truncation", "add_special_tokens", "padding",
                     "device", "scheduler_address", "n_workers", "threads_per_worker")


def default_value(key: str):
    """The default of a config key: ``dask.config``'s ``daskwp.<key>`` when set there
    (``daskwp/config.yaml``, ~/.config/dask, DASK_DASKWP__<KEY>), else the built-in one."""
    default = _KEYS[key][0]
    if key not in _DASK_CONFIG_KEYS:
        return default
    try:
        from . import _config  # noqa: F401  (registers daskwp's defaults)
        import dask.config
        return dask.config.get(f"daskwp.{key}", default=default)
    except ImportError:
        return default


def parse_override(item: str) -> tuple[str, Any]:
    """``key=value`` (value read as a YAML scalar: ``64``, ``true``, ``null``, ``a string``)."""
    import yaml
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    key, raw = item.split("=", 1)
    key = key.strip().replace("-", "_")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    if isinstance(value, (dict, list)) and key != "input":
        value = raw
    return key, value


def load_config(path: str | os.PathLike, overrides: Sequence[str] | dict = (),
                *, cwd: str | os.PathLike | None = None) -> JobConfig:
    """Read a job YAML. Relative paths in the file resolve against the file's folder;
    ``overrides`` (``key=value`` strings or a dict) replace keys, their relative paths
    resolving against ``cwd`` (default: the current directory)."""
    import yaml
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read job file {str(path)!r}: {e.strerror or e}") from None
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a job file is a mapping of config keys to values, got "
                          f"{type(values).__name__}")
    values = dict(values)
    if isinstance(overrides, dict):
        items = list(overrides.items())
    else:
        items = [parse_override(s) for s in overrides]
    cwd = Path.cwd() if cwd is None else Path(cwd)
    anchors = {}
    for key, value in items:
        values[key] = value
        if key in PATH_KEYS:
            anchors[key] = cwd
    return make_config(values, base_dir=path.resolve().parent, source=str(path),
                       path_base_dirs=anchors)


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------
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


def list_input_files(inputs, input_format: str = "auto") -> list[InputFile]:
    """Expand paths, globs and directories into files. A directory is walked recursively
    (names starting with '.' or '_' are skipped, as Spark/Dask metadata files); each path or
    pattern contributes its files in sorted order; list items keep their order."""
    items = [inputs] if isinstance(inputs, str) else list(inputs)
    files: list[str] = []
    for item in items:
        if any(c in item for c in "*?["):
            found = sorted(p for p in _glob.glob(item, recursive=True) if os.path.isfile(p))
            if not found:
                raise InputError(f"no input file matches {item!r}")
            files.extend(found)
        elif os.path.isdir(item):
            found = []
            for root, dirs, names in os.walk(item):
                dirs[:] = [d for d in dirs if not _is_hidden(d)]
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


# ---------------------------------------------------------------------------------------
# Partition tasks (run on workers; no dask here)
# ---------------------------------------------------------------------------------------
def share(obj):
    """Identity: a task whose result (the tokenizer) other tasks depend on."""
    return obj


def part_name(index: int, n_partitions: int) -> str:
    width = max(5, len(str(max(n_partitions - 1, 0))))
    return f"{PART_PREFIX}{index:0{width}d}{PART_SUFFIX}"


@functools.lru_cache(maxsize=None)
def _worker_device(device: str) -> str:
    """The device of this process ('auto' resolved here, on the worker)."""
    if device == "auto":
        from .cluster import resolve_device as _resolve
        return _resolve("auto")
    return device


def _as_series(texts: pa.Array, device: str):
    """A partition's documents as the Series type the tokenizer runs on: cudf on a GPU
    worker (when the text is valid UTF-8), else pandas backed by the Arrow array."""
    if _worker_device(device) == "gpu":
        import cudf
        try:
            return cudf.Series.from_arrow(texts.cast(pa.large_string()))
        except pa.ArrowInvalid:
            pass  # not UTF-8: the CPU path gives the defined ids (U+FFFD, see the README)
    import pandas as pd
    return pd.Series(pd.arrays.ArrowExtensionArray(texts))


def _frame_to_arrow(frame) -> pa.Table:
    if type(frame).__module__.split(".")[0] == "cudf":
        return frame.to_arrow()
    return pa.Table.from_pandas(frame, preserve_index=False)


def tokenize_partition(tokenizer, texts: pa.Array, options: dict, logid_offset: int,
                       device: str = "cpu", partition: int | None = None):
    """Tokenize one partition into the output table and its statistics.

    The table is the partition frame of the ``.wordpiece`` accessor
    (``daskwp.accessor.tokenize_partition``: logID, start, stop, input_ids, attention_mask,
    window) with the global offset added to its logIDs (``accessor.add_logid_offset``), so a
    job writes the same columns as ``ddf[col].wordpiece.tokenize(...).to_parquet(...)``.

    Memory: the tokenizer's arrays for the partition and the Arrow table sharing them.
    """
    from . import accessor
    window_options = {k: options[k] for k in accessor.WINDOW_OPTIONS}
    frame = accessor.tokenize_partition(_as_series(texts, device), tokenizer, window_options,
                                        partition=partition)
    frame = accessor.add_logid_offset(frame, int(logid_offset))
    table = _frame_to_arrow(frame)
    return table, partition_statistics(table, tokenizer.vocab.unk_id)


def partition_statistics(table: pa.Table, unk_id: int) -> dict:
    """Rows, document tokens (each counted once: a document's [start, stop] slices tile its
    tokens) and unknown tokens among them, from a partition table."""
    rows = table.num_rows
    if rows == 0:
        return {"rows": 0, "tokens": 0, "unknown_tokens": 0}
    ids = table.column("input_ids").combine_chunks()
    offsets = ids.offsets.to_numpy().astype(np.int64)
    values = ids.values.to_numpy(zero_copy_only=False)
    start = table.column("start").to_numpy()
    stop = table.column("stop").to_numpy()
    lo, hi = offsets[:-1] + start, offsets[:-1] + stop + 1
    unk = np.flatnonzero(values == unk_id)  # few: count those inside the owned slices
    return {"rows": int(rows), "tokens": int(np.sum(hi - lo)),
            "unknown_tokens": int(np.sum(np.searchsorted(unk, hi) - np.searchsorted(unk, lo)))}


def write_partition(spec: PartitionSpec, logid_offset: int, out_dir: str, tokenizer,
                    options: dict, job_id: str, n_partitions: int,
                    device: str = "cpu") -> dict:
    """Read, tokenize and write one partition atomically; return its statistics.

    The table goes to a hidden temporary file in ``out_dir`` that is fsync'ed and renamed to
    ``part-NNNNN.parquet``: a part exists complete or not at all, and a retried task (a
    worker died) simply replaces it with the same bytes.
    """
    import pyarrow.parquet as pq
    t0 = time.perf_counter()
    texts = read_partition(spec)
    if spec.documents is not None and len(texts) != spec.documents:
        raise InputError(f"{spec.describe()} now holds {len(texts)} documents, "
                         f"{spec.documents} when the job was planned: the input changed "
                         f"during the job")
    import pyarrow.compute as pc
    text_bytes = int(pc.sum(pc.binary_length(texts)).as_py() or 0) if len(texts) else 0
    table, stats = tokenize_partition(tokenizer, texts, options, logid_offset, device,
                                      partition=spec.index)
    stats.update(partition=spec.index, documents=len(texts), text_bytes=text_bytes,
                 logid_offset=int(logid_offset))
    meta = {"job_id": job_id, **stats}
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
    name = part_name(spec.index, n_partitions)
    tmp = os.path.join(out_dir, f"{TMP_PREFIX}{spec.index}-{uuid.uuid4().hex}.parquet")
    try:
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh, compression=options["compression"],
                           row_group_size=65536)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(out_dir, name))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    stats["seconds"] = time.perf_counter() - t0
    return stats


# ---------------------------------------------------------------------------------------
# Output checks
# ---------------------------------------------------------------------------------------
def check_part(path: str, index: int, job_id: str, documents: int | None,
               logid_offset: int | None) -> dict | None:
    """The statistics of a complete, valid part of this job, or None (missing, unreadable,
    written by another job or for another partition)."""
    import pyarrow.parquet as pq
    try:
        md = pq.read_metadata(path)
        meta = json.loads((md.metadata or {}).get(METADATA_KEY, b"{}"))
    except (OSError, ValueError, pa.ArrowException):
        return None
    ok = (meta.get("job_id") == job_id and meta.get("partition") == index
          and meta.get("rows") == md.num_rows
          and (documents is None or meta.get("documents") == documents)
          and (logid_offset is None or meta.get("logid_offset") == logid_offset))
    if not ok:
        return None
    return {k: meta[k] for k in ("partition", "documents", "rows", "tokens",
                                 "unknown_tokens", "text_bytes", "logid_offset")}


def verify_output(out_dir: str, plan: Sequence[dict]) -> None:
    """Read the logID column of every part back and check that part i holds the logIDs
    offset_i .. offset_i + documents_i - 1, each document's rows together and in order; the
    offsets tile 0..N-1. Raises JobError naming the first bad part."""
    import pyarrow.parquet as pq
    expected_offset = 0
    n = len(plan)
    for p in plan:
        path = os.path.join(out_dir, part_name(p["index"], n))
        if p["logid_offset"] != expected_offset:
            raise JobError(f"job plan of {out_dir!r} is inconsistent at partition "
                           f"{p['index']}")
        docs = p["documents"]
        expected_offset += docs
        try:
            ids = pq.read_table(path, columns=["logID"]).column("logID").to_numpy()
        except (OSError, pa.ArrowException) as e:
            raise JobError(f"output part {path!r} cannot be read back: {e}") from None
        if docs == 0:
            if len(ids):
                raise JobError(f"output part {path!r} holds rows for no documents")
            continue
        d = np.diff(ids)
        if (len(ids) < docs or ids[0] != p["logid_offset"]
                or ids[-1] != p["logid_offset"] + docs - 1 or (len(d) and (d.min() < 0 or
                                                                     d.max() > 1))):
            raise JobError(f"output part {path!r} does not hold exactly the logIDs "
                           f"{p['logid_offset']}..{p['logid_offset'] + docs - 1} in order; "
                           f"delete it and rerun the job")


# ---------------------------------------------------------------------------------------
# Running tasks: in-process or on a distributed cluster
# ---------------------------------------------------------------------------------------
class Progress:
    """A one-line text progress bar on stderr (silent when ``quiet``)."""

    def __init__(self, label: str, total: int, quiet: bool, total_bytes: int = 0):
        self.label, self.total, self.quiet = label, total, quiet
        self.done = 0
        self.bytes = 0
        self.total_bytes = total_bytes
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self._last_print = 0.0
        self._last_decile = -1
        if not quiet and total:
            self._show(force=True)

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        self.done += n
        self.bytes += nbytes
        if not self.quiet and self.total:
            self._show(force=self.done == self.total)

    def _show(self, force: bool = False) -> None:
        now = time.perf_counter()
        frac = self.done / self.total
        if self.tty:
            if not force and now - self._last_print < 0.2:
                return
            width = 30
            fill = int(round(frac * width))
            el = now - self.t0
            rate = f"  {self.bytes / 1e6 / el:7.1f} MB/s" if self.bytes and el > 0 else ""
            sys.stderr.write(f"\r{self.label:<10} [{'#' * fill}{'.' * (width - fill)}] "
                             f"{self.done}/{self.total}{rate}  {el:6.1f} s")
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            decile = int(frac * 10)
            if decile == self._last_decile or self.done == 0:
                return
            self._last_decile = decile
            el = now - self.t0
            rate = f", {self.bytes / 1e6 / el:.1f} MB/s" if self.bytes and el > 0 else ""
            sys.stderr.write(f"{self.label}: {self.done}/{self.total} partitions "
                             f"({100 * frac:.0f}%, {el:.1f} s{rate})\n")
        sys.stderr.flush()
        self._last_print = now


def _run_tasks(client, fn, arg_lists: list[tuple], keys: list[str], on_result,
               describe: Callable[[int], str]) -> None:
    """Run ``fn(*args)`` for every args tuple; call ``on_result(i, result)`` as each ends."""
    if client is None:
        for i, args in enumerate(arg_lists):
            try:
                res = fn(*args)
            except JobError as e:
                raise type(e)(f"{describe(i)} failed: {e}") from e
            except Exception as e:
                raise JobError(f"{describe(i)} failed: {type(e).__name__}: {e}") from e
            on_result(i, res)
        return
    from distributed import as_completed
    futures = [client.submit(fn, *args, key=key, pure=False)
               for args, key in zip(arg_lists, keys)]
    index = {f.key: i for i, f in enumerate(futures)}
    try:
        for fut in as_completed(futures):
            i = index[fut.key]
            if fut.status == "error":
                exc = fut.exception()
                if isinstance(exc, JobError):
                    raise type(exc)(f"{describe(i)} failed: {exc}") from exc
                raise JobError(f"{describe(i)} failed: {type(exc).__name__}: {exc}")
            if fut.status == "cancelled":
                raise JobError(f"{describe(i)} was cancelled (the cluster lost it)")
            on_result(i, fut.result())
            fut.release()
    finally:
        client.cancel([f for f in futures if not f.done()])


def resolve_device(device: str) -> str:
    """'cpu' or 'gpu' ('auto': GPUs when dask-cuda, cudf and a GPU are present)."""
    from .cluster import resolve_device as _resolve
    try:
        return _resolve(device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def connect_cluster(cfg: JobConfig, device: str):
    """``daskwp.connect`` for the job: a running scheduler, or a local (CUDA) cluster."""
    from .cluster import connect
    if cfg.scheduler_address:
        try:
            return connect(scheduler_address=cfg.scheduler_address)
        except OSError as e:
            raise JobError(f"cannot reach the scheduler at {cfg.scheduler_address!r}: "
                           f"{e}") from None
    return connect(device=device, n_workers=cfg.n_workers,
                   threads_per_worker=cfg.threads_per_worker, dashboard_address=":0")


# ---------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------
_PARTITION_OPTIONS = ("max_length", "stride", "truncation", "add_special_tokens", "padding",
                      "compression")


def build_tokenizer(cfg: JobConfig):
    """The single-machine tokenizer a job config asks for, resolved as the ``.wordpiece``
    accessor resolves it (``accessor.resolve_tokenizer``: a model folder's own settings,
    ``dask.config`` defaults)."""
    from .accessor import resolve_tokenizer
    options = {k: getattr(cfg, k) for k in ("strip_accents", "clean_text",
                                            "handle_chinese_chars",
                                            "max_input_chars_per_word")}
    try:
        return resolve_tokenizer(cfg.vocab, cfg.lowercase, **options)
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(f"vocab {cfg.vocab or '(default)'}: {e}") from None


def check_window_parameters(cfg: JobConfig, tokenizer, source: str = "config") -> None:
    """Raise ConfigError for window parameters the tokenizer refuses (stride >= L, ...),
    before any cluster starts. The tokenizer's own validation gives the message."""
    options = {k: getattr(cfg, k) for k in _PARTITION_OPTIONS}
    try:
        tokenize_partition(tokenizer, pa.array([""], type=pa.large_string()), options, 0)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{source}: {e}") from None


def validate_job(cfg: JobConfig, source: str = "config"):
    """Everything about a job that can be checked without reading the input or starting a
    cluster: the vocabulary loads and the window parameters are allowed. Returns the
    tokenizer."""
    tok = build_tokenizer(cfg)
    check_window_parameters(cfg, tok, source)
    return tok


def job_parameters(cfg: JobConfig, tokenizer) -> dict:
    """The output-affecting parameters, as recorded in _job.json and _summary.json. The
    vocabulary enters by its hash (its path may move)."""
    params = {k: getattr(cfg, k) for k in JOB_KEYS}
    params.update(tokenizer.settings)
    params["vocab_hash"] = tokenizer.vocab.hash
    return params


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, sort_keys=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _our_files(names: Iterable[str]) -> tuple[list[str], list[str]]:
    ours, other = [], []
    for n in names:
        is_ours = (n in (JOB_FILE, SUMMARY_FILE) or n.startswith(TMP_PREFIX)
                   or (n.startswith(PART_PREFIX) and n.endswith(PART_SUFFIX))
                   or (n.startswith((JOB_FILE + ".", SUMMARY_FILE + ".")) and n.endswith(".tmp")))
        (ours if is_ours else other).append(n)
    return ours, other


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now")
    return out


def prepare_output(cfg: JobConfig, header: dict) -> dict | None:
    """Create or reopen the output directory. Returns the previous _job.json of this very job
    (to resume) or None (a fresh start). Refuses a directory holding another job's data."""
    out = cfg.output
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputConflictError(f"output {out!r} exists and is not a directory")
    os.makedirs(out, exist_ok=True)
    names = os.listdir(out)
    ours, other = _our_files(names)
    if other:
        raise OutputConflictError(
            f"output directory {out!r} holds another job's data: files daskwp did not write "
            f"({', '.join(sorted(other)[:5])}{', ...' if len(other) > 5 else ''}); choose a "
            f"new or empty directory")
    previous = None
    job_path = os.path.join(out, JOB_FILE)
    if os.path.exists(job_path):
        try:
            with open(job_path, encoding="utf-8") as fh:
                previous = json.load(fh)
        except (OSError, ValueError) as e:
            if not cfg.overwrite:
                raise OutputConflictError(f"output directory {out!r} holds an unreadable "
                                          f"{JOB_FILE} ({e}); pass --overwrite to replace "
                                          f"it") from None
    elif ours and not cfg.overwrite and any(n != SUMMARY_FILE and not n.startswith(TMP_PREFIX)
                                            for n in ours):
        raise OutputConflictError(f"output directory {out!r} holds another job's data "
                                  f"(part files without {JOB_FILE}); pass --overwrite to "
                                  f"replace them")
    if previous is not None and not cfg.overwrite:
        diffs = []
        if previous.get("version") != header["version"]:
            diffs.append(f"written by daskwp {previous.get('version')}, this is "
                         f"{header['version']}")
        diffs += _differences(previous.get("parameters", {}), header["parameters"])
        if previous.get("input", {}).get("fingerprint") != header["input"]["fingerprint"]:
            old = {f["path"]: (f["size"], f["mtime_ns"])
                   for f in previous.get("input", {}).get("files", [])}
            new = {f["path"]: (f["size"], f["mtime_ns"]) for f in header["input"]["files"]}
            changed = sorted(set(old) ^ set(new)) or \
                sorted(p for p in new if old.get(p) != new[p])
            diffs.append(f"the input differs ({', '.join(changed[:3]) or 'file list'})")
        if diffs:
            raise OutputConflictError(
                f"output directory {out!r} holds another job's data ({'; '.join(diffs)}); "
                f"use a new output directory, or pass --overwrite to replace it")
    if cfg.overwrite:
        for n in ours:
            os.unlink(os.path.join(out, n))
        return None
    for n in ours:  # leftovers of a killed run
        if n.startswith(TMP_PREFIX) or n.endswith(".tmp"):
            try:
                os.unlink(os.path.join(out, n))
            except FileNotFoundError:
                pass
    return previous


def _fmt_int(n: int) -> str:
    return f"{n:,}"


def format_summary(s: dict) -> str:
    mbps = s["mb_per_s"]
    lines = [
        f"daskwp: {_fmt_int(s['documents'])} documents -> {_fmt_int(s['rows'])} rows, "
        f"{_fmt_int(s['tokens'])} tokens",
        f"  input        {_fmt_int(s['input_bytes'])} text bytes in {s['input_files']} "
        f"file(s), {s['partitions']} partition(s): {s['partitions_written']} written, "
        f"{s['partitions_skipped']} already complete",
        f"  time         {s['seconds']:.2f} s" + (f", {mbps:.2f} MB/s" if mbps else ""),
        f"  unknown      {_fmt_int(s['unknown_tokens'])} tokens "
        f"({100 * s['unknown_token_rate']:.3f}%)",
        f"  vocabulary   {s['vocab']} (hash {s['vocabulary_hash'][:12]})",
        f"  output       {s['output']}",
    ]
    return "\n".join(lines)


def run_job(cfg: JobConfig, *, client=None, tokenizer=None,
            log: Callable[[str], None] | None = None) -> dict:
    """Run a batch job to completion (resuming a previous run of it) and return the summary.

    ``client``: an existing ``distributed.Client`` to use (else one is made from the config,
    or none at all when ``scheduler_address`` is 'synchronous'). ``tokenizer`` replaces the
    one the config describes (its settings are what the job records).
    """
    from . import __version__
    t_start = time.perf_counter()
    if log is None:
        log = (lambda msg: None) if cfg.quiet else (
            lambda msg: print(msg, file=sys.stderr, flush=True))
    tok = tokenizer if tokenizer is not None else build_tokenizer(cfg)
    check_window_parameters(cfg, tok)
    params = job_parameters(cfg, tok)
    files = list_input_files(cfg.input, cfg.input_format)
    header = {
        "daskwp_job": JOB_FORMAT, "version": __version__, "parameters": params,
        "input": {"fingerprint": input_fingerprint(files),
                  "files": [dataclasses.asdict(f) for f in files]},
    }
    job_id = hashlib.blake2b(json.dumps(
        [header["version"], params, header["input"]["fingerprint"]], sort_keys=True).encode(),
        digest_size=16).hexdigest()
    header["job_id"] = job_id
    previous = prepare_output(cfg, header)
    out = os.path.abspath(cfg.output)
    job_path = os.path.join(out, JOB_FILE)

    if previous is not None and previous.get("partitions") is not None:
        specs = [PartitionSpec.from_json(p["spec"]) for p in previous["partitions"]]
        counts = [p.get("documents") for p in previous["partitions"]]
    else:
        specs = plan_partitions(files, cfg.column, cfg.partition_size)
        counts = [s.documents for s in specs]
    n = len(specs)
    run_id = uuid.uuid4().hex[:8]
    options = {k: getattr(cfg, k) for k in _PARTITION_OPTIONS}

    def save_job(counts_):
        parts = [{"spec": s.to_json(), "documents": c} for s, c in zip(specs, counts_)]
        if all(c is not None for c in counts_):
            offs = np.concatenate([[0], np.cumsum(counts_, dtype=np.int64)])
            for p, o in zip(parts, offs[:-1]):
                p["logid_offset"] = int(o)
        _write_json(job_path, {**header, "output": out, "n_partitions": n, "partitions": parts,
                               "documents": int(sum(counts_)) if all(
                                   c is not None for c in counts_) else None})

    local = cfg.scheduler_address in LOCAL_SCHEDULERS
    # A running cluster's workers resolve "auto" themselves (this machine may have no GPU).
    device = cfg.device if cfg.scheduler_address and not local else resolve_device(cfg.device)
    own_client = False
    if client is None and not local and n:
        client = connect_cluster(cfg, device)
        own_client = True
        dash = getattr(client, "dashboard_link", None)
        log(f"daskwp: cluster {client.scheduler.address if client.scheduler else ''}"
            + (f", dashboard {dash}" if dash else ""))
    try:
        if local:
            client = None
        # The tokenizer travels once, as the result of a task that every write depends on
        # (workers fetch it from each other; the scheduler can recompute it if lost).
        tok_ref = tok if client is None else client.submit(
            share, tok, key=f"daskwp-tokenizer-{job_id[:8]}-{run_id}", pure=False)
        save_job(counts)
        # 1. count the documents of every partition (the global logID offset pass)
        todo = [i for i, c in enumerate(counts) if c is None]
        if todo:
            prog = Progress("counting", len(todo), cfg.quiet)

            def got_count(j, c):
                counts[todo[j]] = int(c)
                prog.update()
            _run_tasks(client, count_partition, [(specs[i],) for i in todo],
                       [f"daskwp-count-{job_id[:8]}-{run_id}-{i:05d}" for i in todo],
                       got_count,
                       lambda j: f"counting partition {todo[j]} ({specs[todo[j]].describe()})")
            save_job(counts)
        offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        specs = [dataclasses.replace(s, documents=int(c)) for s, c in zip(specs, counts)]

        # 2. keep the complete parts of an earlier run, write the others
        stats: list[dict | None] = [
            check_part(os.path.join(out, part_name(i, n)), i, job_id, counts[i],
                       int(offsets[i])) for i in range(n)]
        missing = [i for i in range(n) if stats[i] is None]
        skipped = n - len(missing)
        if skipped:
            log(f"daskwp: resuming: {skipped} of {n} partitions already complete, "
                f"{len(missing)} to write")
        t_work = time.perf_counter()
        written_bytes = 0
        if missing:
            # _summary.json exists only while the dataset is complete.
            try:
                os.unlink(os.path.join(out, SUMMARY_FILE))
            except FileNotFoundError:
                pass
            prog = Progress("tokenizing", len(missing), cfg.quiet)

            def got_part(j, st):
                nonlocal written_bytes
                stats[missing[j]] = st
                written_bytes += st["text_bytes"]
                prog.update(1, st["text_bytes"])
            _run_tasks(client, write_partition,
                       [(specs[i], int(offsets[i]), out, tok_ref, options, job_id, n, device)
                        for i in missing],
                       [f"daskwp-write-{job_id[:8]}-{run_id}-{i:05d}" for i in missing],
                       got_part, lambda j: f"partition {missing[j]} "
                                           f"({specs[missing[j]].describe()})")
        work_seconds = time.perf_counter() - t_work
    finally:
        if own_client and client is not None:
            cluster = getattr(client, "cluster", None)
            client.close()
            if cluster is not None:
                cluster.close()

    # Temporary files of writes that died with their worker (the task was rerun).
    for name in os.listdir(out):
        if name.startswith(TMP_PREFIX):
            try:
                os.unlink(os.path.join(out, name))
            except FileNotFoundError:
                pass

    # 3. accounting: every logID 0..N-1 present exactly once, in order
    plan = [{"index": i, "documents": counts[i], "logid_offset": int(offsets[i])}
            for i in range(n)]
    verify_output(out, plan)
    total_docs = int(offsets[-1]) if n else 0
    if sum(s["documents"] for s in stats) != total_docs:
        raise JobError(f"output {out!r}: documents written differ from the input's "
                       f"({sum(s['documents'] for s in stats)} vs {total_docs})")
    tokens = sum(s["tokens"] for s in stats)
    unk = sum(s["unknown_tokens"] for s in stats)
    seconds = time.perf_counter() - t_start
    summary = {
        "documents": total_docs,
        "rows": sum(s["rows"] for s in stats),
        "tokens": tokens,
        "unknown_tokens": unk,
        "unknown_token_rate": unk / tokens if tokens else 0.0,
        "input_bytes": sum(s["text_bytes"] for s in stats),
        "input_files": len(files),
        "input_file_bytes": sum(f.size for f in files),
        "partitions": n,
        "partitions_written": n - skipped,
        "partitions_skipped": skipped,
        "seconds": seconds,
        "tokenize_seconds": work_seconds,
        "mb_per_s": (written_bytes / 1e6 / work_seconds) if written_bytes and work_seconds
        else 0.0,
        "vocabulary_hash": tok.vocab.hash,
        "vocab": cfg.vocab or getattr(tok.vocab, "source", None) or "(bundled)",
        "parameters": params,
        "device": device,
        "scheduler_address": cfg.scheduler_address,
        "output": out,
        "input": cfg.input,
        "job_id": job_id,
        "version": __version__,
    }
    _write_json(os.path.join(out, SUMMARY_FILE), summary)
    return summary
