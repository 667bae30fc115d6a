"""Length buckets (padding="bucket"): each window row in the smallest bucket width that
holds it, no empty bucket, rows equal to the plain padded windows cut to the bucket width,
and stitching the buckets rebuilds every document exactly once — on every corpus, CPU and
the CUDA source (emulated; on a device where there is one). The CPU's native bucketed fill
(``_ext.build_buckets``) equals the ragged fill bucketed by ``bucket_windows`` (the GPU's
and the pairs' path) array for array on every line of every corpus, every per-position
output on, one thread and seven; ``"auto"`` equals the NumPy form of its dynamic program."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pytest

import daskwp
from conftest import FAST_CORPORA, corpus_files, read_documents, slow_unless
from daskwp import _ext
from daskwp.backends.cpu import CPU
from daskwp.core.buckets import BucketedWindows, auto_bucket_widths, bucket_windows, \
    check_bucket_widths
from daskwp.core.pairs import extras_options, sequence_options
from daskwp.core.ragged import to_host
from daskwp.core.windows import window_params

TOK = daskwp.WordPieceTokenizer()
CORPORA = corpus_files()
GRID = [(128, 32, (16, 32, 64)), (64, 0, (8, 24, 64)), (512, 128, "auto"), (16, 3, (5, 9))]


def _docs(path, limit=400):
    docs = read_documents(path)
    return docs[:: max(1, len(docs) // limit)][:limit] + ["", None, "word " * 700]


def _host(bucketed):
    return [(w, {k: to_host(v) for k, v in b.items()}) for w, b in bucketed.buckets]


def check_buckets(tok, texts, buckets, max_length, stride, widths):
    plain = tok(texts, max_length=max_length, stride=stride)
    lengths = plain.attention_mask.sum(axis=1)
    got_widths = [w for w, _ in buckets]
    assert got_widths == sorted(set(got_widths)), got_widths
    expected_widths = check_bucket_widths(widths, max_length) if widths != "auto" else \
        auto_bucket_widths(lengths, max_length)
    assert set(got_widths) <= set(expected_widths)
    assert sum(len(b["metadata"]) for _, b in buckets) == plain.num_rows
    seen = np.zeros(plain.num_rows, dtype=bool)
    row_of = {}
    starts = plain.doc_row_offsets
    for r in range(plain.num_rows):
        d = int(plain.metadata[r, 0])
        row_of[(d, r - int(starts[d]))] = r
    for w, b in buckets:
        assert len(b["metadata"]) > 0, f"empty bucket {w}"
        assert b["input_ids"].shape[1] == w and b["attention_mask"].shape[1] == w
        for i in range(len(b["metadata"])):
            r = row_of[(int(b["metadata"][i, 0]), int(b["window"][i]))]
            assert not seen[r]
            seen[r] = True
            n = int(lengths[r])
            # the smallest width that holds the row
            assert w >= n and not any(n <= x < w for x in expected_widths), (n, w)
            assert np.array_equal(b["input_ids"][i], plain.input_ids[r, :w])
            assert np.array_equal(b["attention_mask"][i], plain.attention_mask[r, :w])
            assert np.array_equal(b["metadata"][i], plain.metadata[r])
            assert (plain.attention_mask[r, w:] == 0).all()
    assert seen.all()
    stitched = daskwp.stitch([b["input_ids"] for _, b in buckets],
                             [b["metadata"] for _, b in buckets],
                             window=[b["window"] for _, b in buckets])
    assert [s.tolist() for s in stitched] == tok.encode(texts).to_list()


@pytest.mark.parametrize("path", slow_unless(CORPORA, fast={Path(c).name for c in FAST_CORPORA},
                                             ids=lambda p: p.name))
@pytest.mark.parametrize("max_length,stride,widths", GRID)
def test_buckets_on_every_corpus(path, max_length, stride, widths):
    texts = _docs(path)
    out = TOK(texts, max_length=max_length, stride=stride, padding="bucket",
              bucket_widths=widths)
    check_buckets(TOK, texts, _host(out), max_length, stride, widths)


def test_every_backend_buckets_alike(any_backend):  # noqa: F811
    if not any_backend.has_windows:
        pytest.skip("the reference backend has no window fill")
    texts = _docs(CORPORA[0], 150)
    for max_length, stride, widths in GRID:
        tok = any_backend.route(TOK)
        out = tok(texts, max_length=max_length, stride=stride, padding="bucket",
                  bucket_widths=widths, return_tensors="np")
        check_buckets(TOK, texts, _host(out), max_length, stride, widths)
        # array for array against the CPU's native fill, every per-position output too
        on = dict(mask_dtype="int8", return_offsets_mapping=True, return_word_ids=True,
                  return_special_tokens_mask=True, return_token_type_ids=True,
                  return_sequence_ids=True)
        got = tok(texts, max_length=max_length, stride=stride, padding="bucket",
                  bucket_widths=widths, return_tensors="np", **on)
        want = TOK(texts, max_length=max_length, stride=stride, padding="bucket",
                   bucket_widths=widths, **on)
        _assert_same_buckets(BucketedWindows(
            [(w, {k: to_host(v) for k, v in b.items()}) for w, b in got.buckets]), want)


def test_auto_widths_minimise_padding():
    rng = np.random.default_rng(7)
    for trial in range(20):
        max_length = int(rng.choice([16, 40, 64]))
        lengths = rng.integers(2, max_length + 1, size=int(rng.integers(1, 60)))
        chosen = auto_bucket_widths(lengths, max_length)
        cands = sorted(set(range(8, max_length + 1, 8)) | {max_length})
        longest = int(lengths.max())
        top = min(w for w in cands if w >= longest)

        def pad(ws):
            ws = sorted(ws)
            return sum(min(w for w in ws if w >= n) - n for n in lengths)

        best = min(pad(c + (top,)) for k in range(0, 4)
                   for c in itertools.combinations([w for w in cands if w < top], k))
        assert len(chosen) <= 4 and chosen[-1] == top
        assert pad(chosen) == best, (trial, lengths.tolist(), chosen)


@pytest.mark.parametrize("widths,pattern", [
    ((), "at least one width"), ((0, 8), r"\[1, max_length=16\].*got 0"),
    ((8, 17), "got 17"), ("some", "sequence of integers or 'auto'"), (8, "sequence"),
    ((8.5,), "must be an integer"),
])
def test_bad_bucket_widths(widths, pattern):
    with pytest.raises(ValueError, match=pattern):
        TOK(["a b"], max_length=16, padding="bucket", bucket_widths=widths)


def test_max_length_is_always_a_bucket():
    assert check_bucket_widths((8, 4, 8), 16) == (4, 8, 16)
    out = TOK(["word " * 40], max_length=16, padding="bucket", bucket_widths=(4,))
    assert out.widths == [16]


def test_bucket_outputs_follow_return_tensors_and_mask_dtype():
    out = TOK(["a b c", "word " * 30], max_length=16, padding="bucket", bucket_widths=(8,),
              mask_dtype="int8")
    for w, b in out:
        assert b["input_ids"].dtype == np.int32 and b["attention_mask"].dtype == np.int8
        assert b["window"].dtype == np.int32 and b["metadata"].dtype == np.int64


def test_buckets_through_the_accessors_jobs_and_read_tokenized(tmp_path):
    import dask.dataframe as dd
    import pandas as pd
    from daskwp.cli import main
    texts = [t or "" for t in _docs(CORPORA[0], 300)]
    opts = dict(max_length=64, stride=8, padding="bucket", bucket_widths=(16, 32))
    want = TOK.encode(texts).to_list()
    eager = pd.Series(texts).wordpiece.tokenize(**opts).to_frame()
    assert eager["logID"].is_monotonic_increasing
    assert sorted(set(eager["bucket"])) == [16, 32, 64]
    assert (eager["input_ids"].map(len) == eager["bucket"]).all()
    ddf = dd.from_pandas(pd.DataFrame({"text": texts}), npartitions=3)
    res = ddf["text"].wordpiece.tokenize(**opts)
    res.to_parquet(str(tmp_path / "lazy"))
    stitched = res.stitch(res.to_frame(), column="input_ids").compute()
    assert [np.asarray(v).tolist() for v in stitched["input_ids"]] == want
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(texts) + "\n", encoding="utf-8")
    rc = main(["tokenize", str(inp), str(tmp_path / "job"), "--scheduler", "synchronous",
               "-q", "--max-length", "64", "--stride", "8", "--padding", "bucket",
               "--bucket-widths", "16", "--bucket-widths", "32", "--partition-size", "30kB"])
    assert rc == 0
    plain = TOK(texts, max_length=64, stride=8)
    for folder in ("lazy", "job"):
        ds = daskwp.read_tokenized(tmp_path / folder)
        rows = {}
        for batch in ds.batches():
            w = batch["input_ids"].shape[1]
            assert (np.asarray(batch["bucket"]) == w).all()      # one width per batch
            for i in range(len(batch["metadata"])):
                rows[(int(batch["metadata"][i, 0]), int(batch["window"][i]))] = \
                    batch["input_ids"][i]
        assert len(rows) == plain.num_rows, folder
        starts = plain.doc_row_offsets
        for r in range(plain.num_rows):
            d = int(plain.metadata[r, 0])
            got = rows[(d, r - int(starts[d]))]
            assert np.array_equal(got, plain.input_ids[r, :len(got)]), (folder, r)


def numpy_auto_widths(lengths, max_length, n_buckets=4):
    """The NumPy form of the "auto" dynamic program (what daskwp ran before the native one):
    the reference the extension's must equal, ties included."""
    lengths = np.asarray(lengths, dtype=np.int64)
    cands = sorted(set(range(8, max_length + 1, 8)) | {max_length})
    if lengths.size == 0:
        return (max_length,)
    longest = int(lengths.max())
    cands = [w for w in cands if w < longest] + [min(w for w in cands if w >= longest)]
    c = np.asarray(cands, dtype=np.int64)
    hist = np.bincount(lengths, minlength=longest + 1).astype(np.int64)
    n_le = np.cumsum(hist)
    s_le = np.cumsum(hist * np.arange(hist.shape[0], dtype=np.int64))
    top = np.minimum(c, longest)
    count = np.diff(n_le[top], prepend=0)
    total = np.diff(s_le[top], prepend=0)
    n_cum = np.concatenate([[0], np.cumsum(count)])
    s_cum = np.concatenate([[0], np.cumsum(total)])
    m = len(c)
    lo, hi = np.arange(m)[:, None], np.arange(m)[None, :]
    cost = c[None, :] * (n_cum[hi + 1] - n_cum[lo]) - (s_cum[hi + 1] - s_cum[lo])
    cost = np.where(lo <= hi, cost, np.inf)
    k_max = min(n_buckets, m)
    best = np.full((k_max, m), np.inf)
    back = np.full((k_max, m), -1, dtype=np.int64)
    best[0] = cost[0]
    for k in range(1, k_max):
        total_ij = best[k - 1][:, None] + np.vstack([cost[1:], np.full((1, m), np.inf)])
        back[k] = np.argmin(total_ij, axis=0)
        best[k] = total_ij[back[k], np.arange(m)]
    j, k = m - 1, int(np.argmin(best[:, m - 1]))
    chosen = []
    while k >= 0 and j >= 0:
        chosen.append(int(c[j]))
        j = int(back[k, j]) if k > 0 else -1
        k -= 1
    return tuple(sorted(chosen))


