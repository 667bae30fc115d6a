"""Offsets and word ids, HuggingFace-exact (docs/design.md §2.9).

* ``encode(..., return_offsets_mapping=True, return_word_ids=True)`` equals HF's
  ``Encoding.offsets`` and ``Encoding.word_ids`` (no special tokens) on every line of every
  shared corpus with every shared vocabulary, in characters; in bytes it equals the same
  spans mapped to UTF-8 positions;
* the edge cases of the contract: accents stripped, lowercasing that changes the UTF-8
  length, removed control characters, CJK characters, literal and registered special tokens,
  words over ``max_input_chars_per_word``, invalid UTF-8 given as Arrow binary;
* windows (``tok(...)``) equal HF's overflow rows with offsets, word ids and special-tokens
  masks (odd and even strides, with and without special tokens, padded and ragged), pairs
  with each strategy, and ``daskwp.stitch`` rebuilds the ``encode()`` arrays.
"""

from __future__ import annotations

import codecs
import functools

import numpy as np
import pyarrow as pa
import pytest

import daskwp
from conftest import (
    DATA,
    FAST_CORPORA,
    DATA_SKIP_REASON,
    VOCAB_CONFIGS,
    VOCAB_LOWERCASE,
    corpus_files,
    hf_from_tokens,
    hf_tokenizer,
    read_documents,
    requires_data,
    slow_unless,
    vocab_path,
)

_NO_DATA = pytest.param(None, id="no-shared-data",
                        marks=pytest.mark.skip(reason=DATA_SKIP_REASON))
# The fast tier keeps FAST_CORPORA with every vocabulary; the full suite every corpus.
CORPUS_PARAMS = slow_unless(corpus_files(), fast=FAST_CORPORA,
                            ids=lambda p: str(p.relative_to(DATA / "corpus"))) or [_NO_DATA]
VOCAB_PARAMS = [pytest.param(name, id=name) for name, _ in VOCAB_CONFIGS]


@functools.lru_cache(maxsize=None)
def dwp(vocab_name: str):
    return daskwp.WordPieceTokenizer(vocab_path(vocab_name),
                                     lowercase=VOCAB_LOWERCASE[vocab_name])


def byte_positions(text: str) -> np.ndarray:
    """UTF-8 byte position of every character position of ``text`` (len + 1 entries)."""
    sizes = [len(c.encode("utf-8", "surrogatepass")) for c in text]
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def check_encoding(enc, docs, hf_encs, unit="chars", label=""):
    """Every document's ids, offsets (in ``unit``) and word ids equal HF's; returns a report
    of the first differences (empty when equal)."""
    ids = np.asarray(enc.token_ids)
    off = np.asarray(enc.offsets)
    spans = np.asarray(enc.offset_mapping)
    words = np.asarray(enc.word_ids)
    assert spans.dtype == np.int64 and spans.shape == (ids.shape[0], 2), spans.shape
    assert words.dtype == np.int32 and words.shape == ids.shape, words.shape
    bad = []
    for i, e in enumerate(hf_encs):
        s, t = int(off[i]), int(off[i + 1])
        want = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)
        if unit == "bytes" and len(want):
            want = byte_positions(docs[i])[want]
        got_ids = ids[s:t].tolist()
        if got_ids != e.ids or not np.array_equal(spans[s:t], want) or \
                words[s:t].tolist() != list(e.word_ids):
            k = next((k for k in range(min(len(e.ids), t - s))
                      if got_ids[k] != e.ids[k] or spans[s + k].tolist() != want[k].tolist()
                      or int(words[s + k]) != e.word_ids[k]), None)
            bad.append(f"  [{i}] {docs[i][:120]!r}: token {k}: got id/span/word "
                       f"{got_ids[k] if k is not None else None}/"
                       f"{spans[s + k].tolist() if k is not None else None}/"
                       f"{int(words[s + k]) if k is not None else None}, HF "
                       f"{e.ids[k] if k is not None else None}/"
                       f"{want[k].tolist() if k is not None else None}/"
                       f"{e.word_ids[k] if k is not None else None} "
                       f"({t - s} vs {len(e.ids)} tokens)")
            if len(bad) >= 5:
                break
    return (f"{label}: " + "\n".join(bad)) if bad else ""


