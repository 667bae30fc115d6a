"""The lazy accessor's own Parquet read (daskwp/accessors/parquet_source.py): where
``to_parquet``'s input is a plain ``dd.read_parquet(...)["text"]``, daskwp reads the row
groups into Arrow itself; the parts written are those of dask's read, and every other input
keeps dask's read."""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import corpus_files, read_lines

import daskwp  # noqa: F401  (the accessor)
from daskwp.accessors import lazy
from daskwp.accessors import parquet_source
from daskwp.accessors.parquet_source import direct_text_source, read_text_partition

OPTIONS = dict(max_length=32, stride=8, padding=False)


def _corpus() -> list:
    """Lines of the shared corpora (every file), with nulls and empty strings among them."""
    lines = []
    for path in corpus_files():
        lines.extend(read_lines(path)[:300])
    for k in range(0, len(lines), 97):
        lines[k] = None
    for k in range(5, len(lines), 211):
        lines[k] = ""
    return lines


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def _write_arrow_files(folder, docs, sizes, row_group_rows=None, large=False) -> None:
    """Files written by pyarrow (no pandas metadata): ``text`` and an ``id`` column."""
    folder.mkdir()
    start = 0
    for i, n in enumerate(sizes):
        chunk = docs[start:start + n]
        table = pa.table({"id": pa.array(np.arange(start, start + n)),
                          "text": pa.array(chunk, pa.large_string() if large else pa.string())})
        pq.write_table(table, folder / f"part.{i}.parquet", row_group_size=row_group_rows)
        start += n


def _uses_direct_read(out) -> bool:
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr
    graph = FinalizeCompute(collections_to_expr([out])).optimize().__dask_graph__()
    return "read_text_partition" in repr(dict(graph)) or any(
        "read_text_partition" in repr(getattr(t, "args", ())) for t in graph.values())


def _parts(folder) -> dict:
    return {p.name: pq.read_table(p) for p in sorted(folder.glob("part.*.parquet"))}


def _write_both(series, tmp_path, monkeypatch, expect_direct: bool, **options):
    """``to_parquet`` of ``series`` with and without the direct read; the parts of both."""
    res = series.wordpiece.tokenize(**(options or OPTIONS))
    out = res.to_parquet(tmp_path / "direct", compute=False)
    assert _uses_direct_read(out) == expect_direct
    out.compute()
    with monkeypatch.context() as m:
        m.setattr(lazy, "direct_text_source", lambda expr: expr)
        ref = res.to_parquet(tmp_path / "dask", compute=False)
        assert not _uses_direct_read(ref)
        ref.compute()
    return _parts(tmp_path / "direct"), _parts(tmp_path / "dask")


def _assert_same_parts(direct: dict, ref: dict) -> None:
    assert list(direct) == list(ref) and direct
    for name in ref:
        a, b = direct[name], ref[name]
        assert a.schema.metadata.get(b"daskwp") == b.schema.metadata.get(b"daskwp"), name
        assert a.drop_columns([]).equals(b), name


@pytest.mark.parametrize("row_group_rows,split,large", [
    (None, "infer", False),     # one partition per file
    (500, True, True),          # one partition per row group (dask's split_row_groups)
])
def test_direct_read_writes_the_parts_of_dasks_read(client, tmp_path, monkeypatch,
                                                    row_group_rows, split, large):
    docs = _corpus()
    _write_arrow_files(tmp_path / "in", docs, [1200, 0, 700, len(docs) - 1900],
                       row_group_rows, large)
    series = dd.read_parquet(tmp_path / "in", columns=["text"],
                             split_row_groups=split)["text"]
    direct, ref = _write_both(series, tmp_path, monkeypatch, expect_direct=True)
    _assert_same_parts(direct, ref)
    back = pd.concat([t.to_pandas() for t in direct.values()])
    assert back["logID"].nunique() == len(docs)   # every document, nulls included