def test_native_auto_widths_equal_the_numpy_program():
    rng = np.random.default_rng(11)
    for trial in range(600):
        max_length = int(rng.choice([1, 3, 7, 8, 9, 16, 40, 64, 100, 128, 512]))
        n = int(rng.integers(1, 400))
        if trial % 3 == 0:      # clustered lengths: many ties between splits
            lengths = rng.choice(rng.integers(0, max_length + 1, size=3), size=n)
        else:
            lengths = rng.integers(0, max_length + 1, size=n)
        n_buckets = int(rng.integers(1, 6))
        assert auto_bucket_widths(lengths, max_length, n_buckets) == \
            numpy_auto_widths(lengths, max_length, n_buckets), (trial, max_length, n_buckets)
    assert auto_bucket_widths(np.zeros(0, dtype=np.int64), 64) == (64,)
    with pytest.raises(ValueError, match="longer than max_length=16"):
        auto_bucket_widths([3, 17], 16)


FAMILIES = {
    "english": [p for p in CORPORA if p.parent.name == "corpus"],
    "logs": [p for p in CORPORA if p.parent.name == "logs"],
    "multi": [p for p in CORPORA if p.parent.name == "multi"],
    "edge": [p for p in CORPORA if p.parent.name == "edge"],
}
NATIVE_GRID = [(128, 32, True, "auto"), (512, 128, True, "auto"), (16, 3, True, (5, 9)),
               (64, 0, False, (8, 24))]


