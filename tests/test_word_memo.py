"""The CPU loop memoizes whitespace chunks and whole words (ASCII letters and digits, plain
non-ASCII letters, ASCII punctuation) in per-thread memos that a process-wide pool keeps
between calls (WordCache in word_memo.hpp, the pool in cpu_batch.cpp; test_word_cache.py
tests the pool). A memo hit must emit exactly what the trie walk emits: encode every corpus
of every vocabulary as one >= 1 MB batch (memo on, one thread so one memo sees all
documents; cold, then warm) and in small batches with the pool keeping nothing (memo off).
test_parity.py ties the small-batch results to HuggingFace."""

import dask
import numpy as np
import pytest

import daskwp
from conftest import VOCAB_CONFIGS, corpus_files, read_documents, requires_data, vocab_path

pytestmark = requires_data


@pytest.fixture(autouse=True)
def _fresh_pool():
    daskwp.memory.clear(["word_cache"])
    yield
    daskwp.memory.clear(["word_cache"])


def _walk(tok, docs, chunk=2000):
    """Small batches (~100-300 KB, below the threshold of a call's own memo) with the pool
    keeping nothing: no memo at all."""
    with dask.config.set({"daskwp.word_cache_mb": 0}):
        return [tok.encode(docs[i:i + chunk], num_threads=1) for i in range(0, len(docs), chunk)]


@pytest.mark.parametrize("vocab_name,lowercase", [
    pytest.param(n, lc, marks=() if n == "bert-base-uncased" else pytest.mark.slow)
    for n, lc in VOCAB_CONFIGS])
def test_memo_equals_walk_on_all_corpora(vocab_name, lowercase):
    tok = daskwp.WordPieceTokenizer(vocab_path(vocab_name), lowercase=lowercase)
    docs = [d for f in corpus_files() for d in read_documents(f)]
    assert sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) > 2 << 20
    # Twice over, so the second half is served from the memo; then again on the warm memo.
    docs = docs + docs
    walked = _walk(tok, docs)
    ids = np.concatenate([w.token_ids for w in walked])
    lengths = np.concatenate([w.lengths for w in walked])
    for _ in range(2):
        memo = tok.encode(docs, num_threads=1)
        np.testing.assert_array_equal(memo.lengths, lengths)
        np.testing.assert_array_equal(memo.token_ids, ids)
    assert daskwp.memory.info()["word_cache"]["hits"] > 0


def test_memo_respects_max_input_chars_per_word():
    # A memoized word must still honour a limit smaller than its length.
    words = ["abcdefgh", "abc", "abcdefghij"] * 200_000
    text = " ".join(words)
    tok = daskwp.WordPieceTokenizer(max_input_chars_per_word=5, num_threads=1)
    enc = tok.encode([text])
    unk = tok.vocab.unk_id
    with dask.config.set({"daskwp.word_cache_mb": 0}):
        small = daskwp.WordPieceTokenizer(max_input_chars_per_word=5).encode(words[:3]).to_list()
    assert small[0] == [unk] and small[2] == [unk] and small[1] != [unk]
    expected = np.array(sum(small, []) * 200_000, dtype=np.int32)
    np.testing.assert_array_equal(enc.token_ids, expected)


def test_memo_packs_four_and_five_tokens_and_skips_large_ids():
    # Words of 4-6 tokens are memoized as 20-bit packed ids; ids from 2**20 up cannot be
    # packed, so such words (of up to 16 bytes) are walked every time. Both must equal the
    # walk.
    filler = [f"f{i:07d}" for i in range((1 << 20) + 10)]
    small_ids = ["ab", "##cd", "##ef", "##gh", "##ij"]
    large_ids = ["xy", "##zw", "##uv", "##st", "##qr"]
    vocab = daskwp.Vocabulary.from_tokens(["[UNK]", "[CLS]", "[SEP]"] + small_ids + filler + large_ids)
    assert vocab.token_to_id("##qr") >= 1 << 20
    tok = daskwp.WordPieceTokenizer(vocab, num_threads=1)
    text = "abcdefghij abcdefgh xyzwuvstqr xyzwuvst abcdefghij."
    walked = _walk(tok, [text])[0].to_list()[0]
    ab = [vocab.token_to_id(t) for t in small_ids]
    xy = [vocab.token_to_id(t) for t in large_ids]
    assert walked[:9] == ab + ab[:4]
    assert walked[9:18] == xy + xy[:4]
    for _ in range(2):  # cold, then warm
        memo = tok.encode([text] * 30_000)  # > 1 MB on one thread
        assert len(text) * 30_000 > 1 << 20
        np.testing.assert_array_equal(memo.token_ids,
                                      np.tile(np.asarray(walked, np.int32), 30_000))


