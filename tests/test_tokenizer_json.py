"""A ``tokenizer.json``'s own pipeline (docs/design.md §1.7): every WordPiece file gives
HuggingFace's ids on every line of every corpus, or is refused with a ValueError naming the
component daskwp cannot run exactly. Also: its settings apply wherever a path is accepted,
its added tokens match as HF matches them, and special tokens spelled another way are
accepted everywhere a vocabulary is named.

The files are written by HF ``tokenizers`` itself (``Tokenizer(WordPiece(...))`` with
``.normalizer`` / ``.pre_tokenizer`` set, then ``.save``).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from conftest import DATA, corpus_files, read_documents, requires_data, slow_unless, vocab_path

import daskwp
from daskwp.backends.reference import reference_encode

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Tokenizer  # noqa: E402
from tokenizers import normalizers as N  # noqa: E402
from tokenizers import pre_tokenizers as P  # noqa: E402
from tokenizers.models import WordPiece  # noqa: E402

BERT_SPECIALS = ("[UNK]", "[SEP]", "[CLS]", "[PAD]", "[MASK]")


@functools.lru_cache(maxsize=None)
def all_documents() -> tuple:
    """Every document of every shared corpus, in file order."""
    docs = []
    for path in corpus_files():
        docs += read_documents(path)
    return tuple(docs)


@functools.lru_cache(maxsize=None)
def model_vocab(name: str) -> dict:
    return WordPiece.read_file(str(vocab_path(name)))


def hf_tokenizer(vocab: dict, normalizer, pre_tokenizer, *, prefix="##", unk="[UNK]",
                 specials=BERT_SPECIALS, max_chars=100):
    tok = Tokenizer(WordPiece(vocab, unk_token=unk, continuing_subword_prefix=prefix,
                              max_input_chars_per_word=max_chars))
    if normalizer is not None:
        tok.normalizer = normalizer
    if pre_tokenizer is not None:
        tok.pre_tokenizer = pre_tokenizer
    tok.add_special_tokens([s for s in specials if s in vocab])
    return tok


def respell(vocab: dict, prefix: str, unk: str) -> dict:
    """``vocab`` with another continuing-subword prefix and unknown token."""
    out = {}
    for t, i in vocab.items():
        if t == "[UNK]":
            t = unk
        elif t.startswith("##") and t != "##":
            t = prefix + t[2:]
        out[t] = i
    return out


def hf_ids(hf, docs) -> list:
    return [e.ids for e in hf.encode_batch(list(docs), add_special_tokens=False)]


def assert_same_ids(got, expected, docs, what):
    assert len(got) == len(expected) == len(docs)
    bad = [i for i in range(len(docs)) if got[i] != expected[i]]
    assert not bad, (f"{what}: {len(bad)} of {len(docs)} lines differ from HF, e.g. "
                     f"{[(docs[i][:60], got[i][:12], expected[i][:12]) for i in bad[:3]]}")


# ---------------------------------------------------------------------------------------
# Supported pipelines: HF's ids on every line of every corpus
# ---------------------------------------------------------------------------------------
# (id, vocabulary, normalizer, pre-tokenizer, prefix, unknown token)
SUPPORTED = [
    ("nfd-lowercase-stripaccents/bert", "bert-base-uncased",
     lambda: N.Sequence([N.NFD(), N.Lowercase(), N.StripAccents()]),
     lambda: P.BertPreTokenizer(), "##", "[UNK]"),
    ("bertnormalizer/whitespacesplit", "bert-base-uncased",
     lambda: N.BertNormalizer(), lambda: P.WhitespaceSplit(), "##", "[UNK]"),
    ("none/bert", "bert-base-cased", lambda: None, lambda: P.BertPreTokenizer(), "##",
     "[UNK]"),
    ("lowercase/whitespacesplit@@<unk>", "bert-base-uncased", lambda: N.Lowercase(),
     lambda: P.WhitespaceSplit(), "@@", "<unk>"),
    ("nfkd/bert", "bert-base-multilingual-cased", lambda: N.NFKD(),
     lambda: P.BertPreTokenizer(), "##", "[UNK]"),
    ("nfd/bert", "bert-base-multilingual-cased", lambda: N.NFD(),
     lambda: P.BertPreTokenizer(), "##", "[UNK]"),
    ("nfkd-stripaccents-lowercase/ws+punct+digits", "bert-base-multilingual-cased",
     lambda: N.Sequence([N.NFKD(), N.StripAccents(), N.Lowercase()]),
     lambda: P.Sequence([P.WhitespaceSplit(), P.Punctuation(), P.Digits(individual_digits=True)]),
     "##", "[UNK]"),
    ("bertnormalizer-cased-strip/punct-removed+ws", "bert-base-cased",
     lambda: N.BertNormalizer(lowercase=False, strip_accents=True, handle_chinese_chars=False),
     lambda: P.Sequence([P.Punctuation("removed"), P.WhitespaceSplit()]), "##", "[UNK]"),
    ("lowercase/punctuation-only", "bert-base-uncased", lambda: N.Lowercase(),
     lambda: P.Punctuation(), "##", "[UNK]"),
    ("lowercase/none", "bert-base-uncased", lambda: N.Lowercase(), lambda: None, "##",
     "[UNK]"),
    ("strip-lowercase-nfd/chardelimiter+split", "bert-base-uncased",
     lambda: N.Sequence([N.Strip(), N.Lowercase(), N.NFD(), N.StripAccents()]),
     lambda: P.Sequence([P.WhitespaceSplit(), P.CharDelimiterSplit("-"),
                         P.Split("/", "isolated")]), "##", "[UNK]"),
    # A 3-byte prefix: continuation pieces move under a 1-byte one (the trie builder's
    # breadth-first links are exact only for short prefixes).
    ("bertnormalizer/bert~~~", "bert-base-uncased", lambda: N.BertNormalizer(),
     lambda: P.BertPreTokenizer(), "~~~", "[UNK]"),
    ("bertnormalizer+nfkd/digits", "bert-base-chinese",
     lambda: N.Sequence([N.NFKD(), N.BertNormalizer(lowercase=False)]),
     lambda: P.Sequence([P.BertPreTokenizer(), P.Digits(individual_digits=True)]), "##",
     "[UNK]"),
]


@requires_data
@pytest.mark.slow   # 5-10 s a pipeline; test_pipeline_on_marks_and_edges keeps all fast
@pytest.mark.parametrize("case", SUPPORTED, ids=[c[0] for c in SUPPORTED])
def test_pipeline_matches_hf_on_every_corpus_line(case, tmp_path):
    name, vocab_name, normalizer, pre_tokenizer, prefix, unk = case
    vocab = model_vocab(vocab_name)
    if prefix != "##" or unk != "[UNK]":
        vocab = respell(vocab, prefix, unk)
    hf = hf_tokenizer(vocab, normalizer(), pre_tokenizer(), prefix=prefix, unk=unk)
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    docs = all_documents()
    tok = daskwp.WordPieceTokenizer(path)
    assert tok.vocab.unk_token == unk and tok.vocab.continuing_subword_prefix == prefix
    assert_same_ids(tok.encode(list(docs)).to_list(), hf_ids(hf, docs), docs, name)


REFERENCE_CASES = ["nfd/bert", "lowercase/none", "strip-lowercase-nfd/chardelimiter+split",
                   "nfkd-stripaccents-lowercase/ws+punct+digits"]


@requires_data
@pytest.mark.parametrize("case", slow_unless([c for c in SUPPORTED if c[0] in REFERENCE_CASES],
                                             fast={"nfkd-stripaccents-lowercase/ws+punct+digits"},
                                             ids=lambda c: c[0]))
def test_reference_runs_the_pipeline_as_hf_does(case, tmp_path):
    """The pure-Python reference runs each step over whole strings (an implementation
    independent of the per-code-point blob): HF's ids on a sample of every corpus and on
    strings made to stress reordering and stripping."""
    name, vocab_name, normalizer, pre_tokenizer, prefix, unk = case
    vocab = model_vocab(vocab_name)
    hf = hf_tokenizer(vocab, normalizer(), pre_tokenizer())
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    tok = daskwp.WordPieceTokenizer(path)
    docs = [d for f in corpus_files() for d in read_documents(f)[:40]] + MARK_CASES
    kw = dict(tok.settings, unk_token=unk, special_tokens=tok.vocab.special_tokens,
              continuing_subword_prefix=prefix)
    got = [reference_encode(d, vocab, **kw) for d in docs]
    assert_same_ids(got, hf_ids(hf, docs), docs, name)
    assert_same_ids(tok.encode(docs).to_list(), got, docs, name + " (kernel)")


# Marks out of canonical order, removed starters between them, decompositions that start
# with non-starters, and whitespace at the ends.
MARK_CASES = ["e\u0301\u0316x", "\u0316\u0301", "a\u0301\u034f\u0316", "\u1e69\u0323",
              "\u0f73\u0f71", "\u00c5\u0327\u0301 \u212b", "\u0130stanbul \u03a3\u0301",
              "  \u3000lead and trail\t ", "\ufb01x \u2460\u00bd", "x\U0001D15E\u1b44",
              "\u302e\u1b44\u0301", "a\x00\u0301\u0316", "\u4e2d\u0301\u6587",
              "\uac00\u11a8 \u1100\u1161", "e" + "\u0301\u0316" * 20, "##", "## x", "##s",
              "@@", "a-b/c--d//e", "1/2-3"]


@requires_data
@pytest.mark.parametrize("case", SUPPORTED, ids=[c[0] for c in SUPPORTED])
def test_pipeline_on_marks_and_edges(case, tmp_path):
    name, vocab_name, normalizer, pre_tokenizer, prefix, unk = case
    vocab = model_vocab(vocab_name)
    if prefix != "##" or unk != "[UNK]":
        vocab = respell(vocab, prefix, unk)
    hf = hf_tokenizer(vocab, normalizer(), pre_tokenizer(), prefix=prefix, unk=unk)
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    tok = daskwp.WordPieceTokenizer(path)
    docs = MARK_CASES + ["", " ", "\t\n", "[CLS]x[SEP]", "[cls]"]
    assert_same_ids(tok.encode(docs).to_list(), hf_ids(hf, docs), docs, name)


def _mark_fuzz(n: int, seed: int = 0) -> list:
    """Strings dense in combining marks, decompositions, controls and whitespace."""
    import random
    from daskwp.core.normalizer import load_pipeline_tables
    T = load_pipeline_tables()
    rng = random.Random(seed)
    pool = ([chr(c) for c in sorted(T["ccc"])[::3]]
            + [chr(c) for c in rng.sample(sorted(T["nfkd"]), 300)]
            + [chr(c) for c in rng.sample(sorted(T["marks"]), 80)]
            + list("abcXYZ .,!#\t\n") + ["\x00", "\x85", "\u200b", "\u034f", "\u0f73",
                                          "\u0344", "\u0130", "\u4e2d", "\U0001D15E",
                                          "\u302e", "\u1b44", "\ufeff", "\u3000"])
    return ["".join(rng.choice(pool) for _ in range(rng.randint(0, 30))) for _ in range(n)]


EXOTIC = [
    lambda: N.Sequence([N.NFD(), N.BertNormalizer()]),
    lambda: N.Sequence([N.NFKD(), N.StripAccents(), N.NFD()]),
    lambda: N.Sequence([N.StripAccents(), N.NFD()]),
    lambda: N.Sequence([N.BertNormalizer(strip_accents=True), N.NFKD()]),
    lambda: N.Sequence([N.Lowercase(), N.NFKD(), N.Lowercase()]),
]


@requires_data
@pytest.mark.parametrize("normalizer", [
    pytest.param(n, id=i, marks=() if i == "nfd+bert" else pytest.mark.slow)
    for n, i in zip(EXOTIC, ["nfd+bert", "nfkd-strip-nfd", "strip-nfd", "bertstrip-nfkd",
                             "lower-nfkd-lower"])])
def test_step_orders_on_mark_heavy_text(normalizer, tmp_path):
    """Steps in any order (removal before or after a reordering, two reorderings): the
    composed blob and the reference give HF's ids on strings dense in marks."""
    vocab = model_vocab("bert-base-multilingual-cased")
    hf = hf_tokenizer(vocab, normalizer(), P.WhitespaceSplit())
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    tok = daskwp.WordPieceTokenizer(path)
    texts = _mark_fuzz(2000)
    expected = hf_ids(hf, texts)
    assert_same_ids(tok.encode(texts).to_list(), expected, texts, "kernel")
    kw = dict(tok.settings, unk_token="[UNK]", special_tokens=tok.vocab.special_tokens)
    ref = [reference_encode(t, vocab, **kw) for t in texts[:500]]
    assert_same_ids(ref, expected[:500], texts[:500], "reference")