@functools.lru_cache(maxsize=1)
def _family_encoding(family):
    texts = [t for p in FAMILIES[family] for t in read_documents(p)] + ["", None, "word " * 700]
    return TOK.encode(texts, return_offsets_mapping=True, return_word_ids=True)


def _assert_same_buckets(got, want):
    assert got.widths == want.widths
    for (_, g), (_, w) in zip(got, want):
        assert list(g.keys()) == list(w.keys())
        for key in w.keys():
            a, b = g[key], w[key]
            assert a.dtype == b.dtype and a.shape == b.shape, (key, a.dtype, b.dtype)
            assert np.array_equal(a, b), key


@pytest.mark.parametrize("family", slow_unless([f for f in FAMILIES if FAMILIES[f]], fast={"edge"}))
@pytest.mark.parametrize("max_length,stride,special,widths", NATIVE_GRID)
def test_native_fill_equals_the_ragged_buckets(family, max_length, stride, special, widths):
    """Every line of the family: the native bucketed fill against the ragged fill passed
    through bucket_windows, with and without every per-position output."""
    enc = _family_encoding(family)
    for mask_dtype, threads, on in (("int8", 7, True), ("int32", 1, False), ("int32", 3, True)):
        p = window_params(max_length, stride, False, special, "bucket", "np", 5, mask_dtype,
                          widths)
        p, seq = sequence_options(p, False, None, on, on)
        extras = extras_options(on, on, on, "chars")
        got = CPU.build_windows(enc, TOK.vocab, p, threads, seq, extras)
        ragged = CPU.build_windows(enc, TOK.vocab, window_params(
            max_length, stride, False, special, "do_not_pad", "np", 5, mask_dtype), 1, seq,
            extras)
        want = bucket_windows(ragged, p.bucket_widths, TOK.vocab.pad_id, max_length,
                              lambda a: a)
        _assert_same_buckets(got, want)
        lengths = np.diff(ragged["input_ids"].offsets)
        if widths == "auto":
            assert tuple(got.widths) == numpy_auto_widths(lengths, max_length)
        assert got.num_rows == len(lengths)


