"""daskwp.read_tokenized: every layout daskwp writes reads back to the same padded tensors
and metadata as single-machine tokenization."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

import dask.dataframe as dd

import daskwp
from conftest import corpus_files, read_documents

TOK = daskwp.WordPieceTokenizer()


def _texts():
    files = [p for p in corpus_files() if p.suffix != ".json"][:2]
    docs = []
    for p in files:
        docs += read_documents(p)[:300]
    return docs + ["", None, "word " * 300]


TEXTS = _texts()
OPTS = dict(max_length=32, stride=8)


def _concat(batches):
    bs = list(batches)
    return {k: np.concatenate([np.asarray(b[k]) for b in bs]) for k in bs[0]}


def _expected(width=32):
    out = TOK(TEXTS, **OPTS)
    assert out.input_ids.shape[1] == width
    return out


@pytest.mark.parametrize("padding", ["max_length", "do_not_pad"])
def test_eager_and_lazy_to_parquet_read_back(tmp_path, padding):
    want = _expected()
    (tmp_path / "eager").mkdir()
    pd.Series(TEXTS).wordpiece.tokenize(**OPTS, padding=padding).to_parquet(
        tmp_path / "eager" / "part.parquet")
    ddf = dd.from_pandas(pd.DataFrame({"text": TEXTS}), npartitions=4)
    ddf["text"].wordpiece.tokenize(**OPTS, padding=padding).to_parquet(str(tmp_path / "lazy"))
    for folder in ("eager", "lazy"):
        ds = daskwp.read_tokenized(tmp_path / folder, tokenizer=TOK)
        got = _concat(ds.batches(max_length=32))
        assert np.array_equal(got["input_ids"], want.input_ids), folder
        assert np.array_equal(got["attention_mask"], want.attention_mask), folder
        assert np.array_equal(got["metadata"], want.metadata), folder
        # fixed-size batches give the same rows
        small = _concat(ds.batches(100, max_length=32))
        assert np.array_equal(small["input_ids"], want.input_ids)
        assert all(len(b["input_ids"]) <= 100 for b in ds.batches(100, max_length=32))
        assert len(ds) == want.num_rows
        meta = ds.metadata.compute()
        assert meta["logID"].tolist() == want.metadata[:, 0].tolist()


def test_job_output_reads_back_ragged_and_padded(tmp_path):
    from daskwp.cli import main
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(t or "" for t in TEXTS) + "\n", encoding="utf-8")
    texts = [t or "" for t in TEXTS]
    want = TOK(texts, **OPTS)
    for padding in ("max_length", "do_not_pad"):
        out = tmp_path / padding
        rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
                   "--max-length", "32", "--stride", "8", "--padding", padding,
                   "--partition-size", "20kB"])
        assert rc == 0
        ds = daskwp.read_tokenized(out, tokenizer=TOK)
        assert len(ds.files) > 1
        got = _concat(ds.batches(max_length=32))
        assert np.array_equal(got["input_ids"], want.input_ids), padding
        assert np.array_equal(got["attention_mask"], want.attention_mask), padding
        assert np.array_equal(got["metadata"], want.metadata), padding


def test_wider_and_longest_widths(tmp_path):
    pd.Series(TEXTS).wordpiece.tokenize(**OPTS, padding=False).to_parquet(tmp_path / "r.parquet")
    ds = daskwp.read_tokenized(tmp_path / "r.parquet", pad_id=TOK.vocab.pad_id)
    wide = _concat(ds.batches(max_length=40))
    want = TOK(TEXTS, **OPTS)
    assert wide["input_ids"].shape == (want.num_rows, 40)
    assert np.array_equal(wide["input_ids"][:, :32], want.input_ids)
    assert (wide["input_ids"][:, 32:] == TOK.vocab.pad_id).all()
    assert (wide["attention_mask"][:, 32:] == 0).all()
    longest = next(ds.batches(50))        # no max_length: the batch's longest row
    assert longest["input_ids"].shape[1] == int(longest["attention_mask"].sum(axis=1).max())


def test_rows_are_never_cut_and_pad_id_is_never_guessed(tmp_path):
    pd.Series(TEXTS).wordpiece.tokenize(**OPTS, padding=False).to_parquet(tmp_path / "r.parquet")
    with pytest.raises(ValueError, match="PAD"):
        next(daskwp.read_tokenized(tmp_path / "r.parquet").batches(max_length=32))
    with pytest.raises(ValueError, match="more than max_length=16"):
        next(daskwp.read_tokenized(tmp_path / "r.parquet", tokenizer=TOK).batches(
            max_length=16))
    pd.Series(TEXTS).wordpiece.tokenize(**OPTS).to_parquet(tmp_path / "p.parquet")
    with pytest.raises(ValueError, match="more than max_length=16"):
        next(daskwp.read_tokenized(tmp_path / "p.parquet", tokenizer=TOK).batches(
            max_length=16))
    with pytest.raises(FileNotFoundError, match="no tokenized Parquet"):
        daskwp.read_tokenized(tmp_path / "nothing-here")


def test_to_torch_shards_files_over_workers(tmp_path):
    torch = pytest.importorskip("torch")
    ddf = dd.from_pandas(pd.DataFrame({"text": TEXTS}), npartitions=4)
    ddf["text"].wordpiece.tokenize(**OPTS).to_parquet(str(tmp_path / "d"))
    ds = daskwp.read_tokenized(tmp_path / "d")
    loader = torch.utils.data.DataLoader(ds.to_torch(64, max_length=32), batch_size=None,
                                         num_workers=2)
    ids = torch.cat([b["input_ids"] for b in loader]).numpy()
    want = TOK(TEXTS, **OPTS).input_ids
    assert sorted(map(tuple, ids.tolist())) == sorted(map(tuple, want.tolist()))


def _numpy_pad(values, offsets, width, pad_id):
    """The padded rows by NumPy alone: the oracle of the extension's fill."""
    lengths = np.diff(offsets)
    ids = np.full((len(lengths), width), pad_id, dtype=np.int32)
    real = np.arange(width)[None, :] < lengths[:, None]
    ids[real] = values[offsets[0]:offsets[-1]]
    return ids, real.astype(np.int32)