@pytest.mark.slow   # test_word_cache.py keeps a fast threads-equal-one-thread case
@pytest.mark.parametrize("threads", [2, 3, 7])
def test_threads_equal_one_thread(threads):
    # Several threads take byte-balanced chunks of the batch as they come free, each with
    # its own memo; ids and per-document lengths must equal one thread's, nulls included.
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-multilingual-cased"), lowercase=False)
    docs = [d for f in corpus_files() for d in read_documents(f)]
    docs = [None if i % 997 == 0 else d for i, d in enumerate(docs * 3)]
    assert sum(len(d.encode("utf-8", "surrogatepass")) for d in docs if d) > threads << 20
    one = tok.encode(docs, num_threads=1)
    many = tok.encode(docs, num_threads=threads)
    np.testing.assert_array_equal(many.lengths, one.lengths)
    np.testing.assert_array_equal(many.token_ids, one.token_ids)
    # (over 1M tokens: the threads copy their chunks into the arrays, spans and word ids too)
    assert len(one.token_ids) > 1 << 20
    extras = dict(return_offsets_mapping=True, return_word_ids=True)
    one = tok.encode(docs, num_threads=1, **extras)
    many = tok.encode(docs, num_threads=threads, **extras)
    np.testing.assert_array_equal(many.token_ids, one.token_ids)
    np.testing.assert_array_equal(many.offset_mapping, one.offset_mapping)
    np.testing.assert_array_equal(many.word_ids, one.word_ids)


# --- Offsets and word ids through the memo (memos of the offsets layout, word_memo.hpp) ----

def _walk_extras(tok, docs, unit, chunk=2000):
    """ids, lengths, offsets and word ids of small batches with the pool keeping nothing: no
    memo at all (the fused pass alone; test_offsets.py ties it to HuggingFace)."""
    with dask.config.set({"daskwp.word_cache_mb": 0}):
        parts = [tok.encode(docs[i:i + chunk], num_threads=1, return_offsets_mapping=True,
                            return_word_ids=True, offsets_unit=unit)
                 for i in range(0, len(docs), chunk)]
    return (np.concatenate([p.token_ids for p in parts]),
            np.concatenate([p.lengths for p in parts]),
            np.concatenate([np.asarray(p.offset_mapping).reshape(-1, 2) for p in parts]),
            np.concatenate([np.asarray(p.word_ids) for p in parts]))


def _assert_extras(enc, want):
    ids, lengths, spans, words = want
    np.testing.assert_array_equal(enc.lengths, lengths)
    np.testing.assert_array_equal(enc.token_ids, ids)
    if enc.offset_mapping is not None:
        np.testing.assert_array_equal(np.asarray(enc.offset_mapping).reshape(-1, 2), spans)
    if enc.word_ids is not None:
        np.testing.assert_array_equal(np.asarray(enc.word_ids), words)