# ---------------------------------------------------------------------------------------
# encode(): every corpus line x every vocabulary
# ---------------------------------------------------------------------------------------
@requires_data
@pytest.mark.parametrize("corpus", CORPUS_PARAMS)
@pytest.mark.parametrize("vocab_name", VOCAB_PARAMS)
def test_encode_offsets_and_word_ids_equal_hf(vocab_name, corpus):
    docs = read_documents(corpus)
    hf_encs = hf_tokenizer(vocab_name).encode_batch(docs, add_special_tokens=False)
    tok = dwp(vocab_name)
    plain = tok.encode(docs)
    for unit in ("chars", "bytes"):
        enc = tok.encode(docs, return_offsets_mapping=True, return_word_ids=True,
                         offsets_unit=unit)
        assert enc.offsets_unit == unit
        np.testing.assert_array_equal(enc.token_ids, plain.token_ids)
        np.testing.assert_array_equal(enc.offsets, plain.offsets)
        report = check_encoding(enc, docs, hf_encs, unit, f"{vocab_name} x {corpus.name} {unit}")
        assert not report, report


def test_options_off_give_none_and_one_without_the_other():
    tok = dwp("bert-base-uncased")
    enc = tok.encode(["hello world"])
    assert enc.offset_mapping is None and enc.word_ids is None and enc.offsets_unit is None
    only_words = tok.encode(["hello world"], return_word_ids=True)
    assert only_words.offset_mapping is None and only_words.word_ids.tolist() == [0, 1]
    only_spans = tok.encode(["hello world"], return_offsets_mapping=True)
    assert only_spans.word_ids is None
    assert only_spans.offset_mapping.tolist() == [[0, 5], [6, 11]]


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(offsets_unit="codepoints", return_offsets_mapping=True), "offsets_unit"),
    (dict(return_offsets_mapping="yes"), "return_offsets_mapping"),
    (dict(return_word_ids=1), "return_word_ids"),
])
def test_bad_options_are_refused(kwargs, pattern):
    with pytest.raises((TypeError, ValueError), match=pattern):
        dwp("bert-base-uncased").encode(["x"], **kwargs)


# The edge cases of the contract, each against HF (chars and bytes).
EDGE_TEXTS = [
    "Héllo naïve café Ångström ÉCOLE",                  # accents stripped (uncased)
    "İstanbul ẞtraße ΩMEGA Kelvin K Åström ǅemal",      # lowercasing changes UTF-8 length
    "ab\x00cd e\x7ff g\u200bh \x01\x02x y\u0085z",      # removed control / format chars
    "中文字符和English混合，日本語のテキスト 한국어",    # CJK isolated, Hangul not
    "hello [SEP] world[CLS]x [MASK][PAD] [unk] [UNK]",  # literal special tokens
    "x" * 99 + " " + "y" * 100 + " " + "z" * 101 + " " + "é" * 101 + " ok",  # word limit
    "a" * 150 + "中" + "b" * 3,                           # over the limit, then CJK
    "ﬁnance ﬃ Ⅻ ①②③ ㎏ ﬀ",                               # compatibility characters
    "e\u0301\u0327 a\u0308\u0304 q\u0323\u0307 \u1e69 \u0f73",  # marks (NFD reordering)
    "\U0001F600 smile \U0001F469\u200d\U0001F4BB 𝐀𝐁𝐂 𐍈",    # astral planes
    "tab\tnew\nline\rcr\u2028ls\u3000ideo\u00a0nbsp",       # whitespace classes
    "!!!...,,,;;;''\"\"¿¡«»—–‐‑‒…‰′″‴",                   # punctuation classes
    "",
    "   ",
    "\x00\x01",
]


def _hf_for(vocab_name, **kw):
    return hf_tokenizer(vocab_name)


@requires_data
@pytest.mark.parametrize("vocab_name", VOCAB_PARAMS)
@pytest.mark.parametrize("unit", ["chars", "bytes"])
def test_edge_cases_equal_hf(vocab_name, unit):
    hf_encs = hf_tokenizer(vocab_name).encode_batch(EDGE_TEXTS, add_special_tokens=False)
    enc = dwp(vocab_name).encode(EDGE_TEXTS, return_offsets_mapping=True,
                                 return_word_ids=True, offsets_unit=unit)
    report = check_encoding(enc, EDGE_TEXTS, hf_encs, unit, vocab_name)
    assert not report, report


