"""The Dask layer: ``.wordpiece`` accessor, global logID offsets, culling, Parquet, the
vocabulary shipped once, cluster-wide stitching.

Results are compared with the single-machine pandas output on a real ``LocalCluster`` with
two worker processes (one module-scoped cluster keeps the suite fast). Graph-shape checks
(culling, input read once, pickled size) need no cluster.
"""

from __future__ import annotations

import pickle
import warnings

import cloudpickle
import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import DATA, DATA_IS_BUNDLED, read_lines

import daskwp
from daskwp.accessors import eager as accessor
from daskwp.distributed import state as worker_state
from daskwp.frames import partition as frames
from daskwp.accessors.lazy import DaskWordPieceResult
from daskwp.distributed.graph import partition_local as _partition_local

MAX_LENGTH = 32
STRIDE = 7  # odd on purpose: the owned-slice split must still rebuild every document
OPTIONS = dict(max_length=MAX_LENGTH, stride=STRIDE)


# -- data ---------------------------------------------------------------------------------

def _documents() -> list:
    """Real corpus lines (when the shared data is there), long multi-window documents,
    and empty / whitespace / None / NaN documents."""
    if not DATA_IS_BUNDLED:
        lines = []
        for name in ("en_ewt.txt", "logs/HDFS_2k.log", "multi/de.txt", "multi/zh.txt",
                     "edge/blns.txt"):
            lines += read_lines(DATA / "corpus" / name)[:30]
    else:
        lines = [f"synthetic document {i}: the quick brown fox jumps over {i} lazy dogs"
                 for i in range(150)]
    docs: list = []
    for i, line in enumerate(lines):
        docs.append(line)
        if i % 17 == 0:
            docs.append(" ".join(lines[i:i + 9]))  # several windows
        if i % 23 == 0:
            docs.append(None)
        if i % 29 == 0:
            docs.append("")
        if i % 31 == 0:
            docs.append(" \t ")
        if i % 37 == 0:
            docs.append(np.nan)
    return docs


DOCS = _documents()


def _series(docs) -> pd.Series:
    return pd.Series(docs, dtype=object, name="text")


def _concat(chunks) -> dd.Series:
    """A dask Series with exactly these partitions (some may be empty), in order."""
    parts = [dd.from_pandas(pd.DataFrame({"text": _series(c)}), npartitions=1, sort=False)
             for c in chunks]
    return dd.concat(parts)["text"]


