"""Parquet parts: one tokenized partition written atomically as one Parquet file.

:class:`PartWriter` is daskwp's one part writer (batch jobs and the lazy accessor's
``to_parquet``): the stored layout (:func:`parquet_write_options`: delta-encoded scalar
columns, BYTE_STREAM_SPLIT list values, no dictionaries), portable pandas metadata
(:func:`portable_pandas_metadata`), the part's JSON metadata and a checksum of its data pages
in the footer (hashed as the pages are written, :class:`_HashingFile`), then fsync and rename
(docs/design.md §4.2); a part is written without the page cache (``O_DIRECT``,
:func:`~daskwp.frames.megatron.create_file`) where the file system allows, else its pages
leave the page cache once on disk (:func:`drop_cached_pages`). :func:`write_parquet` writes
a whole frame with Arrow's writer.
"""

from __future__ import annotations

import functools
import json
import os

import pyarrow as pa

from ..core.options import DEFAULT_COMPRESSION
from .megatron import complete_file, create_file, drop_cached_pages
from .partition import PADDED_KEY
from .schema import is_cudf


def portable_pandas_metadata(table: pa.Table) -> pa.Table:
    """``table`` with pandas metadata that every pandas can read back.

    pandas records an ``ArrowDtype`` list column as ``numpy_type
    "list<item: int32>[pyarrow]"``, a string that ``pandas.read_parquet`` then fails to parse
    (pandas-dev/pandas#57411, apache/arrow#39914, open). Nested columns are recorded as
    ``"object"`` instead: ``pd.read_parquet(path)`` gives object columns of numpy arrays,
    ``pd.read_parquet(path, dtype_backend="pyarrow")`` gives ``list<int32>`` columns. The
    Parquet schema itself (``list<int32>``) is unchanged.
    """
    md = table.schema.pandas_metadata
    if not md:
        return table
    changed = False
    for col in md.get("columns", []):
        name = col.get("field_name", col.get("name"))
        if name not in table.schema.names:
            continue
        typ = table.schema.field(name).type
        if pa.types.is_nested(typ) and str(col.get("numpy_type", "")).endswith("[pyarrow]"):
            col["numpy_type"] = "object"
            changed = True
    if not changed:
        return table
    meta = dict(table.schema.metadata or {})
    meta[b"pandas"] = json.dumps(md).encode("utf-8")
    return table.replace_schema_metadata(meta)


#: Parquet key-value metadata of a part that daskwp writes: a JSON object (the part's rows,
#: documents, logID offset, the vocabulary's ``pad_id``, ...; batch jobs add their job id).
PART_METADATA_KEY = b"daskwp"
#: Key-value metadata of a part: a 128-bit checksum (32 hex digits) of the file's bytes
#: before the footer, :class:`daskwp._ext.PartHash` (docs/design.md §4.2). It replaced the
#: first 128 bits of SHA-256 (:data:`SHA256_CHECKSUM_KEY`): the checksum tells a rerun whether
#: a part's data pages are the ones written (damage, a foreign or half-copied file), which
#: needs no collision resistance against an attacker (who could rewrite the footer too), and
#: SHA-256 cost about a tenth of the tokenizer's CPU on the writer thread even on the CPU's
#: SHA instructions (1.2 GB/s here, against 7 GB/s).
CHECKSUM_KEY = b"daskwp.data_hash128"
#: The checksum key of parts written by daskwp before :data:`CHECKSUM_KEY`: the first 128
#: bits of the SHA-256 of the same bytes; such parts are still verified when a job resumes.
SHA256_CHECKSUM_KEY = b"daskwp.data_sha256"


def checksum_hash(key: bytes = CHECKSUM_KEY):
    """A new hash object of a part checksum recorded under ``key`` (:data:`CHECKSUM_KEY`,
    or :data:`SHA256_CHECKSUM_KEY` for SHA-256); ``checksum_hex(h)`` gives its value as
    recorded."""
    if key == CHECKSUM_KEY:
        from .. import _ext
        return _ext.PartHash()
    if key != SHA256_CHECKSUM_KEY:
        raise ValueError(f"unknown part checksum key {key!r}: {CHECKSUM_KEY!r} or "
                         f"{SHA256_CHECKSUM_KEY!r}")
    import hashlib
    return hashlib.sha256()


