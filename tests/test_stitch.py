"""stitch / stitch_flat (windows back to documents) and merge_wordpieces (the word view).

Property: for any document lengths and any valid (max_length, stride, special tokens,
padding), ``stitch(input_ids, metadata)`` equals ``encode()`` — every token exactly once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import daskwp
from conftest import requires_data, vocab_path
from test_windows import SMALL_VOCAB, encoding_of
from daskwp import RaggedRows, stitch_flat, windows_from_encoding


@st.composite
def window_setups(draw):
    sp = draw(st.booleans())
    max_length = draw(st.integers(3 if sp else 1, 40))
    L = max_length - (2 if sp else 0)
    stride = draw(st.integers(0, L - 1))
    lengths = draw(st.lists(st.integers(0, 5 * L + 3), min_size=0, max_size=8))
    padding = draw(st.sampled_from(["max_length", False, "longest"]))
    return lengths, max_length, stride, sp, padding


def docs_of(lengths, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 30000, size=n).tolist() for n in lengths]


@settings(max_examples=300, deadline=None)
@given(window_setups(), st.integers(0, 2**32 - 1))
def test_stitch_equals_encode_for_any_lengths(setup, seed):
    lengths, max_length, stride, sp, padding = setup
    docs = docs_of(lengths, seed)
    out = windows_from_encoding(encoding_of(docs), SMALL_VOCAB, max_length=max_length,
                                stride=stride, add_special_tokens=sp, padding=padding)
    got = daskwp.stitch(out.input_ids, out.metadata)
    assert [g.tolist() for g in got] == docs
    assert all(g.dtype == np.int32 for g in got)
    flat, offsets, logids = stitch_flat(out.input_ids, out.metadata)
    assert logids.tolist() == list(range(len(docs)))
    assert np.diff(offsets).tolist() == lengths


@settings(max_examples=100, deadline=None)
@given(window_setups(), st.integers(0, 2**32 - 1), st.integers(0, 2**40))
def test_stitch_interleaved_rows_and_offset_logids(setup, seed, offset):
    """Rows of different documents may be interleaved (as after a shuffle that keeps each
    document's window order); logIDs need not start at 0."""
    lengths, max_length, stride, sp, _ = setup
    docs = docs_of(lengths, seed)
    out = windows_from_encoding(encoding_of(docs), SMALL_VOCAB, max_length=max_length,
                                stride=stride, add_special_tokens=sp, logid_offset=offset)
    rng = np.random.default_rng(seed)
    # a random interleaving that keeps each document's rows in order
    owners = out.metadata[:, 0].copy()
    rng.shuffle(owners)
    next_row = {d: iter(np.nonzero(out.metadata[:, 0] == d)[0]) for d in set(owners.tolist())}
    perm = np.array([next(next_row[d]) for d in owners.tolist()], dtype=np.int64)
    ids, meta = out.input_ids[perm], out.metadata[perm]
    got = daskwp.stitch(ids, meta)
    assert [g.tolist() for g in got] == docs
    _, _, logids = stitch_flat(ids, meta)
    assert logids.tolist() == [offset + i for i in range(len(docs))]


def test_stitch_logits_and_labels():
    docs = docs_of([0, 7, 30, 3], 1)
    out = windows_from_encoding(encoding_of(docs), SMALL_VOCAB, max_length=8, stride=3)
    k = 5
    logits = out.input_ids[:, :, None].astype(np.float32) * np.arange(1, k + 1,
                                                                       dtype=np.float32)
    got = daskwp.stitch(logits, out.metadata)
    assert [g.shape for g in got] == [(len(d), k) for d in docs]
    for g, d in zip(got, docs):
        assert np.array_equal(g, np.asarray(d, dtype=np.float32)[:, None] * np.arange(1, k + 1))
    labels = (out.input_ids % 3).astype(np.int8)
    got = daskwp.stitch(labels, out.metadata)
    assert [g.tolist() for g in got] == [[t % 3 for t in d] for d in docs]
    assert got[1].dtype == np.int8


def test_stitch_metadata_as_dataframe_and_ragged_values():
    docs = docs_of([12, 0, 5], 2)
    out = windows_from_encoding(encoding_of(docs), SMALL_VOCAB, max_length=6, stride=2,
                                padding=False)
    frame = pd.DataFrame(out.metadata, columns=["logID", "start", "stop"])
    assert [g.tolist() for g in daskwp.stitch(out.input_ids, frame)] == docs
    # per-token values aligned with ragged rows
    vals = RaggedRows(out.input_ids.values.astype(np.int64) * 2, out.input_ids.offsets)
    assert [g.tolist() for g in daskwp.stitch(vals, out.metadata)] == \
        [[2 * t for t in d] for d in docs]


def test_stitch_empty_inputs():
    out = windows_from_encoding(encoding_of([]), SMALL_VOCAB, max_length=6)
    assert daskwp.stitch(out.input_ids, out.metadata) == []
    flat, offsets, logids = stitch_flat(out.input_ids, out.metadata)
    assert flat.shape == (0,) and offsets.tolist() == [0] and logids.tolist() == []
    one_empty = windows_from_encoding(encoding_of([[]]), SMALL_VOCAB, max_length=6)
    got = daskwp.stitch(one_empty.input_ids, one_empty.metadata)
    assert len(got) == 1 and got[0].shape == (0,)


def test_stitch_rejects_bad_metadata():
    out = windows_from_encoding(encoding_of([[1, 2, 3]]), SMALL_VOCAB, max_length=6)
    with pytest.raises(ValueError, match=r"shape \(rows, 3\).*got shape \(1, 2\)"):
        daskwp.stitch(out.input_ids, out.metadata[:, :2])
    with pytest.raises(ValueError, match="values has 2 rows but metadata has 1"):
        daskwp.stitch(np.vstack([out.input_ids] * 2), out.metadata)
    bad = out.metadata.copy()
    bad[0, 2] = 6
    with pytest.raises(ValueError, match="out-of-range"):
        daskwp.stitch(out.input_ids, bad)
    with pytest.raises(TypeError, match="integers"):
        daskwp.stitch(out.input_ids, out.metadata.astype(float))
    with pytest.raises(ValueError, match="rows x width"):
        daskwp.stitch(out.input_ids[0], out.metadata)


@requires_data
def test_stitch_equals_encode_on_real_text():
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"))
    from conftest import DATA, read_documents

    lines = read_documents(DATA / "corpus" / "logs" / "OpenSSH_2k.log")[:300]
    texts = [" ".join(lines[i:i + 7]) for i in range(0, 300, 7)] + ["", None]
    enc = tok.encode(texts)
    for max_length, stride in [(32, 7), (128, 33), (16, 0), (5, 2)]:
        out = tok(texts, max_length=max_length, stride=stride)
        assert [g.tolist() for g in daskwp.stitch(out.input_ids, out.metadata)] == \
            enc.to_list()


# ---------------------------------------------------------------------------------------
# Word-level view (cyBERT's use case)
# ---------------------------------------------------------------------------------------
APACHE = "POST /administrator/index.php HTTP/1.1 200 4494"


@requires_data
def test_merge_wordpieces_after_stitch_keeps_window_boundary_tokens():
    """cyBERT sliced windows with [start:stop] although stop is inclusive, so "4494"
    (44 ##9 ##4) came back as "449". Stitching with the inclusive stop keeps every piece."""
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-cased"), lowercase=False)
    enc = tok.encode([APACHE])
    pieces = [tok.vocab.id_to_token(i) for i in enc[0]]
    assert pieces[-3:] == ["44", "##9", "##4"]
    # small windows: boundaries fall inside words
    for max_length, stride in [(8, 3), (6, 1), (5, 0), (128, 12)]:
        out = tok([APACHE], max_length=max_length, stride=stride, add_special_tokens=False)
        labels = np.arange(out.input_ids.size, dtype=np.int64).reshape(out.input_ids.shape)
        [ids] = daskwp.stitch(out.input_ids, out.metadata)
        [vals] = daskwp.stitch(labels, out.metadata)
        words, word_vals = daskwp.merge_wordpieces(ids, vals, vocab=tok.vocab)
        assert words == ["POST", "/", "administrator", "/", "index", ".", "php", "HTTP", "/",
                         "1", ".", "1", "200", "4494"]
        # each word carries the value of its first piece
        first = [0]
        for j in range(1, len(ids)):
            if not tok.vocab.id_to_token(int(ids[j])).startswith("##"):
                first.append(j)
        assert word_vals.tolist() == vals[first].tolist()
    # cyBERT's exclusive slicing loses tokens whenever a document spans several windows
    out = tok([APACHE], max_length=8, stride=3, add_special_tokens=False)
    lossy = [t for row, (_, s, e) in zip(out.input_ids.tolist(), out.metadata.tolist())
             for t in row[s:e]]
    assert len(lossy) < len(enc[0])


def test_merge_wordpieces_specials_batches_and_edge_cases():
    v = daskwp.Vocabulary.from_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play",
                                       "##ing", "##s", "go", "##ne"])
    ids = [2, 5, 6, 8, 9, 1, 7, 3, 0, 0]
    vals = np.array([9, 10, 11, 12, 13, 14, 15, 16, 17, 18])
    words, wv = daskwp.merge_wordpieces(ids, vals, vocab=v)
    assert words == ["playing", "gone", "[UNK]s"]
    assert wv.tolist() == [10, 12, 14]
    words, wv = daskwp.merge_wordpieces(ids, vals, vocab=v, skip_special_tokens=False)
    assert words == ["[CLS]", "playing", "gone", "[UNK]s", "[SEP]", "[PAD]", "[PAD]"]
    assert wv.tolist() == [9, 10, 12, 14, 16, 17, 18]
    # a leading continuation piece starts a word
    assert daskwp.merge_wordpieces([6, 5], vocab=v) == (["ing", "play"], None)
    # batches, and a tokenizer in place of the vocabulary
    tok = daskwp.WordPieceTokenizer(v)
    res = daskwp.merge_wordpieces([np.array([5, 6]), [8]], [np.array([1, 2]), np.array([3])],
                                  vocab=tok)
    assert res[0][0] == ["playing"] and res[0][1].tolist() == [1]
    assert res[1][0] == ["go"] and res[1][1].tolist() == [3]
    # 2-D values (probabilities per class) follow the first piece too
    probs = np.arange(8, dtype=np.float32).reshape(4, 2)
    words, wp = daskwp.merge_wordpieces([5, 7, 8, 9], probs, vocab=v)
    assert words == ["plays", "gone"] and wp.tolist() == [[0, 1], [4, 5]]
    assert daskwp.merge_wordpieces([], np.zeros(0), vocab=v)[0] == []
    with pytest.raises(ValueError, match="values has 1 entries"):
        daskwp.merge_wordpieces([5, 6], np.zeros(1), vocab=v)
    with pytest.raises(TypeError, match="Vocabulary or WordPieceTokenizer"):
        daskwp.merge_wordpieces([5], vocab="vocab.txt")


