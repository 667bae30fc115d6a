"""The accessor's Parquet text read, page by page: a text column chunk's pages
decompressed with Arrow's codecs and their PLAIN values decoded natively
(:func:`daskwp._ext.plain_byte_array_values`) straight into the block the partition's
text is gathered in (:class:`~daskwp.accessors.parquet_source._TextBlock`).

Why: pyarrow's reader decodes a page's values into its string builder (one copy, and the
builder's growth), then :class:`_TextBlock` copies them into the block (another). Of a
64 MB partition of zstd text (``dd.read_parquet`` of the pipeline benchmark's files),
its read took ~75-90 ms of CPU, ~45 of them the decompression; here the values are
copied once, from the decompressed page into the block.

What it reads: a flat (top-level) BYTE_ARRAY column; data pages v1 and v2, PLAIN or
dictionary-encoded (the dictionary's values gathered with Arrow's ``take``), nulls from
the definition levels; the codecs Arrow's ``Codec`` decompresses (none, snappy, gzip,
brotli, zstd, LZ4_RAW). :func:`pages_readable` tells from the footer whether a column
chunk is such; a page that turns out otherwise raises :class:`PagesUnsupported` (the
caller then reads the partition with pyarrow's reader). Page checksums are not verified
(neither are they by pyarrow's reader by default).
"""

from __future__ import annotations

import numpy as np

from ..frames.thrift_compact import UnsupportedType, read_struct, read_varint

__all__ = ["PagesUnsupported", "pages_readable", "read_column_pages"]

#: Arrow ``Codec`` names of the Parquet codecs read here (what pyarrow's footer calls
#: "LZ4", which may be Hadoop's framing, is not: pyarrow's reader reads it).
_CODECS = {"UNCOMPRESSED": None, "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli",
           "ZSTD": "zstd", "LZ4_RAW": "lz4_raw"}
_ENCODINGS = {"PLAIN", "PLAIN_DICTIONARY", "RLE_DICTIONARY", "RLE", "BIT_PACKED"}

# Parquet's PageType and Encoding values (parquet.thrift)
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY = 0, 2, 3, 8


class PagesUnsupported(ValueError):
    """A page this reader does not decode (the caller reads the file with pyarrow's)."""


def pages_readable(meta, j: int) -> bool:
    """Whether column ``j`` (a leaf index) of every row group of the file ``meta`` (a
    ``FileMetaData``) is read here, from its footer: a top-level BYTE_ARRAY column, at
    most one definition level, a codec of ``_CODECS``, encodings of ``_ENCODINGS``."""
    if j < 0:
        return False
    col = meta.schema.column(j)
    if col.physical_type != "BYTE_ARRAY" or col.max_repetition_level != 0 or \
            col.max_definition_level > 1 or "." in col.path:
        return False
    for g in range(meta.num_row_groups):
        chunk = meta.row_group(g).column(j)
        if chunk.compression not in _CODECS or not set(chunk.encodings) <= _ENCODINGS:
            return False
    return True