@requires_data
@pytest.mark.parametrize("flags", [
    (True, True, None, True),
    pytest.param((False, False, True, False), marks=pytest.mark.slow),
    pytest.param((True, False, True, True), marks=pytest.mark.slow),
    pytest.param((False, True, False, False), marks=pytest.mark.slow)])
def test_general_composition_equals_the_bundled_bert_tables(flags):
    """BertNormalizer + BertPreTokenizer composed by the general path give the ids of the
    bundled tables (which the default pipeline uses), on every code point and mark fuzz."""
    import numpy as np
    from daskwp.backends.cpu import CPU
    from daskwp.backends.protocol import KernelModel
    from daskwp.core import normalizer as nz
    from daskwp.core.normalizer.compiled import _compile_pipeline
    vocab = daskwp.Vocabulary.from_file(vocab_path("bert-base-multilingual-cased"))
    spec = dict(zip(("clean_text", "handle_chinese_chars", "strip_accents", "lowercase"),
                    flags), type="BertNormalizer")
    pipeline = nz.make_pipeline(spec, {"type": "BertPreTokenizer"})
    every = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = ["a" + "".join(every[i:i + 64]) for i in range(0, len(every), 64)]
    texts += _mark_fuzz(1500, seed=1)

    def ids(blob):
        km = KernelModel(vocab=vocab, vocab_blob=np.frombuffer(vocab.blob, dtype=np.uint8),
                         norm_blob=np.frombuffer(blob, dtype=np.uint8),
                         max_input_chars_per_word=100)
        return CPU.encode(km, texts, 2).to_list()

    general = _compile_pipeline(pipeline, general=True).blob
    assert general != nz.norm_blob(*pipeline.bert_flags)
    assert_same_ids(ids(general), ids(nz.norm_blob(*pipeline.bert_flags)), texts, str(flags))