# ---------------------------------------------------------------------------------------
# CuPy (runs only where cupy imports and a device exists)
# ---------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_stitch_cupy_stays_on_device():
    import cupy  # the gpu marker skips where CuPy or a device is missing (conftest)
    docs = docs_of([0, 7, 30, 3, 51], 3)
    out = windows_from_encoding(encoding_of(docs), SMALL_VOCAB, max_length=8, stride=3,
                                return_tensors="cp")
    got = daskwp.stitch(out.input_ids, out.metadata)
    assert all(isinstance(g, cupy.ndarray) for g in got)
    assert [g.get().tolist() for g in got] == docs
    logits = cupy.asarray(out.input_ids)[:, :, None] * cupy.arange(1, 4)
    got = daskwp.stitch(logits, out.metadata)
    assert [g.shape for g in got] == [(len(d), 3) for d in docs]
    # interleaved rows on the device
    perm = cupy.asarray(np.argsort(out.metadata.get()[:, 0] % 2, kind="stable"))
    got = daskwp.stitch(out.input_ids[perm], out.metadata[perm])
    assert [g.get().tolist() for g in got] == docs
    rag = windows_from_encoding(encoding_of(docs), SMALL_VOCAB, max_length=8, stride=3,
                                return_tensors="cp", padding=False)
    assert [g.get().tolist() for g in daskwp.stitch(rag.input_ids, rag.metadata)] == docs
    words, vals = daskwp.merge_wordpieces(got[1], cupy.arange(7), vocab=SMALL_VOCAB)
    assert isinstance(vals, cupy.ndarray)
