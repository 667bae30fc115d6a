"""The pure-Python reference tokenizer (daskwp.backends.reference) against HuggingFace."""
from __future__ import annotations

import itertools
import random

import pytest

from conftest import (VOCAB_CONFIGS, corpus_files, read_documents, requires_data,
                      vocab_path)

from daskwp.backends.reference import load_tables, load_vocab, normalize, reference_encode

tokenizers = pytest.importorskip("tokenizers")


def _hf(path, **kw):
    return tokenizers.BertWordPieceTokenizer(str(path), **kw)


@requires_data
@pytest.mark.parametrize("vocab_name,lowercase", [
    pytest.param(n, lc, marks=() if n == "bert-base-uncased" else pytest.mark.slow)
    for n, lc in VOCAB_CONFIGS])
def test_corpus_parity_sample(vocab_name, lowercase):
    path = vocab_path(vocab_name)
    vocab = load_vocab(path)
    hf = _hf(path, lowercase=lowercase)
    for f in corpus_files():
        docs = [d for d in read_documents(f) if d is not None][:150]
        expected = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
        got = [reference_encode(d, vocab, lowercase=lowercase) for d in docs]
        bad = [d for d, g, e in zip(docs, got, expected) if g != e]
        assert not bad, (f.name, len(bad), bad[:3])


# Marks that survive accent stripping with a non-zero combining class are
# canonically reordered by HF's whole-string NFD (U+034F, a stripped starter,
# breaks the run; U+1D15E = U+1D157 + U+1D165 ends with one).
REORDER_CASES = ["\u302e\u1b44", "\u302e\u0301\u1b44", "\u302e\u034f\u1b44",
                 "x\U0001D15E\u1b44", "\U0001D16D\U0001D165", "a\u302e\x00\u1b44",
                 "\u302e\u4e2d\u1b44", "\u302e \u1b44"]


@requires_data
@pytest.mark.slow
def test_all_flag_combinations_fuzz():
    T = load_tables()
    rng = random.Random(0)
    pool = [chr(c) for c in T.ccc] + ["\u034f", "\U0001D15E", "\x00", "\x85", "\u2028",
                                       "\u00c9", "\u0130", "\u03a3", "\u4e2d", "\ud55c",
                                       "\U0002B820", "\uf900", " ", "\t", ".", "!", "[CLS]",
                                       "[cls]", "\u0301", "\u200d"] + list("abcXYZ")
    path = vocab_path("bert-base-multilingual-cased")
    vocab = load_vocab(path)
    texts = REORDER_CASES + ["e\u0301" * 60, "\u00e9" * 101, "a" * 101]
    texts += ["".join(rng.choice(pool) for _ in range(rng.randint(0, 30))) for _ in range(200)]
    for cl, ch, sa, lo in itertools.product([False, True], [False, True],
                                            [None, False, True], [False, True]):
        hf = _hf(path, clean_text=cl, handle_chinese_chars=ch, strip_accents=sa, lowercase=lo)
        expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        for t, e in zip(texts, expected):
            got = reference_encode(t, vocab, lowercase=lo, strip_accents=sa, clean_text=cl,
                                   handle_chinese_chars=ch)
            assert got == e, (cl, ch, sa, lo, [hex(ord(c)) for c in t])


def test_normalize_reordering_against_hf():
    from tokenizers.normalizers import BertNormalizer
    for sa, lo in [(True, False), (True, True), (None, True)]:
        n = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=sa,
                           lowercase=lo)
        for t in REORDER_CASES:
            assert normalize(t, lowercase=lo, strip_accents=sa) == n.normalize_str(t), t