def test_native_fill_truncation_and_empty_batches():
    texts = [t or "" for t in _docs(CORPORA[0], 300)]
    for kw in (dict(truncation=True), dict(truncation=True, add_special_tokens=False)):
        got = TOK(texts, max_length=32, padding="bucket", bucket_widths=(8, 16), **kw)
        ragged = TOK(texts, max_length=32, padding="do_not_pad", **kw)
        _assert_same_buckets(got, bucket_windows(ragged, (8, 16, 32), TOK.vocab.pad_id, 32,
                                                 lambda a: a))
        assert got.num_rows == len(texts)
        # auto widths that end below max_length (no row reaches it)
        got = TOK(texts, max_length=64, padding="bucket", **kw)
        ragged = TOK(texts, max_length=64, padding="do_not_pad", **kw)
        want = bucket_windows(ragged, "auto", TOK.vocab.pad_id, 64, lambda a: a)
        _assert_same_buckets(got, want)
    short = TOK(["a b", "c", ""], max_length=64, padding="bucket", return_word_ids=True)
    assert short.widths == [8] and short.num_rows == 3
    assert short.buckets[0][1]["word_ids"].tolist()[0] == [-1, 0, 1, -1, -1, -1, -1, -1]
    empty = TOK([], max_length=32, padding="bucket")
    assert len(empty) == 0 and empty.num_rows == 0


