"""Reading a transformers BERT tokenizer into daskwp's (docs/design.md §3.6, "Reading").

:func:`from_transformers` takes a fast tokenizer (its ``backend_tokenizer``'s JSON, through
daskwp's ``tokenizer.json`` reader), a ``tokenizers.Tokenizer`` or a slow ``BertTokenizer``
(its vocabulary and flags) and returns the keyword arguments of a daskwp tokenizer plus the
transformers settings the drop-in keeps (``model_max_length``, sides, named special tokens,
added tokens and their ``lstrip`` / ``rstrip``). What daskwp cannot run the same way (a model
that is not WordPiece, a post-processor that is not BERT's template, a decoder that is not
WordPiece's, ``do_basic_tokenize=False`` ...) is refused with a ``ValueError`` naming it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..core.vocab import Vocabulary

__all__ = ["SPECIAL_ATTRS", "from_transformers"]

#: transformers' named special tokens, in its order.
SPECIAL_ATTRS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token")

# The BERT template (``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B:1 [SEP]:1``) as tokenizers.json
# spells it; what from_transformers accepts as a post-processor.
_SINGLE = [{"SpecialToken": {"type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
           {"SpecialToken": {"type_id": 0}}]
_PAIR_TAIL = [{"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"type_id": 1}}]


def _template_ok(post, cls, sep) -> bool:
    if post is None:
        return False
    t = post.get("type")
    if t == "BertProcessing":
        return (post.get("cls") or [None])[0] == cls and (post.get("sep") or [None])[0] == sep
    if t != "TemplateProcessing":
        return False

    def strip(items):
        out = []
        for it in items or []:
            if "SpecialToken" in it:
                out.append({"SpecialToken": {"type_id": it["SpecialToken"].get("type_id")}})
            else:
                out.append({"Sequence": {"id": it["Sequence"].get("id"),
                                         "type_id": it["Sequence"].get("type_id")}})
        return out

    single, pair = post.get("single") or [], post.get("pair") or []
    if strip(single) != _SINGLE or strip(pair) != _SINGLE + _PAIR_TAIL:
        return False
    names = [single[0]["SpecialToken"]["id"], single[2]["SpecialToken"]["id"],
             pair[0]["SpecialToken"]["id"], pair[2]["SpecialToken"]["id"],
             pair[4]["SpecialToken"]["id"]]
    return names == [cls, sep, cls, sep, sep]


def _check_spec(spec: dict, cls, sep, where: str) -> None:
    model = spec.get("model") or {}
    if model.get("type") != "WordPiece":
        raise ValueError(f"{where}: the model is {model.get('type')!r}; daskwp reads "
                         f"WordPiece models only")
    post = spec.get("post_processor")
    if not _template_ok(post, cls, sep):
        kind = "none" if post is None else post.get("type")
        raise ValueError(
            f"{where}: the post_processor ({kind}) is not BERT's template ([CLS] $A [SEP] / "
            f"[CLS] $A [SEP] $B:1 [SEP]:1 with {cls!r} and {sep!r}); daskwp's drop-in frames "
            f"rows that way only")
    dec = spec.get("decoder")
    if dec is not None and (dec.get("type") != "WordPiece" or
                            dec.get("prefix", "##") != model.get("continuing_subword_prefix",
                                                                  "##")
                            or dec.get("cleanup", True) is not True):
        raise ValueError(f"{where}: the decoder ({dec.get('type')}, {dec!r:.80}) is not a "
                         f"WordPiece decoder with cleanup and the model's prefix; daskwp "
                         f"decodes that way only")


def from_transformers(obj) -> tuple[dict, dict]:
    """``(arguments of WordPieceTokenizer, transformers settings)`` from a transformers BERT
    tokenizer (fast: its ``backend_tokenizer``; slow: its vocabulary and init flags) or a
    ``tokenizers.Tokenizer``. The arguments hold ``vocab`` (a :class:`Vocabulary`), the
    normalizer / flags and the special-token names; the settings ``model_max_length``,
    ``padding_side``, ``truncation_side``, ``clean_up_tokenization_spaces`` and ``added`` (the
    slow tokenizer's added tokens, to register with ``add_special_tokens``).

    Refused with a ``ValueError`` naming the component: a model that is not WordPiece, a
    post-processor that is not BERT's template, a decoder that is not WordPiece's, a
    normalizer or pre-tokenizer daskwp does not run (the tokenizer.json reader's and the
    tokenizer's own refusals), ``normalized`` / ``single_word`` added tokens, a slow
    tokenizer's ``do_basic_tokenize=False`` or ``never_split``.
    """
    settings = {"model_max_length": None, "padding_side": "right",
                "truncation_side": "right", "clean_up_tokenization_spaces": False,
                "name_or_path": "", "added": []}
    names: dict = {}
    backend = getattr(obj, "backend_tokenizer", None)
    if backend is None and hasattr(obj, "to_str") and hasattr(obj, "get_vocab"):
        backend = obj                                  # a tokenizers.Tokenizer
        where = "tokenizers.Tokenizer"
    else:
        where = f"transformers {type(obj).__name__}"
    if obj is not backend:
        for k in ("model_max_length", "padding_side", "truncation_side",
                  "clean_up_tokenization_spaces", "name_or_path"):
            if hasattr(obj, k):
                settings[k] = getattr(obj, k)
        for k in ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"):
            v = getattr(obj, k, None)
            if v is not None:
                names[k] = str(v)
        # transformers' named and extra special tokens, as the tokenizer has them
        smap = getattr(obj, "special_tokens_map", None)
        if isinstance(smap, dict):
            settings["special_tokens"] = {k: str(v) for k, v in smap.items()
                                          if k in SPECIAL_ATTRS and v is not None}
            settings["extra_special_tokens"] = [
                str(t) for t in (getattr(obj, "extra_special_tokens", None) or [])]
    if backend is not None:
        spec = json.loads(backend.to_str())
        cls = names.get("cls_token")
        sep = names.get("sep_token")
        post = spec.get("post_processor") or {}
        if cls is None or sep is None:
            single = post.get("single") or []
            if post.get("type") == "TemplateProcessing" and len(single) == 3:
                cls = cls or single[0].get("SpecialToken", {}).get("id")
                sep = sep or single[2].get("SpecialToken", {}).get("id")
            elif post.get("type") == "BertProcessing":
                cls = cls or post["cls"][0]
                sep = sep or post["sep"][0]
        _check_spec(spec, cls, sep, where)
        spec["truncation"] = None
        spec["padding"] = None
        settings["added_token_strips"] = {
            at["content"]: (bool(at.get("lstrip")), bool(at.get("rstrip")))
            for at in spec.get("added_tokens") or []
            if isinstance(at, dict) and (at.get("lstrip") or at.get("rstrip"))}
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "tokenizer.json"
            path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
            try:
                vocab = Vocabulary.from_file(path, **{k: v for k, v in names.items()
                                                      if k in ("unk_token",)})
            except ValueError as e:
                raise ValueError(str(e).replace(f"tokenizer file {str(path)!r}", where)) \
                    from None
        for k, v in (("cls_token", cls), ("sep_token", sep)):
            if v is not None:
                names[k] = v
        source = settings["name_or_path"] or where
        vocab = vocab.with_special_names(**{k: v for k, v in names.items()
                                            if vocab.token_to_id(v) is not None})
        args = {"vocab": vocab, "normalizer": json.dumps(spec.get("normalizer")),
                "pre_tokenizer": json.dumps(spec.get("pre_tokenizer")),
                "_where": source}
        return args, settings
    # A slow (Python) BertTokenizer: its vocabulary and flags.
    vocab_map = getattr(obj, "vocab", None)
    if not isinstance(vocab_map, dict) or not hasattr(obj, "do_lower_case"):
        raise TypeError(f"from_transformers takes a transformers BERT tokenizer (fast or "
                        f"slow) or a tokenizers.Tokenizer, got {type(obj).__name__}")
    if getattr(obj, "do_basic_tokenize", True) is False:
        raise ValueError(f"{where}: do_basic_tokenize=False (WordPiece on whitespace-split "
                         f"text only) is not supported; daskwp runs BERT's basic tokenizer")
    basic = getattr(obj, "basic_tokenizer", None)
    never = set(getattr(basic, "never_split", None) or ()) | \
        set(getattr(obj, "never_split", None) or ())
    specials = {str(t) for t in getattr(obj, "all_special_tokens", [])}
    extra = sorted(never - specials)
    if extra:
        raise ValueError(f"{where}: never_split={extra[:5]} is not supported (daskwp keeps "
                         f"only special tokens whole); register them as special tokens "
                         f"instead")
    size = max(vocab_map.values()) + 1
    tokens = [""] * size
    for t, i in sorted(vocab_map.items(), key=lambda kv: kv[1]):
        tokens[i] = t
    v = Vocabulary(tokens, source=settings["name_or_path"] or where,
                   **{k: names[k] for k in names})
    added = []
    decoder = getattr(obj, "added_tokens_decoder", {}) or {}
    for i, at in sorted(decoder.items()):
        content = str(at)
        if v.token_to_id(content) == i:
            continue
        if getattr(at, "normalized", False) and not getattr(at, "special", False):
            raise ValueError(f"{where}: added token {content!r} is normalized (matched in "
                             f"the normalized text), which daskwp does not support")
        added.append((content, int(i)))
    settings["added"] = added
    lower = bool(obj.do_lower_case)
    args = {"vocab": v, "lowercase": lower,
            "strip_accents": getattr(obj, "strip_accents", None),
            "handle_chinese_chars": bool(getattr(obj, "tokenize_chinese_chars", True)),
            "_where": where}
    if basic is not None:
        args["lowercase"] = bool(getattr(basic, "do_lower_case", lower))
        args["strip_accents"] = getattr(basic, "strip_accents", args["strip_accents"])
        args["handle_chinese_chars"] = bool(getattr(basic, "tokenize_chinese_chars",
                                                    args["handle_chinese_chars"]))
    return args, settings