def checksum_hex(h) -> str:
    return h.hexdigest()[:32]
_CHECKSUM_PLACEHOLDER = b"0" * 32
#: Rows per Parquet row group of a part.
ROW_GROUP_ROWS = 65536
#: Encodings of the stored layout (docs/batch-jobs.md "Output"): the int64/int32 scalar
#: columns (sorted or small: logID, start, stop, window, bucket) delta-encoded; the values of
#: the list columns BYTE_STREAM_SPLIT (their bytes transposed: the high bytes of token ids
#: are nearly constant, so the codecs compress them faster and smaller; the figures are in
#: benchmarks/results/writer_variants.md and pipeline_bench.md; readers need Parquet's INT32
#: byte-stream-split: pyarrow >= 17, parquet-java >= 1.14, DuckDB >= 1.1). No dictionaries
#: (ids have tens of thousands of values; hashing each costs more than it saves), statistics
#: for logID only (per-value min/max of list columns is pure cost).
SCALAR_ENCODING = "DELTA_BINARY_PACKED"
LIST_ENCODING = "BYTE_STREAM_SPLIT" if int(pa.__version__.split(".")[0]) >= 17 else "PLAIN"


def parquet_write_options(schema: pa.Schema, compression=DEFAULT_COMPRESSION,
                          compat: bool = False) -> dict:
    """``pyarrow.parquet.ParquetWriter`` keywords of the stored layout for ``schema``
    (measured in benchmarks/results/pipeline_bench.md). ``compat``: list values PLAIN, the
    layout readers without BYTE_STREAM_SPLIT take (fastparquet; the ``parquet_compat``
    option, docs/batch-jobs.md "Output")."""
    codec = None if compression in (None, "none", False) else str(compression)
    encodings = {}
    for f in schema:
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
            if LIST_ENCODING != "PLAIN" and not compat:
                encodings[f"{f.name}.list.element"] = LIST_ENCODING
        elif pa.types.is_integer(f.type):
            encodings[f.name] = SCALAR_ENCODING
    opts = dict(compression=codec, use_dictionary=False, column_encoding=encodings or None,
                write_statistics=[n for n in ("logID",) if n in schema.names])
    if codec == "zstd":
        opts["compression_level"] = 1
    return opts


@functools.lru_cache(maxsize=1)
def _pandas_version() -> str | None:
    """The installed pandas' version, read without importing pandas (None: not installed)."""
    import sys
    if "pandas" in sys.modules:
        return sys.modules["pandas"].__version__
    from importlib import metadata
    try:
        return metadata.version("pandas")
    except metadata.PackageNotFoundError:
        return None


def _integer_pandas_metadata(schema: pa.Schema) -> bytes | None:
    """The ``pandas`` metadata of :func:`_portable_pandas_schema_metadata` for a schema of
    integer and list<integer> columns (every table daskwp's tokenizer makes), built without
    importing pandas (about 0.2 s of a small job's start): the same JSON, byte for byte, as
    ``pa.Table.from_pandas`` of such a frame (integer columns numpy, list columns recorded
    as ``object``). None for other schemas."""
    version = _pandas_version()
    if version is None:
        return None
    columns = []
    for f in schema:
        t = f.type
        if pa.types.is_integer(t):
            pandas_type = numpy_type = str(t)
        elif pa.types.is_list(t) and pa.types.is_integer(t.value_type):
            pandas_type, numpy_type = f"list[{t.value_type}]", "object"
        else:
            return None
        columns.append({"name": f.name, "field_name": f.name, "pandas_type": pandas_type,
                        "numpy_type": numpy_type, "metadata": None})
    return json.dumps({"index_columns": [], "column_indexes": [], "columns": columns,
                       "attributes": {}, "creator": {"library": "pyarrow",
                                                     "version": pa.__version__},
                       "pandas_version": version}).encode("utf-8")