def test_native_fill_refuses_bad_arguments():
    ids = np.arange(10, dtype=np.int32)
    off = np.array([0, 4, 10], dtype=np.int64)

    def call(widths, spans=None, words=None, auto=4, offsets=off):
        return _ext.build_buckets(ids, offsets, 16, 2, False, True, 101, 102, 0, 0, widths,
                                  auto, False, spans, words, False, False, False, 1)

    assert [b[0] for b in call(None)] == [8]
    assert [b[0] for b in call(np.array([4, 16], dtype=np.int64))] == [16]
    for widths, pattern in ((np.array([8], dtype=np.int64), "end with max_length=16"),
                            (np.array([8, 4, 16], dtype=np.int64), "increasing"),
                            (np.array([0, 16], dtype=np.int64), r"in \[1, max_length=16\]"),
                            (np.zeros(0, dtype=np.int64), "end with max_length")):
        with pytest.raises(ValueError, match=pattern):
            call(widths)
    with pytest.raises(ValueError, match="auto_buckets must be >= 1"):
        call(None, auto=0)
    with pytest.raises(ValueError, match="2 values per token"):
        call(None, spans=np.zeros(19, dtype=np.int64))
    with pytest.raises(ValueError, match="one value per token"):
        call(None, words=np.zeros(9, dtype=np.int32))
    with pytest.raises(ValueError, match="outside token_ids"):
        call(None, offsets=np.array([0, 4, 11], dtype=np.int64))
    with pytest.raises(ValueError, match="non-decreasing"):
        call(None, offsets=np.array([0, 5, 4, 10], dtype=np.int64))
    with pytest.raises(ValueError, match="negative count"):
        _ext.auto_bucket_widths(np.array([1, -1], dtype=np.int64), 16, 4)


def test_every_result_is_a_mapping_of_its_outputs():
    """issue 37.11: BucketedWindows and the accessors' results (eager, lazy, lazy computed)
    answer r["input_ids"], keys(), in, items() like BatchWindows and HF's BatchEncoding."""
    import pickle

    import dask.dataframe as dd
    import pandas as pd

    texts = _docs(corpus_files()[0], 60) + ["", "word " * 50]
    bw = TOK(texts, max_length=32, stride=4, padding="bucket", bucket_widths=(8, 16),
             return_token_type_ids=True)
    assert len(bw.buckets) == 3
    assert bw.keys() == list(bw.buckets[0][1].keys())
    assert "input_ids" in bw and "token_type_ids" in bw and "label_ids" not in bw
    for key, value in bw.items():
        assert len(value) == 3
        for got, (_, b) in zip(value, bw.buckets):
            np.testing.assert_array_equal(got, b[key])
    assert [len(v) for v in bw.values()] == [3] * len(bw.keys())
    assert bw.get("nope", 7) == 7
    with pytest.raises(KeyError, match="no output 'nope'; keys: input_ids, attention_mask"):
        bw["nope"]
    assert [w for w, _ in bw] == [8, 16, 32]                 # iterating still gives buckets
    assert [list(x) for x in daskwp.stitch(bw["input_ids"], bw["metadata"],
                                           window=bw["window"])] == TOK.encode(texts).to_list()
    again = pickle.loads(pickle.dumps(bw))
    np.testing.assert_array_equal(again["input_ids"][1], bw["input_ids"][1])
    empty = TOK([], max_length=32, padding="bucket")
    assert all(len(empty[k]) == len(empty.buckets) for k in empty.keys())
    # the accessors: eager, lazy, and the lazy result computed
    s = pd.Series(texts)
    eager = s.wordpiece.tokenize(max_length=32, stride=4, return_token_type_ids=True)
    lazy = dd.from_pandas(s, npartitions=3).wordpiece.tokenize(
        max_length=32, stride=4, return_token_type_ids=True)
    want = TOK(texts, max_length=32, stride=4, return_token_type_ids=True)
    for res in (eager, lazy, lazy.compute()):
        assert res.keys() == ["input_ids", "attention_mask", "metadata", "token_type_ids"]
        assert "token_type_ids" in res and "sequence_ids" not in res
        assert list(res) == res.keys()
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            got = res[key]
            got = got.compute() if hasattr(got, "compute") else got
            np.testing.assert_array_equal(got, want[key], err_msg=key)
        meta = res["metadata"]
        meta = meta.compute() if hasattr(meta, "compute") else meta
        np.testing.assert_array_equal(meta.to_numpy(), want["metadata"])
        assert [k for k, _ in res.items()] == res.keys()
        with pytest.raises(KeyError, match="no output 'ids'"):
            res["ids"]


