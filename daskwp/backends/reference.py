"""Slow, pure-Python reference tokenizer (the "third backend" of the test harness).

Implements HuggingFace semantics from the generated tables in
``daskwp/kernels/unicode_tables.npz`` and ``daskwp/core/pipeline_tables.npz``; it never
imports ``tokenizers``. By default ``BertWordPieceTokenizer``'s pipeline (BertNormalizer +
BertPreTokenizer + WordPiece, with the vocabulary's special tokens registered); with
``normalizer=`` / ``pre_tokenizer=`` (tokenizers JSON) the pipeline of a ``tokenizer.json``,
run step by step over whole strings as HF runs it (NFD reorders whole runs of marks, Strip
strips the ends, each pre-tokenizer splits the pieces of the one before), independently of
the per-code-point composition the kernel's blob holds. Clarity over speed: use it on
test-sized inputs only.
"""
from __future__ import annotations

import functools
import json
import os
import re
from types import SimpleNamespace

import numpy as np

__all__ = ["load_tables", "load_vocab", "normalize", "normalize_steps", "pre_tokenize",
           "pre_tokenize_splits", "wordpiece", "reference_encode"]

WS, PUNCT = 1, 2
REMOVE, SPACE, CHINESE, SURROGATE, NONSTARTER = 4, 8, 16, 32, 64
_MODES = ("lower", "strip", "strip_lower")

# Rust char::is_whitespace (White_Space property): what HF's vocab reader trims.
_RUST_WS = ("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
            + "\u2028\u2029\u202f\u205f\u3000")


def _npz_bytes(folder: str = "kernels", name: str = "unicode_tables.npz") -> bytes:
    try:
        from importlib import resources
        return resources.files("daskwp").joinpath(folder, name).read_bytes()
    except Exception:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            folder, name)
        with open(path, "rb") as f:
            return f.read()


@functools.lru_cache(maxsize=None)
def load_tables() -> SimpleNamespace:
    """Load the generated tables (cached).

    Returns a namespace with ``props`` (bytes, indexable by code point),
    ``maps`` ({mode: {cp: str}} for lower/strip/strip_lower), ``ccc``
    ({survivor cp: canonical combining class}) and ``meta`` (dict).
    """
    import io
    with np.load(io.BytesIO(_npz_bytes())) as z:
        props = z["props"].tobytes()
        maps = {}
        for mode in _MODES:
            cps = z[mode + "_cps"].tolist()
            off = z[mode + "_offsets"].tolist()
            buf = z[mode + "_utf8"].tobytes()
            maps[mode] = {cp: buf[off[i]:off[i + 1]].decode("utf-8")
                          for i, cp in enumerate(cps)}
        ccc = dict(zip(z["strip_ccc_cps"].tolist(), z["strip_ccc_vals"].tolist()))
        meta = json.loads(z["meta"].tobytes().decode("utf-8"))
    return SimpleNamespace(props=props, maps=maps, ccc=ccc, meta=meta)


@functools.lru_cache(maxsize=None)
def load_pipeline_tables() -> SimpleNamespace:
    """The tables of the other normalizers and pre-tokenizers (cached): ``nfd``, ``nfkd``,
    ``lower`` ({cp: str}), ``marks`` (StripAccents removes), ``mn`` (BertNormalizer's accent
    stripping removes, after NFD), ``ccc`` ({cp: class}), ``numeric`` (set)."""
    import io
    with np.load(io.BytesIO(_npz_bytes("core", "pipeline_tables.npz"))) as z:
        maps = {}
        for name in ("nfd", "nfkd", "lower"):
            cps = z[name + "_cps"].tolist()
            off = z[name + "_offsets"].tolist()
            buf = z[name + "_utf8"].tobytes()
            maps[name] = {cp: buf[off[i]:off[i + 1]].decode("utf-8")
                          for i, cp in enumerate(cps)}
        return SimpleNamespace(
            nfd=maps["nfd"], nfkd=maps["nfkd"], lower=maps["lower"],
            marks=frozenset(z["mark_cps"].tolist()), mn=frozenset(z["mn_cps"].tolist()),
            ccc=dict(zip(z["ccc_cps"].tolist(), z["ccc_vals"].tolist())),
            numeric=frozenset(z["numeric_cps"].tolist()))