def _split(docs, sizes):
    bounds = np.cumsum([0, *sizes])
    assert bounds[-1] <= len(docs)
    chunks = [docs[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]
    if bounds[-1] < len(docs):
        chunks.append(docs[bounds[-1]:])
    return chunks


PARTITIONINGS = {
    "uneven": lambda: _concat(_split(DOCS, [5, 0, 1, 37, 2, 0, 60])),
    "one_row": lambda: _concat([[d] for d in DOCS[:16]]),
    "all_null_partition": lambda: _concat([DOCS[:10], [None, np.nan, None], DOCS[10:50]]),
    "single": lambda: _concat([DOCS]),
    "from_pandas": lambda: dd.from_pandas(pd.DataFrame({"text": _series(DOCS)}),
                                          npartitions=7)["text"],
}


def _docs_of(ds: dd.Series) -> pd.Series:
    """The documents of a dask Series, in order, as one pandas Series (the eager input)."""
    return ds.compute(scheduler="sync").reset_index(drop=True)


def _expected(docs, **options):
    return _series(list(docs)).wordpiece.tokenize(**(options or OPTIONS))


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


# -- accessor and laziness (no cluster) ---------------------------------------------------

def test_accessor_registered_on_import():
    assert isinstance(pd.Series(["a"]).wordpiece, accessor.WordPieceAccessor)
    ds = dd.from_pandas(pd.Series(["a", "b"]), npartitions=1)
    res = ds.wordpiece.tokenize()
    assert isinstance(res, DaskWordPieceResult)
    assert callable(daskwp.connect)


def test_pandas_accessor_equals_tokenizer_call(tok):
    s = _series(DOCS)
    res = s.wordpiece.tokenize(**OPTIONS)
    out = tok(s, **OPTIONS)
    np.testing.assert_array_equal(res.input_ids, out["input_ids"])
    np.testing.assert_array_equal(res.attention_mask, out["attention_mask"])
    np.testing.assert_array_equal(res.metadata.to_numpy(), out["metadata"])
    assert list(res.metadata.columns) == ["logID", "start", "stop"]
    frame = res.to_frame()
    assert list(frame.columns) == [*frames.FRAME_COLUMNS, frames.INPUT_INDEX_COLUMN]
    np.testing.assert_array_equal(frame[frames.INPUT_INDEX_COLUMN], out["metadata"][:, 0])
    assert str(frame["input_ids"].dtype) == "list<item: int32>[pyarrow]"
    # window numbers the rows of each document
    lid = out["metadata"][:, 0]
    expected_window = [0 if r == 0 or lid[r] != lid[r - 1] else None for r in range(len(lid))]
    w = frame["window"].to_numpy()
    for r in range(len(lid)):
        assert w[r] == (0 if expected_window[r] == 0 else w[r - 1] + 1)


def _explode(i):
    raise AssertionError(f"partition {i} was computed while the graph was being built")


def test_building_the_graph_computes_nothing():
    parts = [dask.delayed(_explode)(i) for i in range(4)]
    ds = dd.from_delayed(parts, meta=pd.Series([], dtype=object, name="text"),
                         verify_meta=False)
    res = ds.wordpiece.tokenize(**OPTIONS)
    res.metadata, res.input_ids, res.attention_mask, res.to_frame()
    res.metadata.partitions[2]
    res.stitch(res.input_ids)
    res.stitch(res.to_frame().repartition(npartitions=2), column="input_ids")
    with pytest.raises(AssertionError, match="was computed"):
        res.metadata.compute(scheduler="sync")


def test_rejects_non_string_column_and_bad_options_when_building():
    ddf = dd.from_pandas(pd.DataFrame({"n": [1, 2, 3], "text": ["a", "b", "c"]}),
                         npartitions=2)
    with pytest.raises(TypeError, match="dtype int64"):
        ddf["n"].wordpiece.tokenize()
    with pytest.raises(ValueError, match="stride"):
        ddf["text"].wordpiece.tokenize(max_length=8, stride=6)  # L = 6
    with pytest.raises(ValueError, match="max_length"):
        ddf["text"].wordpiece.tokenize(max_length=2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ddf["text"].wordpiece.tokenize(max_lenght=8)
    with pytest.raises(ValueError, match="cannot be applied"):
        ddf["text"].wordpiece.tokenize(daskwp.WordPieceTokenizer(), lowercase=False)


def test_options_come_from_dask_config():
    ds = dd.from_pandas(_series(DOCS[:20]), npartitions=3)
    with dask.config.set({"daskwp.max_length": 24, "daskwp.stride": 3}):
        res = ds.wordpiece.tokenize()
        eager = _series(DOCS[:20]).wordpiece.tokenize()
    assert res.options["max_length"] == 24 and res.options["stride"] == 3
    assert res.input_ids.shape[1] == 24
    assert eager.input_ids.shape[1] == 24
    np.testing.assert_array_equal(res.input_ids.compute(scheduler="sync"), eager.input_ids)
    # an explicit argument wins over the configuration
    with dask.config.set({"daskwp.max_length": 24}):
        assert ds.wordpiece.tokenize(max_length=16).options["max_length"] == 16


def test_vocab_arguments(tmp_path, tok):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(tok.vocab.tokens) + "\n", encoding="utf-8")
    ds = dd.from_pandas(_series(DOCS[:30]), npartitions=3)
    ref = ds.wordpiece.tokenize(**OPTIONS).input_ids.compute(scheduler="sync")
    for vocab in (str(vocab_file), vocab_file, daskwp.Vocabulary.from_file(vocab_file), tok):
        got = ds.wordpiece.tokenize(vocab, **OPTIONS).input_ids.compute(scheduler="sync")
        np.testing.assert_array_equal(got, ref)
    cased = ds.wordpiece.tokenize(vocab_file, lowercase=False, **OPTIONS)
    assert cased.tokenizer.lowercase is False


# -- graph shape (no cluster) -------------------------------------------------------------

def _keys_with(graph, prefix):
    return [k for k in graph if (k[0] if isinstance(k, tuple) else k).startswith(prefix)]


def test_culled_graph_reads_only_the_partitions_it_needs():
    ds = _concat(_split(DOCS, [5, 0, 1, 37, 2, 0, 60]))
    res = ds.wordpiece.tokenize(**OPTIONS)
    graph = dict(res.metadata.partitions[3].optimize().__dask_graph__())
    tokenize_keys = _keys_with(graph, "daskwp-tokenize-")
    assert len(tokenize_keys) == 1  # only partition 3 is tokenized
    counts = _keys_with(graph, "daskwp-count")
    leaves = sorted(k[2] for k in counts if k[1] == 0)
    assert leaves == [0, 1, 2]  # its offset needs the counts of partitions 0..2 only
    assert len(_keys_with(graph, "daskwp-tokenizer-")) == 1


_READS: list = []


def _read_chunk(chunk):
    _READS.append(chunk[0])
    return _series(chunk[1])


def test_input_is_read_once():
    chunks = list(enumerate(_split(DOCS, [40, 0, 25, 60])))
    ds = dd.from_map(_read_chunk, chunks, meta=_series([]), enforce_metadata=False)
    res = ds.wordpiece.tokenize(**OPTIONS)
    _READS.clear()
    frame = res.to_frame().compute(scheduler="sync")
    assert sorted(_READS) == list(range(len(chunks)))  # each partition once
    assert frame["logID"].iloc[-1] == len(DOCS) - 1
    _READS.clear()
    res.metadata.partitions[3].compute(scheduler="sync")
    assert sorted(_READS) == [0, 1, 2, 3]


def test_graph_pickles_without_the_vocabulary_per_task(tok):
    npartitions = 24
    ds = dd.from_pandas(_series(DOCS), npartitions=npartitions)
    res = ds.wordpiece.tokenize(tok, **OPTIONS)
    tok_bytes = len(pickle.dumps(tok))
    # the vocabulary is big (its tokens; the trie is rebuilt on loading): it must not ride
    # in every task
    assert tok_bytes > 200_000
    frame = res.to_frame()
    graph = dict(frame.optimize().__dask_graph__())
    graph_bytes = len(cloudpickle.dumps(graph))
    per_task = {k: len(cloudpickle.dumps(v)) for k, v in graph.items()}
    heavy = [k for k, n in per_task.items() if n > 100_000]
    assert heavy == [res._tokenized.tokenizer_key]
    assert graph_bytes < tok_bytes + npartitions * 20_000, (graph_bytes, tok_bytes)
    # vocabulary per task would be npartitions * tok_bytes
    assert graph_bytes < 2 * tok_bytes
    # the expression (what the client sends to the scheduler) carries it once as well
    expr_bytes = len(cloudpickle.dumps(frame.expr))
    assert expr_bytes < 2 * tok_bytes
    assert cloudpickle.loads(cloudpickle.dumps(graph)).keys() == graph.keys()
    print(f"\ngraph of {npartitions} partitions: {graph_bytes:,} bytes pickled "
          f"(tokenizer {tok_bytes:,}; largest other task "
          f"{max(n for k, n in per_task.items() if k not in heavy):,}); expression "
          f"{expr_bytes:,} bytes")


# -- on the cluster -----------------------------------------------------------------------

@pytest.mark.parametrize("partitioning", sorted(PARTITIONINGS))
def test_matches_single_machine_output(client, partitioning):
    ds = PARTITIONINGS[partitioning]()
    docs = _docs_of(ds)
    expected = _expected(docs)
    res = ds.wordpiece.tokenize(**OPTIONS)
    # Frames and Arrays in separate computes: one dask.compute mixing an Array with a
    # culled frame built by dd.concat returns the wrong partition (a dask bug).
    meta = res.metadata.compute()
    ids, mask = dask.compute(res.input_ids, res.attention_mask)
    np.testing.assert_array_equal(meta.to_numpy(), expected.metadata.to_numpy())
    assert list(meta.columns) == ["logID", "start", "stop"]
    assert (meta.dtypes == np.int64).all()
    np.testing.assert_array_equal(ids, expected.input_ids)
    np.testing.assert_array_equal(mask, expected.attention_mask)
    assert ids.dtype == np.int32 and mask.dtype == np.int32
    # every document has a row; logIDs are the global row positions
    assert np.array_equal(np.unique(meta["logID"]), np.arange(len(docs)))


def _malloc_tuned():
    from daskwp.backends import memory
    return memory._tuned


def test_nanny_workers_get_malloc_tuned_by_their_tasks(client):
    # The nanny starts the workers with MALLOC_TRIM_THRESHOLD_ (distributed's default
    # 65536); the first partition task, through the per-worker state, raises glibc's
    # thresholds (docs/design.md §3.5 "Worker malloc").
    envs = client.run(lambda: __import__("os").environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert all(v is not None and int(v) < 128 << 20 for v in envs.values()), envs
    ds = dd.from_pandas(pd.Series(["hello world"] * 40), npartitions=4)
    ds.wordpiece.tokenize(**OPTIONS).metadata.compute()
    assert set(client.run(_malloc_tuned).values()) == {True}


def test_to_frame_matches_single_machine_output(client):
    ds = _concat(_split(DOCS, [5, 0, 1, 37, 2, 0, 60]))
    expected = _expected(_docs_of(ds)).to_frame()
    got = ds.wordpiece.tokenize(**OPTIONS).to_frame().compute().reset_index(drop=True)
    assert list(got.columns) == list(expected.columns)
    for col in ("logID", "start", "stop", "window"):
        np.testing.assert_array_equal(got[col].to_numpy(), expected[col].to_numpy())
    for col in ("input_ids", "attention_mask"):
        assert got[col].dtype == expected[col].dtype
        np.testing.assert_array_equal(frames.matrix_from_frame(got, col, MAX_LENGTH),
                                      frames.matrix_from_frame(expected, col, MAX_LENGTH))


@pytest.mark.parametrize("options", [
    dict(max_length=16, stride=0, truncation=True),
    dict(max_length=16, stride=3, add_special_tokens=False),
])
def test_window_options_pass_through(client, options):
    ds = _concat(_split(DOCS, [3, 0, 50]))
    expected = _expected(_docs_of(ds), **options)
    res = ds.wordpiece.tokenize(**options)
    np.testing.assert_array_equal(res.metadata.compute().to_numpy(),
                                  expected.metadata.to_numpy())
    np.testing.assert_array_equal(res.input_ids.compute(), expected.input_ids)


def test_ragged_rows_in_to_frame(client):
    ds = _concat(_split(DOCS, [3, 0, 50]))
    res = ds.wordpiece.tokenize(max_length=16, padding=False)
    frame = res.to_frame().compute()
    expected = _expected(_docs_of(ds), max_length=16, padding=False).to_frame()
    assert frame["input_ids"].tolist() == expected["input_ids"].tolist()
    lengths = frame["input_ids"].list.len()
    assert lengths.max() <= 16 and lengths.nunique() > 1
    with pytest.raises(ValueError, match="padding='max_length'"):
        res.input_ids


def test_culling_keeps_global_logids(client):
    sizes = [5, 0, 1, 37, 2, 0, 60]
    chunks = _split(DOCS, sizes)
    ds = _concat(chunks)
    expected = _expected(_docs_of(ds)).metadata
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in chunks])])
    res = ds.wordpiece.tokenize(**OPTIONS)

    def rows_of(p):
        lid = expected["logID"].to_numpy()
        return expected[(lid >= offsets[p]) & (lid < offsets[p + 1])].to_numpy()

    part3, part60, frame23, again = dask.compute(
        res.metadata.partitions[3],
        res.metadata.partitions[[6, 0]],
        res.to_frame().partitions[2:4],
        res.metadata.partitions[2:7].partitions[4])  # a cull of a cull
    block3 = res.input_ids.blocks[3].compute()  # not in the same compute: see above
    np.testing.assert_array_equal(part3.to_numpy(), rows_of(3))
    np.testing.assert_array_equal(part60.to_numpy(), np.concatenate([rows_of(6), rows_of(0)]))
    np.testing.assert_array_equal(frame23[["logID", "start", "stop"]].to_numpy(),
                                  np.concatenate([rows_of(2), rows_of(3)]))
    np.testing.assert_array_equal(again.to_numpy(), rows_of(6))
    assert block3.shape == (len(rows_of(3)), MAX_LENGTH)