def _portable_pandas_schema_metadata(schema: pa.Schema) -> dict:
    """The schema metadata ``pandas`` metadata (portable, see :func:`portable_pandas_metadata`)
    that ``pa.Table.from_pandas`` would record for a frame of these columns, no index."""
    built = _integer_pandas_metadata(schema)
    if built is not None:
        return {b"pandas": built}
    import pandas as pd
    empty = schema.empty_table().to_pandas(types_mapper=pd.ArrowDtype)
    for f in schema:  # numpy columns where the partition frame has them
        if pa.types.is_integer(f.type):
            empty[f.name] = empty[f.name].astype(f.type.to_pandas_dtype())
    table = portable_pandas_metadata(pa.Table.from_pandas(empty, preserve_index=False))
    return {b"pandas": table.schema.metadata[b"pandas"]}


def native_for_kept(kept: pa.Table | None) -> bool | None:
    """:class:`PartWriter`'s ``native`` for a part whose tables carry the columns of ``kept``
    (kept input columns and the accessors' ``input_index``, one row per document: every
    value a table carries is one of them): None, daskwp's own writer wherever it takes their
    types (signed integers), when none holds a null (it writes none); False, Arrow's writer,
    when one does."""
    if kept is not None and any(c.null_count for c in kept.columns):
        return False
    return None