def load_vocab(path) -> dict:
    """Read a vocab.txt like HF's WordPiece.read_file: split on "\\n" only (a
    trailing "\\r" goes with the right-trim), right-trim Unicode White_Space,
    empty lines take ids, a duplicated token keeps its last id."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vocab = {}
    for i, line in enumerate(lines):
        vocab[line.rstrip(_RUST_WS)] = i
    return vocab


def _mode(strip_accents, lowercase):
    strip = lowercase if strip_accents is None else strip_accents
    if strip and lowercase:
        return "strip_lower"
    if strip:
        return "strip"
    if lowercase:
        return "lower"
    return None


def normalize(text: str, *, lowercase=True, strip_accents=None, clean_text=True,
              handle_chinese_chars=True) -> str:
    """BertNormalizer, per code point from the tables, plus the one context
    effect of HF's accent stripping: NFD runs over the whole string, so the few
    characters that survive stripping with a non-zero combining class are
    canonically reordered (stable sort by ccc) within a run of non-starters."""
    T = load_tables()
    props, ccc = T.props, T.ccc
    mode = _mode(strip_accents, lowercase)
    table = T.maps[mode] if mode else None
    strip = mode is not None and mode.startswith("strip")
    out = []
    run_start = None     # index in out of the first survivor of the current run
    for ch in text:
        cp = ord(ch)
        p = props[cp]
        if clean_text and p & REMOVE:
            continue                      # removed before NFD: no effect on runs
        if clean_text and p & SPACE:
            out.append(" ")
            run_start = None
            continue
        m = table.get(cp, ch) if table is not None else ch
        if handle_chinese_chars and p & CHINESE:
            out.append(" ")
            out.extend(m)
            out.append(" ")
            run_start = None
            continue
        if not strip:
            out.extend(m)
            continue
        if not m:                          # stripped entirely
            if not p & NONSTARTER:         # a starter (e.g. U+034F) ends the run
                run_start = None
            continue
        for y in m:
            k = ccc.get(ord(y), 0)
            if k == 0:
                out.append(y)
                run_start = None
                continue
            if run_start is None:
                run_start = len(out)
            j = len(out)
            while j > run_start and ccc.get(ord(out[j - 1]), 0) > k:
                j -= 1
            out.insert(j, y)
    return "".join(out)


def pre_tokenize(text: str) -> list:
    """BertPreTokenizer: whitespace-class chars split (dropped), each
    punctuation-class char is a word of its own."""
    props = load_tables().props
    words, cur = [], []
    for ch in text:
        k = props[ord(ch)] & 3
        if k == 0:
            cur.append(ch)
            continue
        if cur:
            words.append("".join(cur))
            cur = []
        if k == PUNCT:
            words.append(ch)
    if cur:
        words.append("".join(cur))
    return words


def wordpiece(word: str, vocab: dict, unk_id: int, *, max_input_chars_per_word=100,
              continuing_subword_prefix="##") -> list:
    """Greedy longest-match-first WordPiece of one word (HF semantics)."""
    n = len(word)
    if n > max_input_chars_per_word:
        return [unk_id]
    ids, start = [], 0
    while start < n:
        end, found = n, None
        while start < end:
            sub = word[start:end]
            if start > 0:
                sub = continuing_subword_prefix + sub
            found = vocab.get(sub)
            if found is not None:
                break
            end -= 1
        if found is None:
            return [unk_id]
        ids.append(found)
        start = end
    return ids


def _decompose(text: str, table: dict) -> str:
    """NFD / NFKD of a whole string: each character's decomposition, then every run of
    non-starters stably sorted by combining class (no bound on the run)."""
    ccc = load_pipeline_tables().ccc
    out = []
    for ch in text:
        out.extend(table.get(ord(ch), ch))
    i = 0
    while i < len(out):
        if not ccc.get(ord(out[i]), 0):
            i += 1
            continue
        j = i
        while j < len(out) and ccc.get(ord(out[j]), 0):
            j += 1
        out[i:j] = sorted(out[i:j], key=lambda c: ccc[ord(c)])
        i = j
    return "".join(out)


def normalize_steps(text: str, steps) -> str:
    """A normalizer given as steps (``daskwp.core.normalizer.normalizer_steps``), each run
    over the whole string in turn, as HF's Sequence runs its normalizers."""
    T, P = load_tables(), load_pipeline_tables()
    props = T.props
    for step in steps:
        if step == "clean_text":
            text = "".join("" if props[ord(c)] & REMOVE else " " if props[ord(c)] & SPACE
                           else c for c in text)
        elif step == "chinese":
            text = "".join(" " + c + " " if props[ord(c)] & CHINESE else c for c in text)
        elif step in ("nfd", "nfkd"):
            text = _decompose(text, P.nfd if step == "nfd" else P.nfkd)
        elif step == "strip_mn":
            text = "".join(c for c in text if ord(c) not in P.mn)
        elif step == "strip_marks":
            text = "".join(c for c in text if ord(c) not in P.marks)
        elif step == "lower":
            text = "".join(P.lower.get(ord(c), c) for c in text)
        elif step == "strip":
            lo, hi = 0, len(text)
            while lo < hi and props[ord(text[lo])] & 3 == WS:
                lo += 1
            while hi > lo and props[ord(text[hi - 1])] & 3 == WS:
                hi -= 1
            text = text[lo:hi]
        else:
            raise ValueError(f"unknown normalizer step {step!r}")
    return text


