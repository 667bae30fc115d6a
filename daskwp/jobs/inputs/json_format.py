"""JSON Lines and JSON array inputs: sampling the first objects for the column names and the
kept columns' types at planning time, and reading a partition. A JSON Lines partition's text
columns are read by the native reader (``daskwp/kernels/jsonl_reader.hpp``: one pass, JSON
escapes decoded straight into the documents' buffer), which accepts only what it reads
exactly as Arrow's JSON reader does; anything else (a bad line, invalid UTF-8, a lone
surrogate, a text field given twice, kept columns) is read as before: by Arrow's JSON reader
(invalid UTF-8 put back into the documents that held it) or, under the row policy, one line
or item at a time so that a bad one becomes an empty document recorded with its reason.
"""

from __future__ import annotations

import io
import json
import re
from typing import Sequence

import numpy as np
import pyarrow as pa

from ... import _ext
from ..errors import InputError
from .columns import kept_table, partition_documents, text_columns_of, type_from_str
from .compression import open_stream, read_head
from .specs import InputFile, PartitionSpec
from .text import lines_to_arrow
from .utf8 import invalid_utf8_per_document, value_offsets


def _decode_lossless(data: bytes) -> str:
    """UTF-8 bytes as str; invalid bytes as lone surrogates (restored by
    :func:`_encode_lossless`)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "surrogateescape")


def _encode_lossless(s: str) -> bytes:
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a JSON escape of a lone surrogate: invalid UTF-8 bytes
        return s.encode("utf-8", "surrogatepass")


def json_type(values: list, name: str, path: str) -> str:
    """The Arrow type of a kept JSON column from sampled values: bool, int64, double or
    large_string (all null: large_string)."""
    kinds = set()
    for v in values:
        if v is None:
            continue
        kinds.add(bool if isinstance(v, bool) else int if isinstance(v, int) else
                  float if isinstance(v, float) else str if isinstance(v, str) else "nested")
    if "nested" in kinds:
        raise InputError(f"keep_columns: column {name!r} of {path!r} holds lists or objects; "
                         f"kept JSON columns hold strings, numbers or booleans")
    if not kinds or kinds == {str}:
        return "large_string"
    if kinds == {bool}:
        return "bool"
    if kinds <= {int}:
        return "int64"
    if kinds <= {int, float}:
        return "double"
    raise InputError(f"keep_columns: column {name!r} of {path!r} holds values of several "
                     f"types ({', '.join(sorted(k.__name__ for k in kinds))}); a kept column "
                     f"has one type")


def json_sample(f: InputFile, column: str, keep: Sequence[str],
                 limit: int = 1000, lenient: bool = False) -> tuple[list | None, dict]:
    """(keys found in the first objects, or None for an array of strings; sampled values of
    the kept columns). JSON Lines: the first ``limit`` non-blank lines; a JSON array: its
    first ``limit`` items (read from the first MB). ``lenient``: lines and items that are
    not JSON objects are passed over (the row policy rejects them when they are read),
    unless no object at all is found: then the file is not in this format, an error."""
    names: dict = {}
    passed_over: list = []
    samples: dict = {k: [] for k in keep}
    strings = False

    def take(obj, where):
        nonlocal strings
        if isinstance(obj, dict):
            names.update(dict.fromkeys(obj))
            for k in keep:
                samples[k].append(obj.get(k))
        elif lenient and not (f.format == "json" and isinstance(obj, str)):
            passed_over.append(ValueError(f"{where} holds {type(obj).__name__}, not an "
                                          f"object"))
        elif f.format == "json" and (obj is None or isinstance(obj, str)):
            strings = True
        elif f.format == "json":
            raise ValueError(f"a JSON array of documents holds objects or strings; {where} is "
                             f"a {type(obj).__name__}")
        else:
            raise ValueError(f"JSON Lines holds one object per line; {where} holds a "
                             f"{type(obj).__name__}")

    if f.format == "json":
        text = _decode_lossless(read_head(f.path, f.compression, 1 << 20)).lstrip("\ufeff")
        dec = json.JSONDecoder()
        pos = text.index("[") + 1
        for k in range(limit):
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text) or text[pos] == "]":
                break
            try:
                obj, pos = dec.raw_decode(text, pos)
            except ValueError:
                break  # an item cut by the end of the sample
            take(obj, f"item {k}")
    else:
        with open_stream(f.path, f.compression) as fh:
            buf, k, seen, done = b"", 0, 0, False
            while not done:
                chunk = fh.read(1 << 20)
                chunk = bytes(chunk) if chunk else b""
                lines = (buf + chunk).split(b"\n")
                buf = lines.pop() if chunk else b""
                for line in lines:
                    k += 1
                    if line.strip():
                        try:
                            obj = json.loads(_decode_lossless(line))
                        except ValueError as e:
                            if not lenient:
                                raise
                            passed_over.append(ValueError(f"line {k}: {e}"))
                        else:
                            take(obj, f"line {k}")
                        seen += 1
                        if seen >= limit or (column in names and not keep):
                            done = True
                            break
                done = done or not chunk
    if passed_over and not names and not strings:
        raise passed_over[0]   # not one object: the file is not JSON (Lines)
    return (None if strings and not names else list(names)), samples


def _blank_lines(lines: pa.Array) -> np.ndarray:
    """Which lines hold only spaces, tabs and carriage returns (not JSON Lines documents)."""
    off = value_offsets(lines)
    vals = np.frombuffer(lines.buffers()[2], dtype=np.uint8) if len(lines) and \
        lines.buffers()[2] else np.zeros(0, np.uint8)
    lens = np.diff(off)
    blank = lens == 0
    first = np.zeros(len(lens), dtype=np.uint8)
    nz = ~blank
    first[nz] = vals[off[:-1][nz]]
    for i in np.flatnonzero(nz & np.isin(first, np.array([32, 9, 13], dtype=np.uint8))):
        if not vals[off[i]:off[i + 1]].tobytes().strip(b" \t\r"):
            blank[i] = True
    return blank


def count_jsonl_documents(pieces) -> int:
    """The documents of JSON Lines bytes, its non-blank lines (as :func:`read_jsonl` maps
    lines to documents), counted without parsing the JSON: a bad line is found when the
    bytes are read. ``pieces``: the bytes, or an iterable of uint8 arrays that follow on
    (:func:`.byte_ranges.read_pieces`: a line may span pieces). One native pass that
    neither copies nor splits them (``_ext.count_nonblank_lines``: the count pass of a
    Megatron job spent more CPU on the split than its write tasks on reading the same
    bytes)."""
    if isinstance(pieces, (bytes, bytearray, memoryview)):
        pieces = (np.frombuffer(pieces, dtype=np.uint8),)
    n, open_counted = 0, False
    for piece in pieces:
        k, open_counted = _ext.count_nonblank_lines(piece, open_counted)
        n += k
    return n


def read_jsonl_native(data, spec: PartitionSpec) -> tuple:
    """``(documents, None)`` of a JSON Lines partition read by the native reader (each text
    column a large_string array over one buffer of the host memory pool, nulls where the
    field is absent or null), or ``(None, why)`` when a line holds something it leaves to
    Arrow's JSON reader (``why``: the line and what it holds)."""
    src = np.frombuffer(data, dtype=np.uint8)
    fields = text_columns_of(spec)
    outs = [_ext.host_bytes(len(src) + _ext.JSONL_SLACK) for _ in fields]
    why, rows, columns = _ext.read_jsonl_fields(src, fields, outs)
    if why is not None:
        return None, f"line {rows + 1}: {why}"
    arrays = []
    for out, (offsets, validity, nulls) in zip(outs, columns):
        arrays.append(pa.Array.from_buffers(pa.large_string(), rows, [
            pa.py_buffer(validity) if nulls else None, pa.py_buffer(offsets),
            pa.py_buffer(out[:int(offsets[-1])])], null_count=nulls))
    return partition_documents(spec, arrays), None


