"""daskwp's own Parquet writer (daskwp/frames/parquet_writer.py, docs/design.md §3.3): the
files it writes read back, through every reader daskwp documents, exactly as the files
Arrow's writer makes with the stored layout's options — same schema, metadata, values,
row groups, encodings and logID statistics — on the outputs of every shared corpus line, and
on integer columns built to break its encoders (delta wraparound, extremes, empty lists, page
and row-group boundaries)."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from conftest import every_corpus_line, slow_unless
from daskwp.frames import parquet_writer, thrift_compact
from daskwp.frames.partition import table_from_output
from daskwp.frames.part_writer import PartWriter

TOK = daskwp.WordPieceTokenizer()
CORPUS = every_corpus_line()   # every shared corpus line and the edge cases


def _write(path, tables, native, row_group_rows=20_000, compression="zstd"):
    w = PartWriter(str(path), str(path) + ".tmp", compression=compression,
                   row_group_rows=row_group_rows, native=native)
    with w:
        for t in tables:
            w.write(t)
        w.close({"partition": 0})
    return str(path)


def _assert_same_files(a: str, n: str) -> None:
    ta, tn = pq.read_table(a), pq.read_table(n)
    assert ta.schema == tn.schema and ta.schema.metadata == tn.schema.metadata
    assert ta.equals(tn)
    ma, mn = pq.read_metadata(a), pq.read_metadata(n)
    assert (ma.num_rows, ma.num_row_groups, ma.num_columns) == \
        (mn.num_rows, mn.num_row_groups, mn.num_columns)
    assert set(ma.metadata) == set(mn.metadata)
    assert mn.metadata[b"daskwp"] == ma.metadata[b"daskwp"]
    for rg in range(ma.num_row_groups):
        ra, rn = ma.row_group(rg), mn.row_group(rg)
        assert ra.num_rows == rn.num_rows
        for c in range(ma.num_columns):
            ca, cn = ra.column(c), rn.column(c)
            assert (ca.path_in_schema, ca.physical_type, ca.encodings, ca.compression) == \
                (cn.path_in_schema, cn.physical_type, cn.encodings, cn.compression)
            assert (ca.statistics is None) == (cn.statistics is None) or \
                not (ca.statistics and ca.statistics.has_min_max)
            if ca.statistics is not None and ca.statistics.has_min_max:
                sa, sn = ca.statistics, cn.statistics
                assert (sa.min, sa.max, sa.null_count) == (sn.min, sn.max, sn.null_count)
    sa, sn = pq.ParquetFile(a).schema, pq.ParquetFile(n).schema
    assert sa.equals(sn)
    assert [str(sa.column(i)) for i in range(len(sa))] == [str(sn.column(i)) for i in range(len(sn))]
    pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(n))


LAYOUTS = {
    "ragged": (dict(padding=False), {}),
    "padded": ({}, dict(attention_mask=True)),
    "trimmed": ({}, dict(attention_mask=False)),
    "int8_mask": (dict(mask_dtype="int8"), dict(attention_mask=True)),
    "positions": (dict(padding=False, return_offsets_mapping=True, return_word_ids=True,
                       return_special_tokens_mask=True, return_token_type_ids=True), {}),
    "bucket": (dict(padding="bucket"), {}),
    "no_specials": (dict(padding=False, add_special_tokens=False), {}),
}


@pytest.mark.parametrize("layout", slow_unless(sorted(LAYOUTS), fast={"ragged"}))
def test_native_parts_equal_arrow_parts_on_every_corpus_line(tmp_path, layout):
    call, table_kw = LAYOUTS[layout]
    out = TOK(CORPUS, max_length=64, stride=16, **call)
    table = table_from_output(out, **table_kw)
    half = table.num_rows // 2     # two writes: row groups continue across tables
    tables = [table.slice(0, half), table.slice(half)]
    a = _write(tmp_path / "arrow.parquet", tables, native=False)
    n = _write(tmp_path / "native.parquet", tables, native=True)
    assert b"daskwp" in pq.read_metadata(n).created_by.encode()
    assert b"parquet-cpp-arrow" in pq.read_metadata(a).created_by.encode()
    _assert_same_files(a, n)


def test_pairs_sequence_ids_round_trip(tmp_path):
    firsts = [d[:40] for d in CORPUS[:3000]]   # short first sequences (only_second)
    seconds = CORPUS[3000:6000]
    out = TOK(firsts, text_pair=seconds, max_length=96, stride=24, padding=False,
              return_offsets_mapping=True, return_token_type_ids=True)
    table = table_from_output(out)
    a = _write(tmp_path / "a.parquet", [table], native=False, row_group_rows=777)
    n = _write(tmp_path / "n.parquet", [table], native=True, row_group_rows=777)
    _assert_same_files(a, n)


def _edge_table(rng) -> pa.Table:
    n = 3001
    i64 = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64,
                       endpoint=True)
    i64[:6] = [np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1,
               np.iinfo(np.int64).min, np.iinfo(np.int64).max]   # deltas that wrap
    i32 = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, n, dtype=np.int32,
                       endpoint=True)
    i32[:4] = [np.iinfo(np.int32).max, np.iinfo(np.int32).min, np.iinfo(np.int32).max, 7]
    sorted64 = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    lengths = rng.integers(0, 40, n)
    lengths[::7] = 0                       # empty lists among the rows
    lengths[:3] = 0
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])

    def lists(values):
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))

    return pa.table({
        "logID": pa.array(sorted64),
        "random64": pa.array(i64),
        "random32": pa.array(i32),
        "small8": pa.array(rng.integers(-128, 128, n, dtype=np.int8)),
        "small16": pa.array(rng.integers(-2**15, 2**15, n, dtype=np.int16)),
        "ids": lists(rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, total,
                                  dtype=np.int32, endpoint=True)),
        "pairs64": lists(rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, total,
                                      dtype=np.int64, endpoint=True)),
        "mask8": lists(rng.integers(-128, 128, total, dtype=np.int8)),
    })


@pytest.mark.parametrize("compression", ["zstd", pytest.param("lz4", marks=pytest.mark.slow),
                                         pytest.param("none", marks=pytest.mark.slow)])
@pytest.mark.parametrize("row_group_rows", [pytest.param(1, marks=pytest.mark.slow), 129, 100_000])
def test_encoders_on_extreme_integers_and_empty_lists(tmp_path, monkeypatch, compression,
                                                      row_group_rows):
    monkeypatch.setattr(parquet_writer, "PAGE_BYTES", 1000)    # many pages per chunk
    monkeypatch.setattr(parquet_writer, "PAGE_VALUES", 200)
    table = _edge_table(np.random.default_rng(row_group_rows))
    if row_group_rows == 1:
        table = table.slice(0, 300)
    path = tmp_path / "edge.parquet"
    n = _write(path, [table], native=True, row_group_rows=row_group_rows,
               compression=compression)
    back = pq.read_table(n)
    assert back.equals(table.replace_schema_metadata(back.schema.metadata)), \
        "the native writer's file reads back different values"
    a = _write(tmp_path / "a.parquet", [table], native=False, row_group_rows=row_group_rows,
               compression=compression)
    _assert_same_files(a, n)


def test_empty_part_and_schema_only_part(tmp_path):
    empty = table_from_output(TOK([], max_length=32, stride=8, padding=False))
    n = _write(tmp_path / "n.parquet", [empty], native=True)
    a = _write(tmp_path / "a.parquet", [empty], native=False)
    _assert_same_files(a, n)
    w = PartWriter(str(tmp_path / "s.parquet"), str(tmp_path / ".s.tmp"), native=True)
    w.close({"partition": 0}, schema=empty.schema)
    assert pq.read_table(tmp_path / "s.parquet").num_rows == 0


def test_other_columns_and_compressions_use_arrows_writer(tmp_path):
    table = table_from_output(TOK(CORPUS[:200], max_length=32, stride=8, padding=False))
    kept = table.append_column("source", pa.array(["x"] * table.num_rows))
    assert not parquet_writer.supports(kept.schema, "zstd")
    assert not parquet_writer.supports(table.schema, "snappy")
    assert parquet_writer.supports(table.schema, "zstd")
    for t, compression in ((kept, "zstd"), (table, "snappy")):
        path = tmp_path / f"{compression}-{t.num_columns}.parquet"
        _write(path, [t], native=None, compression=compression)
        assert "parquet-cpp-arrow" in pq.read_metadata(path).created_by
        assert pq.read_table(path).select(t.column_names).equals(
            t.replace_schema_metadata(pq.read_table(path).schema.metadata))
    with pytest.raises(ValueError, match="unsupported"):
        parquet_writer.NativeParquetWriter(open(os.devnull, "wb"), kept.schema)


def test_checksum_and_resume_accept_native_parts(tmp_path):
    from daskwp import _ext
    from daskwp.jobs.parts import data_checksum
    table = table_from_output(TOK(CORPUS[:2000], max_length=32, stride=8, padding=False))
    n = _write(tmp_path / "n.parquet", [table], native=True)
    kv = pq.read_metadata(n).metadata
    # the fast 128-bit part checksum, not SHA-256 (a tenth of the tokenizer's CPU)
    assert b"daskwp.data_sha256" not in kv
    recorded = kv[b"daskwp.data_hash128"].decode()
    assert data_checksum(n) == recorded
    raw = open(n, "rb").read()
    h = _ext.PartHash()
    h.update(raw[:len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")])
    assert h.hexdigest() == recorded
    with open(n, "r+b") as fh:      # a flipped byte in a data page no longer matches
        fh.seek(100)
        b = fh.read(1)
        fh.seek(100)
        fh.write(bytes([b[0] ^ 0xFF]))
    assert data_checksum(n) != recorded


def test_part_hash_sees_every_change():
    """The part checksum (docs/design.md §4.2): the same digest however the bytes arrive
    (the writer feeds page headers and pages; resume reads 4 MB pieces), another one after
    any flipped bit, truncation, appended zeros or swapped blocks."""
    from daskwp import _ext

    def digest(*parts):
        h = _ext.PartHash()
        for p in parts:
            h.update(p)
        return h.hexdigest()
    data = np.random.default_rng(0).integers(0, 256, 700, dtype=np.uint8).tobytes()
    ref = digest(data)
    assert len(ref) == 32 and int(ref, 16) >= 0
    for i in range(0, 700, 31):
        for j in range(i, 700, 47):
            assert digest(data[:i], data[i:j], b"", data[j:]) == ref
    assert digest(memoryview(data)) == digest(pa.py_buffer(data)) == ref
    seen = {ref, digest(b""), digest(b"\0"), digest(bytes(32)), digest(bytes(64))}
    changed = [bytes(data[:i]) + bytes([data[i] ^ (1 << b)]) + data[i + 1:]
               for i in range(700) for b in (0, 3, 7)]
    changed += [data[:k] for k in range(1, 700)] + [data + bytes(k) for k in range(1, 70)]
    changed += [data[32:64] + data[:32] + data[64:], data[8:16] + data[:8] + data[16:]]
    for c in changed:
        seen.add(digest(c))
    assert len(seen) == 5 + len(changed)
    with pytest.raises(TypeError):
        digest("text")


def test_dask_and_dataset_readers(tmp_path):
    import dask.dataframe as dd
    import pyarrow.dataset as ds
    table = table_from_output(TOK(CORPUS[:5000], max_length=48, stride=12, padding=False))
    d = tmp_path / "parts"
    d.mkdir()
    for i in range(2):
        _write(d / f"part-{i:05d}.parquet", [table], native=True, row_group_rows=1000)
    frame = dd.read_parquet(str(d)).compute()
    assert len(frame) == 2 * table.num_rows
    assert frame["input_ids"].iloc[:table.num_rows].map(list).tolist() == \
        table.column("input_ids").to_pylist()
    got = ds.dataset(str(d)).to_table(filter=ds.field("logID") < 10)
    want = table.filter(pa.compute.less(table.column("logID"), 10))
    assert got.num_rows == 2 * want.num_rows


def test_plain_list_values_where_readers_lack_byte_stream_split(tmp_path, monkeypatch):
    """With pyarrow < 17 the stored layout writes PLAIN id values; daskwp's writer follows
    the same setting (part_writer.LIST_ENCODING), so both writers still give the same file."""
    import daskwp.frames.part_writer as part_writer
    monkeypatch.setattr(part_writer, "LIST_ENCODING", "PLAIN")
    table = table_from_output(TOK(CORPUS[:4000], max_length=48, stride=12, padding=False))
    a = _write(tmp_path / "a.parquet", [table], native=False)
    n = _write(tmp_path / "n.parquet", [table], native=True)
    _assert_same_files(a, n)
    enc = pq.read_metadata(n).row_group(0).column(3).encodings
    assert "BYTE_STREAM_SPLIT" not in enc and "PLAIN" in enc


def test_parts_are_lz4_from_daskwps_writer_by_default(tmp_path):
    # the default compression (core.options.DEFAULT_COMPRESSION) goes through the native
    # writer as Parquet's LZ4_RAW, which Arrow reads back; zstd stays one option away
    table = table_from_output(TOK(CORPUS[:500], max_length=32, stride=8, padding=False))
    w = PartWriter(str(tmp_path / "d.parquet"), str(tmp_path / ".d.tmp"))
    w.write(table)
    w.close({"partition": 0})
    md = pq.read_metadata(tmp_path / "d.parquet")
    assert md.created_by == "daskwp parquet writer"
    assert {md.row_group(0).column(c).compression for c in range(md.num_columns)} == {"LZ4"}
    back = pq.read_table(tmp_path / "d.parquet")
    assert back.equals(table.replace_schema_metadata(back.schema.metadata))
    z = _write(tmp_path / "z.parquet", [table], native=None, compression="zstd")
    assert pq.read_metadata(z).row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize("compression", ["zstd"])
def test_compressed_pages_from_a_pool_that_keeps_its_pages(tmp_path, monkeypatch, compression):
    """Each zstd page's compressed copy comes from the system allocator (glibc keeps the
    freed block for the next page) where Arrow's default pool is mimalloc and malloc keeps
    freed blocks; from Arrow's default pool where a nanny's malloc setting would map each one
    afresh or the pool is jemalloc (a nanny's worker); the files are the same bytes. (lz4
    pages go to the writer's one reused buffer: tests/test_lz4_block.py.)"""
    from daskwp.backends import memory
    for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
              "MALLOC_MMAP_MAX_"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(memory, "_tuned", False)
    if pa.default_memory_pool().backend_name != "mimalloc":
        monkeypatch.setattr(pa, "default_memory_pool", pa.mimalloc_memory_pool)
    system = pa.system_memory_pool()
    assert parquet_writer.compression_pool().backend_name == "system"
    texts = [line for line in CORPUS if line][:3000] * 4
    table = table_from_output(TOK(texts, max_length=128, stride=32, padding=False))
    before = system.total_bytes_allocated()
    kept = _write(tmp_path / "kept.parquet", [table], native=True, compression=compression)
    md = pq.read_metadata(kept)
    compressed = sum(md.row_group(g).column(c).total_compressed_size
                     for g in range(md.num_row_groups) for c in range(md.num_columns))
    assert system.total_bytes_allocated() - before >= compressed, \
        "the compressed pages were not allocated from the system pool"
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")   # a nanny's, not tuned
    assert parquet_writer.compression_pool() is None
    monkeypatch.setattr(memory, "_tuned", True)              # tune_worker_malloc() ran
    assert parquet_writer.compression_pool().backend_name == "system"

    class Jemalloc:
        backend_name = "jemalloc"
    monkeypatch.setattr(pa, "default_memory_pool", Jemalloc)  # a nanny's worker's pool
    assert parquet_writer.compression_pool() is None
    monkeypatch.setattr(parquet_writer, "compression_pool", lambda: None)
    default = _write(tmp_path / "default.parquet", [table], native=True,
                     compression=compression)
    with open(kept, "rb") as a, open(default, "rb") as b:
        assert a.read() == b.read()


def test_a_native_part_imports_no_pyarrow_parquet(tmp_path):
    """A part of daskwp's own writer leaves ``pyarrow.parquet`` unimported (its import cost
    a worker's first partition's write stage about 10 ms); Arrow's writer imports it."""
    import subprocess
    import sys
    code = (
        "import sys, daskwp\n"
        "from daskwp.frames.part_writer import PartWriter\n"
        "from daskwp.frames.partition import table_from_output\n"
        "t = table_from_output(daskwp.WordPieceTokenizer()(['hello world'], max_length=8,\n"
        "                      stride=2, padding=False))\n"
        "def part(name, native):\n"
        f"    w = PartWriter({str(tmp_path)!r} + name, {str(tmp_path)!r} + name + '.tmp',\n"
        "                   compression='lz4', native=native)\n"
        "    w.write(t); w.close({'partition': 0})\n"
        "    return 'pyarrow.parquet' in sys.modules\n"
        "print(part('/n.parquet', None), part('/a.parquet', False))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True"]


def test_pages_are_encoded_one_at_a_time_into_one_buffer(tmp_path):
    """Each data page is encoded into the writer's one page buffer and compressed from it
    before the next (benchmarks/results/writer_variants.md: a column chunk's pages encoded
    into fresh memory all at once cost about three times the encoder's CPU): writing a
    column chunk of ~8 pages allocates about one page, not the chunk's pages."""
    import tracemalloc
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 128, 60_000)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = pa.ListArray.from_arrays(pa.array(offsets),
                                   pa.array(rng.integers(0, 30_000, int(offsets[-1]),
                                                         dtype=np.int32)))
    table = pa.table({"logID": pa.array(np.arange(len(lengths), dtype=np.int64)),
                      "input_ids": ids})
    chunk = 4 * int(offsets[-1])
    assert chunk > 6 * parquet_writer.PAGE_BYTES
    w = PartWriter(str(tmp_path / "p.parquet"), str(tmp_path / ".p.tmp"), compression="lz4",
                   row_group_rows=len(lengths), native=True)
    tracemalloc.start()
    try:
        w.write(table)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    w.close({"partition": 0})
    assert peak < 2.5 * parquet_writer.PAGE_BYTES, \
        f"writing a {chunk:,}-byte column chunk allocated {peak:,} bytes at once"
    back = pq.read_table(tmp_path / "p.parquet")
    assert back.column("input_ids").combine_chunks().equals(ids)
    pages = pq.ParquetFile(tmp_path / "p.parquet").metadata.row_group(0).column(1)
    assert pages.total_uncompressed_size > 6 * parquet_writer.PAGE_BYTES