def test_parquet_source_with_fused_partitions(client, tmp_path):
    # Reading one column of a wider Parquet dataset makes dask-expr fuse small partitions;
    # the offsets must follow, in full and culled graphs.
    chunks = _split(DOCS, [20, 0, 31, 3, 40, 1])
    for i, chunk in enumerate(chunks):
        pd.DataFrame({"id": np.arange(len(chunk)), "text": _series(chunk),
                      "a": 1.0, "b": 2.0, "c": "x"}).to_parquet(tmp_path / f"part.{i}.parquet")
    ds = dd.read_parquet(tmp_path)["text"]
    assert ds.npartitions == len(chunks)
    expected = _expected(DOCS).metadata
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in chunks])])
    lid = expected["logID"].to_numpy()

    def rows_of(p):
        return expected[(lid >= offsets[p]) & (lid < offsets[p + 1])].to_numpy()

    res = ds.wordpiece.tokenize(**OPTIONS)
    full, part4, parts = dask.compute(res.metadata, res.metadata.partitions[4],
                                      res.metadata.partitions[[5, 2, 3]])
    np.testing.assert_array_equal(full.to_numpy(), expected.to_numpy())
    np.testing.assert_array_equal(part4.to_numpy(), rows_of(4))
    np.testing.assert_array_equal(parts.to_numpy(),
                                  np.concatenate([rows_of(5), rows_of(2), rows_of(3)]))