def test_unk_spans_the_whole_word():
    tok = dwp("bert-base-uncased")
    text = "ok " + "ab" * 60 + " end"
    enc = tok.encode([text], return_offsets_mapping=True, return_word_ids=True)
    assert enc.token_ids.tolist()[1] == tok.vocab.unk_id
    assert enc.offset_mapping.tolist()[1] == [3, 123]
    assert enc.word_ids.tolist() == [0, 1, 2]


def test_registered_special_tokens_equal_hf():
    from tokenizers import BertWordPieceTokenizer

    name = "bert-base-uncased"
    tok = daskwp.WordPieceTokenizer(vocab_path(name), lowercase=True)
    hf = BertWordPieceTokenizer(str(vocab_path(name)), lowercase=True)
    new = ["<ip>", "<<user>>", "ÜBERX", "日本"]
    tok.add_special_tokens(new)
    hf.add_special_tokens(new)
    texts = ["from <ip> to <<user>>: ÜBERXall über日本語 <ip><ip>x", "<<user>", "a日本b"]
    hf_encs = hf.encode_batch(texts, add_special_tokens=False)
    for unit in ("chars", "bytes"):
        enc = tok.encode(texts, return_offsets_mapping=True, return_word_ids=True,
                         offsets_unit=unit)
        report = check_encoding(enc, texts, hf_encs, unit, unit)
        assert not report, report


def _replace_spans(raw: bytes):
    """(decoded text, byte span of every character) with one U+FFFD per maximal ill-formed
    subpart, as Python's errors="replace"."""
    spans = []

    def handler(err):
        spans.append((err.start, err.end))
        return ("\ufffd", err.end)

    codecs.register_error("daskwp-test-spans", handler)
    text = raw.decode("utf-8", "daskwp-test-spans")
    # byte span of each character: walk the valid parts and the recorded subparts
    out, at, bad = [], 0, iter(spans)
    nxt = next(bad, None)
    for ch in text:
        if ch == "\ufffd" and nxt is not None and nxt[0] == at:
            out.append(nxt)
            at = nxt[1]
            nxt = next(bad, None)
        else:
            n = len(ch.encode("utf-8"))
            out.append((at, at + n))
            at += n
    assert at == len(raw)
    return text, out


INVALID = [b"abc\xffdef", b"caf\xc3 bar", b"\xe2\x82 x \xe2\x82\xac", b"\xf0\x9f\x98 end",
           b"ok \xed\xa0\x80 surrogate", b"\xc0\xaf\x80\x80z", b"mid\xf4\x90\x80\x80dle",
           b"x\xefy", b"\xef\xbf\xbd real fffd", b"[SEP]\xff[CLS]"]


@pytest.mark.parametrize("clean_text", [True, False])
def test_invalid_utf8_spans(clean_text):
    """Bytes: the replaced subpart's own bytes; chars: positions in the text decoded with
    errors="replace" (one U+FFFD per maximal ill-formed subpart), where HF's offsets on
    that text are the reference."""
    vocab = daskwp.Vocabulary.default()
    tok = daskwp.WordPieceTokenizer(vocab, clean_text=clean_text)
    from tokenizers import BertWordPieceTokenizer

    hf = BertWordPieceTokenizer(str(daskwp.Vocabulary.default().source), lowercase=True,
                                clean_text=clean_text)
    arr = pa.array(INVALID, type=pa.binary())
    decoded = [_replace_spans(raw) for raw in INVALID]
    texts = [d[0] for d in decoded]
    hf_encs = hf.encode_batch(texts, add_special_tokens=False)
    chars = tok.encode(arr, return_offsets_mapping=True, return_word_ids=True)
    report = check_encoding(chars, texts, hf_encs, "chars", "chars")
    assert not report, report
    by = tok.encode(arr, return_offsets_mapping=True, offsets_unit="bytes")
    for i, e in enumerate(hf_encs):
        s, t = int(by.offsets[i]), int(by.offsets[i + 1])
        cs = decoded[i][1] + [(len(INVALID[i]), len(INVALID[i]))]
        want = [[cs[b][0], cs[e_ - 1][1]] for b, e_ in e.offsets]
        assert by.offset_mapping[s:t].tolist() == want, (INVALID[i], want)