@pytest.mark.slow   # test_offsets_memo_long_entries_unk_and_odd_chunks keeps a fast sample
@pytest.mark.parametrize("unit", ["chars", "bytes"])
@pytest.mark.parametrize("vocab_name,lowercase", VOCAB_CONFIGS)
def test_offsets_memo_equals_walk_on_all_corpora(vocab_name, lowercase, unit):
    # Every corpus twice over as one batch on one thread (the second half from the memo),
    # cold then warm: offsets (relative to each memoized chunk's first unit) and word ids
    # (the running word index + each token's delta) must equal the walk's on every token.
    tok = daskwp.WordPieceTokenizer(vocab_path(vocab_name), lowercase=lowercase)
    docs = [d for f in corpus_files() for d in read_documents(f)]
    docs = docs + docs
    want = _walk_extras(tok, docs, unit)
    before = daskwp.memory.info()["word_cache"]
    for _ in range(2):
        _assert_extras(tok.encode(docs, num_threads=1, return_offsets_mapping=True,
                                  return_word_ids=True, offsets_unit=unit), want)
    assert daskwp.memory.info()["word_cache"]["hits"] > before["hits"]
    # Either array alone (the memo keeps both either way), and several threads.
    _assert_extras(tok.encode(docs, num_threads=1, return_offsets_mapping=True,
                              offsets_unit=unit), want)
    if unit == "bytes":
        _assert_extras(tok.encode(docs, num_threads=1, return_word_ids=True), want)
    _assert_extras(tok.encode(docs, num_threads=3, return_offsets_mapping=True,
                              return_word_ids=True, offsets_unit=unit), want)


def test_offsets_memos_are_apart_from_ids_memos():
    # Entries of the offsets layout differ from the ids-only ones (and chars from bytes):
    # each has its own pool key, and the ids stay those of the walk in every order.
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)
    docs = read_documents(corpus_files()[0])[:3000]
    want = {u: _walk_extras(tok, docs, u) for u in ("chars", "bytes")}
    for unit in ("chars", "bytes", None, "chars", None, "bytes"):
        if unit is None:
            enc = tok.encode(docs, num_threads=1)
            np.testing.assert_array_equal(enc.token_ids, want["chars"][0])
        else:
            _assert_extras(tok.encode(docs, num_threads=1, return_offsets_mapping=True,
                                      return_word_ids=True, offsets_unit=unit), want[unit])
    assert daskwp.memory.info()["word_cache"]["keys"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["chars", "bytes"])
def test_offsets_memo_long_entries_unk_and_odd_chunks(unit):
    # Chunks and words of the long table (17-160 bytes, more than 3 tokens), [UNK] words
    # (too long, or not splittable), chunks whose spans do not tile them (removed control
    # characters, accents stripped, a ligature split in two), non-ASCII letters (chars
    # differ from bytes), a small memo whose arena is emptied again and again: every token's
    # span and word id equal the walk's.
    rng = np.random.default_rng(11)
    letters = list("abcdefghij-_/.:") + ["é", "ß", "д", "ж", "ﬁ", "\x07", "中"]
    pool = ["".join(rng.choice(letters, size=int(rng.integers(1, 150))))
            for _ in range(3000)]
    pool += ["a" * 120, "supercalifragilisticexpialidocious", "Crème", "naïve,", "x\x01y",
             "Привет,", "мир!", "1.2.3.4.5.6.7", "don't", "U.S.A.", "ﬁne", "ǅ"]
    docs = [" ".join(pool[k] for k in rng.integers(0, len(pool), size=20))
            for _ in range(3000)]
    for lowercase in (True, False):
        tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=lowercase,
                                        max_input_chars_per_word=40)
        want = _walk_extras(tok, docs, unit)
        with dask.config.set({"daskwp.word_cache_mb": 1}):
            for _ in range(3):
                _assert_extras(tok.encode(docs, num_threads=1, return_offsets_mapping=True,
                                          return_word_ids=True, offsets_unit=unit), want)


