"""A ``tokenizer.json``'s normalizer and pre-tokenizer read as what the kernel can run:
normalizer *steps* that each map one code point on its own, and pre-tokenizer *splits* on a
predicate of one character (removed or isolated). A component that looks at more than one
code point is refused with a ValueError that names it and says why.

HF runs a normalizer over the whole text (between added tokens), then a pre-tokenizer over
the normalized text, then WordPiece over each piece. The kernel makes one pass over the
code points: each input code point maps to an output string (blob entry), each output
character has a class (other: continues the word; space: ends it and is dropped;
punctuation: a word of its own), and the one context effect it knows is canonical
reordering of waiting combining marks. So a pipeline is supported exactly when:

* every normalizer step maps each code point on its own (NFD and NFKD decompose each code
  point, then reorder runs of non-starters: the kernel's waiting marks), and
* every pre-tokenizer step splits on a predicate of one character, removing the matches or
  isolating each match as a piece of its own.

The composition is computed per code point (:mod:`.compiled`), from HF's own tables.
"""

from __future__ import annotations


#: Pre-tokenizer steps of BertPreTokenizer: whitespace removed, punctuation isolated.
BERT_SPLITS = (("whitespace", "removed"), ("punctuation", "isolated"))
_REFUSED_NORMALIZERS = {
    "NFC": "it composes characters, which looks at more than one code point",
    "NFKC": "it composes characters, which looks at more than one code point",
    "Replace": "it replaces patterns that may span code points",
    "Prepend": "it inserts text at the start of the normalized string",
    "Precompiled": "it applies SentencePiece's precompiled character map, which matches "
                   "strings of several code points",
    "ByteLevel": "it maps bytes to characters (a byte-level BPE step)",
    "Nmt": "daskwp has no tables for it",
}
_REFUSED_PRE_TOKENIZERS = {
    "Whitespace": "it splits with the regex \\w+|[^\\w\\s]+, which keeps runs of punctuation "
                  "together ('...' is one piece); daskwp's single pass makes every "
                  "punctuation character a piece of its own",
    "Metaspace": "it replaces spaces by a meta symbol and prepends one (SentencePiece)",
    "ByteLevel": "it maps bytes to characters (a byte-level BPE step)",
    "UnicodeScripts": "it splits where the script changes, which looks at two characters",
    "FixedLength": "it cuts pieces by length",
}


def _component(spec, what: str, list_key: str) -> tuple:
    """``(type, parts)`` of a ``tokenizer.json`` normalizer or pre-tokenizer object (``what``):
    ``parts`` is a Sequence's list (under ``list_key``), else None. Raises ValueError for
    anything else."""
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ValueError(f"a {what} must be a tokenizers JSON object with a 'type', got "
                         f"{spec!r:.80}")
    kind = spec["type"]
    if kind != "Sequence":
        return kind, None
    parts = spec.get(list_key)
    if not isinstance(parts, list):
        raise ValueError(f"{what} Sequence has no '{list_key}' list")
    return kind, parts


def normalizer_steps(spec) -> tuple:
    """The per-code-point steps of a HF normalizer (its ``tokenizer.json`` object; None: no
    normalizer). Raises ValueError naming a normalizer daskwp cannot run exactly."""
    if spec is None:
        return ()
    kind, parts = _component(spec, "normalizer", "normalizers")
    if parts is not None:
        return tuple(s for part in parts for s in normalizer_steps(part))
    if kind == "BertNormalizer":
        flags = []
        for key, default in (("clean_text", True), ("handle_chinese_chars", True),
                             ("strip_accents", None), ("lowercase", True)):
            v = spec.get(key, default)
            if not (isinstance(v, bool) or (v is None and key == "strip_accents")):
                raise ValueError(f"normalizer BertNormalizer: {key} must be true or false, "
                                 f"got {v!r}")
            flags.append(v)
        return bert_steps(*flags)
    if kind == "NFD":
        return ("nfd",)
    if kind == "NFKD":
        return ("nfkd",)
    if kind == "Lowercase":
        return ("lower",)
    if kind == "StripAccents":
        return ("strip_marks",)
    if kind == "Strip":
        if spec.get("strip_left", True) or spec.get("strip_right", True):
            return ("strip",)
        return ()
    reason = _REFUSED_NORMALIZERS.get(kind, "daskwp does not know it")
    raise ValueError(f"normalizer {kind} is not supported: {reason}")


def bert_steps(clean_text: bool, handle_chinese_chars: bool, strip_accents, lowercase: bool
               ) -> tuple:
    """BertNormalizer's steps, in HF's order (strip_accents None follows lowercase)."""
    strip = lowercase if strip_accents is None else strip_accents
    steps = []
    if clean_text:
        steps.append("clean_text")
    if handle_chinese_chars:
        steps.append("chinese")
    if strip:
        steps += ["nfd", "strip_mn"]
    if lowercase:
        steps.append("lower")
    return tuple(steps)


def pre_tokenizer_splits(spec) -> tuple:
    """The per-character splits of a HF pre-tokenizer (its ``tokenizer.json`` object; None:
    none), each ``(predicate, "removed" | "isolated")``. Raises ValueError naming a
    pre-tokenizer daskwp cannot run exactly."""
    if spec is None:
        return ()
    kind, parts = _component(spec, "pre-tokenizer", "pretokenizers")
    if parts is not None:
        return tuple(s for part in parts for s in pre_tokenizer_splits(part))
    if kind == "BertPreTokenizer":
        return BERT_SPLITS
    if kind == "WhitespaceSplit":
        return (("whitespace", "removed"),)
    if kind == "Punctuation":
        behavior = _behavior(spec.get("behavior", "Isolated"))
        if behavior is None:
            raise ValueError(f"pre-tokenizer Punctuation with behavior "
                             f"{spec.get('behavior')!r} is not supported: daskwp runs "
                             f"Punctuation with behavior Isolated or Removed only")
        return (("punctuation", behavior),)
    if kind == "Digits":
        if spec.get("individual_digits", False) is True:
            return (("numeric", "isolated"),)
        raise ValueError("pre-tokenizer Digits with individual_digits=false is not "
                         "supported: it keeps runs of digits together ('123' is one piece); "
                         "daskwp's single pass can only make each digit a piece of its own "
                         "(individual_digits=true)")
    if kind == "CharDelimiterSplit":
        d = spec.get("delimiter")
        if not isinstance(d, str) or len(d) != 1:
            raise ValueError(f"pre-tokenizer CharDelimiterSplit: delimiter must be one "
                             f"character, got {d!r}")
        return ((("char", d), "removed"),)
    if kind == "Split":
        pattern = spec.get("pattern")
        behavior = _behavior(spec.get("behavior"))
        text = pattern.get("String") if isinstance(pattern, dict) else None
        if (isinstance(text, str) and len(text) == 1 and behavior is not None
                and not spec.get("invert", False)):
            return ((("char", text), behavior),)
        raise ValueError(f"pre-tokenizer Split ({pattern!r:.60}, behavior "
                         f"{spec.get('behavior')!r}, invert {spec.get('invert', False)!r}) is "
                         f"not supported: daskwp runs Split only on one literal character, "
                         f"with behavior Removed or Isolated and invert false")
    reason = _REFUSED_PRE_TOKENIZERS.get(kind, "daskwp does not know it")
    raise ValueError(f"pre-tokenizer {kind} is not supported: {reason}")


def _behavior(value):
    v = value.lower() if isinstance(value, str) else None
    return {"isolated": "isolated", "removed": "removed"}.get(v)