def read_column_pages(f, meta, groups, j: int, block, buffer_bytes: int, batch_bytes: int,
                      pool=None) -> list:
    """Column ``j`` of row groups ``groups`` of the open file ``f`` (its footer ``meta``)
    into ``block`` (a :class:`_TextBlock`); returns the Arrow arrays the block completes.
    The column chunk is read through a buffer of ``buffer_bytes`` (larger for a larger
    page). A dictionary-encoded page's text goes to the block in slices of about
    ``batch_bytes``. ``pool``: the Arrow memory pool the pages are decompressed into
    (None: Arrow's default)."""
    import pyarrow as pa

    from .. import _ext

    max_def = meta.schema.column(j).max_definition_level
    out = []
    for g in groups:
        chunk = meta.row_group(g).column(j)
        rows = meta.row_group(g).num_rows
        start = chunk.data_page_offset
        if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
            start = chunk.dictionary_page_offset
        reader = _ChunkReader(f, start, chunk.total_compressed_size, buffer_bytes)
        codec = _CODECS[chunk.compression]
        codec = pa.Codec(codec) if codec else None
        dictionary = None
        seen = 0
        while reader.remaining():
            header, used = _page_header(reader)
            reader.skip(used)
            kind, unc, comp = header.get(1), header.get(2), header.get(3)
            if unc is None or comp is None or comp > reader.remaining():
                raise PagesUnsupported(f"a page header of row group {g} is malformed")
            # (the page's bytes are used up before the reader's next view)
            body = reader.view(comp)[:comp]
            reader.skip(comp)
            if kind == _DICTIONARY_PAGE:
                dph = header.get(7) or {}
                if dph.get(2, _PLAIN) not in (_PLAIN, _PLAIN_DICTIONARY):
                    raise PagesUnsupported("a dictionary page not PLAIN-encoded")
                values = _decompress(codec, body, unc, pool)
                n = dph.get(1, 0)
                text = np.empty(max(1, len(values) - 4 * n), dtype=np.uint8)
                offsets = _ext.plain_byte_array_values(values, n, text, 0)
                dictionary = pa.Array.from_buffers(pa.large_binary(), n, [
                    None, pa.py_buffer(offsets), pa.py_buffer(text)])
                continue
            if kind == _DATA_PAGE:
                dph = header.get(5) or {}
                n, encoding = dph.get(1, 0), dph.get(2)
                page = _decompress(codec, body, unc, pool)
                pos, valid = 0, None
                if max_def:
                    if dph.get(3, _RLE) != _RLE:
                        raise PagesUnsupported("definition levels not RLE-encoded")
                    if len(page) < 4:
                        raise PagesUnsupported("a data page without its levels")
                    nbytes = int(page[:4].view("<u4")[0])
                    valid = _levels(page[4:4 + nbytes], n)
                    pos = 4 + nbytes
                values = page[pos:]
            elif kind == _DATA_PAGE_V2:
                dph = header.get(8) or {}
                n, encoding = dph.get(1, 0), dph.get(4)
                def_len, rep_len = dph.get(5, 0), dph.get(6, 0)
                if rep_len:
                    raise PagesUnsupported("repetition levels in a flat column")
                valid = _levels(np.frombuffer(body[:def_len], dtype=np.uint8), n) \
                    if max_def else None
                rest = body[def_len:]
                values = _decompress(codec if dph.get(7, True) else None, rest,
                                     unc - def_len, pool)
            else:
                continue   # an index page: nothing of the values
            if valid is not None and valid.all():   # (levels of 1s, bit-packed)
                valid = None
            count = n if valid is None else int(valid.sum())
            if encoding == _PLAIN:
                out.extend(block.add_plain(values, count, valid))
            elif encoding in (_RLE_DICTIONARY, _PLAIN_DICTIONARY):
                if dictionary is None:
                    raise PagesUnsupported("a dictionary-encoded page without a dictionary")
                idx = _dictionary_indices(values, count)
                if len(idx) and (idx.min() < 0 or idx.max() >= len(dictionary)):
                    raise PagesUnsupported("a dictionary index out of range")
                if valid is not None:
                    full = np.zeros(n, dtype=np.int32)
                    full[valid] = idx
                    idx = pa.array(full, mask=~valid)
                try:
                    text = dictionary.take(idx).cast(block.kind)
                except pa.ArrowInvalid as e:   # (bytes that are not UTF-8)
                    raise PagesUnsupported(str(e)) from None
                for piece in _slices(text, batch_bytes):   # (the block's chunks stay small)
                    out.extend(block.add(piece))
            else:
                raise PagesUnsupported(f"a data page of encoding {encoding}")
            seen += n
        if seen != rows:
            raise PagesUnsupported(f"row group {g}: its pages hold {seen} values for "
                                   f"{rows} rows")
    return out


#: Bytes of a page header read at a time (its statistics may take more: then up to
#: :data:`_HEADER_MAX_BYTES`).
_HEADER_BYTES, _HEADER_MAX_BYTES = 16 << 10, 1 << 20


def _page_header(reader) -> tuple:
    """The page header at the reader's position: ``({field id: value}, its bytes)``."""
    for want in (_HEADER_BYTES, _HEADER_MAX_BYTES):
        head = reader.view(min(want, reader.remaining()))
        try:
            return read_struct(head, 0)
        except IndexError:   # past the bytes at hand
            if len(head) == reader.remaining():
                break
        except UnsupportedType as e:
            raise PagesUnsupported(f"a page header holding Thrift type {e.kind}") from None
    raise PagesUnsupported("a page header runs past its column chunk")


