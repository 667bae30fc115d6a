"""Loading a transformers model folder straight into the drop-in (docs/design.md §3.6):
:func:`from_pretrained` is ``BertTokenizerFast.from_pretrained(folder, **kwargs)`` with daskwp
as the tokenizer.

It sits above both :mod:`daskwp.backends.tokenizer` (which reads the folder's vocabulary and
normalizer flags) and :mod:`daskwp.backends.transformers_compat` (the facade), so neither
imports the other for it.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.vocab import SPECIAL_NAME_OPTIONS
from .tokenizer import WordPieceTokenizer
from .transformers_compat import SPECIAL_ATTRS, TransformersTokenizer, is_added_token

__all__ = ["from_pretrained"]

#: transformers keyword -> daskwp tokenizer keyword (BertNormalizer flags).
_TOKENIZER_KWARGS = {"do_lower_case": "lowercase", "strip_accents": "strip_accents",
                     "tokenize_chinese_chars": "handle_chinese_chars"}
#: transformers settings the facade keeps.
_SETTINGS = ("model_max_length", "padding_side", "truncation_side",
             "clean_up_tokenization_spaces")
#: tokenizer_config.json keys that say nothing the drop-in must act on.
_IGNORED = {"tokenizer_class", "model_input_names", "added_tokens_decoder", "backend",
            "files_loaded", "name_or_path", "processor_class", "auto_map", "use_fast",
            "local_files_only", "do_basic_tokenize", "never_split", "vocab_file",
            "tokenizer_file", "split_special_tokens", "verbose"}


def _content(v):
    return v.get("content") if isinstance(v, dict) else v


def from_pretrained(folder, **kwargs) -> TransformersTokenizer:
    """The drop-in for a transformers model folder (``vocab.txt`` or ``tokenizer.json``, and
    ``tokenizer_config.json``), as ``BertTokenizerFast.from_pretrained(folder, **kwargs)``:
    keyword arguments override the config (``do_lower_case``, ``strip_accents``,
    ``tokenize_chinese_chars``, ``model_max_length``, ``padding_side``, ``truncation_side``,
    ``clean_up_tokenization_spaces``, the special tokens' names, ``extra_special_tokens`` /
    ``additional_special_tokens``); a named or extra special token the vocabulary does not
    have is added, as transformers adds it. Other keyword arguments raise ``TypeError``
    naming them."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"from_pretrained takes a model folder; {str(folder)!r} is not a "
                         f"directory")
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    allowed = set(_TOKENIZER_KWARGS) | set(_SETTINGS) | set(SPECIAL_ATTRS) | {
        "extra_special_tokens", "additional_special_tokens"}
    unknown = sorted(set(kwargs) - allowed - _IGNORED)
    if unknown:
        raise TypeError(f"from_pretrained: keyword argument(s) {unknown} are not available "
                        f"from daskwp's drop-in; allowed: {sorted(allowed)}")
    merged = {**cfg, **kwargs}
    if "additional_special_tokens" in merged and "extra_special_tokens" not in merged:
        merged["extra_special_tokens"] = merged.pop("additional_special_tokens")
    tok_kwargs = {dst: kwargs[src] for src, dst in _TOKENIZER_KWARGS.items() if src in kwargs}
    if "do_lower_case" in kwargs and tok_kwargs["lowercase"] is not None:
        tok_kwargs["lowercase"] = bool(tok_kwargs["lowercase"])
    names = {k: str(_content(merged[k])) for k in SPECIAL_NAME_OPTIONS
             if merged.get(k) is not None}
    tok = WordPieceTokenizer.from_pretrained(folder, **tok_kwargs, **names)
    v = tok.vocab
    specials = {k: merged[k] if is_added_token(merged[k]) else str(_content(merged[k]))
                for k in SPECIAL_ATTRS if merged.get(k) is not None}
    for k, t in v.special_names.items():          # the vocabulary's, unless named otherwise
        if k not in specials and v.token_to_id(t) is not None and k not in merged:
            specials[k] = t
    extra = merged.get("extra_special_tokens")
    extra = None if extra is None else [t if is_added_token(t) else str(_content(t))
                                        for t in extra]
    settings = {k: merged[k] for k in _SETTINGS if merged.get(k) is not None}
    spec_path = folder / "tokenizer.json"
    if spec_path.is_file():
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
        settings["added_token_strips"] = {
            at["content"]: (bool(at.get("lstrip")), bool(at.get("rstrip")))
            for at in spec.get("added_tokens") or []
            if isinstance(at, dict) and (at.get("lstrip") or at.get("rstrip"))}
    out = TransformersTokenizer(tok, name_or_path=str(folder), special_tokens=specials,
                                extra_special_tokens=extra, **settings)
    # the named and extra tokens the vocabulary lacks are added (flags checked), as
    # transformers' _post_init adds them
    new = [t for t in list(specials.values()) + (extra or [])
           if v.token_to_id(str(t)) is None]
    if new:
        out.add_tokens(new, special_tokens=True)
    out.split_special_tokens = bool(merged.get("split_special_tokens", False))
    out.init_kwargs = {k: val for k, val in merged.items() if k not in ("added_tokens_decoder",)}
    return out