@requires_data
@pytest.mark.parametrize("case", slow_unless([c for c in SUPPORTED if c[0] in (
    "lowercase/punctuation-only", "bertnormalizer/whitespacesplit", "nfd/bert")],
    fast={"nfd/bert"}, ids=lambda c: c[0]))
@pytest.mark.parametrize("chunk_bytes", [3, 64])
def test_cuda_kernel_reads_the_same_blob(case, chunk_bytes, tmp_path, emulated_cuda):
    """The CUDA kernel (emulated on the host: tests/conftest.py's harness) reads the composed
    blob as the CPU does; small chunks cut documents at every boundary byte the blob
    allows (with Punctuation alone, a space is not one)."""
    from daskwp.backends import cuda
    name, vocab_name, normalizer, pre_tokenizer, prefix, unk = case
    hf = hf_tokenizer(model_vocab(vocab_name), normalizer(), pre_tokenizer())
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    tok = daskwp.WordPieceTokenizer(path)
    docs = [d for f in corpus_files() for d in read_documents(f)[::25]] + MARK_CASES
    expected = tok.encode(docs)
    ids, offsets = cuda.encode_cuda(tok, docs, chunk_bytes=chunk_bytes)
    got = daskwp.Encoding(ids, offsets).to_list()
    assert_same_ids(got, expected.to_list(), docs, f"{name}, chunks of {chunk_bytes}")