def read_jsonl(data, spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    """``(documents, kept, invalid)`` of a JSON Lines partition (``data``: its bytes, or a
    uint8 array of them that may be reused once this returns), read by the native reader
    (:func:`read_jsonl_native`) when no kept column is asked for and it reads every line,
    else parsed by Arrow's reader. ``invalid``: the :func:`count_invalid_utf8` of the
    documents where reading knows it (the native reader reads well-formed UTF-8 only:
    ``(0, 0)``), else None. ``bad`` (the row policy, ``on_bad_row: reject``): a partition
    Arrow's reader refuses is parsed line by line instead (:func:`_read_jsonl_lines`), each
    bad line an empty document recorded in ``bad``; None: the reader's error."""
    if not (with_kept and spec.keep_columns):
        docs, _ = read_jsonl_native(data, spec)
        if docs is not None:
            return docs, None, (0, 0)
    if not isinstance(data, bytes):   # a reused buffer: the readers below keep no view
        data = bytes(data)            # of it, but take bytes
    try:
        return (*_read_jsonl_arrow(data, spec, with_kept), None)
    except (ValueError, InputError):   # pa.ArrowInvalid and json's errors are ValueErrors
        if bad is None:
            raise
    return (*_read_jsonl_lines(data, spec, with_kept, bad), None)


_FIRST_NULL = re.compile(rb"[ \t\r\n]*(null)(?=[ \t\r\n]|$)")


def _first_null_as_empty_object(data: bytes) -> bytes:
    """``data`` with a first row of ``null`` written as ``{}`` (same length): pyarrow's
    JSON reader crashes the process on a buffer whose first row is a top-level ``null``,
    and reads ``{}`` as it reads a ``null`` row anywhere else (every column null)."""
    m = _FIRST_NULL.match(data)
    if m is None:
        return data
    return data[:m.start(1)] + b"{}  " + data[m.end(1):]


def _read_jsonl_arrow(data: bytes, spec: PartitionSpec, with_kept: bool):
    import pyarrow.compute as pc
    import pyarrow.json as pj
    keep = spec.keep_columns if with_kept else ()
    types = dict(zip(spec.keep_columns, spec.keep_types))
    text_columns = text_columns_of(spec)
    fields = [(c, pa.large_string()) for c in text_columns] + [
        (k, type_from_str(types.get(k, "")) or pa.large_string())
        for k in keep if k not in text_columns]
    schema = pa.schema(fields)

    def parse(b: bytes) -> pa.Table:
        if not b:    # an empty range (Arrow's reader refuses it)
            return schema.empty_table()
        b = _first_null_as_empty_object(b)
        return pj.read_json(io.BytesIO(b), read_options=pj.ReadOptions(
            use_threads=False, block_size=int(min(max(len(b) + 1, 1 << 20), 2**31 - 1))),
            parse_options=pj.ParseOptions(explicit_schema=schema,
                                          unexpected_field_behavior="ignore"))

    whole = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [
        None, pa.py_buffer(np.array([0, len(data)], dtype=np.int64)), pa.py_buffer(data)])
    if invalid_utf8_per_document(whole) is None:
        table = parse(data)
        columns = [table.column(c).combine_chunks() for c in text_columns]
    else:
        # Arrow's JSON reader refuses invalid UTF-8: parse the bytes with each ill-formed
        # sequence replaced, then put the original bytes back into the documents of the
        # lines that held them (parsed here, invalid bytes kept as surrogates).
        table = parse(data.decode("utf-8", "replace").encode("utf-8"))
        columns = []
        lines = lines_to_arrow(data)
        per_line = invalid_utf8_per_document(lines)
        doc_of_line = np.cumsum(~_blank_lines(lines)) - 1
        for c in text_columns:
            texts = table.column(c).combine_chunks().view(pa.large_binary())
            if doc_of_line[-1] + 1 != len(texts):
                raise InputError(f"{spec.describe()}: {doc_of_line[-1] + 1} non-blank lines "
                                 f"but {len(texts)} JSON objects")
            mask = np.zeros(len(texts), dtype=bool)
            repl = []
            for li in np.flatnonzero(per_line):
                obj = json.loads(_decode_lossless(lines[int(li)].as_py()))
                value = obj.get(c) if isinstance(obj, dict) else None
                if isinstance(value, str):
                    mask[doc_of_line[li]] = True
                    repl.append(_encode_lossless(value))
            if repl:
                texts = pc.replace_with_mask(texts, pa.array(mask),
                                             pa.array(repl, type=pa.large_binary()))
            columns.append(texts)
    kept = None
    if keep:
        kept = kept_table({k: table.column(k) for k in keep}, spec)
    return partition_documents(spec, columns), kept