def test_direct_read_of_pandas_files_with_a_range_index(client, tmp_path, monkeypatch):
    # pandas writes its RangeIndex into the footer: from 0 by 1 the direct read gives
    # dask's index; a file whose index starts elsewhere is read by dask's own read
    docs = _corpus()[:900]
    (tmp_path / "in").mkdir()
    pd.DataFrame({"text": pd.Series(docs[:400], dtype="string")}) \
        .to_parquet(tmp_path / "in" / "part.0.parquet")
    pd.DataFrame({"text": pd.Series(docs[400:], dtype="string")},
                 index=pd.RangeIndex(1000, 1000 + 2 * 500, 2)) \
        .to_parquet(tmp_path / "in" / "part.1.parquet")
    series = dd.read_parquet(tmp_path / "in")["text"]
    direct, ref = _write_both(series, tmp_path, monkeypatch, expect_direct=True)
    _assert_same_parts(direct, ref)
    assert direct["part.1.parquet"].column("input_index").to_pylist()[0] == 1000


def test_read_text_partition_gives_dasks_partition(tmp_path):
    docs = _corpus()[:1000]
    _write_arrow_files(tmp_path / "in", docs, [600, 400], row_group_rows=128)
    for split in ("infer", True):
        series = dd.read_parquet(tmp_path / "in", split_row_groups=split)["text"]
        direct = direct_text_source(series.expr)
        assert isinstance(direct.frame, parquet_source.DirectTextRead)
        from dask._collections import new_collection
        ours = new_collection(direct)
        assert ours.npartitions == series.npartitions
        for i in range(series.npartitions):
            got = ours.partitions[i].compute(scheduler="sync")
            want = series.partitions[i].compute(scheduler="sync")
            pd.testing.assert_series_equal(got, want)
    empty = read_text_partition((), "text", pd.StringDtype("pyarrow"))
    assert len(empty) == 0 and list(empty.columns) == ["text"]


def test_other_inputs_keep_dasks_read(client, tmp_path, monkeypatch):
    docs = _corpus()[:1500]
    _write_arrow_files(tmp_path / "in", docs, [700, 800])
    wide = dd.read_parquet(tmp_path / "in")
    refused = {
        "filters": dd.read_parquet(tmp_path / "in", filters=[("id", ">", 100)])["text"],
        "index": dd.read_parquet(tmp_path / "in", index="id")["text"],
        "row filter": wide[wide["id"] % 3 != 1]["text"],
        "dtype_backend": dd.read_parquet(tmp_path / "in", dtype_backend="pyarrow")["text"],
        "from_pandas": dd.from_pandas(pd.DataFrame({"text": pd.Series(docs, dtype="string")}),
                                      npartitions=2)["text"],
    }
    for what, series in refused.items():
        assert direct_text_source(series.expr) is series.expr, what
    # a filter and kept columns: dask's read, the same parts either way
    direct, ref = _write_both(wide[wide["id"] % 3 != 1]["text"], tmp_path, monkeypatch,
                              expect_direct=False)
    _assert_same_parts(direct, ref)
    res = wide["text"].wordpiece.tokenize(keep_columns=["id"], **OPTIONS)
    out = res.to_parquet(tmp_path / "kept", compute=False)
    assert not _uses_direct_read(out)


def test_read_text_partition_reads_chunks_of_bounded_size(tmp_path, monkeypatch):
    # a row group read whole grows its string buffer by doubling (up to 1.5x the text);
    # batches of about CHUNK_BYTES of text grow none beyond a chunk
    docs = [d for d in _corpus() if d]
    _write_arrow_files(tmp_path / "in", docs, [len(docs)])
    monkeypatch.setattr(parquet_source, "CHUNK_BYTES", 64 << 10)
    path = str(tmp_path / "in" / "part.0.parquet")
    got = read_text_partition(((path, None),), "text", pd.StringDtype("pyarrow"))["text"]
    chunks = got.array.__arrow_array__().chunks
    sizes = [c.buffers()[2].size for c in chunks]
    assert len(chunks) > 5 and max(sizes) < 3 * (64 << 10), sizes
    assert got.tolist() == docs
    # fewer rows than one batch: one chunk
    monkeypatch.setattr(parquet_source, "CHUNK_BYTES", 1 << 30)
    one = read_text_partition(((path, None),), "text", pd.StringDtype("pyarrow"))["text"]
    assert one.array.__arrow_array__().num_chunks == 1 and one.tolist() == docs