# ---------------------------------------------------------------------------------------
# Refused components: a ValueError naming them
# ---------------------------------------------------------------------------------------
TINY = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[PAD]": 3, "[MASK]": 4, "a": 5, "##b": 6,
        "...": 7, "12": 8}

REFUSED = [
    ("NFC", lambda: N.NFC(), None),
    ("NFKC", lambda: N.NFKC(), None),
    ("Replace", lambda: N.Replace("a", "b"), None),
    ("Prepend", lambda: N.Prepend("x"), None),
    ("Nmt", lambda: N.Nmt(), None),
    ("ByteLevel", lambda: N.ByteLevel(), None),
    ("NFC", lambda: N.Sequence([N.Lowercase(), N.NFC()]), None),
    ("Whitespace", None, lambda: P.Whitespace()),
    ("Whitespace", None, lambda: P.Sequence([P.Digits(True), P.Whitespace()])),
    ("Digits with individual_digits=false", None, lambda: P.Digits(individual_digits=False)),
    ("Punctuation with behavior 'Contiguous'", None, lambda: P.Punctuation("contiguous")),
    ("Punctuation with behavior 'MergedWithPrevious'", None,
     lambda: P.Punctuation("merged_with_previous")),
    ("Punctuation with behavior 'MergedWithNext'", None,
     lambda: P.Punctuation("merged_with_next")),
    ("Metaspace", None, lambda: P.Metaspace()),
    ("ByteLevel", None, lambda: P.ByteLevel()),
    ("UnicodeScripts", None, lambda: P.UnicodeScripts()),
    ("Split", None, lambda: P.Split(tokenizers.Regex(r"\d+"), "isolated")),
    ("Split", None, lambda: P.Split("ab", "removed")),
    ("Split", None, lambda: P.Split("-", "merged_with_next")),
    ("Split", None, lambda: P.Split("-", "removed", invert=True)),
    ("Strip", lambda: N.Sequence([N.Strip(), N.Lowercase()]), lambda: P.Punctuation()),
]