def _create_part_file(path: str, direct: bool):
    """``(file, direct)``: a new file at ``path`` (which must not exist) to write front to
    back; with ``direct``, without the page cache (``O_DIRECT``,
    :func:`~daskwp.frames.megatron.create_file`: an aligned buffer, pooled per writing
    thread, written 8 MB at a time) where the file system takes it, else buffered."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))   # must not exist
    if direct:
        fh = create_file(path, direct=True)
        if getattr(fh, "direct", False):
            return fh, True
        fh.close()
    # compressed pages (hundreds of KB) go to the file directly, not through the buffer
    return open(path, "wb", buffering=1 << 16), False


class _HashingFile:
    """A write-only file for ``ParquetWriter`` that hashes what it writes (the checksum) and,
    once :meth:`hold` is called, keeps the rest (the footer, and pages the writer flushes
    when it closes) in memory so that the footer can be patched before it reaches the file.
    ``drop_cache``: the part is not read back soon: written without the page cache
    (``O_DIRECT``) where the file system allows, else its pages leave the page cache once
    fsync'ed (:func:`drop_cached_pages`).

    Why direct: a 29 MB part written into the page cache, fsync'ed and its pages dropped
    cost 14.2 ms of CPU (write 10.2, fsync 2.0, drop 2.1); copied into the aligned buffer
    and written direct, 5.6 ms (the kernel copies nothing and keeps no page to drop)."""

    def __init__(self, path: str, drop_cache: bool = True):
        self._drop_cache = drop_cache
        self._fh, self.direct = _create_part_file(path, drop_cache)
        self._hash = checksum_hash()
        self._pos = 0
        self._held: list | None = None
        self.closed = False

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        if self.closed:  # abandoned: what the writer still flushes goes nowhere
            return n
        if self._held is not None:
            self._held.append(bytes(data))
        else:
            self._hash.update(data)
            self._fh.write(data)
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:  # ParquetWriter closes what it was given; finish() does it
        pass

    def hold(self) -> None:
        self._held = []

    def finish(self, path: str) -> None:
        """Hash the held bytes before the footer, write the digest over the placeholder in
        the footer (same length: the footer stays valid), write, fsync and close."""
        import struct
        tail = b"".join(self._held or [])
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise ValueError(f"{path!r}: the Parquet writer wrote no footer")
        start = len(tail) - 8 - struct.unpack("<i", tail[-8:-4])[0]
        if start < 0:
            raise ValueError(f"{path!r}: the footer began before the file was closed")
        self._hash.update(tail[:start])
        footer = tail[start:]
        at = footer.find(CHECKSUM_KEY) + len(CHECKSUM_KEY)
        pos = footer.find(_CHECKSUM_PLACEHOLDER, at)
        if footer.count(CHECKSUM_KEY) != 1 or not 0 < pos - at <= 8:
            raise ValueError(f"{path!r}: cannot place the part's checksum in its footer")
        digest = checksum_hex(self._hash).encode()
        self._fh.write(tail[:start + pos] + digest + tail[start + pos + len(digest):])
        if self.direct:
            complete_file(self._fh, fsync=True)
        else:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            if self._drop_cache:
                drop_cached_pages(self._fh.fileno())
        self._fh.close()
        self.closed = True

    def abort(self) -> None:
        if not self.closed:
            self._fh.close()   # (a direct file's buffer goes back to its pool)
        self.closed = True


class PartWriter:
    """One Parquet part written atomically, in row groups as tables arrive (daskwp's one
    writer: batch jobs and the lazy accessor's ``to_parquet`` both use it).

    The file is written to ``tmp_path`` (created, must not exist), its data pages hashed as
    they are written; :meth:`close` records ``metadata`` (a JSON object under
    ``PART_METADATA_KEY``) and the checksum of the data pages (``CHECKSUM_KEY``) in the
    footer, fsyncs, and renames the file to ``path``. A part therefore exists complete or not
    at all; a writer that fails or is abandoned (:meth:`abort`) removes its temporary file.
    Once fsync'ed its pages leave the page cache (:func:`drop_cached_pages`) unless
    ``drop_cache`` is false (a staged part that is uploaded next, read back at once).

    The stored layout is :func:`parquet_write_options`; the schema is the first table's,
    with portable pandas metadata (``pd.read_parquet`` reads the parts). Tables of integer
    and list<integer> columns (every table daskwp's tokenizer makes) go through daskwp's own
    writer (:mod:`daskwp.frames.parquet_writer`: the same file to every reader, at a third of
    Arrow's writer cost), kept integer columns too; others (kept columns of other types,
    compressions it does not write)
    through ``pyarrow.parquet.ParquetWriter``. ``native`` forces one or the other; None (the
    own writer wherever it takes the schema and compression) needs tables without nulls:
    :func:`native_for_kept` chooses for kept columns. A table of padded
    rows stored trimmed (:data:`PADDED_KEY` in its schema metadata, from
    :func:`table_from_output`) records the row width and mask dtype in the footer's
    ``daskwp`` object as ``padded`` (docs/design.md §3.3).
    """

    def __init__(self, path: str, tmp_path: str, compression=DEFAULT_COMPRESSION,
                 row_group_rows: int = ROW_GROUP_ROWS, native: bool | None = None,
                 compat: bool = False, drop_cache: bool = True):
        self.path, self.tmp_path = str(path), str(tmp_path)
        self.drop_cache = drop_cache
        self.compression = compression
        #: the layout of parquet_write_options(compat=True): list values PLAIN
        self.compat = compat
        #: daskwp's own writer (:mod:`daskwp.frames.parquet_writer`) or Arrow's; None: the
        #: own one wherever it takes the schema and compression
        self.native = native
        self.row_group_rows = row_group_rows
        self._file = None
        self._writer = None
        self.schema = None
        #: ``{"width", "mask_dtype"}`` of padded rows stored trimmed (:data:`PADDED_KEY`)
        self.padded = None
        # A write may run in another thread (the next piece is tokenized meanwhile): the lock
        # makes abort wait for it, and no write starts (or creates the file) after abort.
        import threading
        self._lock = threading.RLock()
        self._done = False

    def _open(self, schema: pa.Schema) -> None:
        from . import parquet_writer
        schema = schema.with_metadata(_portable_pandas_schema_metadata(schema))
        self._file = _HashingFile(self.tmp_path, self.drop_cache)
        options = parquet_write_options(schema, self.compression, self.compat)
        native = self.native if self.native is not None else \
            parquet_writer.supports(schema, options["compression"])
        try:
            if native:
                self._writer = parquet_writer.NativeParquetWriter(
                    self._file, schema, options["compression"],
                    byte_stream_split=LIST_ENCODING == "BYTE_STREAM_SPLIT" and not self.compat)
            else:   # pyarrow.parquet imported only here: its import is a writer's first ms
                import pyarrow.parquet as pq
                self._writer = pq.ParquetWriter(self._file, schema, **options)
        except BaseException:
            self.abort()
            raise
        self.schema = schema

    def write(self, table: pa.Table) -> None:
        """Append ``table`` (the schema of the first one) as row groups."""
        with self._lock:
            if self._done:
                raise RuntimeError(f"{self.path!r}: the part was closed or abandoned")
            padded = (table.schema.metadata or {}).get(PADDED_KEY)
            if padded is not None:
                padded = json.loads(padded)
                if self.padded is not None and padded != self.padded:
                    raise ValueError(f"{self.path!r}: pieces of one part padded alike "
                                     f"expected, got {self.padded} then {padded}")
                self.padded = padded
                table = table.replace_schema_metadata(None)
            if self._writer is None:
                self._open(table.schema)
            elif table.schema.remove_metadata() != self.schema.remove_metadata():
                table = table.cast(self.schema.remove_metadata())
            self._writer.write_table(table.replace_schema_metadata(self.schema.metadata),
                                     row_group_size=self.row_group_rows)

    def close(self, metadata: dict | None = None, schema: pa.Schema | None = None) -> None:
        """Finish the part: metadata and checksum in the footer, fsync, rename to ``path``.
        ``schema`` gives the columns of a part no table was written to."""
        try:
            with self._lock:
                if self._done:
                    raise RuntimeError(f"{self.path!r}: the part was closed or abandoned")
                if self._writer is None:
                    if schema is None:
                        raise ValueError("PartWriter.close: no table written and no schema "
                                         "given")
                    self._open(schema)
                kv = {CHECKSUM_KEY: _CHECKSUM_PLACEHOLDER}
                if self.padded is not None:
                    metadata = dict(metadata or {}, padded=self.padded)
                if metadata is not None:
                    kv[PART_METADATA_KEY] = json.dumps(metadata, sort_keys=True).encode()
                self._writer.add_key_value_metadata(kv)
                self._file.hold()
                self._writer.close()
                self._file.finish(self.tmp_path)
                os.replace(self.tmp_path, self.path)
                self._done = True
        finally:
            self.abort()

    def __enter__(self) -> "PartWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.abort()

    def abort(self) -> None:
        """Drop the part: wait for a write in progress, close and remove the temporary file
        (nothing if the part is complete); later writes are refused."""
        with self._lock:
            self._done = True
            if self._file is not None and not self._file.closed:
                self._file.abort()
            # the file and its checksum's hash go with the part: a writer kept in a reference
            # cycle (collected late, or never where the heap is frozen at exit) would otherwise
            # hold the extension's hash object past the module's teardown
            self._file = None
            if self._writer is not None:
                writer, self._writer = self._writer, None
                try:
                    writer.close()  # into the abandoned file: nothing is written
                except Exception:
                    pass
            try:
                os.unlink(self.tmp_path)
            except FileNotFoundError:
                pass


def write_parquet(frame: pd.DataFrame, path, **kwargs) -> None:
    """Write a partition frame to one Parquet file (list<int32> columns, no index)."""
    import pyarrow.parquet as pq

    if is_cudf(frame):
        kwargs.setdefault("index", False)
        frame.to_parquet(path, **kwargs)
        return
    index = kwargs.pop("index", False)
    table = pa.Table.from_pandas(frame, preserve_index=index)
    pq.write_table(portable_pandas_metadata(table), path, **kwargs)