def test_a_series_of_several_arrow_chunks_is_tokenized_as_it_is():
    # to_arrow keeps the chunks of an Arrow-backed Series (zero-copy); pa.array() of it
    # went through Python objects
    from daskwp.core.strings import to_arrow
    docs = [d for d in _corpus()[:400] if d is not None]
    col = pa.chunked_array([pa.array(docs[:150], pa.large_string()),
                            pa.array(docs[150:], pa.large_string())])
    for dtype in (pd.StringDtype("pyarrow"), pd.ArrowDtype(pa.large_string())):
        series = pd.Series(pd.array(col, dtype=dtype))
        arr = to_arrow(series)
        assert arr.num_chunks == 2
        assert arr.chunk(1).buffers()[2].address == col.chunk(1).buffers()[2].address
    chunked = pd.Series(pd.array(col, dtype=pd.StringDtype("pyarrow")))
    whole = pd.Series(docs, dtype=pd.StringDtype("pyarrow"))
    a = chunked.wordpiece.tokenize(**OPTIONS).to_frame()
    b = whole.wordpiece.tokenize(**OPTIONS).to_frame()
    pd.testing.assert_frame_equal(a, b)


def test_the_text_is_read_into_the_heap_that_keeps_freed_blocks(tmp_path, monkeypatch):
    # a nanny's worker gives Arrow's default pool to jemalloc, which hands the freed text
    # back at once: each partition's read faulted its text in afresh. Where glibc keeps
    # freed blocks the read allocates from it (the next partition reuses them)
    from daskwp.backends import memory
    system, default = pa.system_memory_pool(), pa.default_memory_pool()
    if default.backend_name == system.backend_name:
        pytest.skip("Arrow's default pool is the system allocator here")
    docs = [d for d in _corpus() if d]
    _write_arrow_files(tmp_path / "in", docs, [len(docs)])
    path = str(tmp_path / "in" / "part.0.parquet")
    text = sum(len(d.encode()) for d in docs)
    for keeps, pool, other in ((True, system, default), (False, default, system)):
        monkeypatch.setattr(memory, "malloc_keeps_freed_blocks", lambda: keeps)
        assert (parquet_source.read_pool() is not None) == keeps
        before, before_other = pool.bytes_allocated(), other.bytes_allocated()
        got = read_text_partition(((path, None),), "text", pd.StringDtype("pyarrow"))
        assert pool.bytes_allocated() - before >= text, keeps
        assert other.bytes_allocated() - before_other < text // 4, keeps
        assert got["text"].tolist() == docs
        del got


def test_the_compressed_column_chunk_is_read_through_a_buffer(tmp_path):
    # pyarrow's pre-buffered read holds a row group's whole column chunk in Arrow's
    # default pool (faulted in afresh per partition on a worker): read it 1 MB at a time
    import os
    import subprocess
    import sys
    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
    docs = [rng.choice(letters, 200).tobytes().decode() for _ in range(80_000)]  # 16 MB
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": docs}), path, compression="none", use_dictionary=False)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0).total_compressed_size
    assert chunk > 12 * parquet_source.READ_BUFFER_BYTES
    code = (
        "import pandas as pd, pyarrow as pa\n"
        "from daskwp.accessors.parquet_source import read_text_partition\n"
        "if pa.default_memory_pool().backend_name == pa.system_memory_pool().backend_name:\n"
        "    print(-1); raise SystemExit\n"
        f"got = read_text_partition((({str(path)!r}, None),), 'text', "
        "pd.StringDtype('pyarrow'))\n"
        "assert len(got) == 80000\n"
        "print(pa.default_memory_pool().max_memory())\n")
    # (no MALLOC_*_ settings, which a nanny started in this process may have left: the
    # arrays then come from the system allocator, and the default pool holds the I/O only)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    peak = int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True, env=env).stdout.split()[-1])
    if peak < 0:
        pytest.skip("Arrow's default pool is the system allocator here")
    assert peak < chunk // 3, (peak, chunk)   # the buffer, a page and its decompressed copy