@pytest.mark.parametrize("component,normalizer,pre_tokenizer", REFUSED,
                         ids=[f"{i}-{c[0]}" for i, c in enumerate(REFUSED)])
def test_unsupported_component_is_refused_by_name(component, normalizer, pre_tokenizer,
                                                  tmp_path):
    hf = hf_tokenizer(TINY, normalizer() if normalizer else N.Lowercase(),
                      pre_tokenizer() if pre_tokenizer else P.BertPreTokenizer())
    path = tmp_path / "refused.json"
    hf.save(str(path))
    with pytest.raises(ValueError, match=re.escape(component)) as e:
        daskwp.WordPieceTokenizer(path)
    assert "refused.json" in str(e.value)
    # Everywhere a path is accepted: the accessor, a job's tokenizer, a model folder.
    import pandas as pd
    with pytest.raises(ValueError, match=re.escape(component)):
        pd.Series(["a"]).wordpiece.tokenize(vocab=str(path))
    folder = tmp_path / "model"
    folder.mkdir()
    hf.save(str(folder / "tokenizer.json"))
    with pytest.raises(ValueError, match=re.escape(component)):
        daskwp.WordPieceTokenizer.from_pretrained(folder)
    # ... and the same component given as an argument.
    spec = json.loads(hf.to_str())
    with pytest.raises(ValueError, match=re.escape(component)):
        daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(list(TINY)),
                                  normalizer=spec["normalizer"],
                                  pre_tokenizer=spec["pre_tokenizer"])


def _tokenizer_file(tmp_path, name="t.json", **parts) -> Path:
    hf = hf_tokenizer(TINY, parts.pop("normalizer", N.Lowercase()),
                      parts.pop("pre_tokenizer", P.BertPreTokenizer()), **parts)
    path = tmp_path / name
    hf.save(str(path))
    return path


def test_empty_continuing_prefix_is_refused_by_name(tmp_path):
    path = _tokenizer_file(tmp_path, prefix="")
    with pytest.raises(ValueError, match="continuing-subword prefix ''"):
        daskwp.WordPieceTokenizer(path)


def test_prefix_that_cannot_be_kept_apart_is_refused(tmp_path):
    """No normalizer and Digits alone: every character may start a word, and none can hold
    the continuation pieces apart from words that start with '##'."""
    path = _tokenizer_file(tmp_path, normalizer=None,
                           pre_tokenizer=P.Digits(individual_digits=True))
    with pytest.raises(ValueError, match="continuing-subword prefix '##'") as e:
        daskwp.WordPieceTokenizer(path)
    assert "t.json" in str(e.value)


def test_bert_flags_with_another_normalizer_are_refused(tmp_path):
    path = _tokenizer_file(tmp_path, normalizer=N.Sequence([N.NFD(), N.Lowercase()]))
    with pytest.raises(ValueError, match=r"lowercase set a BertNormalizer's flags.*"
                                         r"Sequence\[NFD, Lowercase\]"):
        daskwp.WordPieceTokenizer(path, lowercase=False)
    # normalizer=... replaces it, and then the flags apply.
    tok = daskwp.WordPieceTokenizer(path, normalizer={"type": "BertNormalizer"},
                                    lowercase=False)
    assert tok.lowercase is False and tok.encode(["A"]).to_list() == [[0]]


@pytest.mark.parametrize("flags,pattern", [
    (dict(normalized=True), r"'<x>' has \"normalized\": true"),
    (dict(normalized=True, special=True), r"'<x>' has \"normalized\": true"),
    (dict(single_word=True, normalized=False), r"'<x>' has \"single_word\": true"),
])
def test_added_token_flags_daskwp_cannot_honour_are_refused(tmp_path, flags, pattern):
    hf = hf_tokenizer(TINY, N.Lowercase(), P.BertPreTokenizer())
    special = flags.pop("special", False)
    tok = AddedToken("<x>", special=special, **flags)
    (hf.add_special_tokens if special else hf.add_tokens)([tok])
    path = tmp_path / "added.json"
    hf.save(str(path))
    with pytest.raises(ValueError, match=pattern) as e:
        daskwp.WordPieceTokenizer(path)
    assert "added.json" in str(e.value)


def test_added_token_lstrip_refused_where_whitespace_is_kept(tmp_path):
    hf = hf_tokenizer(TINY, N.Lowercase(), P.Punctuation())
    hf.add_special_tokens([AddedToken("<m>", special=True, lstrip=True, normalized=False)])
    path = tmp_path / "strip.json"
    hf.save(str(path))
    with pytest.raises(ValueError, match=r"'<m>' has \"lstrip\" or \"rstrip\""):
        daskwp.WordPieceTokenizer(path)