def test_a_tiny_vocabulary_with_long_pieces_and_expansions():
    """Pops of several tokens and pieces that split one expanded character."""
    tokens = ["[UNK]", "[CLS]", "[SEP]", "f", "##i", "##n", "fi", "##nance", "a", "##b",
              "##c", "abc", "##abc", "##d", "x", "##x", "i", "##̇", "##s", "##t"]
    from daskwp import Vocabulary

    tok = daskwp.WordPieceTokenizer(Vocabulary.from_tokens(tokens), strip_accents=False)
    hf = hf_from_tokens(tokens, strip_accents=False)
    texts = ["ﬁnance abcabcd abcx fin İst İİ ab", "ﬁ ﬁﬁ abcd xxxxx"]
    hf_encs = hf.encode_batch(texts, add_special_tokens=False)
    for unit in ("chars", "bytes"):
        enc = tok.encode(texts, return_offsets_mapping=True, return_word_ids=True,
                         offsets_unit=unit)
        report = check_encoding(enc, texts, hf_encs, unit, unit)
        assert not report, report


# ---------------------------------------------------------------------------------------
# Windows: HF's overflow rows with offsets, word ids and special-tokens masks
# ---------------------------------------------------------------------------------------
WINDOW_GRID = [(128, 0, True), (128, 31, True), (64, 16, False), (64, 15, False),
               (24, 21, True), (16, 7, True), (17, 5, True), (12, 11, False), (3, 0, True),
               (1, 0, False), (9, 6, True), (10, 3, False)]


def _hf_window_rows(vocab_name, texts, max_length, stride, sp, pad_id):
    from test_windows import _hf_pair

    t = _hf_pair(vocab_name)[0 if sp else 1]
    t.enable_truncation(max_length, stride=stride)
    t.enable_padding(length=max_length, pad_id=pad_id, pad_token="[PAD]")
    try:
        encs = t.encode_batch(texts, add_special_tokens=sp)
    finally:
        t.no_truncation()
        t.no_padding()
    return [w for e in encs for w in [e] + list(e.overflowing)]


@requires_data
@pytest.mark.slow   # test_windows.py keeps the fast sample of HF overflow rows
@pytest.mark.parametrize("vocab_name", ["bert-base-uncased", "bert-base-multilingual-cased"])
def test_windows_equal_hf_overflow_rows(vocab_name):
    from test_windows import glued_documents

    tok = dwp(vocab_name)
    all_texts = glued_documents()
    for max_length, stride, sp in WINDOW_GRID:
        texts = all_texts if max_length >= 64 else all_texts[:24]
        rows = _hf_window_rows(vocab_name, texts, max_length, stride, sp, tok.vocab.pad_id)
        out = tok(texts, max_length=max_length, stride=stride, add_special_tokens=sp,
                  return_offsets_mapping=True, return_word_ids=True,
                  return_special_tokens_mask=True, return_token_type_ids=True)
        key = (vocab_name, max_length, stride, sp)
        assert out.input_ids.tolist() == [w.ids for w in rows], key
        assert out.offset_mapping.dtype == np.int64
        assert out.offset_mapping.tolist() == [[list(o) for o in w.offsets] for w in rows], key
        assert out.word_ids.dtype == np.int32
        assert out.word_ids.tolist() == [[-1 if x is None else x for x in w.word_ids]
                                         for w in rows], key
        assert out.special_tokens_mask.tolist() == [w.special_tokens_mask for w in rows], key
        assert out.token_type_ids.tolist() == [w.type_ids for w in rows], key
        # ragged: the same values without the padding
        rag = tok(texts, max_length=max_length, stride=stride, add_special_tokens=sp,
                  padding=False, return_offsets_mapping=True, return_word_ids=True,
                  return_special_tokens_mask=True)
        real = out.attention_mask.astype(bool)
        for name in ("offset_mapping", "word_ids", "special_tokens_mask"):
            r = rag[name]
            assert isinstance(r, daskwp.RaggedRows), name
            np.testing.assert_array_equal(r.offsets, rag.input_ids.offsets)
            np.testing.assert_array_equal(r.values, out[name][real], err_msg=name)