@pytest.mark.parametrize("large,dictionary", [(True, False), (False, False), (True, True)])
def test_a_files_text_is_gathered_into_one_host_block(tmp_path, monkeypatch, large,
                                                      dictionary):
    # the text of a file goes to one host-pool block (reused by the next partition, as a
    # batch job's text buffer is), read in small batches and handed out in chunks of at
    # most CHUNK_BYTES (one tokenizer piece each: a byte more made a piece of a few rows),
    # nulls kept; dictionary pages decode to more text than the block holds: a larger one
    monkeypatch.setattr(parquet_source, "HOST_BLOCK_MIN_BYTES", 16 << 10)
    monkeypatch.setattr(parquet_source, "READ_BATCH_BYTES", 4 << 10)
    monkeypatch.setattr(parquet_source, "CHUNK_BYTES", 64 << 10)
    docs = _corpus()
    if dictionary:
        docs = [docs[k % 50] for k in range(40_000)]   # a few distinct lines, many rows
        monkeypatch.setattr(parquet_source, "READ_BATCH_BYTES", 256)
    grown = []
    grow = parquet_source._TextBlock._grow
    monkeypatch.setattr(parquet_source._TextBlock, "_grow",
                        lambda self, n: grown.append(n) or grow(self, n))
    kind = pa.large_string() if large else pa.string()
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": pa.array(docs, kind)}), path, use_dictionary=dictionary,
                   row_group_size=len(docs) // 3)
    got = read_text_partition(((str(path), None),), "text", pd.StringDtype("pyarrow"))
    arr = got["text"].array.__arrow_array__()
    assert [None if v is pd.NA else v for v in got["text"].tolist()] == docs
    assert arr.combine_chunks().equals(pa.array(docs, arr.type))
    sizes = [c.buffers()[2].size for c in arr.chunks]
    assert sum(sizes) == sum(len(d.encode()) for d in docs if d)
    assert len(sizes) >= 3 and max(sizes) <= 64 << 10, sizes
    assert min(sizes[:-1]) >= 32 << 10, sizes   # not the reads' batches
    assert arr.null_count == sum(d is None for d in docs)
    assert bool(grown) == dictionary, grown
    assert len(grown) <= 3   # sized from the rows to come, not a batch at a time


