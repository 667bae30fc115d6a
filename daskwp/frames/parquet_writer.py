"""daskwp's own Parquet writer for the tables it writes (docs/design.md §3.3, "The part
writer"): integer columns and lists of integers, no nulls, zstd, lz4 or no compression.

The data pages come from the native core one at a time (``_ext.parquet_scalar_page`` /
``_ext.parquet_list_page``: levels as RLE runs, values BYTE_STREAM_SPLIT or
DELTA_BINARY_PACKED, one pass over the buffers), each into the same reused buffer, which the
compressor then reads while it is in the cache (``lz4``: daskwp's own LZ4 block compressor
into a second reused buffer, a list page by the same native call that encodes it, which
searches one of its value streams for matches and reuses them in the others; a scalar page
by ``_ext.lz4_raw_compress``; ``zstd``: Arrow's codec); this module writes the page headers
and the footer (Thrift compact protocol, :mod:`daskwp.frames.thrift_compact`) and records
the same schema, encodings and key-value metadata (``ARROW:schema``, ``pandas``) as
``pyarrow.parquet.ParquetWriter`` with :func:`daskwp.frames.part_writer.parquet_write_options`,
so every reader sees the same file. It costs about a third of Arrow's writer on these columns
(benchmarks/results/writer_variants.md): Arrow builds levels and encodes values per element
through its generic nested-data path.

:func:`supports` says which tables it takes; the part writer uses Arrow's writer for anything
else (kept input columns of batch jobs, other compressions).
"""

from __future__ import annotations

import base64
import functools
import struct

import numpy as np
import pyarrow as pa

from .. import _ext
from ..backends import memory
from .schema import numpy_of_arrow
from .thrift_compact import write_struct, write_varint

__all__ = ["NativeParquetWriter", "compression_pool", "supports"]

#: Page size of list columns: a page closes after the row that brings its values to this
#: many bytes (Arrow's default data page size).
PAGE_BYTES = 1 << 20
#: Most values of a scalar column's page.
PAGE_VALUES = 1 << 20
#: Parquet codec numbers (parquet.thrift CompressionCodec) of the compressions it writes:
#: ``lz4`` is Parquet's LZ4_RAW (a bare LZ4 block per page), as Arrow's own writer writes it,
#: compressed by daskwp's LZ4 block compressor (daskwp/kernels/lz4_block.hpp); ``zstd`` by
#: Arrow's codec.
CODECS = {None: 0, "zstd": 6, "lz4": 7}
_CREATED_BY = "daskwp parquet writer"

# Parquet enums (parquet.thrift)
_INT32, _INT64 = 1, 2
_REQUIRED, _OPTIONAL, _REPEATED = 0, 1, 2
_PLAIN, _RLE, _DELTA, _BSS = 0, 3, 5, 9
_LIST = 3
_INT_CONVERTED = {8: 15, 16: 16}   # INT_8, INT_16


def _int_type(t: pa.DataType) -> bool:
    return pa.types.is_signed_integer(t)


def compression_pool() -> pa.MemoryPool | None:
    """The memory pool of the zstd-compressed pages (lz4 pages go to one reused buffer):
    the system allocator (glibc's malloc) where
    Arrow's default pool is mimalloc and glibc keeps freed blocks
    (:func:`daskwp.backends.memory.malloc_keeps_freed_blocks`), else None (Arrow's default
    pool).

    Each page's compressed copy is a fresh buffer of up to a page (pyarrow's
    ``Codec.compress`` takes no output buffer). mimalloc hands freed pages back to the system
    and faults fresh zeroed ones in for the next page: in a 2-worker job on mimalloc that was
    a tenth of the writer threads' CPU samples (``clear_page_erms`` under
    ``mi_page_free_list_extend`` and LZ4's stores), 3% from glibc, which reuses the block the
    previous page freed. A nanny's worker gives Arrow's allocations to jemalloc
    (docs/design.md §3.5), which keeps them as well as glibc does: there the default pool."""
    if pa.default_memory_pool().backend_name != "mimalloc":
        return None
    return pa.system_memory_pool() if memory.malloc_keeps_freed_blocks() else None


def supports(schema: pa.Schema, compression) -> bool:
    """Whether :class:`NativeParquetWriter` writes tables of ``schema``: every field a signed
    integer or a list of signed integers, compression zstd, lz4 or none."""
    if compression not in CODECS:
        return False
    for f in schema:
        t = f.type
        if pa.types.is_list(t):
            t = t.value_type
        if not _int_type(t):
            return False
    return True