_JSON_KINDS = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
               list: "an array", dict: "an object", type(None): "null"}


def _json_kind(value) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _kept_json_problem(value, type_name: str) -> str | None:
    """Why a JSON value cannot go into a kept column of the planned type (None: it can)."""
    if value is None:
        return None
    t = type_name or "large_string"
    ok = (isinstance(value, bool) if t == "bool" else
          isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63
          if t == "int64" else
          isinstance(value, (int, float)) and not isinstance(value, bool) if t == "double"
          else isinstance(value, str))
    return None if ok else f"holds {_json_kind(value)}, the column is {t}"


def _json_record(obj, spec: PartitionSpec, keep: Sequence[str], types: dict) -> tuple:
    """``(texts, kept values, problem)`` of one JSON object of a JSON Lines line or a JSON
    array item; ``problem`` (or None) says why it is not a document."""
    if not isinstance(obj, dict):
        return None, None, f"{_json_kind(obj)}, not an object"
    texts = []
    for c in text_columns_of(spec):
        value = obj.get(c)
        if value is not None and not isinstance(value, str):
            return None, None, f"column {c!r} holds {_json_kind(value)}, not text"
        texts.append(value)
    kept = []
    for k in keep:
        value = obj.get(k)
        problem = _kept_json_problem(value, types.get(k, ""))
        if problem:
            return None, None, f"kept column {k!r} {problem}"
        kept.append(value)
    return texts, kept, None