def test_the_text_block_comes_from_the_host_pool(tmp_path):
    from daskwp.backends.memory import host_pool_info
    docs = [d for d in _corpus() if d]
    docs = docs * (1 + (6 << 20) // sum(len(d.encode()) for d in docs))   # > 6 MB
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": docs}), path, use_dictionary=False)
    before = host_pool_info()["live"]
    got = read_text_partition(((str(path), None),), "text", pd.StringDtype("pyarrow"))
    text = sum(len(d.encode()) for d in docs)
    assert host_pool_info()["live"] - before >= text
    assert got["text"].tolist() == docs
    del got
    assert host_pool_info()["live"] == before   # the block goes back with the frame


def test_parts_from_host_blocks_are_those_of_dasks_read(tmp_path, monkeypatch):
    import dask
    monkeypatch.setattr(parquet_source, "HOST_BLOCK_MIN_BYTES", 16 << 10)
    monkeypatch.setattr(parquet_source, "READ_BATCH_BYTES", 4 << 10)
    monkeypatch.setattr(parquet_source, "CHUNK_BYTES", 32 << 10)
    docs = _corpus()
    _write_arrow_files(tmp_path / "in", docs, [1500, len(docs) - 1500], large=True)
    with dask.config.set(scheduler="threads"):
        series = dd.read_parquet(tmp_path / "in", columns=["text"])["text"]
        direct, ref = _write_both(series, tmp_path, monkeypatch, expect_direct=True)
    _assert_same_parts(direct, ref)


# -- the page reader (daskwp/accessors/parquet_pages.py) ----------------------------------

@pytest.fixture(autouse=True)
def _pool_left_empty():
    """The host pool's freed blocks released after each test (a later test of another
    file may count on the block it freed being the one the pool gives back)."""
    yield
    from daskwp.backends.memory import release_host_memory
    release_host_memory()


def _page_docs() -> list:
    """The corpus lines with nulls and empty strings, and non-ASCII text, repeated."""
    docs = _corpus() + ["naïve café — 東京", "emoji 🙂 and tabs\tinside", ""]
    return docs * 3


def _read_both(path, monkeypatch):
    """``read_text_partition`` of ``path`` with the page reader (counting the files it
    read) and with pyarrow's reader."""
    calls = []
    read = parquet_source.read_column_pages
    monkeypatch.setattr(parquet_source, "read_column_pages",
                        lambda *a: calls.append(a[0]) or read(*a))
    dtype = pd.StringDtype("pyarrow")
    pages = read_text_partition(((str(path), None),), "text", dtype)["text"]
    ref = read_text_partition(((str(path), None),), "text", dtype, pages=False)["text"]
    return pages, ref, len(calls)


def _same_text(pages, ref):
    a = pages.array.__arrow_array__().combine_chunks()
    b = ref.array.__arrow_array__().combine_chunks()
    assert a.type == b.type and a.equals(b)
    assert a.null_count == b.null_count


@pytest.mark.parametrize("compression", ["none", "snappy", "gzip", "brotli", "zstd"])
@pytest.mark.parametrize("version,dictionary,large", [
    ("1.0", False, True), ("1.0", True, False), ("2.0", True, True), ("2.0", False, False)])
def test_the_page_reader_reads_what_pyarrow_reads(tmp_path, monkeypatch, compression,
                                                  version, dictionary, large):
    # a text column's pages decoded by daskwp (PLAIN values straight into the host block,
    # dictionary pages, nulls from the definition levels, v1 and v2 data pages, every
    # codec pyarrow writes), in chunks of at most CHUNK_BYTES: the text pyarrow reads
    monkeypatch.setattr(parquet_source, "HOST_BLOCK_MIN_BYTES", 16 << 10)
    monkeypatch.setattr(parquet_source, "CHUNK_BYTES", 48 << 10)
    docs = _page_docs()
    path = tmp_path / "in.parquet"
    kind = pa.large_string() if large else pa.string()
    # small pages (many per row group), a small dictionary limit (dictionary pages, then
    # PLAIN ones), several row groups
    pq.write_table(pa.table({"text": pa.array(docs, kind)}), path, compression=compression,
                   data_page_version=version, use_dictionary=dictionary,
                   data_page_size=20 << 10, dictionary_pagesize_limit=8 << 10,
                   row_group_size=len(docs) // 3 + 1)
    pages, ref, calls = _read_both(path, monkeypatch)
    assert calls == 1
    _same_text(pages, ref)
    assert [None if v is pd.NA else v for v in pages.tolist()] == docs
    sizes = [c.buffers()[2].size for c in pages.array.__arrow_array__().chunks]
    assert max(sizes) <= 48 << 10 and len(sizes) >= 3, sizes


def test_the_page_reader_cuts_a_large_page_into_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_source, "HOST_BLOCK_MIN_BYTES", 16 << 10)
    monkeypatch.setattr(parquet_source, "CHUNK_BYTES", 8 << 10)
    docs = [d for d in _page_docs() if d is not None] + ["x" * (20 << 10)]  # a row > a chunk
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": docs}), path, use_dictionary=False,
                   data_page_size=1 << 20)   # one page per row group
    pages, ref, calls = _read_both(path, monkeypatch)
    assert calls == 1
    _same_text(pages, ref)
    sizes = [c.buffers()[2].size for c in pages.array.__arrow_array__().chunks]
    assert sizes[-1] == 20 << 10   # the large row alone
    assert max(sizes[:-1]) <= 8 << 10 and min(sizes[:-2]) > 6 << 10, sizes


def test_columns_the_page_reader_does_not_decode_go_to_pyarrow(tmp_path, monkeypatch):
    # an encoding it does not decode (DELTA_BYTE_ARRAY), the codec pyarrow calls LZ4
    # (Hadoop's framing in older files): pyarrow's reader, the same text
    monkeypatch.setattr(parquet_source, "HOST_BLOCK_MIN_BYTES", 16 << 10)
    docs = _page_docs()
    for name, kw in (("delta", dict(use_dictionary=False,
                                    column_encoding={"text": "DELTA_BYTE_ARRAY"})),
                     ("lz4", dict(compression="lz4"))):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"text": docs}), path, **kw)
        pages, ref, calls = _read_both(path, monkeypatch)
        assert calls == 0, name
        _same_text(pages, ref)


