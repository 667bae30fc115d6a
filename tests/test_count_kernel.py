"""The count loop (``_ext.count32`` / ``count64``, ``WordPieceTokenizer.count_lengths``):
per document its number of tokens and the ``[UNK]`` total, exactly what ``encode``'s
offsets and ids give, on every shared corpus line (uncased, cased, multilingual and Chinese
vocabularies; literal special tokens in the text, added ones; one thread and several; int32
and int64 offsets, nulls, sliced and chunked arrays) and on the emulated CUDA build."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import daskwp
from conftest import corpus_files, read_documents, requires_data, vocab_path
from daskwp import _ext
from daskwp.core.lengths import count_tokens

from test_offsets import emulated_gpu  # noqa: F401  (the emulated CUDA backend)

pytestmark = requires_data

VOCABS = ("bert-base-uncased", "bert-base-cased", "bert-base-multilingual-cased",
          "bert-base-chinese")


def _every_line() -> list:
    docs = []
    for f in corpus_files():
        docs += read_documents(f)
    return docs


def _want(tok, texts, num_threads=None):
    enc = tok.encode(texts, num_threads=num_threads)
    ids = np.asarray(enc.token_ids)
    return np.diff(np.asarray(enc.offsets)), int(np.count_nonzero(ids == tok.vocab.unk_id))


def _assert_counts(tok, texts, num_threads=None):
    want_lengths, want_unknown = _want(tok, texts, num_threads)
    lengths, unknown = tok.count_lengths(texts, num_threads=num_threads)
    assert lengths.dtype == np.int64
    np.testing.assert_array_equal(lengths, want_lengths)
    assert unknown == want_unknown
    return want_lengths, want_unknown


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_counts_equal_encode_on_every_corpus_line(vocab, num_threads):
    docs = _every_line()
    kw = {"lowercase": True} if vocab == "bert-base-uncased" else {}
    tok = daskwp.WordPieceTokenizer(vocab_path(vocab), **kw)
    lengths, unknown = _assert_counts(tok, docs, num_threads)
    assert lengths.sum() > len(docs)
    if vocab != "bert-base-chinese":
        assert unknown > 0   # the edge corpus has characters no such vocabulary holds


@pytest.mark.parametrize("lowercase", [True, False])
def test_literal_and_added_special_tokens_count_as_encode_gives_them(lowercase):
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=lowercase)
    docs = ["[CLS] hello [SEP] world [UNK] [unk] [MASK]x", "[UNK][UNK]", "a [PAD] b",
            "<extra> token <extra>", "☃ ☃☃ [UNK] \u0000 ok"] * 50
    before = _assert_counts(tok, docs)
    tok.add_special_tokens(["<extra>"])
    after = _assert_counts(tok, docs)
    assert before[1] > 0 and after[0].sum() < before[0].sum()


def test_arrow_inputs_nulls_slices_chunks_and_offset_widths():
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)
    docs = read_documents(next(f for f in corpus_files() if f.name == "blns.txt"))
    with_nulls = [None if i % 7 == 3 else d for i, d in enumerate(docs)]
    arr = pa.array(with_nulls, type=pa.string())
    for texts in (arr, pa.array(with_nulls, type=pa.large_string()), arr.slice(5, 300),
                  pa.chunked_array([arr.slice(0, 100), arr.slice(100)]),
                  pa.chunked_array([], type=pa.string()), [], ["", None], "one doc"):
        _assert_counts(tok, texts)
    # the binding: its checks are encode's
    m = tok.kernel_model
    with pytest.raises(ValueError, match="not non-decreasing"):
        _ext.count64(m.vocab_blob, m.norm_blob, m.max_input_chars_per_word,
                     np.array([0, 3, 1], np.int64), np.zeros(4, np.uint8), None, 0, 1)
    with pytest.raises(ValueError, match="outside the data buffer"):
        _ext.count32(m.vocab_blob, m.norm_blob, m.max_input_chars_per_word,
                     np.array([0, 9], np.int32), np.zeros(4, np.uint8), None, 0, 1)
    lengths, tokens, unknown = _ext.count32(
        m.vocab_blob, m.norm_blob, m.max_input_chars_per_word, np.array([0, 5, 5, 10], np.int32),
        np.frombuffer(b"hello\xe2\x98\x83 x", np.uint8), np.array([0b101], np.uint8), 0, 1)
    assert lengths.tolist() == [1, 0, 2] and tokens == 3 and unknown == 1


def test_long_documents_with_more_tokens_than_bytes_guess():
    """Documents longer than the loop's reused buffer, and ones whose tokens outnumber a
    guess from their bytes (the run again path)."""
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)
    docs = ["word " * 50_000, "a" * 300_000, "x", "!" * 70_000, "ﬀ" * 5000, "㍱" * 4000]
    _assert_counts(tok, docs, 1)
    _assert_counts(tok, docs * 20, 2)


def test_count_tokens_uses_the_count_loop(monkeypatch):
    """count_tokens makes no ids: encode is not called on the CPU."""
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)
    docs = ["hello world ☃", None, ""]
    want = _want(tok, docs)

    def no_encode(*a, **k):
        raise AssertionError("encode called")
    monkeypatch.setattr(type(tok), "encode", no_encode)
    c = count_tokens(tok, docs, 7)
    assert (c.documents, c.tokens, c.unknown_tokens, c.text_bytes) == (3, int(want[0].sum()),
                                                                       want[1], 7)


def test_emulated_gpu_count_lengths_equal_cpu(emulated_gpu):
    cpu = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)
    gpu = daskwp.WordPieceTokenizer(cpu.vocab, device="gpu", **cpu.settings)
    docs = read_documents(next(f for f in corpus_files() if f.name == "blns.txt")) + ["", None]
    a, b = cpu.count_lengths(docs), gpu.count_lengths(docs)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1] > 0


def test_count_runs_a_call_per_piece_asking_the_threads_each_time(monkeypatch):
    """A call per COUNT_PIECE_BYTES of text, the thread count asked before each (an
    in-process job's share of the moment); the counts are those of one call."""
    from daskwp.backends import cpu
    from daskwp.backends.cpu import set_task_num_threads
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)
    docs = read_documents(next(f for f in corpus_files() if f.name == "blns.txt"))
    texts = pa.chunked_array([pa.array(docs[:300]), pa.array([None] + docs[300:])])
    want = _want(tok, texts)
    monkeypatch.setattr(cpu, "COUNT_PIECE_BYTES", 1000)
    asked = []

    def share():
        asked.append(len(asked) % 2 + 1)
        return asked[-1]
    set_task_num_threads(share)
    try:
        lengths, unknown = tok.count_lengths(texts)
    finally:
        set_task_num_threads(None)
    np.testing.assert_array_equal(lengths, want[0])
    assert unknown == want[1]
    total = sum(len(d.encode()) for d in docs)
    assert len(asked) >= total // 1000 // 2