class _ChunkReader:
    """The bytes of a column chunk (``size`` from ``start`` of the file ``f``), read
    through a buffer of ``nbytes`` (larger where a page needs it)."""

    def __init__(self, f, start: int, size: int, nbytes: int):
        f.seek(start)
        self.f, self.left = f, size   # bytes of the chunk still in the file
        self.buf = np.empty(max(1, min(nbytes, size)), dtype=np.uint8)
        self.lo = self.hi = 0         # the bytes at hand: buf[lo:hi]

    def remaining(self) -> int:
        return self.hi - self.lo + self.left

    def view(self, n: int):
        """At least ``n`` bytes from the position (fewer at the chunk's end), valid until
        the next call."""
        held = self.hi - self.lo
        if held < n and self.left:
            if len(self.buf) < n:
                grown = np.empty(n, dtype=np.uint8)
                grown[:held] = self.buf[self.lo:self.hi]
                self.buf = grown
            else:
                self.buf[:held] = self.buf[self.lo:self.hi].copy()
            self.lo, self.hi = 0, held
            want = min(len(self.buf) - held, self.left)
            if self.f.readinto(memoryview(self.buf)[held:held + want]) != want:
                raise PagesUnsupported("a column chunk ends past its file")
            self.hi += want
            self.left -= want
        return memoryview(self.buf)[self.lo:self.hi]

    def skip(self, n: int) -> None:
        self.lo += n


def _slices(arr, nbytes: int):
    """Slices of the string array ``arr`` of about ``nbytes`` of text each (a row at
    least)."""
    from ..core.strings import chunk_buffers, piece_ranges
    off = chunk_buffers(arr).offsets
    for start, end in piece_ranges(off, nbytes):
        yield arr.slice(start, end - start)


def _decompress(codec, body, nbytes: int, pool):
    """A page's bytes, decompressed (a uint8 array)."""
    if codec is not None:
        body = codec.decompress(body, nbytes, asbytes=False, memory_pool=pool)
    return np.frombuffer(body, dtype=np.uint8)


def _levels(data, n: int):
    """The validity (bool, ``n``) of definition levels of bit width 1, RLE/bit-packed
    hybrid encoded; None when every value is present: the levels open with one run of 1s
    covering the page (how writers store a page without nulls), read from its header
    alone (decoding ~12k levels per 1 MB page into a bool array, only to find them all
    set, took ~2 of the ~67 ms of CPU that a 64 MB file's read takes)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    if len(buf) >= 2:
        header, i = read_varint(buf, 0)
        if not header & 1 and header >> 1 >= n and i < len(buf) and buf[i] == 1:
            return None
    return _rle_hybrid(buf, 1, n).astype(bool)


def _dictionary_indices(values, n: int):
    """The ``n`` dictionary indices of a dictionary-encoded page's values (a bit-width
    byte, then the RLE/bit-packed hybrid runs)."""
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    return _rle_hybrid(values[1:], int(values[0]), n)


def _rle_hybrid(data, width: int, n: int):
    """``n`` values of the Parquet RLE/bit-packed hybrid encoding of ``width`` bits."""
    if width > 32:
        raise PagesUnsupported(f"a bit width of {width}")
    out = np.empty(n, dtype=np.int32)
    buf = np.frombuffer(data, dtype=np.uint8)
    value_bytes = (width + 7) // 8
    weights = (1 << np.arange(width, dtype=np.int64)) if width else None
    i = k = 0
    while k < n:
        if i >= len(buf):
            raise PagesUnsupported("levels or indices end before their values")
        header, i = read_varint(buf, i)
        if header & 1:   # bit-packed: groups of 8 values
            count = (header >> 1) * 8
            nbytes = (header >> 1) * width
            if width:
                bits = np.unpackbits(buf[i:i + nbytes], bitorder="little")
                vals = bits[:count * width].reshape(-1, width) @ weights
            else:
                vals = np.zeros(count, dtype=np.int64)
            i += nbytes
            take = min(count, n - k)
            if len(vals) < take:
                raise PagesUnsupported("a bit-packed run past the end of its page")
            out[k:k + take] = vals[:take]
        else:   # a run of one value
            count = header >> 1
            value = int.from_bytes(bytes(buf[i:i + value_bytes]), "little")
            i += value_bytes
            take = min(count, n - k)
            out[k:k + take] = value
        k += take
    return out
