"""The Thrift compact protocol both ways (daskwp/frames/thrift_compact.py): what the
Parquet writer writes (``write_struct``) the page reader's ``read_struct`` reads back, for
every type either uses (bool, i8 to i64 at their extremes, binary, lists of every element
type at every size form, nested structs, short and long field ids); the reader reads the
footers Arrow's writer makes, and bytes cut short raise IndexError (what the page reader
retries on)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from daskwp.frames import thrift_compact as tc

I64 = [0, 1, -1, 63, -64, 64, -65, 2**31 - 1, -2**31, 2**32, 2**53 + 1, 2**63 - 1, -2**63]
I32 = [0, 1, -1, 127, -128, 2**15 - 1, -2**15, 2**31 - 1, -2**31]
I8 = [0, 1, -1, 127, -128, 8, 16]
BINS = [b"", b"a", "logID", "größe", b"\x00\xff" * 70, bytes(range(256)) * 65]


def _plain(v):
    """A value :func:`read_struct` returned, its binaries as bytes."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, (bytes, memoryview)):
        return bytes(v)
    return v


def _as_bytes(v):
    return v.encode() if isinstance(v, str) else v


def _fields():
    """``(fields for write_struct, {field id: what read_struct should return})``: every type
    the writer writes, each at short and long field-id forms."""
    inner = [(1, "i8", -3), (2, "bool", True), (3, "bin", "x")]
    inner_want = {1: -3, 2: True, 3: b"x"}
    nested = [(4, "struct", tc.write_struct(inner)), (20, "i64", -2**63)]
    nested_want = {4: inner_want, 20: -2**63}
    fields, want = [], {}
    fid = 0
    for kind, values in [("bool", [True, False]), ("i8", I8), ("i16", [0, -1, 2**15 - 1, -2**15]),
                         ("i32", I32), ("i64", I64), ("bin", BINS)]:
        for v in values:
            fid += 1
            fields.append((fid, kind, v))
            want[fid] = _as_bytes(v) if kind == "bin" else v
    for n in (0, 1, 14, 15, 16, 300):   # the short (<15) and the long size form
        fid += 1
        fields.append((fid, "list", ("i32", [I32[k % len(I32)] for k in range(n)])))
        want[fid] = [I32[k % len(I32)] for k in range(n)]
        fid += 1
        fields.append((fid, "list", ("i64", [I64[k % len(I64)] for k in range(n)])))
        want[fid] = [I64[k % len(I64)] for k in range(n)]
        fid += 1
        fields.append((fid, "list", ("bin", [BINS[k % len(BINS)] for k in range(n)])))
        want[fid] = [_as_bytes(BINS[k % len(BINS)]) for k in range(n)]
        fid += 1
        fields.append((fid, "list", ("struct", [tc.write_struct(nested)] * n)))
        want[fid] = [nested_want] * n
    fid += 1
    fields.append((fid, "struct", tc.write_struct([])))
    want[fid] = {}
    fields.append((fid + 1, "i32", None))   # left out
    # field ids past a delta of 15 (the long form), and large ones
    for gap_fid, v in [(fid + 16, -7), (fid + 40, 2**40), (1000, -1), (32767, 5)]:
        fields.append((gap_fid, "i64", v))
        want[gap_fid] = v
    fields.append((32767 + 1, "struct", tc.write_struct(nested)))
    want[32768] = nested_want
    return fields, want


def test_what_the_writer_writes_the_reader_reads():
    fields, want = _fields()
    data = tc.write_struct(fields)
    got, end = tc.read_struct(data, 0)
    assert end == len(data)
    assert _plain(got) == want
    # as the page reader reads: from inside a larger buffer, through a uint8 array's view
    buf = np.frombuffer(b"\x07" * 5 + data + b"\x09" * 3, dtype=np.uint8)
    got, end = tc.read_struct(memoryview(buf), 5)
    assert end == 5 + len(data)
    assert _plain(got) == want


def test_struct_field_headers_are_the_compact_protocol_bytes():
    """Bytes from the compact protocol's specification (not from either half), so that
    the two cannot agree on a wrong format."""
    assert tc.write_struct([]) == b"\x00"
    assert tc.write_struct([(1, "i32", 0), (2, "i64", -1), (3, "bool", True),
                            (4, "bool", False)]) == b"\x15\x00\x16\x01\x11\x12\x00"
    # a delta of 16: the type alone, then the id as a zigzag varint (16 -> 32)
    assert tc.write_struct([(16, "i8", -2)]) == b"\x03\x20\xfe\x00"
    assert tc.write_struct([(1, "bin", "ab"), (2, "list", ("i32", [1, -1]))]) == \
        b"\x18\x02ab\x19\x25\x02\x01\x00"
    assert tc.write_struct([(1, "list", ("i64", [0] * 15))]) == b"\x19\xf6\x0f" + b"\x00" * 15 \
        + b"\x00"
    assert tc.write_struct([(1, "struct", tc.write_struct([(1, "i16", 3)]))]) == \
        b"\x1c\x14\x06\x00\x00"