@pytest.mark.parametrize("threads,width", [(1, 40), (3, 40), (2, 42)])
def test_native_padding_equals_numpy(threads, width):
    # 200K rows: > 64K rows a thread (threads split) and over 32 MB of output, which the fill
    # writes with streaming stores when a row is a whole number of 16-byte vectors (width
    # 40; 42 takes the plain stores)
    from daskwp import _ext
    from daskwp.io.tokenized import pad_rows
    rng = np.random.default_rng(threads)
    lengths = rng.integers(0, 41, 200_000)
    offsets = np.concatenate([[7], 7 + np.cumsum(lengths)]).astype(np.int64)  # not from 0
    values = rng.integers(0, 30522, int(offsets[-1]) + 5, dtype=np.int32)
    ids, mask = pad_rows(values, offsets, width, 3, num_threads=threads)
    want_ids, want_mask = _numpy_pad(values, offsets, width, 3)
    assert ids.dtype == np.int32 and mask.dtype == np.int32
    assert np.array_equal(ids, want_ids) and np.array_equal(mask, want_mask)
    # the int8 mask of the bucket fill, through the same two paths (48: 16-byte int8 rows)
    w8 = width + 8
    ids8, mask8 = _ext.pad_rows(values, offsets, None, w8, 3, True, threads)
    want_ids8, want_mask8 = _numpy_pad(values, offsets, w8, 3)
    assert mask8.dtype == np.int8
    assert np.array_equal(ids8, want_ids8) and np.array_equal(mask8, want_mask8)
    with pytest.raises(ValueError, match="more than max_length=39"):
        pad_rows(values, offsets, 39, 0)


def test_read_ahead_gives_each_file_in_order_and_stops_cleanly(tmp_path):
    ddf = dd.from_pandas(pd.DataFrame({"text": TEXTS}), npartitions=5)
    ddf["text"].wordpiece.tokenize(**OPTS, padding=False).to_parquet(str(tmp_path / "d"))
    ds = daskwp.read_tokenized(tmp_path / "d", tokenizer=TOK)
    assert len(ds.files) == 5
    want = _expected()
    for threads in (1, 0):
        got = _concat(ds.batches(max_length=32, num_threads=threads))
        assert np.array_equal(got["input_ids"], want.input_ids)
        assert np.array_equal(got["metadata"], want.metadata)
    one_by_one = [next(ds.batches(max_length=32, files=[f]))["metadata"] for f in ds.files]
    assert np.array_equal(np.concatenate(one_by_one), want.metadata)
    it = ds.batches(max_length=32)
    next(it)
    assert any(t.name.startswith("daskwp-read") for t in threading.enumerate())
    it.close()    # the file being read ahead is awaited, nothing is left running
    assert not any(t.name.startswith("daskwp-read") for t in threading.enumerate())
    # a file that is no tokenized part is refused when its turn comes, by name
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "d" / "part.9.parquet")
    bad = daskwp.read_tokenized(tmp_path / "d", tokenizer=TOK)
    it = bad.batches(max_length=32)
    assert len(next(it)["input_ids"])
    with pytest.raises(ValueError, match="part.9.parquet.*not a tokenized dataset"):
        list(it)


def test_padded_batch_size_is_checked_before_allocating(tmp_path):
    """issue 37.10 through the reader: batches(max_length=2**31-1) padded a 3-token row to
    16 GB per row (std::bad_alloc, or the OOM killer); the size is refused first with an
    OutputSizeError naming it, for ragged and padded parts, per-position outputs counted;
    the cap is daskwp.max_output_bytes."""
    import resource

    import dask.config
    pd.Series(TEXTS).wordpiece.tokenize(**OPTS, padding=False, return_offsets_mapping=True) \
        .to_parquet(tmp_path / "r.parquet")
    pd.Series(TEXTS).wordpiece.tokenize(**OPTS).to_parquet(tmp_path / "p.parquet")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for name in ("r.parquet", "p.parquet"):
        ds = daskwp.read_tokenized(tmp_path / name, tokenizer=TOK)
        with pytest.raises(daskwp.OutputSizeError, match=r"the padded output would take "
                                                         r"[\d,]+ bytes .* 2,147,483,647 "
                                                         r"columns"):
            next(ds.batches(4, max_length=2**31 - 1))
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) < (1 << 20)  # KiB
    ds = daskwp.read_tokenized(tmp_path / "r.parquet", tokenizer=TOK)
    n = next(ds.batches(4, max_length=40))["input_ids"].shape[0]
    cell = 8 + 16   # ids and mask, offset_mapping's two int64
    with dask.config.set({"daskwp.max_output_bytes": n * (40 * cell + 24)}):
        assert next(ds.batches(4, max_length=40))["input_ids"].shape == (n, 40)
    with dask.config.set({"daskwp.max_output_bytes": n * (40 * cell + 24) - 1}):
        with pytest.raises(daskwp.OutputSizeError, match=f"{n} rows x 40 columns x "
                                                         f"{cell} bytes per cell"):
            next(ds.batches(4, max_length=40))