def pre_tokenize_splits(text: str, splits) -> list:
    """A pre-tokenizer given as splits (``daskwp.core.normalizer.pre_tokenizer_splits``):
    each split in turn cuts every piece of the one before at the characters it matches,
    dropping them ("removed") or keeping each as a piece of its own ("isolated")."""
    props, numeric = load_tables().props, load_pipeline_tables().numeric

    def matches(pred, c):
        if pred == "whitespace":
            return props[ord(c)] & 3 == WS
        if pred == "punctuation":
            return props[ord(c)] & 3 == PUNCT
        if pred == "numeric":
            return ord(c) in numeric
        return c == pred[1]

    pieces = [text] if text else []
    for pred, behavior in splits:
        new = []
        for piece in pieces:
            cur = []
            for c in piece:
                if not matches(pred, c):
                    cur.append(c)
                    continue
                if cur:
                    new.append("".join(cur))
                    cur = []
                if behavior == "isolated":
                    new.append(c)
            if cur:
                new.append("".join(cur))
        pieces = new
    return pieces


@functools.lru_cache(maxsize=64)
def _special_re(specials: tuple):
    if not specials:
        return None
    alts = sorted(set(specials), key=len, reverse=True)   # leftmost-longest
    return re.compile("|".join(re.escape(t) for t in alts))


def reference_encode(text: str, vocab: dict, *, unk_token="[UNK]",
                     special_tokens=("[UNK]", "[SEP]", "[CLS]", "[PAD]", "[MASK]"),
                     lowercase=True, strip_accents=None, clean_text=True,
                     handle_chinese_chars=True, max_input_chars_per_word=100,
                     continuing_subword_prefix="##", normalizer=None, pre_tokenizer=None,
                     added_tokens=None, cls_token=None, sep_token=None, pad_token=None,
                     mask_token=None, post_processor=None) -> list:
    """Token ids of ``text`` (no [CLS]/[SEP] added), as HF's
    ``BertWordPieceTokenizer(vocab, lowercase=...).encode(text, add_special_tokens=False).ids``;
    with ``normalizer`` / ``pre_tokenizer`` (a tokenizers JSON object or its text; ``"null"``:
    none) that pipeline instead of BertNormalizer (the flags) / BertPreTokenizer. ``vocab``
    holds the WordPiece pieces; ``special_tokens`` (those in ``vocab`` or in
    ``added_tokens``, {token: id} of a tokenizer.json's added tokens, which are no pieces) are
    matched literally first. The ``cls_token`` ... ``mask_token`` and ``post_processor`` of
    a tokenizer's settings do not change the ids."""
    if unk_token not in vocab:
        raise ValueError("unk_token %r is not in the vocabulary" % unk_token)
    unk_id = vocab[unk_token]
    steps = splits = None
    if normalizer is not None or pre_tokenizer is not None:
        from ..core.normalizer import BERT_SPLITS, bert_steps, normalizer_steps, \
            pre_tokenizer_splits
        if normalizer is None:
            steps = bert_steps(clean_text, handle_chinese_chars, strip_accents, lowercase)
        else:
            steps = normalizer_steps(json.loads(normalizer) if isinstance(normalizer, str)
                                     else normalizer)
        splits = BERT_SPLITS if pre_tokenizer is None else pre_tokenizer_splits(
            json.loads(pre_tokenizer) if isinstance(pre_tokenizer, str) else pre_tokenizer)
        spec = json.loads(normalizer) if isinstance(normalizer, str) else normalizer
        if splits == BERT_SPLITS and (normalizer is None or (
                isinstance(spec, dict) and spec.get("type") == "BertNormalizer")):
            # BertWordPieceTokenizer's own pipeline: the per-code-point model below.
            if normalizer is not None:
                lowercase = spec.get("lowercase", True)
                strip_accents = spec.get("strip_accents")
                clean_text = spec.get("clean_text", True)
                handle_chinese_chars = spec.get("handle_chinese_chars", True)
            steps = None
    added = dict(added_tokens or {})
    specials = tuple(t for t in special_tokens if t and (t in vocab or t in added))
    rx = _special_re(specials)
    pieces = []                      # (is_special, str)
    pos = 0
    if rx is not None:
        for m in rx.finditer(text):
            if m.start() > pos:
                pieces.append((False, text[pos:m.start()]))
            pieces.append((True, m.group()))
            pos = m.end()
    if pos < len(text):
        pieces.append((False, text[pos:]))
    ids = []
    for is_special, piece in pieces:
        if is_special:
            ids.append(added[piece] if piece in added else vocab[piece])
            continue
        if steps is None:
            norm = normalize(piece, lowercase=lowercase, strip_accents=strip_accents,
                             clean_text=clean_text, handle_chinese_chars=handle_chinese_chars)
            words = pre_tokenize(norm)
        else:
            words = pre_tokenize_splits(normalize_steps(piece, steps), splits)
        for word in words:
            ids.extend(wordpiece(word, vocab, unk_id,
                                 max_input_chars_per_word=max_input_chars_per_word,
                                 continuing_subword_prefix=continuing_subword_prefix))
    return ids