def test_empty_and_all_null_partitions_conform_to_the_schema(client):
    ds = _concat([DOCS[:4], [], [None, np.nan, None], DOCS[4:9]])
    res = ds.wordpiece.tokenize(**OPTIONS)
    frame = res.to_frame()
    empty = frame.partitions[1].compute()
    assert len(empty) == 0
    assert list(empty.columns) == [*frames.FRAME_COLUMNS, frames.INPUT_INDEX_COLUMN]
    assert (empty.dtypes == frame._meta.dtypes).all()
    nulls = frame.partitions[2].compute()
    assert (nulls.dtypes == frame._meta.dtypes).all()
    assert nulls["logID"].tolist() == [4, 5, 6]
    assert (nulls["stop"] == nulls["start"] - 1).all()
    assert res.input_ids.blocks[1].compute().shape == (0, MAX_LENGTH)


def test_failure_names_the_partition(client):
    with dask.config.set({"dataframe.convert-string": False}):
        ds = _concat([["fine"], ["also fine"], ["bad", 42, "row"], ["fine"]])
    assert ds.dtype == object  # a mixed column; the tokenizer rejects the int
    res = ds.wordpiece.tokenize(**OPTIONS)
    with pytest.raises(TypeError, match="partition 2 "):
        res.metadata.compute()
    # after culling, the message still gives the original partition number
    with pytest.raises(TypeError, match="partition 2 "):
        res.to_frame().partitions[2].compute()


