"""Length buckets (padding="bucket"): each window row in the smallest bucket width that
holds it, no empty bucket, rows equal to the plain padded windows cut to the bucket width,
and stitching the buckets rebuilds every document exactly once — on every corpus, CPU and
the CUDA source (emulated; on a device where there is one)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import daskwp
from conftest import corpus_files, read_documents
from daskwp.core.buckets import auto_bucket_widths, check_bucket_widths
from daskwp.core.ragged import to_host
from test_backends import any_backend  # noqa: F401  (the fixture: every backend present)

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


@pytest.mark.parametrize("path", CORPORA, ids=[p.name for p in CORPORA])
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