@pytest.mark.slow   # 4 threads on every corpus line
@pytest.mark.parametrize("padding", ["max_length", False])
def test_window_extras_on_threads_equal_one_thread(padding):
    # The extras fill takes ranges of rows on threads from 256K cells on: a range that
    # starts inside a document, empty documents and nulls between; every array equal to
    # one thread's.
    docs = [d for f in corpus_files()[:3] for d in read_documents(f)][:12000]
    docs = [None if k % 97 == 5 else "" if k % 89 == 3 else d for k, d in enumerate(docs)]
    docs += [" ".join(f"w{i % 50}é," for i in range(k, k + 2000)) for k in range(300)]
    out = {}
    for threads in (1, 3):
        tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True,
                                        num_threads=threads)
        out[threads] = tok(docs, max_length=64, stride=16, padding=padding,
                           return_offsets_mapping=True, return_word_ids=True,
                           return_special_tokens_mask=True)
    cells = out[1]["offset_mapping"]
    cells = cells.values.shape[0] if hasattr(cells, "values") else cells.shape[0] * 64
    assert cells >= 3 << 18  # three threads' worth
    for name in ("offset_mapping", "word_ids", "special_tokens_mask", "input_ids"):
        a, b = out[1][name], out[3][name]
        if hasattr(a, "values"):
            np.testing.assert_array_equal(a.offsets, b.offsets, err_msg=name)
            a, b = a.values, b.values
        np.testing.assert_array_equal(a, b, err_msg=name)


@requires_data
@pytest.mark.parametrize("max_length,mask_dtype", [
    (128, "int8"),
    pytest.param(128, "int32", marks=pytest.mark.slow),
    pytest.param(63, "int8", marks=pytest.mark.slow)])
def test_streamed_padded_extras_equal_ragged(max_length, mask_dtype):
    # Padded extras of more than 32 MB are built a row at a time in L1 and written with
    # non-temporal stores (bind_windows.cpp fill_extras) when every output's rows are
    # multiples of 16 bytes (128 wide: yes; 63 wide: its word ids are not, so no stream);
    # ragged rows never stream. The padded cells of real tokens equal the ragged values,
    # padding cells are (0, 0) / -1 / 1.
    docs = [d for f in corpus_files() for d in read_documents(f)][:40000]
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True,
                                    num_threads=1)
    kw = dict(max_length=max_length, stride=16, return_offsets_mapping=True,
              return_word_ids=True, return_special_tokens_mask=True, mask_dtype=mask_dtype)
    pad = tok(docs, **kw)
    rag = tok(docs, padding=False, **kw)
    assert pad["offset_mapping"].nbytes + pad["word_ids"].nbytes > 32 << 20
    real = pad.attention_mask.astype(bool)
    body = real & (pad["special_tokens_mask"] == 0)
    for name in ("offset_mapping", "word_ids", "special_tokens_mask"):
        np.testing.assert_array_equal(pad[name][real], rag[name].values, err_msg=name)
    assert not pad["offset_mapping"][~body].any()
    assert (pad["word_ids"][~body] == -1).all()
    assert (pad["special_tokens_mask"][~body] == 1).all()
    assert pad["special_tokens_mask"].dtype == np.dtype(mask_dtype)


@pytest.mark.parametrize("unit", ["chars", "bytes"])
@pytest.mark.parametrize("padding", ["max_length", False, "bucket"])
@pytest.mark.parametrize("stride", [0, 3, 4])
def test_stitch_rebuilds_encode_arrays(unit, padding, stride):
    tok = dwp("bert-base-uncased")
    docs = read_documents(DATA / "corpus" / "edge" / "blns.txt")[:200] + ["", None, "x"]
    enc = tok.encode(docs, return_offsets_mapping=True, return_word_ids=True,
                     offsets_unit=unit)
    out = tok(docs, max_length=12, stride=stride, padding=padding, offsets_unit=unit,
              return_offsets_mapping=True, return_word_ids=True)
    for name, want in (("offset_mapping", enc.offset_mapping), ("word_ids", enc.word_ids),
                       ("input_ids", enc.token_ids)):
        if padding == "bucket":
            parts = [(b[name], b.metadata, b.window) for _, b in out.buckets]
            flat, off, logids = daskwp.stitch_flat(*map(list, zip(*parts)))
        else:
            flat, off, logids = daskwp.stitch_flat(out[name], out.metadata)
        np.testing.assert_array_equal(flat, want, err_msg=name)
        np.testing.assert_array_equal(off, enc.offsets, err_msg=name)
    got = daskwp.stitch(out.offset_mapping, out.metadata) if padding != "bucket" else None
    if got is not None:
        assert [np.asarray(g).tolist() for g in got] == \
            [enc.offset_mapping[a:b].tolist() for a, b in zip(enc.offsets[:-1], enc.offsets[1:])]