def test_to_parquet_round_trip(client, tmp_path):
    ds = _concat(_split(DOCS, [5, 0, 1, 37, 2, 0, 60]))
    expected = _expected(_docs_of(ds))
    res = ds.wordpiece.tokenize(**OPTIONS)
    path = tmp_path / "tokens"
    res.to_parquet(path)
    # padded rows are stored trimmed (docs/design.md §3.3); read_tokenized pads them back
    back = daskwp.read_tokenized(path).to_dask().compute().reset_index(drop=True)
    assert str(back["input_ids"].dtype).startswith("list<") and "int32" in \
        str(back["input_ids"].dtype)
    np.testing.assert_array_equal(back[["logID", "start", "stop"]].to_numpy(dtype=np.int64),
                                  expected.metadata.to_numpy())
    for col, want in (("input_ids", expected.input_ids),
                      ("attention_mask", expected.attention_mask)):
        np.testing.assert_array_equal(frames.matrix_from_frame(back, col, MAX_LENGTH), want)
    # plain readers read the stored rows: each padded row's real tokens
    plain = pd.read_parquet(path)
    real = expected.attention_mask.astype(bool)
    np.testing.assert_array_equal(np.concatenate(plain["input_ids"].to_numpy()),
                                  expected.input_ids[real])
    np.testing.assert_array_equal(np.stack(daskwp.read_tokenized(path).to_pandas()[
        "input_ids"].to_numpy()), expected.input_ids)
    # the eager result writes the same columns
    expected.to_parquet(tmp_path / "eager.parquet")
    eager = pd.read_parquet(tmp_path / "eager.parquet", dtype_backend="pyarrow")
    np.testing.assert_array_equal(frames.matrix_from_frame(eager, "input_ids", MAX_LENGTH),
                                  expected.input_ids)


def test_one_tokenizer_per_worker(client, tok):
    ds = dd.from_pandas(_series(DOCS), npartitions=8)
    res = ds.wordpiece.tokenize(tok, **OPTIONS)
    res.metadata.compute()
    key = worker_state.tokenizer_key(tok)
    cached = client.run(worker_state.cached_tokenizer_keys)
    assert len(cached) == 2
    for keys in cached.values():
        assert keys.count(key) <= 1
    assert sum(key in keys for keys in cached.values()) >= 1


def _check_stitched(stitched: pd.DataFrame, docs, tok, column, scale=1):
    stitched = stitched.sort_values("logID").reset_index(drop=True)
    enc = tok.encode(_series(list(docs)))
    assert stitched["logID"].tolist() == list(range(len(docs)))  # every document, once
    for i, seq in enumerate(stitched[column]):
        np.testing.assert_array_equal(np.asarray(seq), enc[i] * scale)


@pytest.mark.slow
def test_stitch_rebuilds_every_document_cluster_wide(client, tok):
    ds = _concat(_split(DOCS[:120], [5, 0, 1, 37]))
    docs = _docs_of(ds)
    res = ds.wordpiece.tokenize(**OPTIONS)
    frame = res.to_frame()
    assert _partition_local(frame.expr)
    # a dask Array aligned with the rows: the ids, and per-token "predictions" from them
    from_ids = res.stitch(res.input_ids)
    from_preds = res.stitch(res.input_ids * 3, column="pred")
    # a frame still partitioned as tokenized: stitched partition by partition, no shuffle
    local = res.stitch(frame, column="input_ids")
    assert not _keys_with(dict(local.optimize().__dask_graph__()), "shuffle")
    # repartitioned: a document's rows may straddle partitions -> groupby on logID
    moved = frame.repartition(npartitions=3)
    assert not _partition_local(moved.expr)
    regrouped = res.stitch(moved, column="input_ids")
    # shuffled rows: the window column restores the order of each document's rows
    shuffled = res.stitch(frame.shuffle(on="stop", shuffle_method="tasks"),
                          column="input_ids", how="groupby")
    results = dask.compute(from_ids, from_preds, local, regrouped, shuffled)
    _check_stitched(results[0], docs, tok, "values")
    _check_stitched(results[1], docs, tok, "pred", scale=3)
    for stitched in results[2:]:
        _check_stitched(stitched, docs, tok, "input_ids")


def _parquet_files(folder, chunks) -> None:
    """One Parquet file per chunk, with an id and other columns beside ``text`` (a read
    of one column fuses small files into fewer partitions)."""
    start = 0
    for i, chunk in enumerate(chunks):
        pd.DataFrame({"id": np.arange(start, start + len(chunk)), "text": _series(chunk),
                      "a": 1.0, "b": 2.0, "c": "x"}).to_parquet(folder / f"part.{i}.parquet")
        start += len(chunk)