def _page_header(uncompressed: int, compressed: int, num_values: int, encoding: int) -> bytes:
    """The PageHeader of a v1 data page (type DATA_PAGE, its sizes, a DataPageHeader of
    ``num_values`` values in ``encoding``, levels RLE), as
    :func:`~daskwp.frames.thrift_compact.write_struct` writes it: the fields' type bytes
    are fixed, only the four integers vary (a page's Python cost)."""
    return b"".join((b"\x15\x00\x15", write_varint(uncompressed << 1), b"\x15",
                     write_varint(compressed << 1), b"\x2c\x15",
                     write_varint(num_values << 1), b"\x15",
                     write_varint(encoding << 1), b"\x15\x06\x15\x06\x00\x00"))


# -- schema -----------------------------------------------------------------------------------

def _leaf_annotations(t: pa.DataType) -> dict:
    bits = t.bit_width
    phys = _INT64 if bits == 64 else _INT32
    ann = {"type": phys}
    if bits in _INT_CONVERTED:
        ann["converted"] = _INT_CONVERTED[bits]
        ann["logical"] = write_struct([
            (10, "struct", write_struct([(1, "i8", bits), (2, "bool", True)]))])
    return ann


def _schema_element(name, *, phys=None, repetition=None, children=None, converted=None,
                    logical=None) -> bytes:
    return write_struct([(1, "i32", phys), (3, "i32", repetition), (4, "bin", name),
                         (5, "i32", children), (6, "i32", converted), (10, "struct", logical)])


class _Column:
    """One leaf column: its path, physical type, encodings and how to encode a chunk."""

    def __init__(self, field: pa.Field, byte_stream_split: bool):
        self.name = field.name
        self.is_list = pa.types.is_list(field.type)
        leaf = field.type.value_type if self.is_list else field.type
        self.ann = _leaf_annotations(leaf)
        self.path = [self.name, "list", "element"] if self.is_list else [self.name]
        # the encodings of parquet_write_options: delta scalars; list values BYTE_STREAM_SPLIT
        # where the readers take it (part_writer.LIST_ENCODING), else PLAIN
        self.split = byte_stream_split
        self.encoding = (_BSS if byte_stream_split else _PLAIN) if self.is_list else _DELTA
        self.elements = self._elements(field, leaf)

    def _elements(self, field, leaf) -> list:
        a = self.ann
        if not self.is_list:
            return [_schema_element(self.name, phys=a["type"], repetition=_OPTIONAL,
                                    converted=a.get("converted"), logical=a.get("logical"))]
        return [_schema_element(self.name, repetition=_OPTIONAL, children=1, converted=_LIST,
                                logical=write_struct([(3, "struct", write_struct([]))])),
                _schema_element("list", repetition=_REPEATED, children=1),
                _schema_element("element", phys=a["type"], repetition=_OPTIONAL,
                                converted=a.get("converted"), logical=a.get("logical"))]

    def pages(self, arr: pa.Array, scratch, packer=None):
        """``(uncompressed body, num_values, compressed body or None)`` of each page of
        ``arr`` (a slice of this column), one after another. Each body is a view of the
        buffer that ``scratch(size)`` gives (at least ``size`` bytes; the writer reuses
        one): use it before taking the next page. ``packer(size)``, where given, is the
        buffer of an LZ4 block of a page of ``size`` bytes: a list page is compressed into
        it by the call that encodes it (``_ext.parquet_list_page``, the streams of its
        BYTE_STREAM_SPLIT values compressed as one, lz4_block.hpp), a view of which is the
        third item; scalar pages give None (the writer compresses them)."""
        if arr.null_count:
            raise ValueError(f"column {self.name!r} holds nulls: daskwp's parts have none")
        if not self.is_list:
            values = numpy_of_arrow(arr)
            first = 0
            while True:
                buf, (size, n) = _page_into(scratch, lambda b: _ext.parquet_scalar_page(
                    values, first, PAGE_VALUES, b))
                yield buf[:size], n, None
                first += n
                if first >= len(values):
                    return
        offsets = numpy_of_arrow(arr.offsets)
        child = arr.values
        if child.null_count:
            raise ValueError(f"column {self.name!r} holds null items: daskwp's parts have none")
        values = numpy_of_arrow(child)
        rows = len(offsets) - 1
        row = 0

        def encode(b):
            if packer is None:
                return _ext.parquet_list_page(values, offsets, row, PAGE_BYTES, self.split, b)
            return _ext.parquet_list_page(values, offsets, row, PAGE_BYTES, self.split, b,
                                          packer(len(b)))
        while True:
            buf, out = _page_into(scratch, encode)
            size, n, end = out[:3]
            packed = None
            if packer is not None:
                # the page fitted its buffer, and the block's buffer its worst case
                assert out[3] >= 0, "the list page was not compressed"
                packed = packer(len(buf))[:out[3]]
            yield buf[:size], n, packed
            row = end
            if row >= rows:
                return