def _json_documents(spec: PartitionSpec, keep: Sequence[str], records, bad: list):
    """``(documents, kept table)`` of ``records``, ``(texts, kept values, problem, where)``
    per document (:func:`_json_record`): a record with a problem is an empty document with
    null kept values, and ``(its index, where: problem)`` goes to ``bad``."""
    texts = {c: [] for c in text_columns_of(spec)}
    kept = {k: [] for k in keep}
    for i, (values, kv, problem, where) in enumerate(records):
        if problem:
            bad.append((i, f"{where}: {problem}"))
            values, kv = [None] * len(texts), [None] * len(keep)
        for c, v in zip(texts, values):
            texts[c].append(v)
        for k, v in zip(keep, kv):
            kept[k].append(v)
    docs = partition_documents(spec, [pa.array([None if v is None else _encode_lossless(v)
                                       for v in texts[c]], type=pa.large_binary())
                             for c in text_columns_of(spec)])
    if not keep:
        return docs, None
    types = dict(zip(spec.keep_columns, spec.keep_types))
    cols = {}
    for k in keep:
        t = type_from_str(types.get(k, "")) or pa.large_string()
        if pa.types.is_large_string(t):
            cols[k] = pa.array([None if v is None else _encode_lossless(v) for v in kept[k]],
                               type=pa.large_binary())
        else:
            cols[k] = pa.array(kept[k], type=t)
    return docs, kept_table(cols, spec)