@pytest.mark.parametrize("v", [0, 1, 127, 128, 300, 2**14 - 1, 2**14, 2**32, 2**63, 2**64 - 1])
def test_varints(v):
    b = tc.write_varint(v)
    assert len(b) == max(1, (v.bit_length() + 6) // 7)
    assert all(x & 0x80 for x in b[:-1]) and not b[-1] & 0x80
    assert tc.read_varint(b + b"\xff", 0) == (v, len(b))
    assert tc.read_varint(np.frombuffer(b, dtype=np.uint8), 0) == (v, len(b))


def test_zigzag_varints():
    assert tc.write_varint(300) == b"\xac\x02"
    for v, z in [(0, 0), (-1, 1), (1, 2), (-2, 3), (2**31 - 1, 2**32 - 2), (-2**31, 2**32 - 1),
                 (2**63 - 1, 2**64 - 2), (-2**63, 2**64 - 1)]:
        assert tc.write_zigzag_varint(v) == tc.write_varint(z), v
        assert tc.read_zigzag_varint(tc.write_varint(z), 0) == (v, len(tc.write_varint(z)))
    for v in I64 + list(range(-300, 300)):
        b = tc.write_zigzag_varint(v)
        assert tc.read_zigzag_varint(b, 0) == (v, len(b))


def test_the_types_the_writer_does_not_write():
    """Doubles, sets and bool lists (written by other Thrift writers) read; a map is
    refused with its type."""
    data = (b"\x17" + struct.pack("<d", -2.5)     # a double
            + b"\x1a\x25\x05\x00"                   # a set of two i32
            + b"\x19\x31\x01\x02\x00"               # a list of three bools
            + b"\x00")
    assert tc.read_struct(data, 0) == ({1: -2.5, 2: [-3, 0], 3: [True, False, False]},
                                       len(data))
    with pytest.raises(tc.UnsupportedType, match="type 11") as e:
        tc.read_struct(b"\x1b\x00\x00", 0)
    assert e.value.kind == 11


@pytest.mark.parametrize("step", [pytest.param(97, marks=pytest.mark.slow), 4999])
def test_bytes_cut_short_raise_index_error(step):
    """Every cut in the first 64 bytes, every ``step``-th and the last byte off. The reader
    reads up to the cut each time (~1 MB of bytes): the cut every 97 bytes (~10,000 reads,
    10 CPU s) is slow, every 4999 bytes (~260 reads) fast."""
    fields, _ = _fields()
    data = tc.write_struct(fields)
    for cut in sorted({*range(0, 64), *range(0, len(data), step), len(data) - 1}):
        with pytest.raises(IndexError):
            tc.read_struct(memoryview(data)[:cut], 0)


def test_the_reader_reads_arrow_footers(tmp_path):
    """An independent writer's bytes: the footer of a file Arrow writes (strings,
    lists, statistics), field for field against pyarrow's own reading of it."""
    n = 5000
    table = pa.table({"text": [f"row {i} " * (i % 7) for i in range(n)],
                      "ids": pa.array([list(range(i % 5)) for i in range(n)],
                                      type=pa.list_(pa.int32())),
                      "v": pa.array(np.arange(n, dtype=np.int64) - 2**40)})
    path = tmp_path / "a.parquet"
    pq.write_table(table, path, row_group_size=1500, compression="zstd")
    raw = path.read_bytes()
    size = struct.unpack("<i", raw[-8:-4])[0]
    footer = raw[-8 - size:-8]
    meta, end = tc.read_struct(footer, 0)
    assert end == size
    meta = _plain(meta)
    pm = pq.read_metadata(path)
    assert meta[3] == pm.num_rows == n
    assert meta[6].decode() == pm.created_by
    names = [e[4].decode() for e in meta[2]]
    assert names[0] == "schema" and {"text", "ids", "v"} <= set(names)
    assert len(meta[4]) == pm.num_row_groups == 4
    for g, rg in enumerate(meta[4]):
        assert rg[3] == pm.row_group(g).num_rows
        for c, chunk in enumerate(rg[1]):
            cm, pc = chunk[3], pm.row_group(g).column(c)
            assert cm[9] == pc.data_page_offset and cm[5] == pc.num_values
            assert ".".join(p.decode() for p in cm[3]) == pc.path_in_schema
            if pc.path_in_schema == "v":
                assert struct.unpack("<q", cm[12][6])[0] == pc.statistics.min
    assert {kv[1] for kv in meta[5]} == set(pm.metadata)


def test_the_page_reader_refuses_a_header_of_an_unread_type():
    from daskwp.accessors import parquet_pages
    head = b"\x15\x00\x1b\x00\x00"   # a map where a page header's field 2 is
    reader = parquet_pages._ChunkReader(io.BytesIO(head), 0, len(head), 64)
    with pytest.raises(parquet_pages.PagesUnsupported, match="Thrift type 11"):
        parquet_pages._page_header(reader)