# ---------------------------------------------------------------------------------------
# Pairs: offsets into whichever text the token came from, as HF
# ---------------------------------------------------------------------------------------
# (truncation given to daskwp, HF strategy, return_overflowing_tokens, fixed side, stride)
PAIR_MODES = [
    (False, "only_second", None, 0, 2),
    (False, "only_second", None, 0, 3),
    ("only_second", "only_second", True, 0, 4),
    ("only_second", "only_second", True, 0, 5),
    ("only_first", "only_first", True, 1, 3),
    ("only_first", "only_first", True, 1, 6),
    ("only_second", "only_second", False, 0, 0),
    ("only_first", "only_first", False, 1, 0),
    ("longest_first", "longest_first", False, None, 0),
    (True, "longest_first", None, None, 0),
]


@requires_data
@pytest.mark.parametrize("mode", PAIR_MODES, ids=lambda m: f"{m[0]}-{m[2]}-s{m[4]}")
@pytest.mark.parametrize("unit", ["chars", pytest.param("bytes", marks=pytest.mark.slow)])
def test_pairs_equal_hf(mode, unit):
    from test_pairs import fits, long_documents, short_sentences
    from tokenizers import BertWordPieceTokenizer

    truncation, strategy, rot, fixed, stride = mode
    overflow = truncation is False or bool(rot)
    max_length = 40
    name = "bert-base-uncased"
    tok = dwp(name)
    hf = BertWordPieceTokenizer(str(vocab_path(name)), lowercase=True)
    shorts, longs = short_sentences(30), long_documents(30)
    shorts[3] = "Ünïcödé ﬁne 中文 [SEP] text"
    firsts, seconds = (longs, shorts) if fixed == 1 else (shorts, longs)
    n = min(len(firsts), len(seconds))
    firsts, seconds = firsts[:n], seconds[:n]
    if fixed is not None:
        firsts, seconds = fits(tok, firsts, seconds, max_length, stride, True, fixed)
    hf.enable_truncation(max_length, stride=stride, strategy=strategy)
    hf.enable_padding(length=max_length, pad_id=tok.vocab.pad_id)
    try:
        encs = hf.encode_batch(list(zip(firsts, seconds)))
    finally:
        hf.no_truncation()
        hf.no_padding()
    rows = [w for e in encs for w in [e] + (list(e.overflowing) if overflow else [])]
    out = tok(firsts, text_pair=seconds, max_length=max_length, stride=stride,
              truncation=truncation, return_overflowing_tokens=rot,
              return_offsets_mapping=True, return_word_ids=True,
              return_special_tokens_mask=True, offsets_unit=unit)
    assert out.input_ids.tolist() == [w.ids for w in rows]
    seq = [[-1 if x is None else x for x in w.sequence_ids] for w in rows]
    pair_of = out.metadata[:, 0].tolist()
    want = []
    for r, w in enumerate(rows):
        texts = (firsts[pair_of[r]], seconds[pair_of[r]])
        spans = []
        for (b, e), s in zip(w.offsets, seq[r]):
            if unit == "bytes" and s >= 0:
                pos = byte_positions(texts[s])
                b, e = int(pos[b]), int(pos[e])
            spans.append([b, e])
        want.append(spans)
    assert out.offset_mapping.tolist() == want
    assert out.word_ids.tolist() == [[-1 if x is None else x for x in w.word_ids] for w in rows]
    assert out.special_tokens_mask.tolist() == [w.special_tokens_mask for w in rows]


# ---------------------------------------------------------------------------------------
# GPU == CPU: the CUDA launcher with the emulated kernels (tests/conftest.py: emulated_cuda)
# ---------------------------------------------------------------------------------------
GPU_CASES = [
    dict(max_length=24, stride=5),
    dict(max_length=25, stride=4, padding=False, offsets_unit="bytes"),
    dict(max_length=16, stride=3, padding="bucket"),
    dict(max_length=33, stride=6, padding="longest", mask_dtype="int8",
         return_token_type_ids=True),
    dict(max_length=40, truncation=True, add_special_tokens=False),
]