# ---------------------------------------------------------------------------------------
# Added tokens: matched as HF matches them
# ---------------------------------------------------------------------------------------
ADDED_TEXTS = ["newword", "NEWWORD", "Newword", "néwword", "a newword b", "xnewwordy",
               "newwords", "<e>", "a<e>b", "a <e> b", "<E>", "hello<mask>world",
               "hello <mask>  world", "\t<mask>\u3000x", "<mask><mask>", "[CLS] [cls] [CLS]x",
               "new word", ""]


@requires_data
@pytest.mark.parametrize("pre_tokenizer", [P.BertPreTokenizer, P.WhitespaceSplit],
                         ids=["bert", "whitespacesplit"])
def test_added_tokens_match_as_hf(tmp_path, pre_tokenizer):
    """A non-special added token (``normalized: false``) matches only its exact bytes,
    never as a WordPiece piece of another spelling ("NEWWORD", "néwword"); lstrip/rstrip
    take whitespace HF's way (no id changes where the pre-tokenizer removes whitespace)."""
    vocab = model_vocab("bert-base-uncased")
    hf = hf_tokenizer(vocab, N.BertNormalizer(), pre_tokenizer())
    hf.add_tokens([AddedToken("newword", normalized=False),
                   AddedToken("<e>", normalized=False)])
    hf.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, rstrip=True,
                                      normalized=False)])
    path = tmp_path / "added.json"
    hf.save(str(path))
    tok = daskwp.WordPieceTokenizer(path)
    docs = ADDED_TEXTS + list(all_documents()[:3000])
    assert_same_ids(tok.encode(docs).to_list(), hf_ids(hf, docs), docs, "added tokens")
    new_id = hf.token_to_id("newword")
    assert tok.vocab.token_to_id("newword") == new_id
    assert tok.encode(["NEWWORD", "néwword"]).to_list() != [[new_id], [new_id]]
    assert tok.decode([new_id]) == hf.decode([new_id])


# ---------------------------------------------------------------------------------------
# A tokenizer.json's settings apply wherever a path is accepted
# ---------------------------------------------------------------------------------------
CASED_TEXTS = ["Hello World", "Ünïcödé CAFÉ", "naïve Résumé", "ABC def"]


@pytest.fixture
def cased_json(tmp_path) -> Path:
    if DATA is None:
        pytest.skip("shared data not found")
    hf = hf_tokenizer(model_vocab("bert-base-cased"), N.BertNormalizer(lowercase=False),
                      P.BertPreTokenizer())
    path = tmp_path / "cased.json"
    hf.save(str(path))
    return path


def _hf_cased(path):
    return Tokenizer.from_file(str(path))


def test_cased_file_is_not_lowercased_anywhere(cased_json, tmp_path):
    import pandas as pd
    from daskwp.backends.tokenizer import resolve_tokenizer
    expected = hf_ids(_hf_cased(cased_json), CASED_TEXTS)
    assert daskwp.WordPieceTokenizer(cased_json).encode(CASED_TEXTS).to_list() == expected
    assert daskwp.WordPieceTokenizer(str(cased_json)).encode(CASED_TEXTS).to_list() == expected
    tok = resolve_tokenizer(str(cased_json))
    assert tok.lowercase is False and tok.encode(CASED_TEXTS).to_list() == expected
    res = pd.Series(CASED_TEXTS).wordpiece.tokenize(vocab=str(cased_json), max_length=16,
                                                      add_special_tokens=False,
                                                      padding="do_not_pad")
    rows = res.to_frame()["input_ids"].tolist()
    assert [list(r) for r in rows] == expected
    # A model folder with the same file, and a Vocabulary read from it.
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(cased_json.read_bytes())
    assert daskwp.WordPieceTokenizer.from_pretrained(folder).encode(CASED_TEXTS).to_list() \
        == expected
    v = daskwp.Vocabulary.from_file(cased_json)
    assert daskwp.WordPieceTokenizer(v).encode(CASED_TEXTS).to_list() == expected
    # Explicit arguments override the file.
    uncased = daskwp.WordPieceTokenizer(cased_json, lowercase=True)
    assert uncased.lowercase is True and uncased.strip_accents is None
    assert uncased.encode(CASED_TEXTS).to_list() != expected
    assert resolve_tokenizer(str(cased_json), lowercase=True).lowercase is True
    with pytest.raises(TypeError, match="lowercase must be True or False, got None"):
        daskwp.WordPieceTokenizer(cased_json, lowercase=None)