def _read_jsonl_lines(data: bytes, spec: PartitionSpec, with_kept: bool, bad: list):
    """A JSON Lines partition parsed one line at a time (the row policy's path): every
    non-blank line is a document; a line that is not a JSON object, or whose text or kept
    column holds another type, is an empty document (null kept values) and
    ``(document, reason)`` in ``bad``."""
    keep = spec.keep_columns if with_kept else ()
    types = dict(zip(spec.keep_columns, spec.keep_types))
    lines = lines_to_arrow(data)

    def records():
        for li in np.flatnonzero(~_blank_lines(lines)):
            try:
                obj = json.loads(_decode_lossless(lines[int(li)].as_py()))
            except ValueError as e:
                yield None, None, f"not valid JSON ({e})", "JSON Lines line"
            else:
                yield (*_json_record(obj, spec, keep, types), "JSON Lines line")
    return _json_documents(spec, keep, records(), bad)


def read_json_array(data: bytes, spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    if bad is not None:
        return _read_json_array_items(data, spec, with_kept, bad)
    keep = spec.keep_columns if with_kept else ()
    items = json.loads(_decode_lossless(data).lstrip("\ufeff"))
    if not isinstance(items, list):
        raise InputError(f"{spec.describe()}: a JSON array file holds one array, found a "
                         f"{type(items).__name__}")
    text_columns = text_columns_of(spec)
    texts, kept = {c: [] for c in text_columns}, {k: [] for k in keep}
    for i, item in enumerate(items):
        if isinstance(item, dict):
            values = [item.get(c) for c in text_columns]
            for k in keep:
                kept[k].append(item.get(k))
        elif item is None or isinstance(item, str):
            values = [item]
            if keep:
                raise InputError(f"{spec.describe()}: item {i} is a string; keep_columns "
                                 f"needs objects")
            if spec.column_pair is not None:
                raise InputError(f"{spec.describe()}: item {i} is a string; column_pair "
                                 f"needs objects")
        else:
            raise InputError(f"{spec.describe()}: item {i} of the array is a "
                             f"{type(item).__name__}; the items are objects (the column "
                             f"{spec.column!r} is the text) or strings")
        for c, value in zip(text_columns, values):
            if value is None:
                texts[c].append(None)
            elif isinstance(value, str):
                texts[c].append(_encode_lossless(value))
            else:
                raise InputError(f"{spec.describe()}: item {i} has a {type(value).__name__} "
                                 f"in column {c!r}, not text")
    arr = partition_documents(spec, [pa.array(texts[c], type=pa.large_binary())
                            for c in text_columns])
    table = None
    if keep:
        types = dict(zip(spec.keep_columns, spec.keep_types))
        cols = {}
        for k in keep:
            t = type_from_str(types.get(k, "")) or pa.large_string()
            try:
                cols[k] = pa.array(kept[k], type=t)
            except (pa.ArrowException, TypeError, OverflowError) as e:
                raise InputError(f"{spec.describe()}: kept column {k!r} does not hold {t} "
                                 f"values: {e}") from None
        table = kept_table(cols, spec)
    return arr, table


def _read_json_array_items(data: bytes, spec: PartitionSpec, with_kept: bool, bad: list):
    """A JSON array under the row policy: an item that is not an object (or a string, a
    document itself, when no other column is read), or whose text or kept column holds
    another type, is an empty document recorded in ``bad``. An array that does not parse
    has no items to number: an error."""
    keep = spec.keep_columns if with_kept else ()
    types = dict(zip(spec.keep_columns, spec.keep_types))
    items = json.loads(_decode_lossless(data).lstrip("\ufeff"))
    if not isinstance(items, list):
        raise InputError(f"{spec.describe()}: a JSON array file holds one array, found a "
                         f"{type(items).__name__}")
    strings = not keep and spec.column_pair is None
    nulls = ([None] * len(text_columns_of(spec)), [None] * len(keep), None)

    def records():
        for i, item in enumerate(items):
            if item is None:
                yield (*nulls, "")
            elif strings and isinstance(item, str):
                yield [item], [], None, ""
            else:
                yield (*_json_record(item, spec, keep, types), f"JSON array item {i}")
    return _json_documents(spec, keep, records(), bad)