def test_a_page_the_reader_cannot_decode_reads_the_partition_with_pyarrow(tmp_path,
                                                                          monkeypatch):
    from daskwp.accessors import parquet_pages
    monkeypatch.setattr(parquet_source, "HOST_BLOCK_MIN_BYTES", 16 << 10)
    docs = _page_docs()
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": docs}), path, use_dictionary=False,
                   data_page_size=20 << 10)

    def fail(*args):
        raise parquet_pages.PagesUnsupported("a page it does not decode")

    monkeypatch.setattr(parquet_source, "read_column_pages", fail)
    got = read_text_partition(((str(path), None),), "text", pd.StringDtype("pyarrow"))
    assert [None if v is pd.NA else v for v in got["text"].tolist()] == docs


def test_plain_byte_array_values_decodes_a_plain_page():
    from daskwp import _ext
    values = [b"", b"abc", "é東".encode(), b"x" * 300]
    page = b"".join(len(v).to_bytes(4, "little") + v for v in values)
    out = np.zeros(400, dtype=np.uint8)
    offsets = _ext.plain_byte_array_values(np.frombuffer(page, np.uint8), 4, out, 10)
    assert offsets.tolist() == [10, 10, 13, 18, 318]
    assert out[10:318].tobytes() == b"".join(values)
    with pytest.raises(ValueError, match="past the end of the page"):
        _ext.plain_byte_array_values(np.frombuffer(page[:-1], np.uint8), 4, out, 0)
    with pytest.raises(ValueError, match="ends inside the length of value 4"):
        _ext.plain_byte_array_values(np.frombuffer(page, np.uint8), 5, out, 0)
    with pytest.raises(ValueError, match="out holds 100 bytes"):
        _ext.plain_byte_array_values(np.frombuffer(page, np.uint8), 4, out[:100], 0)


@pytest.mark.parametrize("levels,n,expected", [
    (bytes([10 << 1, 1]), 10, None),              # one run of ten 1s: every value present
    (bytes([0x90, 0x03, 1]), 150, None),          # a run of 200 (a two-byte varint header)
    (bytes([12 << 1, 1]), 10, None),              # a run longer than the page
    (bytes([3 << 1, 1, 2 << 1, 0]), 5, [1, 1, 1, 0, 0]),   # 1s, then nulls
    (bytes([5 << 1, 0]), 5, [0] * 5),             # all null
    (bytes([(1 << 1) | 1, 0b10110111]), 8, [1, 1, 1, 0, 1, 1, 0, 1]),   # bit-packed
    (bytes([(1 << 1) | 1, 0xFF]), 8, [1] * 8),    # bit-packed 1s: decoded (the caller
])                                                # drops an all-true validity)
def test_definition_levels_of_a_page_without_nulls_are_read_from_their_header(levels, n,
                                                                                expected):
    from daskwp.accessors.parquet_pages import _levels
    got = _levels(np.frombuffer(levels, np.uint8), n)
    if expected is None:
        assert got is None
    else:
        assert got.dtype == bool and got.tolist() == [bool(v) for v in expected]


def test_levels_that_end_before_the_page_does_are_refused():
    from daskwp.accessors.parquet_pages import PagesUnsupported, _levels
    with pytest.raises(PagesUnsupported, match="end before their values"):
        _levels(np.frombuffer(bytes([4 << 1, 1]), np.uint8), 10)   # 4 of 10 levels


def test_a_column_without_nulls_reads_no_levels_but_their_header(tmp_path, monkeypatch):
    # pyarrow's pages of a nullable column without nulls: each opens with one run of 1s
    from daskwp.accessors import parquet_pages
    docs = [d for d in _page_docs() if d is not None] * 20
    path = tmp_path / "full.parquet"
    pq.write_table(pa.table({"text": pa.array(docs, pa.large_string())}), path,
                   compression="zstd", use_dictionary=False, data_page_size=4096)
    decoded = []
    rle = parquet_pages._rle_hybrid
    monkeypatch.setattr(parquet_pages, "_rle_hybrid",
                        lambda *a: decoded.append(a[2]) or rle(*a))
    pages, ref, files = _read_both(path, monkeypatch)
    assert files == 1
    _same_text(pages, ref)
    assert decoded == []