def test_huge_max_length_buckets_cost_the_rows_not_max_length():
    """issue 37.10's class: padding='bucket' with max_length=2**31-1 (or 858993459) sized
    its length histogram and width candidates by max_length (16 GB, 40 s, or std::bad_alloc);
    both now span the longest row. Run under a 4 GiB address-space limit, so that the old
    allocation fails at once instead of filling the machine."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))
        import pandas as pd
        import daskwp
        tok = daskwp.WordPieceTokenizer()
        docs = ["hello", "", "a b c d e f g h i j k l"]
        for ml in (2**31 - 1, 858993459):
            b = tok(docs, max_length=ml, padding="bucket")
            ragged = tok(docs, max_length=ml, padding=False)["input_ids"].to_list()
            assert [w for w, _ in b.buckets] == [8, 16], b.buckets
            got = {}
            for w, part in b.buckets:
                for row, m, meta in zip(part["input_ids"], part["attention_mask"],
                                        part["metadata"]):
                    got[int(meta[0])] = row[m.astype(bool)].tolist()
            assert [got[i] for i in range(3)] == ragged
            assert tok(["hello"], text_pair=["x"], max_length=ml, padding="bucket")
            assert pd.Series(docs).wordpiece.tokenize(max_length=ml, padding="bucket")
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_accessor_results_map_every_padding_as_the_tokenizer():
    """issue 37.11: the accessors' results answer ``r["input_ids"]`` (and items()) for
    every padding, not only max_length: eager (and ``compute()``) gives what the tokenizer
    gives for that padding (RaggedRows, one matrix per bucket, the ``longest`` matrix); the
    lazy result gives the list column (a dask Series) for rows of other widths."""
    import dask
    import dask.dataframe as dd
    import pandas as pd

    from daskwp.core.ragged import RaggedRows
    docs = read_documents(corpus_files()[0])[:300]
    tok = daskwp.WordPieceTokenizer()
    s = pd.Series(docs)
    ddf = dd.from_pandas(pd.DataFrame({"text": docs}), npartitions=3)
    for padding in (False, "bucket", "longest"):
        want = tok(docs, max_length=32, stride=8, padding=padding, text_pair=None)
        for r in (s.wordpiece.tokenize(max_length=32, stride=8, padding=padding),
                  ddf["text"].wordpiece.tokenize(max_length=32, stride=8,
                                                 padding=padding).compute()):
            for key in ("input_ids", "attention_mask"):
                got, exp = r[key], want[key]
                assert type(got) is type(exp), (padding, key)
                if isinstance(exp, RaggedRows):
                    assert got.to_list() == exp.to_list()
                elif isinstance(exp, list):
                    assert len(got) == len(exp)
                    assert all(np.array_equal(a, b) for a, b in zip(got, exp))
                else:
                    assert np.array_equal(got, exp)
            assert dict(r.items()).keys() == set(r.keys())
        lazy = ddf["text"].wordpiece.tokenize(max_length=32, stride=8, padding=padding)
        with dask.config.set(scheduler="synchronous"):
            rows = lazy["input_ids"].compute()
        assert [list(v) for v in rows] == [list(v) for v in
                                           s.wordpiece.tokenize(max_length=32, stride=8,
                                                                padding=padding)
                                           .to_frame()["input_ids"]]


def test_encode_result_maps_its_outputs():
    """issue 37.11 for ``tok.encode``'s Encoding: ``enc["input_ids"]`` (and
    ``attention_mask``, ``offset_mapping``, ``word_ids`` where asked for) as RaggedRows, one
    row per document; ``keys()``, ``in``, ``items()``, ``get()``; integer indexing unchanged."""
    import pickle
    docs = read_documents(corpus_files()[0])[:200]
    tok = daskwp.WordPieceTokenizer()
    enc = tok.encode(docs, return_offsets_mapping=True, return_word_ids=True)
    rows = tok(docs, padding=False, max_length=10**6, add_special_tokens=False,
               return_offsets_mapping=True,
               return_word_ids=True)
    assert enc.keys() == ["input_ids", "attention_mask", "offset_mapping", "word_ids"]
    for key in enc.keys():
        assert enc[key].to_list() == rows[key].to_list(), key
    assert "input_ids" in enc and "token_type_ids" not in enc
    assert enc.get("token_type_ids") is None
    assert dict(enc.items()).keys() == set(enc.keys())
    assert tok.encode(docs).keys() == ["input_ids", "attention_mask"]
    with pytest.raises(KeyError, match="word_ids"):
        tok.encode(docs)["word_ids"]
    assert np.array_equal(enc[3], enc["input_ids"][3])
    assert pickle.loads(pickle.dumps(enc))["input_ids"].to_list() == enc["input_ids"].to_list()