def _page_into(scratch, encode):
    """``(buffer, encode(buffer))``: one page encoded into the writer's reused buffer
    (``scratch(size)``); the encoder returns the page's size first, and writes nothing when
    the buffer is smaller, so a bigger page is encoded again into a buffer grown to it."""
    buf = scratch(0)
    out = encode(buf)
    if out[0] > len(buf):
        buf = scratch(out[0])
        out = encode(buf)
    return buf, out


def _arrow_schema_value(schema: pa.Schema) -> bytes:
    """The ``ARROW:schema`` key-value of a file of ``schema`` (what Arrow's writer records:
    the IPC-serialized schema, base64)."""
    return base64.b64encode(schema.serialize().to_pybytes())


class NativeParquetWriter:
    """A Parquet file of ``schema`` written to ``sink`` (``write(bytes)``, ``tell()``):
    :meth:`write_table` appends row groups, :meth:`add_key_value_metadata` adds footer
    metadata, :meth:`close` writes the footer (``sink`` is not closed). The interface of
    ``pyarrow.parquet.ParquetWriter`` that the part writer uses."""

    def __init__(self, sink, schema: pa.Schema, compression="zstd", compression_level=1,
                 byte_stream_split: bool = True):
        if not supports(schema, compression):
            raise ValueError(f"NativeParquetWriter: unsupported schema or compression "
                             f"{compression!r}: {schema}")
        self._sink = sink
        self.schema = schema
        self._codec = CODECS[compression]
        self._compress = None
        # the compressed page being written (lz4): one buffer of the worst case, reused.
        # (A flag, not self._lz4_page kept in an attribute: that bound method made the
        # writer a reference cycle, and its page buffers, ~2 MB a part, waited for the
        # cyclic collector; a worker's peak RSS grew as its full passes grew rarer.)
        self._packed = np.empty(0, dtype=np.uint8)
        self._lz4 = compression == "lz4"
        if compression is not None and not self._lz4:
            codec = pa.Codec(compression, compression_level=compression_level)
            # a pyarrow Buffer (not copied into bytes), from a pool that keeps its pages
            self._compress = functools.partial(codec.compress, memory_pool=compression_pool())
        self._columns = [_Column(f, byte_stream_split) for f in schema]
        # the uncompressed page being written: one buffer, grown as a page needs
        self._page = np.empty(PAGE_BYTES + (PAGE_BYTES >> 4), dtype=np.uint8)
        self._row_groups: list[bytes] = []
        self._rows = 0
        kv = dict(schema.metadata or {})
        kv[b"ARROW:schema"] = _arrow_schema_value(schema)
        self._kv = kv
        self._closed = False
        if sink.tell() == 0:
            sink.write(b"PAR1")

    def _scratch(self, size: int) -> np.ndarray:
        """The page buffer, at least ``size`` bytes."""
        if size > len(self._page):
            self._page = np.empty(size + (size >> 3), dtype=np.uint8)
        return self._page

    def _lz4_buffer(self, size: int) -> np.ndarray:
        """The compressed-page buffer, grown first to the worst case of an LZ4 block of
        ``size`` bytes (``_ext.lz4_raw_bound``; at least that of the page buffer), which the
        compressor checks before it writes."""
        need = _ext.lz4_raw_bound(size)
        if need > len(self._packed):
            self._packed = np.empty(max(need, _ext.lz4_raw_bound(len(self._page))),
                                    dtype=np.uint8)
        return self._packed

    def _lz4_page(self, body: np.ndarray) -> np.ndarray:
        """``body`` as one LZ4 block (an LZ4_RAW page): a view of the compressed-page
        buffer; use it before compressing the next page."""
        packed = self._lz4_buffer(len(body))
        return packed[:_ext.lz4_raw_compress(body, packed)]

    def add_key_value_metadata(self, kv: dict) -> None:
        for k, v in kv.items():
            k = k.encode() if isinstance(k, str) else bytes(k)
            self._kv[k] = v.encode() if isinstance(v, str) else bytes(v)

    def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
        if self._closed:
            raise ValueError("write_table on a closed NativeParquetWriter: the file ended")
        if table.schema.remove_metadata() != self.schema.remove_metadata():
            raise ValueError(f"table schema differs from the file's: {table.schema}")
        n = table.num_rows
        size = row_group_size or n or 1
        if any(c.num_chunks > 1 for c in table.columns):
            table = table.combine_chunks()
        for start in range(0, max(n, 1), size):   # an empty table: one empty row group, as Arrow
            self._row_group(table.slice(start, min(size, n - start)))

    def _row_group(self, table: pa.Table) -> None:
        chunks = []
        first = self._sink.tell()
        total_u = total_c = 0
        for col, column in zip(self._columns, table.columns):
            arr = column.chunk(0) if column.num_chunks else pa.array([], column.type)
            start = self._sink.tell()
            values = unc = comp = 0
            packer = self._lz4_buffer if self._lz4 else None
            for body, n, data in col.pages(arr, self._scratch, packer):
                if data is None:
                    data = self._lz4_page(body) if self._lz4 else \
                        self._compress(body) if self._compress else body
                header = _page_header(len(body), len(data), n, col.encoding)
                self._sink.write(header)
                self._sink.write(data)
                values += n
                unc += len(header) + len(body)
                comp += len(header) + len(data)
            stats = self._statistics(col, arr)
            meta = write_struct([
                (1, "i32", col.ann["type"]),
                (2, "list", ("i32", [_RLE, col.encoding] if len(arr) else [_RLE])),
                (3, "list", ("bin", col.path)),
                (4, "i32", self._codec),
                (5, "i64", values), (6, "i64", unc), (7, "i64", comp),
                (9, "i64", start),
                (12, "struct", stats),
            ])
            chunks.append(write_struct([(2, "i64", start), (3, "struct", meta)]))
            total_u += unc
            total_c += comp
        self._row_groups.append(write_struct([
            (1, "list", ("struct", chunks)), (2, "i64", total_u), (3, "i64", table.num_rows),
            (5, "i64", first), (6, "i64", total_c),
            (7, "i16", len(self._row_groups))]))
        self._rows += table.num_rows

    @staticmethod
    def _statistics(col: _Column, arr: pa.Array):
        """Min, max and null count of the logID column (the statistics the stored layout
        keeps, :func:`~daskwp.frames.part_writer.parquet_write_options`)."""
        if col.name != "logID" or col.is_list or not len(arr):
            return None
        values = numpy_of_arrow(arr)
        fmt = "<q" if col.ann["type"] == _INT64 else "<i"
        lo, hi = struct.pack(fmt, int(values.min())), struct.pack(fmt, int(values.max()))
        return write_struct([(1, "bin", hi), (2, "bin", lo), (3, "i64", 0), (5, "bin", hi),
                        (6, "bin", lo)])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        elements = [_schema_element("schema", repetition=_REQUIRED,
                                    children=len(self._columns))]
        for col in self._columns:
            elements += col.elements
        kv = [write_struct([(1, "bin", k), (2, "bin", v)]) for k, v in self._kv.items()]
        orders = [write_struct([(1, "struct", write_struct([]))]) for _ in self._columns]
        footer = write_struct([
            (1, "i32", 2),
            (2, "list", ("struct", elements)),
            (3, "i64", self._rows),
            (4, "list", ("struct", self._row_groups)),
            (5, "list", ("struct", kv)),
            (6, "bin", _CREATED_BY),
            (7, "list", ("struct", orders)),
        ])
        self._sink.write(footer + struct.pack("<i", len(footer)) + b"PAR1")
        # the sink (a hashing file, its checksum's hash an extension object) is not held past
        # the file's end: the writer's bound compressor makes it a cycle, collected late, or
        # never where the heap is frozen at exit (the console command's)
        self._sink = None