@pytest.mark.parametrize("family", ["tok_{:05d}", "[tok_{:05d}]", "t{:d}x"])
def test_memo_with_letter_first_special_tokens_equals_walk(family):
    # Registered special tokens whose first byte is common in the text ("t", "["): chunks
    # holding that byte are memoized once no special token matches at any of its
    # positions (special_in); chunks where one matches (inside a word, at its edges,
    # prefixes that do not match) are never served from the memo. Ids, offsets and word
    # ids must equal the walk's.
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)
    tok.add_special_tokens([family.format(i) for i in range(2000)])
    docs = read_documents(corpus_files()[0])[:6000]
    rng = np.random.default_rng(3)
    spliced = []
    for k, d in enumerate(docs[:3000]):
        words = d.split(" ")
        at = int(rng.integers(0, len(words)))
        sp = family.format(int(rng.integers(0, 2500)))  # some are not registered
        words[at] = [sp, words[at] + sp, sp + words[at], "to" + words[at], "tok_" + words[at],
                     sp[:-1] + " " + words[at]][k % 6]
        spliced.append(" ".join(words))
    docs = docs + spliced
    docs = docs * 2
    with dask.config.set({"daskwp.word_cache_mb": 0}):
        walked = [tok.encode(docs[i:i + 2000], num_threads=1) for i in range(0, len(docs), 2000)]
    ids = np.concatenate([w.token_ids for w in walked])
    lengths = np.concatenate([w.lengths for w in walked])
    before = daskwp.memory.info()["word_cache"]
    for _ in range(2):
        memo = tok.encode(docs, num_threads=1)
        np.testing.assert_array_equal(memo.lengths, lengths)
        np.testing.assert_array_equal(memo.token_ids, ids)
    assert daskwp.memory.info()["word_cache"]["hits"] > before["hits"]
    for unit in ("chars", "bytes"):
        want = _walk_extras(tok, docs, unit)
        for _ in range(2):
            _assert_extras(tok.encode(docs, num_threads=1, return_offsets_mapping=True,
                                      return_word_ids=True, offsets_unit=unit), want)


def test_memo_with_a_special_token_that_holds_a_space(tmp_path):
    # A tokenizer.json's added token may hold a space ("tok x"): a match that starts in a
    # chunk ("tok") then reaches past it, so chunks with its first byte are never
    # memoized (special_probe off): "tok" of "tok y" must not serve the "tok" of "tok x".
    from tokenizers import AddedToken, Tokenizer
    h = Tokenizer.from_file(str(vocab_path("bert-base-uncased").parent / "tokenizer.json"))
    h.add_special_tokens([AddedToken("tok x", special=True, normalized=False)])
    h.no_padding()
    h.no_truncation()
    h.save(str(tmp_path / "tokenizer.json"))
    tok = daskwp.WordPieceTokenizer.from_pretrained(tmp_path)
    # (and in chunks of more than 16 bytes, scanned 16 bytes at a time: the refused "t"
    # past the first 16)
    long_a, long_b = "a" * 21 + "tok", "b" * 30 + "tok"
    docs = ["tok y tok x tok, tokx", "a tok x b", "tok y", "tok x", f"{long_a} x",
            f"{long_a} y", f"{long_b} y {long_b} x", f"{long_a}"] * 500
    want = [e.ids for e in h.encode_batch(docs, add_special_tokens=False)]
    for _ in range(2):
        assert tok.encode(docs, num_threads=1).to_list() == want
    for unit in ("chars", "bytes"):
        ref = _walk_extras(tok, docs, unit)
        for _ in range(2):
            _assert_extras(tok.encode(docs, num_threads=1, return_offsets_mapping=True,
                                      return_word_ids=True, offsets_unit=unit), ref)


def _chunk_docs(seed: int, n_docs: int) -> list[str]:
    """Documents of whitespace chunks of 12-36 bytes (most 17-32: the mid table's), of 2
    to 30+ tokens (letters, digits, punctuation, Cyrillic), drawn from a pool so that they
    repeat, some at a document's end, some before a tab or a removed control byte."""
    rng = np.random.default_rng(seed)
    alphabet = list("abcdefghijklmnopqrstuvwxyz0123456789") + list(".-/_:$#") + list("жзщю")
    pool = []
    for k in range(3000):
        want = int(rng.integers(12, 37))
        s = ""
        while len(s.encode()) < want:
            s += str(rng.choice(alphabet)) if rng.random() < 0.7 or not s else \
                rng.choice(["data", "node", "packet", "при", "вет", "ing"])
        pool.append(s)
    seps = [" ", " ", " ", "  ", "\t", "\x1f ", "\n"]
    docs = []
    for _ in range(n_docs):
        parts = [pool[int(rng.integers(0, len(pool)))] for _ in range(int(rng.integers(1, 12)))]
        docs.append("".join(p + str(rng.choice(seps)) for p in parts[:-1]) + parts[-1])
    return docs