def test_native_page_encoders_check_their_arguments():
    """The page encoders write a page only into a buffer it fits (and say its size), and
    refuse offsets and starts outside the values by name."""
    from daskwp import _ext
    values = np.arange(10, dtype=np.int32)
    offsets = np.array([0, 3, 3, 10], dtype=np.int32)
    small = np.zeros(8, dtype=np.uint8)
    size, entries, end = _ext.parquet_list_page(values, offsets, 0, 1 << 20, True, small)
    assert (entries, end) == (11, 3) and size > len(small) and not small.any()
    buf = np.zeros(size, dtype=np.uint8)
    assert _ext.parquet_list_page(values, offsets, 0, 1 << 20, True, buf) == (size, 11, 3)
    assert bytes(buf[-40:]) == np.arange(10, dtype=np.int32).view(np.uint8).reshape(
        10, 4).T.tobytes()                                   # BYTE_STREAM_SPLIT values
    # from the empty row 1 (one entry), through row 2, which brings the page to 4 bytes
    assert _ext.parquet_list_page(values, offsets, 1, 4, True, buf)[1:] == (8, 3)
    assert _ext.parquet_list_page(values, offsets, 0, 4, True, buf)[1:] == (3, 1)
    for bad, first, what in ((np.array([0, 5, 3, 10], np.int32), 0, "non-decreasing"),
                             (np.array([0, 3, 3, 11], np.int32), 0, "outside values"),
                             (np.array([-1, 3, 3, 10], np.int32), 0, "outside values"),
                             (offsets, 3, "first_row"), (offsets, -1, "first_row")):
        with pytest.raises(ValueError, match=what):
            _ext.parquet_list_page(values, bad, first, 1 << 20, True, buf)
    size, n = _ext.parquet_scalar_page(values, 4, 100, small)
    assert n == 6 and size > len(small)
    with pytest.raises(ValueError, match="first"):
        _ext.parquet_scalar_page(values, 11, 100, buf)