# Chunks with [UNK] among their tokens of every kind of memo entry: short ones of 1-3 ids,
# 4-6 (u16 inline, or packed 20-bit ids in the multilingual vocabulary's int32 layout),
# more than 6 (a reference to the long table), mid ones (17-32 bytes) inline and by
# reference, and long chunks.
_UNKNOWN_CHUNKS = ["☃", "😀,", "x☃y", "a☃b,c.d", "☃,☃,☃,☃", "hello-☃☃-worldwide,",
                   ",;,;,;,;,;,;,;,;☃", "☃x,☃y.☃z;☃w",
                   "the-quick-brown-fox-jumps-over-the-☃-lazy-dog,again"]


@pytest.mark.parametrize("vocab", ["bert-base-uncased", "bert-base-multilingual-cased"])
def test_memo_hits_count_the_unknown_tokens_of_their_entries(vocab):
    """The count loop adds a memo hit's tokens and its [UNK] from the entry (its count
    byte) without the ids: over documents that repeat chunks holding [UNK] of every entry
    kind, counted on a fresh memo (its own entries), on the memo encode filled and on its
    own warm one, the counts are encode's."""
    kw = {"lowercase": True} if vocab == "bert-base-uncased" else {}
    tok = daskwp.WordPieceTokenizer(vocab_path(vocab), **kw)
    rng = np.random.default_rng(7)
    words = _UNKNOWN_CHUNKS + ["plain", "words,", "and", "more.", "text"]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(1, 30)))) for _ in range(4000)]
    daskwp.memory.clear(["word_cache"])
    lengths_cold, unknown_cold = tok.count_lengths(docs, num_threads=1)
    daskwp.memory.clear(["word_cache"])
    want_lengths, want_unknown = _want(tok, docs, 1)   # (fills the memo)
    assert want_unknown > 4000
    np.testing.assert_array_equal(lengths_cold, want_lengths)
    assert unknown_cold == want_unknown
    for _ in range(2):   # on encode's entries, then again
        lengths, unknown = tok.count_lengths(docs, num_threads=1)
        np.testing.assert_array_equal(lengths, want_lengths)
        assert unknown == want_unknown
    hits = daskwp.memory.info()["word_cache"]["hits"]
    assert hits > 10 * len(docs)