@pytest.mark.slow
@pytest.mark.parametrize("vocab_name,lowercase", [("bert-base-uncased", True),
                                                  ("bert-base-multilingual-cased", False)])
@pytest.mark.parametrize("memo_mb", [None, 1])
def test_mid_chunks_and_long_references_equal_walk(vocab_name, lowercase, memo_mb):
    # Chunks of 17-32 bytes are served from the mid table (ids inline: up to 15 of the
    # uint16 layout, bert-base-uncased; 7 int32, multilingual) or through a reference to
    # their long record, as are short chunks of more than 6 tokens. A 1 MB pool makes
    # 2^14-entry memos whose arena fills and empties many times a call: a reference
    # from before must then read as a miss, never as the new arena's bytes.
    tok = daskwp.WordPieceTokenizer(vocab_path(vocab_name), lowercase=lowercase)
    docs = _chunk_docs(3, 40_000)
    walked = _walk(tok, docs)
    ids = np.concatenate([w.token_ids for w in walked])
    lengths = np.concatenate([w.lengths for w in walked])
    cfg = {} if memo_mb is None else {"daskwp.word_cache_mb": memo_mb}
    with dask.config.set(cfg):
        for _ in range(2):  # cold, then warm
            memo = tok.encode(docs, num_threads=1)
            np.testing.assert_array_equal(memo.lengths, lengths)
            np.testing.assert_array_equal(memo.token_ids, ids)
        info = daskwp.memory.info()["word_cache"]
    assert info["hits"] > len(docs)
    if memo_mb is not None:
        assert info["long_resets"] > 10
    # The offsets layout's mid entries: references to long records with their spans.
    docs = docs[:15_000]
    for unit in ("chars", "bytes"):
        want = _walk_extras(tok, docs, unit)
        with dask.config.set(cfg):
            for _ in range(2):
                _assert_extras(tok.encode(docs, num_threads=1, return_offsets_mapping=True,
                                          return_word_ids=True, offsets_unit=unit), want)


def _short_set(chunk: bytes, bits: int) -> int:
    """The short-table set of a chunk of up to 16 bytes (word_memo.hpp short_hash)."""
    M = (1 << 64) - 1
    k = chunk.ljust(16, b"\0")
    k0, k1 = int.from_bytes(k[:8], "little"), int.from_bytes(k[8:], "little")
    h = ((k0 ^ ((k1 * 0xFF51AFD7ED558CCD) & M)) * 0x9E3779B97F4A7C15) & M
    return (h >> (64 - bits)) >> 1


def test_keys_three_to_a_set_stop_evicting_each_other():
    # Four chunks of one two-way set, over and over among chunks that hit: once the memo is
    # warm, the one a newer key pushes out moves to its second set, where the next lookup
    # finds it. Without that every lookup of the four missed (each evicted the next).
    bits = 14  # a 1 MB pool: one 2^14-entry memo
    by_set: dict = {}
    for n in range(200_000):
        w = f"q{n}x".encode()
        by_set.setdefault(_short_set(w, bits), []).append(w.decode())
    four = next(ws for ws in by_set.values() if len(ws) >= 4)[:4]
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True,
                                    num_threads=1)
    docs = [" ".join(four) + " " + " ".join(["the", "of", "and", "to"] * 20)] * 4000
    walked = np.concatenate([w.token_ids for w in _walk(tok, docs)])
    with dask.config.set({"daskwp.word_cache_mb": 1}):
        for _ in range(3):
            np.testing.assert_array_equal(tok.encode(docs).token_ids, walked)
        before = daskwp.memory.info()["word_cache"]
        np.testing.assert_array_equal(tok.encode(docs).token_ids, walked)
        after = daskwp.memory.info()["word_cache"]
    assert after["misses"] - before["misses"] < 50, four  # 4 x 4,000 without the moves