def test_cased_file_in_a_job_and_recorded(cased_json, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from daskwp.cli import main
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(CASED_TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "--vocab",
               str(cased_json), "--no-add-special-tokens", "--padding", "do_not_pad", "-q"])
    assert rc == 0, capsys.readouterr().err
    table = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    assert table.column("input_ids").to_pylist() == hf_ids(_hf_cased(cased_json),
                                                           CASED_TEXTS)
    job = json.loads((out / "_job.json").read_text())
    params = job.get("parameters", job)
    assert params["lowercase"] is False
    assert json.loads(params["normalizer"])["type"] == "BertNormalizer"
    assert json.loads(params["pre_tokenizer"]) == {"type": "BertPreTokenizer"}
    assert params["unk_token"] == "[UNK]"


def test_non_bert_pipeline_is_recorded_and_round_trips(tmp_path):
    import pickle
    path = _tokenizer_file(tmp_path, normalizer=N.Sequence([N.NFKD(), N.Lowercase()]),
                           pre_tokenizer=P.WhitespaceSplit())
    tok = daskwp.WordPieceTokenizer(path)
    s = tok.settings
    assert "lowercase" not in s and tok.lowercase is None
    assert json.loads(s["normalizer"]) == {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Lowercase"}]}
    assert json.loads(s["pre_tokenizer"]) == {"type": "WhitespaceSplit"}
    texts = ["A ##b ...", "12 a##b"]
    again = daskwp.WordPieceTokenizer(tok.vocab, **s)
    assert again.encode(texts).to_list() == tok.encode(texts).to_list()
    assert pickle.loads(pickle.dumps(tok)).encode(texts).to_list() == \
        tok.encode(texts).to_list()
    import dask.base
    assert dask.base.tokenize(tok) != dask.base.tokenize(daskwp.WordPieceTokenizer(
        tok.vocab, normalizer={"type": "BertNormalizer"}))


def test_pipeline_as_arguments(tmp_path):
    """normalizer= and pre_tokenizer= take HF JSON (an object or its text; 'null': none)."""
    vocab = daskwp.Vocabulary.from_tokens(list(TINY))
    hf = hf_tokenizer(TINY, N.NFKD(), P.WhitespaceSplit())
    texts = ["a##b", "\uff41 ##b", "A b"]
    for norm in ({"type": "NFKD"}, '{"type": "NFKD"}'):
        tok = daskwp.WordPieceTokenizer(vocab, normalizer=norm,
                                        pre_tokenizer={"type": "WhitespaceSplit"})
        assert tok.encode(texts).to_list() == hf_ids(hf, texts)
    hf_none = hf_tokenizer(TINY, None, P.WhitespaceSplit())
    tok = daskwp.WordPieceTokenizer(vocab, normalizer="null",
                                    pre_tokenizer={"type": "WhitespaceSplit"})
    assert tok.encode(texts).to_list() == hf_ids(hf_none, texts)
    with pytest.raises(ValueError, match="normalizer must be a tokenizers JSON object"):
        daskwp.WordPieceTokenizer(vocab, normalizer="NFKD")


# ---------------------------------------------------------------------------------------
# Special tokens spelled another way, everywhere a vocabulary is named
# ---------------------------------------------------------------------------------------
OTHER_NAMES = dict(unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>",
                   mask_token="<mask>")
NAME_TEXTS = ["hello world", "<s> hello </s> <mask>", "zzzqqq hello", "<unk>", ""]


@pytest.fixture
def odd_vocab(tmp_path) -> Path:
    path = tmp_path / "odd" / "vocab.txt"
    path.parent.mkdir()
    path.write_text("\n".join(["<pad>", "<unk>", "<s>", "</s>", "<mask>", "hello", "world",
                               "##s", "z", "##z", "##q"]) + "\n", encoding="utf-8")
    return path


def _hf_odd(path):
    from tokenizers import BertWordPieceTokenizer
    return BertWordPieceTokenizer(str(path), lowercase=True, **OTHER_NAMES)


def test_missing_unk_error_suggests_what_works(odd_vocab):
    with pytest.raises(ValueError, match=r"no unknown token '\[UNK\]'.*unk_token="):
        daskwp.WordPieceTokenizer(odd_vocab)
    assert daskwp.WordPieceTokenizer(odd_vocab, unk_token="<unk>").vocab.unk_token == "<unk>"


def test_other_names_everywhere(odd_vocab, tmp_path, capsys):
    import pandas as pd
    from daskwp.backends.tokenizer import resolve_tokenizer
    hf = _hf_odd(odd_vocab)
    expected = [e.ids for e in hf.encode_batch(NAME_TEXTS, add_special_tokens=False)]
    framed = [e.ids for e in hf.encode_batch(NAME_TEXTS)]
    tok = daskwp.WordPieceTokenizer(odd_vocab, **OTHER_NAMES)
    assert tok.encode(NAME_TEXTS).to_list() == expected
    rows = tok(NAME_TEXTS, max_length=16, padding=False)["input_ids"].to_list()
    assert rows == framed
    padded = tok(["hello"], max_length=5)["input_ids"].tolist()
    assert padded == [framed[0][:1] + [hf.token_to_id("hello")] + framed[0][-1:] + [0, 0]]
    # A Vocabulary, from_pretrained, resolve_tokenizer, the accessor.
    v = daskwp.Vocabulary.from_file(odd_vocab, unk_token="<unk>")
    assert daskwp.WordPieceTokenizer(v, **OTHER_NAMES).encode(NAME_TEXTS).to_list() == expected
    pre = daskwp.WordPieceTokenizer.from_pretrained(odd_vocab.parent, **OTHER_NAMES)
    assert pre(NAME_TEXTS, max_length=16, padding=False)["input_ids"].to_list() == framed
    assert resolve_tokenizer(str(odd_vocab), **OTHER_NAMES).encode(NAME_TEXTS).to_list() \
        == expected
    res = pd.Series(NAME_TEXTS).wordpiece.tokenize(vocab=str(odd_vocab), max_length=16,
                                                     padding="do_not_pad", **OTHER_NAMES)
    assert [list(r) for r in res.to_frame()["input_ids"]] == framed
    # tokenizer_config.json of a vocab.txt folder names them too.
    (odd_vocab.parent / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, **OTHER_NAMES}))
    pre = daskwp.WordPieceTokenizer.from_pretrained(odd_vocab.parent)
    assert pre(NAME_TEXTS, max_length=16, padding=False)["input_ids"].to_list() == framed
    (odd_vocab.parent / "tokenizer_config.json").unlink()
    # A batch job: the YAML key and the CLI flag.
    from daskwp import jobs
    cfg = jobs.make_config({"input": "x", "output": "y", "vocab": str(odd_vocab),
                            **OTHER_NAMES})
    assert cfg.unk_token == "<unk>" and cfg.cls_token == "<s>"
    import pyarrow as pa
    import pyarrow.parquet as pq
    from daskwp.cli import main
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(NAME_TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    flags = [x for k, v in OTHER_NAMES.items() for x in ("--" + k.replace("_", "-"), v)]
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "--vocab",
               str(odd_vocab), "--padding", "do_not_pad", "--max-length", "16", "-q", *flags])
    assert rc == 0, capsys.readouterr().err
    table = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    assert table.column("input_ids").to_pylist() == framed
    job = json.loads((out / "_job.json").read_text())
    params = job.get("parameters", job)
    assert {k: params[k] for k in OTHER_NAMES} == OTHER_NAMES
    rc = main(["tokenize", str(inp), str(tmp_path / "out2"), "--scheduler", "synchronous",
               "--vocab", str(odd_vocab), "-q"])
    assert rc == 2 and "unk_token" in capsys.readouterr().err


def test_tokenizer_json_names_its_own_special_tokens(tmp_path):
    """A tokenizer.json's unknown token, post-processor (cls/sep) and padding token."""
    from tokenizers.processors import TemplateProcessing
    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "hello": 4, "##s": 5}
    hf = hf_tokenizer(vocab, N.Lowercase(), P.BertPreTokenizer(), unk="<unk>",
                      specials=("<pad>", "<unk>", "<s>", "</s>"))
    hf.post_processor = TemplateProcessing(single="<s> $A </s>",
                                           special_tokens=[("<s>", 2), ("</s>", 3)])
    hf.enable_padding(pad_id=0, pad_token="<pad>")
    path = tmp_path / "named.json"
    hf.save(str(path))
    tok = daskwp.WordPieceTokenizer(path)
    assert tok.vocab.special_names == {"unk_token": "<unk>", "cls_token": "<s>",
                                       "sep_token": "</s>", "pad_token": "<pad>",
                                       "mask_token": "[MASK]"}
    hf.no_padding()
    texts = ["hellos x", "<s>hello"]
    assert tok(texts, max_length=8, padding=False)["input_ids"].to_list() == \
        [e.ids for e in hf.encode_batch(texts)]