@pytest.fixture
def emulated_gpu(emulated_cuda, monkeypatch):
    """tests/conftest.py's emulated CUDA backend, whose ``full`` makes host arrays."""
    monkeypatch.setattr(emulated_cuda.xp, "full", np.full)
    return emulated_cuda.xp


def _gpu_docs():
    root = DATA / "corpus"
    docs = read_documents(root / "edge" / "blns.txt")[:150]
    docs += read_documents(root / "multi" / "ja.txt")[:20]
    docs += read_documents(root / "multi" / "de.txt")[:20]
    docs += [" ".join(read_documents(root / "en_ewt.txt")[:200])]   # many chunks
    return docs + ["", None, "x" * 150, EDGE_TEXTS[1]]


@pytest.mark.parametrize("unit", ["chars", "bytes"])
@pytest.mark.parametrize("chunk_bytes", [None, 7, 64])
def test_emulated_gpu_encode_equals_cpu(emulated_gpu, unit, chunk_bytes):
    from daskwp.backends import cuda

    tok = dwp("bert-base-multilingual-cased")
    docs = _gpu_docs()
    want = tok.encode(docs, return_offsets_mapping=True, return_word_ids=True,
                      offsets_unit=unit)
    ids, off, spans, words = cuda.encode_cuda(tok, docs, chunk_bytes=chunk_bytes,
                                              offsets_unit=unit, word_ids=True)
    np.testing.assert_array_equal(np.asarray(ids), want.token_ids)
    np.testing.assert_array_equal(np.asarray(off), want.offsets)
    np.testing.assert_array_equal(np.asarray(spans), want.offset_mapping)
    np.testing.assert_array_equal(np.asarray(words), want.word_ids)
    gpu = daskwp.WordPieceTokenizer(tok.vocab, device="gpu", **tok.settings)
    only = gpu.encode(docs, return_word_ids=True)
    assert only.offset_mapping is None
    np.testing.assert_array_equal(np.asarray(only.word_ids), want.word_ids)


@pytest.mark.parametrize("case", range(len(GPU_CASES)))
def test_emulated_gpu_windows_equal_cpu(emulated_gpu, case):
    tok = dwp("bert-base-uncased")
    gpu = daskwp.WordPieceTokenizer(tok.vocab, device="gpu", **tok.settings)
    docs = _gpu_docs()
    opts = dict(GPU_CASES[case], return_offsets_mapping=True, return_word_ids=True,
                return_special_tokens_mask=True)
    want = tok(docs, **opts)
    got = gpu(docs, return_tensors="np", **opts)
    if opts.get("padding") == "bucket":
        pairs = list(zip(got.buckets, want.buckets))
    else:
        pairs = [((0, got), (0, want))]
    for (wg, g_bw), (ww, w_bw) in pairs:
        assert wg == ww and sorted(g_bw) == sorted(w_bw)
        for key, w in w_bw.items():
            g = g_bw[key]
            if isinstance(w, daskwp.RaggedRows):
                np.testing.assert_array_equal(np.asarray(g.offsets), w.offsets)
                g, w = g.values, w.values
            g = np.asarray(g)
            assert g.dtype == w.dtype and g.shape == w.shape, key
            np.testing.assert_array_equal(g, w, err_msg=key)


def test_emulated_gpu_pairs_equal_cpu(emulated_gpu):
    tok = dwp("bert-base-uncased")
    gpu = daskwp.WordPieceTokenizer(tok.vocab, device="gpu", **tok.settings)
    docs = _gpu_docs()[:60]
    firsts = [d for d in docs if d and len(d) < 40][:20]
    seconds = docs[:len(firsts)]
    opts = dict(max_length=48, stride=4, return_offsets_mapping=True, return_word_ids=True,
                return_special_tokens_mask=True, offsets_unit="bytes")
    want = tok(firsts, text_pair=seconds, **opts)
    got = gpu(firsts, text_pair=seconds, return_tensors="np", **opts)
    assert sorted(got) == sorted(want)
    for key, w in want.items():
        np.testing.assert_array_equal(np.asarray(got[key]), w, err_msg=key)
