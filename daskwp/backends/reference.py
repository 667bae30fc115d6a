"""Slow, pure-Python reference tokenizer (the "third backend" of the test harness).

Implements HuggingFace ``BertWordPieceTokenizer`` semantics (BertNormalizer +
BertPreTokenizer + WordPiece, with the vocabulary's special tokens registered)
from the generated tables in ``daskwp/kernels/unicode_tables.npz``; it never
imports ``tokenizers``.  Clarity over speed: use it on test-sized inputs only.
"""
from __future__ import annotations

import functools
import json
import os
import re
from types import SimpleNamespace

import numpy as np

__all__ = ["load_tables", "load_vocab", "normalize", "pre_tokenize",
           "wordpiece", "reference_encode"]

WS, PUNCT = 1, 2
REMOVE, SPACE, CHINESE, SURROGATE, NONSTARTER = 4, 8, 16, 32, 64
_MODES = ("lower", "strip", "strip_lower")

# Rust char::is_whitespace (White_Space property): what HF's vocab reader trims.
_RUST_WS = ("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
            + "\u2028\u2029\u202f\u205f\u3000")


def _npz_bytes() -> bytes:
    try:
        from importlib import resources
        return resources.files("daskwp").joinpath("kernels", "unicode_tables.npz").read_bytes()
    except Exception:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "kernels", "unicode_tables.npz")
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
                     continuing_subword_prefix="##") -> list:
    """Token ids of ``text`` (no [CLS]/[SEP] added), as HF's
    ``BertWordPieceTokenizer(vocab, lowercase=...).encode(text, add_special_tokens=False).ids``."""
    if unk_token not in vocab:
        raise ValueError("unk_token %r is not in the vocabulary" % unk_token)
    unk_id = vocab[unk_token]
    specials = tuple(t for t in special_tokens if t and t in vocab)
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
            ids.append(vocab[piece])
            continue
        norm = normalize(piece, lowercase=lowercase, strip_accents=strip_accents,
                         clean_text=clean_text, handle_chinese_chars=handle_chinese_chars)
        for word in pre_tokenize(norm):
            ids.extend(wordpiece(word, vocab, unk_id,
                                 max_input_chars_per_word=max_input_chars_per_word,
                                 continuing_subword_prefix=continuing_subword_prefix))
    return ids