@pytest.mark.slow
def test_stitch_takes_the_arrays_of_any_partitioning(client, tmp_path, tok):
    # issue 37 item 4: README's example (res.stitch(res.input_ids)) on dd.read_parquet of
    # several files failed, the array's blocks being the fused read's partitions
    _parquet_files(tmp_path, _split(DOCS, [20, 0, 31, 3, 40, 1, 9]))
    wide = dd.read_parquet(tmp_path)
    pandas_frame = pd.DataFrame({"id": np.arange(len(DOCS)), "text": _series(DOCS)})
    many = dd.from_pandas(pandas_frame, npartitions=7)
    sources = {
        "read_parquet": wide["text"],
        "read_parquet_filtered": wide[wide["id"] % 3 != 1]["text"],
        "from_pandas": many["text"],
        "from_pandas_filtered": many[many["id"] % 4 != 0]["text"],
        "repartitioned": many.repartition(npartitions=3)["text"],
    }
    for name, ds in sources.items():
        docs = _docs_of(ds)
        res = ds.wordpiece.tokenize(**OPTIONS)
        predictions = res.input_ids
        stitched = dask.compute(res.stitch(predictions),
                                res.stitch(res.input_ids * 3, column="pred"),
                                res.stitch(res.attention_mask * res.input_ids, column="m"))
        _check_stitched(stitched[0], docs, tok, "values")
        _check_stitched(stitched[1], docs, tok, "pred", scale=3)
        _check_stitched(stitched[2], docs, tok, "m")
    # rows of known sizes in other blocks: aligned with the result's blocks
    res = sources["read_parquet"].wordpiece.tokenize(**OPTIONS)
    rechunked = res.input_ids.compute_chunk_sizes().rechunk({0: 50, 1: 8})
    docs = _docs_of(sources["read_parquet"])
    _check_stitched(res.stitch(rechunked).compute(), docs, tok, "values")
    # what res.compute() gives: a NumPy array of all rows, a pandas frame
    computed = res.compute()
    _check_stitched(res.stitch(computed.input_ids * 2).compute(), docs, tok, "values", 2)
    _check_stitched(res.stitch(computed.to_frame(), column="input_ids").compute(), docs, tok,
                    "input_ids")
    # other blocks of unknown sizes: an error that says what to do
    other = dd.from_pandas(pandas_frame, npartitions=2)["text"].wordpiece.tokenize(**OPTIONS)
    with pytest.raises(ValueError, match="row blocks of this result's arrays"):
        res.stitch(other.input_ids)


