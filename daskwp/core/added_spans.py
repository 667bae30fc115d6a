"""HuggingFace's spans of added tokens with ``lstrip`` / ``rstrip`` (docs/design.md §2.9).

An added token from a ``tokenizer.json`` with ``"lstrip": true`` takes the White_Space before
it into its match, ``"rstrip": true`` the White_Space after it (``AddedVocabulary::
find_matches``): HF's ``Encoding.offsets`` of such a token cover that whitespace, back to
the end of the previous such token at most. The ids do not change (daskwp reads such tokens
only where the pre-tokenizer drops whitespace, so the kernel matches the token alone and its
span is the token's own characters); this post-step widens the kernel's spans of those
tokens on the host, for the few documents that hold one, in either offsets unit. It is the
one place the core fixes them, for ``encode`` and the windows of ``tok(...)`` alike.
"""

from __future__ import annotations

import numpy as np

from .ragged import Encoding, to_host
from .strings import to_arrow
from .vocab import WHITE_SPACE

__all__ = ["strip_flags", "widen_added_spans"]

_WHITE_SPACE_BYTES = tuple(sorted({c.encode("utf-8") for c in WHITE_SPACE}, key=len))


def strip_flags(vocab) -> dict:
    """``{token id: (lstrip, rstrip)}`` of the vocabulary's added tokens that take
    whitespace (read from a ``tokenizer.json``: ``config["added_token_strips"]``)."""
    flags = (vocab.config or {}).get("added_token_strips") or {}
    out = {}
    for token, (lstrip, rstrip) in flags.items():
        i = vocab.token_to_id(token)
        if i is not None and (lstrip or rstrip):
            out[i] = (bool(lstrip), bool(rstrip))
    return out


def _is_space_before(text, pos: int, unit_bytes: bool) -> int:
    """The length of the White_Space character that ends at ``pos`` (0 if none)."""
    if not unit_bytes:
        return 1 if text[pos - 1] in WHITE_SPACE else 0
    for w in _WHITE_SPACE_BYTES:
        if pos >= len(w) and text[pos - len(w):pos] == w:
            return len(w)
    return 0


def _is_space_at(text, pos: int, unit_bytes: bool) -> int:
    """The length of the White_Space character that starts at ``pos`` (0 if none)."""
    if not unit_bytes:
        return 1 if text[pos] in WHITE_SPACE else 0
    for w in _WHITE_SPACE_BYTES:
        if text[pos:pos + len(w)] == w:
            return len(w)
    return 0


def _document(texts, d: int, unit_bytes: bool):
    value = texts[d].as_py()
    if unit_bytes:
        return value.encode("utf-8") if isinstance(value, str) else value
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


def widen_added_spans(enc: Encoding, texts, flags: dict) -> Encoding:
    """``enc`` with the spans of the added tokens in ``flags`` (:func:`strip_flags`) widened
    over the White_Space next to them, as HF's; ``enc`` itself where no document holds
    one. ``texts`` are the documents ``enc`` was encoded from."""
    if not flags or enc.offset_mapping is None:
        return enc
    ids = to_host(enc.token_ids)
    hits = np.flatnonzero(np.isin(ids, np.fromiter(flags, dtype=np.int64)))
    if hits.size == 0:
        return enc
    spans = to_host(enc.offset_mapping).astype(np.int64, copy=True)
    bounds = to_host(enc.offsets)
    docs = np.searchsorted(bounds, hits, side="right") - 1
    arrow = to_arrow(texts).combine_chunks() if not isinstance(texts, str) else \
        to_arrow([texts]).combine_chunks()
    unit_bytes = enc.offsets_unit == "bytes"
    doc, text, prev = -1, None, 0
    for k, d in zip(hits.tolist(), docs.tolist()):
        if d != doc:
            doc, text, prev = d, _document(arrow, d, unit_bytes), 0
        lstrip, rstrip = flags[int(ids[k])]
        start, end = int(spans[k, 0]), int(spans[k, 1])
        if lstrip:
            while start > prev and (n := _is_space_before(text, start, unit_bytes)):
                start -= n
        if rstrip:
            while end < len(text) and (n := _is_space_at(text, end, unit_bytes)):
                end += n
        spans[k] = (start, end)
        prev = end
    if type(enc.offset_mapping).__module__.split(".")[0] == "cupy":
        import cupy
        spans = cupy.asarray(spans)
    return Encoding(enc.token_ids, enc.offsets, spans, enc.word_ids, enc.offsets_unit)
