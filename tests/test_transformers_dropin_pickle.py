"""The transformers drop-in's results pickle (issue 37, item 3): every ``BatchEncoding`` the
drop-in returns, and the drop-in itself, round-trip through ``pickle``, a ``multiprocessing``
pool and a torch ``DataLoader`` with worker processes (where torch is installed), equal to
``BertTokenizerFast``'s results for the same calls."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

from conftest import corpus_files, read_documents
from test_transformers_dropin import VOCABS, assert_same, pair_for, torch

# Calls covering the drop-in's paths: the vectorized windows (ragged lists, padded lists,
# NumPy, torch; offsets), overflow, pairs, the general path (words, left truncation).
CALLS = [
    {},
    {"padding": True},
    {"padding": "max_length", "max_length": 24, "truncation": True, "return_tensors": "np"},
    {"truncation": True, "max_length": 10, "stride": 3, "return_overflowing_tokens": True},
    {"return_offsets_mapping": True, "return_special_tokens_mask": True, "padding": True},
    {"pair": True, "padding": True, "truncation": True, "max_length": 16},
    {"pair": True, "truncation": "only_second", "max_length": 16, "stride": 2,
     "return_overflowing_tokens": True, "padding": True},
    {"words": True, "padding": True},
    {"padding": True, "padding_side": "left", "return_length": True},
    {"return_offsets_mapping": True, "padding": True, "padding_side": "left",
     "return_tensors": "np"},
    {"pair": True, "return_offsets_mapping": True, "truncation": True, "max_length": 16},
]
if torch is not None:
    CALLS += [{"padding": True, "return_tensors": "pt"},
              {"pair": True, "padding": "max_length", "max_length": 20, "truncation": True,
               "return_tensors": "pt", "return_overflowing_tokens": False}]


@pytest.fixture(scope="module")
def texts():
    docs = [d for d in read_documents(corpus_files()[0]) if d.strip()]
    return docs[:8]


def _call(tok, texts, spec):
    spec = dict(spec)
    args = [texts]
    if spec.pop("pair", False):
        args.append(texts[::-1])
    if spec.pop("words", False):
        args = [[t.split() for t in texts]]
        spec["is_split_into_words"] = True
    return tok(*args, **spec)


def _same_result(got, want):
    assert set(got) == set(want)
    for k in want:
        assert_same(got[k], want[k], k)
    n = len(want["input_ids"])
    for i in range(n):
        assert got.sequence_ids(i) == want.sequence_ids(i)


@pytest.mark.parametrize("spec", CALLS, ids=[str(sorted(c.items())) for c in CALLS])
def test_batch_encoding_pickles(spec, texts):
    hf, dt = pair_for(VOCABS[0])
    got = _call(dt, texts, spec)
    want = _call(hf, texts, spec)
    got.word_ids(0)          # word ids asked for before pickling travel with the result
    again = pickle.loads(pickle.dumps(got))
    _same_result(again, want)
    assert again.word_ids(0) == want.word_ids(0)
    assert again.n_sequences == want.n_sequences
    # the tokenizer does not travel: what needs it says so
    with pytest.raises(ValueError, match="pickled"):
        again.tokens(0)


def test_drop_in_pickles(texts):
    hf, dt = pair_for(VOCABS[0])
    again = pickle.loads(pickle.dumps(dt))
    assert again.model_max_length == dt.model_max_length
    _same_result(again(texts, padding=True), hf(texts, padding=True))


def _encode_in_worker(tok, batch):
    return tok(batch, padding=True, truncation=True, max_length=32)


def test_results_through_a_multiprocessing_pool(texts):
    """The drop-in goes to worker processes and its results come back (pickled both
    ways)."""
    hf, dt = pair_for(VOCABS[0])
    batches = [texts[i:i + 3] for i in range(0, len(texts), 3)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.starmap_async(_encode_in_worker, [(dt, b) for b in batches]) \
            .get(timeout=120)
    for got, batch in zip(results, batches):
        _same_result(got, hf(batch, padding=True, truncation=True, max_length=32))


def test_torch_dataloader_with_workers(texts):
    """The README's pattern: a collate_fn that tokenizes, in 2 worker processes (it hung
    when results did not pickle; the timeout turns a hang into a failure)."""
    if torch is None:
        pytest.skip("PyTorch is not installed (pip install -e .[torch])")
    from torch.utils.data import DataLoader
    hf, dt = pair_for(VOCABS[0])
    loader = DataLoader(texts, batch_size=3, num_workers=2, timeout=120,
                        multiprocessing_context="fork",
                        collate_fn=lambda b: dt(b, padding=True, truncation=True,
                                                max_length=32, return_tensors="pt"))
    batches = list(loader)
    assert len(batches) == 3
    for k, got in enumerate(batches):
        want = hf(texts[3 * k:3 * k + 3], padding=True, truncation=True, max_length=32,
                  return_tensors="pt")
        _same_result(got, want)


def test_pickles_made_before_the_split_load(texts, monkeypatch):
    """Pickles that name the classes by their paths before transformers_compat.py was split
    (issue 41), with the row table's state of then (``_seq``, ``_ids``, ``_n``), load."""
    import numpy as np

    import daskwp.backends.transformers_compat as compat
    from daskwp.backends.transformers_batch import ArrayRows, BatchEncoding

    hf, dt = pair_for(VOCABS[0])
    want = hf(texts, padding=True, return_tensors="np")

    class OldRows:              # the state of the row table as it was pickled then
        pass

    OldRows.__module__, OldRows.__qualname__ = compat.__name__, "_SeqRows"
    old = OldRows()
    seq = np.array([[-1 if s is None else s for s in want.sequence_ids(i)]
                    for i in range(len(texts))])
    old.__dict__.update(_seq=seq, _ids=want["input_ids"], _n=1)
    enc = BatchEncoding(dict(want), rows=old, n_sequences=1)
    monkeypatch.setattr(compat, "_SeqRows", OldRows)
    monkeypatch.setattr(BatchEncoding, "__module__", compat.__name__)
    blob = pickle.dumps(enc)
    monkeypatch.undo()
    assert b"transformers_compat" in blob and b"transformers_batch" not in blob
    again = pickle.loads(blob)
    assert type(again) is BatchEncoding and isinstance(again._rows, ArrayRows)
    assert again.n_sequences == 1
    for i in range(len(texts)):
        assert again.sequence_ids(i) == want.sequence_ids(i)