def test_to_frame_joins_back_to_the_source_after_a_filter(client, tmp_path, tok):
    # issue 37 item 9: to_frame() carries the input index and keep_columns
    n = len(DOCS)
    source = pd.DataFrame({"id": np.arange(n) * 10 + 3, "text": _series(DOCS),
                           "group": [f"g{i % 4}" for i in range(n)]},
                          index=pd.Index(np.arange(n)[::-1] * 7, name="row"))
    ddf = dd.from_pandas(source, npartitions=5, sort=False)
    kept = ddf[(ddf["id"] // 10) % 3 != 1]
    res = kept["text"].wordpiece.tokenize(keep_columns=["id", "group"], **OPTIONS)
    assert res.options["keep_columns"] == ["id", "group"] and res.position_outputs == []
    frame = res.to_frame()
    assert list(frame.columns) == [*frames.FRAME_COLUMNS, frames.INPUT_INDEX_COLUMN, "id",
                                   "group"]
    got, ids, stitched = dask.compute(frame, frame["id"], res.stitch(res.input_ids))
    got = got.reset_index(drop=True)
    expected = source[(source["id"] // 10) % 3 != 1]
    # logIDs are positions in the filtered frame; input_index and id name the source row
    docs = expected.iloc[got["logID"].to_numpy()]
    np.testing.assert_array_equal(got[frames.INPUT_INDEX_COLUMN], docs.index)
    np.testing.assert_array_equal(got["id"], docs["id"])
    np.testing.assert_array_equal(ids.to_numpy(), docs["id"])
    assert got["group"].tolist() == docs["group"].tolist()
    # joined back on either column, each row meets its own text
    for joined in (got.merge(source, left_on=frames.INPUT_INDEX_COLUMN, right_index=True,
                             suffixes=("", "_source")),
                   got.merge(source, on="id", suffixes=("", "_source"))):
        assert len(joined) == len(got)
        by_doc = stitched.set_index("logID")["values"]
        for lid, text in joined.groupby("logID")["text"].first().items():
            np.testing.assert_array_equal(np.asarray(by_doc[lid]),
                                          tok.encode(_series([text]))[0])
    assert set(got["id"]) == set(expected["id"])   # every source row, none other


def test_keep_columns_of_parquet_pairs_and_parts(client, tmp_path):
    _parquet_files(tmp_path, _split(DOCS, [20, 0, 31, 3, 40, 1, 9]))
    wide = dd.read_parquet(tmp_path)
    filtered = wide[wide["id"] % 2 == 0]
    res = filtered["text"].wordpiece.tokenize(keep_columns="id", **OPTIONS)
    frame = res.to_frame().compute()
    src = filtered.compute()
    np.testing.assert_array_equal(frame["id"], src["id"].to_numpy()[frame["logID"]])
    # read_parquet numbers each file's rows from 0: the index is the row in its file
    np.testing.assert_array_equal(frame[frames.INPUT_INDEX_COLUMN],
                                  src.index.to_numpy()[frame["logID"]])
    assert (frame[frames.INPUT_INDEX_COLUMN] != frame["id"]).any()
    # the parts to_parquet writes carry the same columns
    res.to_parquet(tmp_path / "out")
    parts = pd.read_parquet(tmp_path / "out").sort_values(["logID", "window"])
    np.testing.assert_array_equal(parts["id"], frame["id"])
    np.testing.assert_array_equal(parts[frames.INPUT_INDEX_COLUMN],
                                  frame[frames.INPUT_INDEX_COLUMN])
    # sentence pairs, a kept column given as a Dask Series, the text column itself kept
    pairs = wide["c"].wordpiece.tokenize(text_pair=wide["text"], keep_columns=wide["text"],
                                         **OPTIONS).to_frame().compute()
    texts = wide["text"].compute().reset_index(drop=True)
    assert pairs["text"].tolist() == texts.iloc[pairs["logID"]].tolist()


def test_input_index_keeps_the_index_dtype():
    df = pd.DataFrame({"text": ["a b", "c", "d e f", None]},
                      index=pd.Index(["x", "y", "z", "w"], name="key"))
    frame = dd.from_pandas(df, npartitions=2, sort=False)["text"].wordpiece.tokenize(
        **OPTIONS).to_frame()
    got = frame.compute(scheduler="sync")
    assert got[frames.INPUT_INDEX_COLUMN].tolist() == ["x", "y", "z", "w"]
    assert frame._meta[frames.INPUT_INDEX_COLUMN].dtype == got[frames.INPUT_INDEX_COLUMN].dtype
    multi = pd.Series(["a", "b c", None], index=pd.MultiIndex.from_tuples(
        [(1, "a"), (2, "b"), (3, "c")]))
    assert multi.wordpiece.tokenize(**OPTIONS).to_frame()[
        frames.INPUT_INDEX_COLUMN].tolist() == [(1, "a"), (2, "b"), (3, "c")]


def test_keep_columns_eagerly_and_refused_names():
    df = pd.DataFrame({"id": [4, 5, 6], "text": ["a b", None, "c d e"]}, index=[30, 10, 20])
    sub = df[df["id"] != 5]
    res = sub["text"].wordpiece.tokenize(keep_columns=sub[["id"]], **OPTIONS)
    frame = res.to_frame()
    assert frame[frames.INPUT_INDEX_COLUMN].tolist() == [30, 20]
    assert frame["id"].tolist() == [4, 6]
    assert df["text"].wordpiece.tokenize(**OPTIONS).to_frame()[
        frames.INPUT_INDEX_COLUMN].tolist() == [30, 10, 20]
    with pytest.raises(TypeError, match="does not know the frame"):
        df["text"].wordpiece.tokenize(keep_columns=["id"])
    with pytest.raises(ValueError, match="one row per row"):
        df["text"].wordpiece.tokenize(keep_columns=sub[["id"]])
    ddf = dd.from_pandas(df, npartitions=2)
    with pytest.raises(ValueError, match="no column 'nope'"):
        ddf["text"].wordpiece.tokenize(keep_columns=["id", "nope"])
    for name in ("logID", frames.INPUT_INDEX_COLUMN, "token_type_ids"):
        with pytest.raises(ValueError, match=f"'{name}' is a column of"):
            ddf.rename(columns={"id": name})["text"].wordpiece.tokenize(keep_columns=name)
    with pytest.raises(ValueError, match="not a column of a DataFrame"):
        ddf["text"].str.lower().wordpiece.tokenize(keep_columns="id")


def test_stitch_logits_eagerly(tok):
    s = _series(DOCS[:40])
    res = s.wordpiece.tokenize(**OPTIONS)
    logits = np.stack([res.input_ids, -res.input_ids], axis=-1).astype(np.float32)
    out = res.stitch(logits, column="logits")
    enc = tok.encode(s)
    for i, seq in enumerate(out["logits"]):
        arr = np.array([np.asarray(x) for x in seq]).reshape(-1, 2)
        np.testing.assert_array_equal(arr[:, 0], enc[i])


# -- cudf (skipped without cudf) ----------------------------------------------------------

@pytest.mark.gpu
def test_cudf_accessor_matches_pandas():
    cudf = pytest.importorskip("cudf")
    s = _series(DOCS)
    expected = s.wordpiece.tokenize(**OPTIONS)
    res = cudf.from_pandas(s).wordpiece.tokenize(**OPTIONS)
    np.testing.assert_array_equal(res.input_ids.get(), expected.input_ids)
    np.testing.assert_array_equal(res.metadata.to_pandas().to_numpy(),
                                  expected.metadata.to_numpy())


@pytest.mark.gpu
def test_dask_cudf_matches_pandas():
    pytest.importorskip("cudf")
    pytest.importorskip("dask_cudf")
    s = _series(DOCS)
    expected = s.wordpiece.tokenize(**OPTIONS)
    ds = dd.from_pandas(s, npartitions=5).to_backend("cudf")
    res = ds.wordpiece.tokenize(**OPTIONS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        meta = res.metadata.compute().to_pandas()
        ids = res.input_ids.compute()
    np.testing.assert_array_equal(meta.to_numpy(), expected.metadata.to_numpy())
    np.testing.assert_array_equal(ids.get() if hasattr(ids, "get") else ids,
                                  expected.input_ids)


def test_to_parquet_reads_each_partition_in_its_write_task(client, tmp_path):
    # Parquet row counts give every offset before anything runs: each partition is then
    # read, tokenized and written by one task (the read fused into the write), no text
    # partition is a task result held or moved between workers; the offsets still follow
    # dask-expr's fusion of small Parquet partitions.
    chunks = _split(DOCS, [20, 0, 31, 3, 40, 1])
    for i, chunk in enumerate(chunks):
        pd.DataFrame({"id": np.arange(len(chunk)), "text": _series(chunk),
                      "a": 1.0, "b": 2.0, "c": "x"}).to_parquet(tmp_path / f"part.{i}.parquet")
    expected = _expected(DOCS)
    for columns, name in ((None, "wide"), (["text"], "narrow")):
        ds = dd.read_parquet(tmp_path / "part.*.parquet", columns=columns)["text"]
        out = ds.wordpiece.tokenize(**OPTIONS).to_parquet(tmp_path / name, compute=False)
        # the graph compute runs (the wide read's small files fused into larger partitions
        # there): a write per partition, the tokenizer and the end, no count pass
        from dask._expr import FinalizeCompute
        from dask.base import collections_to_expr
        graph = FinalizeCompute(collections_to_expr([out])).optimize().__dask_graph__()
        # (a read of the text column alone is daskwp's own: accessors/parquet_source.py)
        writes = [k for k in graph if str(k).startswith(("('read_parquet-",
                                                         "('daskwp-getitem-daskwp-"))]
        assert writes and len(graph) == len(writes) + 2, sorted(map(str, graph))
        stats = out.compute()
        assert stats["documents"] == len(DOCS)
        back = daskwp.read_tokenized(tmp_path / name).to_dask().compute()
        back = back.sort_values(["logID", "window"]).reset_index(drop=True)
        np.testing.assert_array_equal(
            back[["logID", "start", "stop"]].to_numpy(dtype=np.int64),
            expected.metadata.to_numpy())
        np.testing.assert_array_equal(frames.matrix_from_frame(back, "input_ids", MAX_LENGTH),
                                      expected.input_ids)


@pytest.mark.parametrize("padding", [False, "bucket", "longest"])
def test_stitch_takes_what_results_of_every_padding_give(tmp_path, tok, padding):
    # issue 37 item 4's class: stitch accepts any values res produced, also for rows not
    # padded to max_length: res["input_ids"] / to_frame() list columns (a dask Series),
    # and what res.compute() gives (RaggedRows, one matrix per bucket, a matrix)
    _parquet_files(tmp_path, _split(DOCS, [20, 0, 31, 3, 40, 1, 9]))
    ds = dd.read_parquet(tmp_path)["text"]
    docs = _docs_of(ds)
    res = ds.wordpiece.tokenize(padding=padding, **OPTIONS)
    with dask.config.set(scheduler="sync"):
        _check_stitched(res.stitch(res["input_ids"]).compute(), docs, tok, "input_ids")
        _check_stitched(res.stitch(res.to_frame()["input_ids"], column="p").compute(), docs,
                        tok, "p")
        _check_stitched(res.stitch(res.compute()["input_ids"]).compute(), docs, tok,
                        "values")
        if padding != "longest":
            with pytest.raises(ValueError, match="values hold 3 rows.*this result has"):
                res.stitch(tok(["a", "b", "c"], padding=padding)["input_ids"])


@pytest.mark.parametrize("padding", [False, "bucket", "longest", "max_length"])
def test_eager_stitch_takes_what_its_result_maps(tok, padding):
    # issue 37 items 4 and 11: r.stitch(r["input_ids"]) for every padding, eagerly (a
    # bucketed result maps one matrix per bucket width)
    docs = _series([d for d in DOCS if isinstance(d, str)])
    r = docs.wordpiece.tokenize(padding=padding, **OPTIONS)
    _check_stitched(r.stitch(r["input_ids"]), docs, tok, "values")
    _check_stitched(r.stitch(r["attention_mask"] * 0 + r["input_ids"])
                    if padding in ("longest", "max_length") else
                    r.stitch(r.to_frame(), column="input_ids"), docs, tok,
                    "values" if padding in ("longest", "max_length") else "input_ids")
