"""daskwp's LZ4 block compressor (daskwp/kernels/lz4_block.hpp, ``_ext.lz4_raw_compress``),
which writes the part writer's ``lz4`` pages (Parquet's LZ4_RAW): every block decodes with
Arrow's ``lz4_raw`` codec to its input and keeps the block format's end-of-block rules, on
zero, constant, random and structured buffers, BYTE_STREAM_SPLIT streams of real token ids,
every length around the 12/13-byte limits and matches at the 64 KiB offset limit; a part
written with it reads back equal through pyarrow, polars and DuckDB (docs/design.md §3.3)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from conftest import every_corpus_line
from daskwp import _ext
from daskwp.frames import parquet_writer
from daskwp.frames.part_writer import PartWriter
from daskwp.frames.partition import table_from_output

LZ4_RAW = pa.Codec("lz4_raw")
TOK = daskwp.WordPieceTokenizer()


def _length(block: bytes, i: int, n: int) -> tuple[int, int]:
    """A sequence's literal or match length field: ``n`` (its 4 bits in the token), and
    where it is 15, the bytes after it added on up to one that is not 255. Returns
    ``(length, index after it)``."""
    if n == 15:
        while True:
            b = block[i]
            i += 1
            n += b
            if b != 255:
                break
    return n, i


def _sequences(block: bytes, n: int) -> list:
    """``(literals, offset, match length)`` of each sequence of an LZ4 block (the last one
    with offset 0), checking the format's rules on the way: offsets 1..65535 within the
    output so far, and the block ends after a literals-only sequence."""
    seqs, i, out = [], 0, 0
    while True:
        token = block[i]
        lit, i = _length(block, i + 1, token >> 4)
        i += lit
        out += lit
        if i == len(block):
            seqs.append((lit, 0, 0))
            break
        offset = block[i] | block[i + 1] << 8
        ml, i = _length(block, i + 2, token & 15)
        ml += 4
        assert 1 <= offset <= min(out, 65535), (offset, out)
        seqs.append((lit, offset, ml))
        out += ml
    assert out == n
    return seqs


def _check(data: bytes, *, rules: bool = True) -> bytes:
    """``data`` compressed, decoded by Arrow's codec and compared; the end-of-block rules
    checked on the block's sequences (the last 5 bytes literals, the last match starting
    at least 12 bytes before the end)."""
    src = np.frombuffer(data, dtype=np.uint8)
    out = np.full(_ext.lz4_raw_bound(len(src)), 0xAB, dtype=np.uint8)
    size = _ext.lz4_raw_compress(src, out)
    assert 0 < size <= len(src) + len(src) // 255 + 16
    block = out[:size].tobytes()
    back = LZ4_RAW.decompress(block, decompressed_size=len(data), asbytes=True)
    assert back == data, f"{len(data)} bytes did not round-trip"
    if rules:
        seqs = _sequences(block, len(data))
        if len(data) < 13:
            assert len(seqs) == 1, "a block under 13 bytes has literals only"
        pos = 0
        for lit, offset, ml in seqs[:-1]:
            pos += lit
            assert pos + 12 <= len(data), "a match starts in the last 12 bytes"
            pos += ml
        assert seqs[-1][0] >= min(5, len(data)), "the last 5 bytes are not literals"
    return block


def _bss(values: np.ndarray) -> bytes:
    """int32 values BYTE_STREAM_SPLIT: the low bytes of all, then the next bytes, ..."""
    return np.ascontiguousarray(values.astype("<i4").view(np.uint8).reshape(-1, 4).T).tobytes()


@pytest.fixture(scope="module")
def token_ids() -> np.ndarray:
    docs = [d for d in every_corpus_line() if d][:20_000]
    out = TOK(docs, max_length=128, stride=32, padding=False)
    return np.concatenate([np.asarray(r, dtype=np.int32) for r in out["input_ids"]])


def test_every_short_length_and_the_12_13_byte_limits():
    rng = np.random.default_rng(0)
    for n in range(0, 80):
        for data in (bytes(n), b"a" * n, rng.integers(0, 256, n, dtype=np.uint8).tobytes(),
                     (b"abcd" * 30)[:n], bytes([1, 2, 3, 4, 5, 6, 7, 8]) * (n // 8)):
            _check(data)
    assert _check(b"") == b"\x00"                      # an empty block: one empty token
    assert len(_sequences(_check(bytes(12)), 12)) == 1  # 12 zeros: literals only
    assert len(_sequences(_check(bytes(20)), 20)) == 2  # one match, then 5+ literals


def test_zero_constant_and_random_buffers_of_many_lengths():
    rng = np.random.default_rng(1)
    lengths = sorted({*range(13, 300, 7), 4095, 4096, 4097, 65535, 65536, 65537, 70_000,
                      *rng.integers(0, 70_001, 25).tolist()})
    for n in lengths:
        zero = _check(bytes(n))
        assert len(zero) <= 16 + n // 255, "a zero run is one long match"
        _check(bytes([0x5A]) * n)
        _check(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        _check(rng.integers(0, 4, n, dtype=np.uint8).tobytes())       # short matches
        half = rng.integers(0, 256, n, dtype=np.uint8)
        half[n // 2:] = 0
        _check(half.tobytes())


def test_matches_at_the_64k_offset_limit():
    rng = np.random.default_rng(2)
    piece = rng.integers(0, 256, 4000, dtype=np.uint8).tobytes()
    for gap in (65535 - 4000, 65536 - 4000, 65537 - 4000, 70_000):
        filler = rng.integers(0, 256, gap, dtype=np.uint8).tobytes()
        data = piece + filler + piece + b"tail-bytes-to-end"
        block = _check(data)
        offsets = [o for _, o, _ in _sequences(block, len(data)) if o]
        assert all(o <= 65535 for o in offsets)
        if len(piece) + gap <= 65535:
            assert len(block) < len(data) - 3000, "the repeat 65535 bytes back was not found"


def test_byte_stream_split_token_ids(token_ids):
    ids = token_ids
    assert len(ids) > 300_000
    for n in (1, 3, 17, 1000, 16_384, 65_536, 262_144):
        _check(_bss(ids[:n]))
    page = _bss(ids[:262_144])                     # ~1 MB: one list page's values
    block = _check(page, rules=False)
    ref = LZ4_RAW.compress(page, asbytes=True)
    # the zero high-byte streams cost almost nothing; a few % over Arrow's (the search
    # passes 4-7 byte matches by: lz4_block.hpp)
    assert len(block) < 0.6 * len(page)
    assert len(block) <= 1.08 * len(ref)


def test_out_must_hold_the_worst_case_and_nothing_is_written_otherwise():
    src = np.frombuffer(b"x" * 1000, dtype=np.uint8)
    need = _ext.lz4_raw_bound(1000)
    assert need == 1000 + 1000 // 255 + 16
    small = np.zeros(need - 1, dtype=np.uint8)
    with pytest.raises(ValueError, match="lz4_raw_bound"):
        _ext.lz4_raw_compress(src, small)
    assert not small.any()
    with pytest.raises(ValueError, match="n must be >= 0"):
        _ext.lz4_raw_bound(-1)
    out = np.zeros(4 * need, dtype=np.uint8)
    for bad_src, bad_out in ((src.astype(np.int32), out), (src, out.view(np.int32)),
                             (src[::2], out), (src, out[::2])):
        with pytest.raises(TypeError):       # never a converted copy
            _ext.lz4_raw_compress(bad_src, bad_out)
    assert not out.any()


def test_hypothesis_buffers():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    runs = st.lists(st.tuples(st.integers(0, 255), st.integers(1, 300)), max_size=40)

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(st.one_of(st.binary(max_size=2000),
                                runs.map(lambda rs: b"".join(bytes([v]) * k for v, k in rs)),
                                st.tuples(st.binary(min_size=1, max_size=64),
                                          st.integers(1, 200), st.binary(max_size=30)).map(
                                    lambda t: t[0] * t[1] + t[2])))
    def check(data):
        _check(data)
    check()


# -- the writer ---------------------------------------------------------------------------

def _part(tmp_path, name="p.parquet", docs=None, compression="lz4"):
    docs = docs if docs is not None else [d for d in every_corpus_line() if d][:6000]
    table = table_from_output(TOK(docs, max_length=128, stride=32, padding=False,
                                  return_token_type_ids=True))
    path = tmp_path / name
    w = PartWriter(str(path), str(path) + ".tmp", compression=compression,
                   row_group_rows=2000, native=True)
    with w:
        w.write(table)
        w.close({"partition": 0})
    return path, table


class _Spy:
    """``_ext`` for the writer, recording each page it compresses with daskwp's LZ4: the
    scalar pages (``lz4_raw_compress``) and the list pages, compressed by the call that
    encodes them (``parquet_list_page`` with ``packed``)."""

    def __init__(self):
        self.blocks = []

    def __getattr__(self, name):
        return getattr(_ext, name)

    def lz4_raw_compress(self, src, out):
        size = _ext.lz4_raw_compress(src, out)
        self.blocks.append((src.tobytes(), out[:size].tobytes()))
        return size

    def parquet_list_page(self, *args):
        got = _ext.parquet_list_page(*args)
        if len(args) == 7 and got[0] <= len(args[5]):
            assert got[3] >= 0
            self.blocks.append((args[5][:got[0]].tobytes(), args[6][:got[3]].tobytes()))
        return got


def test_lz4_parts_are_daskwps_blocks_and_every_reader_reads_them(tmp_path, monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(parquet_writer, "_ext", spy)
    real_codec = pa.Codec

    def codec(name, *a, **k):
        assert name != "lz4_raw", "lz4 pages went through Arrow's codec"
        return real_codec(name, *a, **k)
    monkeypatch.setattr(pa, "Codec", codec)
    path, table = _part(tmp_path)
    monkeypatch.undo()
    md = pq.read_metadata(path)
    assert md.created_by == "daskwp parquet writer"
    pages = md.num_row_groups * md.num_columns
    assert len(spy.blocks) >= pages > 10
    raw = path.read_bytes()
    for page, block in spy.blocks:       # each written as compressed, and decodes
        assert block in raw
        assert LZ4_RAW.decompress(block, decompressed_size=len(page), asbytes=True) == page
    assert {md.row_group(g).column(c).compression for g in range(md.num_row_groups)
            for c in range(md.num_columns)} == {"LZ4"}   # (pyarrow names LZ4_RAW "LZ4")
    back = pq.read_table(path)
    assert back.equals(table.replace_schema_metadata(back.schema.metadata))
    want = {c: table.column(c).to_pylist() for c in table.column_names}
    polars = pytest.importorskip("polars")
    df = polars.read_parquet(path)
    assert {c: df[c].to_list() for c in table.column_names} == want
    duckdb = pytest.importorskip("duckdb")
    rel = duckdb.connect().sql(f"SELECT * FROM read_parquet('{path}')")
    cols = list(zip(*rel.fetchall()))
    got = {c: [list(v) if isinstance(v, list) else v for v in cols[rel.columns.index(c)]]
           for c in table.column_names}
    assert got == want


def test_lz4_parts_near_arrows_size_and_checksummed(tmp_path):
    """A part within a few % of Arrow's LZ4_RAW part (the same table through Arrow's
    writer), and the resume checksum recorded and matching."""
    from daskwp.jobs.parts import data_checksum
    path, table = _part(tmp_path)
    arrow = tmp_path / "arrow.parquet"
    w = PartWriter(str(arrow), str(arrow) + ".tmp", compression="lz4", row_group_rows=2000,
                   native=False)
    with w:
        w.write(table)
        w.close({"partition": 0})
    ours, theirs = path.stat().st_size, arrow.stat().st_size
    assert ours <= 1.08 * theirs, (ours, theirs)
    assert data_checksum(str(path)) == \
        pq.read_metadata(path).metadata[b"daskwp.data_hash128"].decode()


def test_the_compressed_page_buffer_grows_for_a_bigger_page(tmp_path, monkeypatch):
    """A page bigger than the page buffer (one long row) grows the compressed-page buffer
    to its worst case first; the file reads back."""
    monkeypatch.setattr(parquet_writer, "PAGE_BYTES", 4096)
    rng = np.random.default_rng(3)
    lengths = np.array([5, 300_000, 0, 7, 120_000])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(
        rng.integers(0, 30_000, int(offsets[-1]), dtype=np.int32)))
    table = pa.table({"logID": pa.array(np.arange(len(lengths), dtype=np.int64)),
                      "input_ids": ids})
    path = tmp_path / "big.parquet"
    w = PartWriter(str(path), str(path) + ".tmp", compression="lz4", native=True)
    with w:
        w.write(table)
        w.close({"partition": 0})
    back = pq.read_table(path)
    assert back.column("input_ids").combine_chunks().equals(ids)


@pytest.mark.slow
def test_compressor_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    """tests/native/lz4_asan_driver.cpp: exact-size input and output blocks, so the
    compressor's 8- and 16-byte loads near the end of its input and its writes up to the
    bound are checked by AddressSanitizer, and every block by a strict decoder."""
    import os
    import shutil
    import subprocess
    from pathlib import Path
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++/clang++) found")
    repo = Path(__file__).resolve().parent.parent
    exe = tmp_path / "lz4_asan_driver"
    build = subprocess.run([cxx, "-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer",
                            "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                            "-I", str(repo / "daskwp" / "kernels"),
                            str(repo / "tests" / "native" / "lz4_asan_driver.cpp"), "-o",
                            str(exe)], capture_output=True, text=True, timeout=300)
    if build.returncode and "sanitize" in build.stderr:
        pytest.skip(f"no sanitizer runtimes: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    over = subprocess.run([str(exe), "selftest-overflow"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert over.returncode != 0 and ("heap-buffer-overflow" in over.stderr or
                                     "insufficient space" in over.stderr), \
        "the driver is not instrumented"
    run = subprocess.run([str(exe), "3000", "7"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0 and run.stdout.startswith("OK"), run.stdout + run.stderr[-2000:]


# -- list pages compressed by the call that encodes them (compress_split_page) ------------

def _repeating_ids(rng, n, vocab):
    """Token-id-like values: runs of an earlier stretch repeated (the overlapping windows
    and repeated lines the split compressor reuses matches of) among fresh ones."""
    out = rng.integers(0, vocab, n).astype(np.int64)
    for _ in range(n // 300):
        src, length = int(rng.integers(0, n - 200)), int(rng.integers(8, 120))
        dst = int(rng.integers(src + 1, min(n - length, src + 60_000)))
        out[dst:dst + length] = out[src:src + length]
    return out


@pytest.mark.parametrize("kind", ["ids16", "ids_wide", "high_byte_one", "random32", "int64",
                                  "int8", "zeros", "plain"])
def test_list_pages_compressed_where_they_are_encoded_decode_to_the_page(kind):
    """``parquet_list_page`` with ``packed``: the page it writes and, as one LZ4 block, the
    same page (Arrow's ``lz4_raw`` decodes it; the end-of-block rules hold), for ids under
    2^16 (two zero streams), wider ids, a constant non-zero high byte, random and 64-bit
    values, small integers, all-zero values and PLAIN values; every page of a column of
    ragged and empty rows, pages of a few bytes to a whole buffer."""
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 90, 3000)
    lengths[::9] = 0
    lengths[5:40] = 1
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    n = int(offsets[-1])
    values = {"ids16": _repeating_ids(rng, n, 30_522).astype(np.int32),
              "ids_wide": _repeating_ids(rng, n, 250_000).astype(np.int32),
              "high_byte_one": (256 + _repeating_ids(rng, n, 256)).astype(np.int32),
              "random32": rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32),
              "int64": _repeating_ids(rng, n, 2**40) * -3,
              "int8": rng.integers(-128, 128, n, dtype=np.int8),
              "zeros": np.zeros(n, dtype=np.int32),
              "plain": _repeating_ids(rng, n, 30_522).astype(np.int32)}[kind]
    split = kind != "plain"
    page = np.zeros(1 << 20, dtype=np.uint8)
    packed = np.zeros(_ext.lz4_raw_bound(len(page)), dtype=np.uint8)
    for page_bytes in (1, 64, 4096, 1 << 20):
        row = 0
        while row < len(lengths):
            size, entries, end, csize = _ext.parquet_list_page(values, offsets, row,
                                                               page_bytes, split, page,
                                                               packed)
            assert 0 < csize <= _ext.lz4_raw_bound(size)
            # the same page as without `packed`
            assert _ext.parquet_list_page(values, offsets, row, page_bytes, split,
                                          np.zeros(size, np.uint8)) == (size, entries, end)
            body = page[:size].tobytes()
            block = packed[:csize].tobytes()
            assert LZ4_RAW.decompress(block, decompressed_size=size, asbytes=True) == body
            seqs = _sequences(block, size)
            pos = 0
            for lit, offset, ml in seqs[:-1]:
                pos += lit
                assert pos + 12 <= size and pos + ml + 5 <= size, "end-of-block rules"
                pos += ml
            row = end


def test_split_pages_search_one_stream_and_cost_few_bytes():
    """A page of repeating ids under 2^16: each zero stream is one match at offset 1; the
    second byte stream reuses the first one's matches (nearly all its matches at the
    offsets found there); the block at most 3% larger than lz4_raw_compress's of the same
    page."""
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 128, 8000)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = _repeating_ids(rng, int(offsets[-1]), 30_522).astype(np.int32)
    page = np.zeros(1 << 21, dtype=np.uint8)
    packed = np.zeros(_ext.lz4_raw_bound(len(page)), dtype=np.uint8)
    size, entries, end, csize = _ext.parquet_list_page(values, offsets, 0, 1 << 30, True,
                                                       page, packed)
    assert end == len(lengths) and entries == len(values)
    whole = np.zeros_like(packed)
    plain_size = _ext.lz4_raw_compress(page[:size], whole)
    assert csize <= 1.03 * plain_size, (csize, plain_size)
    n = len(values)
    head = size - 4 * n
    seqs = _sequences(packed[:csize].tobytes(), size)
    starts, pos = [], 0
    for lit, offset, ml in seqs[:-1]:
        pos += lit
        starts.append((pos, offset, ml))
        pos += ml
    in_stream = [[(p - head - k * n, o) for p, o, _ in starts
                  if head + k * n <= p < head + (k + 1) * n] for k in range(4)]
    assert len(in_stream[2]) == len(in_stream[3]) == 1 and in_stream[2][0][1] == 1
    assert len(in_stream[0]) > 100
    reused = set(in_stream[0]) & set(in_stream[1])
    assert len(reused) >= 0.9 * len(in_stream[1]), (len(reused), len(in_stream[1]))