@pytest.mark.parametrize("buffer_bytes", [64, 3000, 1 << 20])
def test_the_page_reader_reads_the_column_chunk_through_a_buffer(tmp_path, monkeypatch,
                                                                 buffer_bytes):
    # the compressed column chunk is read a buffer at a time (a page or a header across
    # two reads; a page larger than the buffer), not whole
    monkeypatch.setattr(parquet_source, "HOST_BLOCK_MIN_BYTES", 16 << 10)
    monkeypatch.setattr(parquet_source, "READ_BUFFER_BYTES", buffer_bytes)
    docs = _page_docs()
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": docs}), path, compression="zstd",
                   dictionary_pagesize_limit=8 << 10, data_page_size=6 << 10,
                   row_group_size=len(docs) // 2 + 1)
    reads = []
    from daskwp.accessors import parquet_pages
    init = parquet_pages._ChunkReader.__init__
    monkeypatch.setattr(parquet_pages._ChunkReader, "__init__",
                        lambda self, *a: init(self, *a) or reads.append(self))
    pages, ref, calls = _read_both(path, monkeypatch)
    assert calls == 1 and len(reads) == 2
    _same_text(pages, ref)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0).total_compressed_size
    assert all(len(r.buf) < chunk for r in reads) or buffer_bytes >= chunk


def test_a_partition_task_runs_on_a_worker_without_dask_dataframe(tmp_path):
    # a fresh worker that unpickled the read's task imported dask.dataframe for it (the
    # module's dask glue, dask's partition read as an argument): ~0.25 s of CPU at its
    # first task. Unpickled and run in a fresh process, it imports none.
    import pickle
    import subprocess
    import sys
    lines = _corpus()[:500]
    pd.DataFrame({"text": pd.array(lines, dtype="string[pyarrow]")}).to_parquet(
        tmp_path / "a.parquet", index=False)
    direct = direct_text_source(dd.read_parquet(str(tmp_path))["text"].expr)
    assert isinstance(direct.frame, parquet_source.DirectTextRead)
    (task,) = direct.frame.__dask_graph__().values()
    code = (
        "import pickle, sys\n"
        f"task = pickle.loads({pickle.dumps(task)!r})\n"
        "assert not [m for m in sys.modules if m.startswith('dask.dataframe')], 'imported'\n"
        "got = task({})\n"
        "assert not [m for m in sys.modules if m.startswith('dask.dataframe')], 'ran'\n"
        "print(len(got))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == len(lines)


def test_dask_read_passed_to_a_task_reads_as_dask(tmp_path):
    # dask's partition read travels pickled (DaskRead), loaded when called (for a file
    # whose footer asks for dask's read): the frame is dask's own
    import pickle
    lines = _corpus()[:300]
    pd.DataFrame({"text": pd.array(lines, dtype="string[pyarrow]")}).to_parquet(
        tmp_path / "a.parquet", index=False)
    read = dd.read_parquet(str(tmp_path))["text"].expr.simplify().frame
    part = read._plan["parts"][0]
    wrapped = pickle.loads(pickle.dumps(parquet_source.DaskRead(read._io_func)))
    assert isinstance(wrapped.blob, bytes)
    pd.testing.assert_frame_equal(wrapped(part), read._io_func(part))


def test_dask_read_pickled_once_for_all_partitions(tmp_path, monkeypatch):
    # every partition's task carries the same DaskRead (dask's read pickled once, not once
    # per task), and dask takes its token without pickling it again
    import pickle

    from dask.tokenize import tokenize
    lines = _corpus()[:400]
    for i in range(4):
        pd.DataFrame({"text": pd.array(lines[i::4], dtype="string[pyarrow]")}).to_parquet(
            tmp_path / f"{i}.parquet", index=False)
    direct = direct_text_source(dd.read_parquet(str(tmp_path))["text"].expr)
    read = direct.frame
    assert isinstance(read, parquet_source.DirectTextRead) and read.npartitions == 4
    tasks = list(read.__dask_graph__().values())
    reads = {id(a) for t in tasks for a in t.args if isinstance(a, parquet_source.DaskRead)}
    assert len(tasks) == 4 and len(reads) == 1
    wrapped = read._dask_read
    copy = pickle.loads(pickle.dumps(wrapped))
    copy._token = None   # (as a DaskRead whose token was never taken)
    token = tokenize(wrapped)
    import cloudpickle
    for mod in (pickle, cloudpickle):
        monkeypatch.setattr(mod, "dumps", lambda *a, **k: pytest.fail("pickled for a token"))
    assert tokenize(copy) == token == tokenize(wrapped)