def test_native_pages_are_the_same_bytes_in_a_buffer_of_their_exact_size():
    """A page encoded into a buffer of exactly its size (its bound does not fit: encoded
    aside, then copied) is the page encoded straight into a large buffer; both the list and
    the scalar encoder, ragged and empty rows, integer extremes (the widest delta blocks)."""
    from daskwp import _ext
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 300, 400)
    lengths[::7] = 0
    lengths[1::11] = 1
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, int(offsets[-1]), dtype=dtype,
                              endpoint=True)
        values[::5] = info.min
        values[1::5] = info.max
        big = np.zeros(1 << 22, dtype=np.uint8)
        row = 0
        while row < len(lengths):
            size, n, end = _ext.parquet_list_page(values, offsets, row, 4096, True, big)
            exact = np.zeros(size, dtype=np.uint8)
            assert _ext.parquet_list_page(values, offsets, row, 4096, True, exact) == \
                (size, n, end)
            assert bytes(exact) == bytes(big[:size])
            row = end
        for first in (0, 1, 129, len(values) - 1):
            size, n = _ext.parquet_scalar_page(values, first, 1000, big)
            exact = np.zeros(size, dtype=np.uint8)
            assert _ext.parquet_scalar_page(values, first, 1000, exact) == (size, n)
            assert bytes(exact) == bytes(big[:size])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_delta_miniblocks_of_every_bit_width(tmp_path, dtype):
    """Scalar columns whose delta miniblocks take every width from 0 to the type's bits
    (each packed by its own unrolled routine up to 56 bits) read back exactly, in the file
    Arrow's writer makes."""
    bits = np.dtype(dtype).itemsize * 8
    utype = np.uint32 if bits == 32 else np.uint64
    rng = np.random.default_rng(bits)
    deltas = []
    for width in range(bits + 1):
        for _ in range(4):   # a block of 4 miniblocks of 32 deltas below 2**width
            d = rng.integers(0, 2**63, 32, dtype=np.uint64).astype(utype)
            d = d >> utype(bits - width) if width else np.zeros(32, utype)
            d[0] = 0                                        # the block's min delta: 0
            if width:
                d[1] = utype((1 << width) - 1)              # the width is reached
            deltas.append(d)
    values = np.cumsum(np.concatenate(deltas), dtype=utype).view(dtype)
    table = pa.table({"logID": pa.array(values), "window": pa.array(values[::-1].copy())})
    n = _write(tmp_path / "n.parquet", [table], native=True, compression="lz4")
    back = pq.read_table(n)
    assert back.equals(table.replace_schema_metadata(back.schema.metadata))
    a = _write(tmp_path / "a.parquet", [table], native=False, compression="lz4")
    _assert_same_files(a, n)


def test_page_headers_are_the_thrift_structs_they_stand_for():
    """``_page_header`` (a data page's header from its four integers) writes the bytes of
    the general Thrift writer's PageHeader, around every varint length."""
    rle = parquet_writer._RLE
    for u, c, n, enc in itertools.product([0, 1, 63, 64, 8191, 8192, 1 << 20, 2**31 - 1],
                                          [0, 5, 300, 1 << 20], [0, 1, 65536, 1 << 20],
                                          [0, 5, 9]):
        want = thrift_compact.write_struct([
            (1, "i32", 0), (2, "i32", u), (3, "i32", c),
            (5, "struct", thrift_compact.write_struct([(1, "i32", n), (2, "i32", enc),
                                                       (3, "i32", rle), (4, "i32", rle)]))])
        assert parquet_writer._page_header(u, c, n, enc) == want, (u, c, n, enc)
