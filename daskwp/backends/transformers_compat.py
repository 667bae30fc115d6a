"""The transformers drop-in: a daskwp tokenizer behind ``BertTokenizerFast``'s API
(docs/design.md §3.6).

:class:`TransformersTokenizer` (``tok.as_transformers()``) answers ``__call__``,
``encode_plus``, ``batch_encode_plus``, ``encode``, ``decode``, ``pad``, ... with what
``transformers`` (5.x, ``TokenizersBackend``) returns for a BERT tokenizer built from the same
files: the same keys, values, types (lists, NumPy int64 arrays, torch int64 tensors) and the
same errors. The ids come from the daskwp tokenizer (``tok.encode``: flat ragged ids per
document); truncation, overflow, special tokens and padding follow HuggingFace ``tokenizers``'
rules (``Encoding::truncate``, ``truncate_encodings``, ``Encoding::merge_with`` and the BERT
template), so what transformers accepts this accepts, and what it refuses (or panics on) this
refuses with a ``ValueError``.

:func:`from_transformers` reads a transformers BERT tokenizer (fast or slow) or a
``tokenizers.Tokenizer`` into the keyword arguments of a daskwp tokenizer.

This module holds the tokenizer class and its call resolution; the result class is in
:mod:`~daskwp.backends.transformers_batch`, HF's truncation rules in
:mod:`~daskwp.backends.transformers_truncation`, the reader in
:mod:`~daskwp.backends.transformers_importer` (all re-exported here: the public import paths
and the pickled classes' old paths keep working). It does not import
:mod:`daskwp.backends.tokenizer` (the tokenizer is passed in; duck typing), so that module
imports this one at its top.
"""

from __future__ import annotations

import json
import logging
from collections import UserDict
from pathlib import Path

import numpy as np

from ..core.decode import cleanup_token
from ..core.normalizer import whitespace_vanishes
from ..core.vocab import WHITE_SPACE, Vocabulary
from ..core.windows import check_padded_bytes
from .transformers_batch import (ArrayRows, BatchEncoding, as_tensor, offsets_available,
                                 pad_left, span_rows, tensor_kind)
from .transformers_importer import SPECIAL_ATTRS, from_transformers
from .transformers_prepare import prepare_for_model, truncate_sequences
from .transformers_truncation import merged_rows, padded_row, truncate_pair

__all__ = ["BatchEncoding", "TransformersTokenizer", "from_transformers",
           "is_added_token", "offsets_available"]

#: The class's name in pickles made before the split (daskwp.backends.transformers_compat).
_SeqRows = ArrayRows

#: transformers' logger for its tokenizers' warnings: the drop-in's over-length warning goes
#: where transformers' goes (``assertLogs("transformers")``, transformers' verbosity).
logger = logging.getLogger("transformers.tokenization_utils_base")

#: transformers' "no limit" for ``model_max_length`` (``VERY_LARGE_INTEGER``) and the bound
#: above which it means "none" (``LARGE_INTEGER``).
VERY_LARGE_INTEGER = int(1e30)
LARGE_INTEGER = int(1e20)

PADDING_STRATEGIES = ("longest", "max_length", "do_not_pad")
TRUNCATION_STRATEGIES = ("only_first", "only_second", "longest_first", "do_not_truncate")


def is_added_token(value) -> bool:
    """A ``tokenizers.AddedToken`` (duck typing: this module does not import tokenizers)."""
    return all(hasattr(value, a) for a in ("content", "lstrip", "rstrip", "single_word",
                                           "normalized", "special"))


def _named_token(key: str):
    """``tok.<key>`` (e.g. ``bos_token``): the token's string or None; settable (a string,
    an AddedToken or None), as transformers'."""
    def get(self):
        t = self._special_tokens_map.get(key)
        return None if t is None else str(t)

    def set_(self, value):
        if value is not None and not isinstance(value, str) and not is_added_token(value):
            raise ValueError(f"Cannot set a non-string value as the {key}")
        self._special_tokens_map[key] = value

    return property(get, set_, doc=f"transformers' ``{key}`` (None when not set).")


def _named_token_id(key: str):
    """``tok.<key>_id``: the id of the token (the unknown token's id for a string the
    vocabulary does not have, as transformers); setting it sets the token."""
    def get(self):
        t = self._special_tokens_map.get(key)
        return None if t is None else self.convert_tokens_to_ids(str(t))

    def set_(self, value):
        self._special_tokens_map[key] = None if value is None else \
            self.convert_ids_to_tokens(value)

    return property(get, set_, doc=f"transformers' ``{key}_id``.")


class TransformersTokenizer:
    """A daskwp tokenizer with the API of transformers' ``BertTokenizerFast``.

    Build it with ``tok.as_transformers()``. Outputs equal ``BertTokenizerFast``'s
    (transformers 5.x) on the same vocabulary and normalizer flags: keys, values and types;
    what transformers refuses raises here too. See docs/design.md §3.6 for what is supported
    and what is refused (``truncation_side`` / ``padding_side`` "left" are honoured;
    ``return_tensors`` other than None / "np" / "pt" is refused by name; character offsets
    and word ids need a daskwp build that gives them, see :func:`offsets_available`).

    Examples
    --------
    >>> import daskwp
    >>> hf = daskwp.WordPieceTokenizer().as_transformers(model_max_length=512)
    >>> batch = hf(["Hello world!", "hi"], padding=True)
    >>> batch["input_ids"]
    [[101, 7592, 2088, 999, 102], [101, 7632, 102, 0, 0]]
    >>> hf.convert_ids_to_tokens(batch["input_ids"][1])
    ['[CLS]', 'hi', '[SEP]', '[PAD]', '[PAD]']
    """

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    backend = "tokenizers"         # transformers' name of the backend it stands for
    is_fast = True
    pad_token_type_id = 0

    def __init__(self, tokenizer, *, model_max_length: int | None = None,
                 padding_side: str = "right", truncation_side: str = "right",
                 clean_up_tokenization_spaces: bool = False, name_or_path: str = "",
                 special_tokens: dict | None = None,
                 extra_special_tokens: list | None = None,
                 added_token_strips: dict | None = None):
        for name in ("encode", "vocab"):
            if not hasattr(tokenizer, name):
                raise TypeError(f"as_transformers needs a daskwp WordPieceTokenizer, got "
                                f"{type(tokenizer).__name__} (no {name!r})")
        self.tokenizer = tokenizer
        self.model_max_length = VERY_LARGE_INTEGER if model_max_length is None \
            else int(model_max_length)
        self.padding_side = padding_side
        self.truncation_side = truncation_side
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.name_or_path = name_or_path
        self.split_special_tokens = False
        self.deprecation_warnings: dict = {}
        self.init_kwargs: dict = {}        # transformers' (from_pretrained fills it)
        # added tokens registered with special=False and never special (daskwp registers
        # every added token as special; decode(skip_special_tokens=True) keeps these, as
        # HF's decode skips every token that was ever added as special), and the special
        # flag add_tokens last gave each token (HF's count compares it)
        self._nonspecial_added: set = set()
        self._added_special: dict = {}
        # added token -> (lstrip, rstrip): HF's span of such a token takes the whitespace
        # next to it (ids are the same: the pre-tokenizer drops that whitespace)
        # (the core widens the spans of those its tokenizer.json names: _core_strips)
        self._strips: dict = {t: (bool(a), bool(b)) for t, (a, b) in
                              {**self._core_strips(tokenizer), **(added_token_strips or {})}
                              .items() if a or b}
        self.init_inputs: tuple = ()
        # transformers' named special tokens and extra special tokens: the names the
        # transformers tokenizer had (from_transformers), else the daskwp vocabulary's; the
        # [CLS] / [SEP] that frame rows stay the vocabulary's (as a transformers tokenizer's
        # post-processor is fixed when it is built), padding takes pad_token_id.
        v = tokenizer.vocab
        if special_tokens is None:
            special_tokens = {k: t for k, t in v.special_names.items()
                              if v.token_to_id(t) is not None}
        unknown = sorted(set(special_tokens) - set(SPECIAL_ATTRS))
        if unknown:
            raise ValueError(f"special token name(s) {unknown} are not available from "
                             f"daskwp's drop-in; allowed: {list(SPECIAL_ATTRS)}")
        self._special_tokens_map = dict.fromkeys(SPECIAL_ATTRS)
        for k, t in special_tokens.items():
            setattr(self, k, t)
        if extra_special_tokens is None:
            named = {str(t) for t in self._special_tokens_map.values() if t is not None}
            extra_special_tokens = [t for t in v.special_tokens if t not in named
                                    and v.token_to_id(t) in v.special_ids]
        self.extra_special_tokens = extra_special_tokens

    # -- sides: checked where they are set -------------------------------------------
    @property
    def padding_side(self) -> str:
        return self._padding_side

    @padding_side.setter
    def padding_side(self, value):
        if value not in ("right", "left"):
            raise ValueError(f"Padding side should be selected between 'right' and 'left', "
                             f"current value: {value}")
        self._padding_side = value

    @property
    def truncation_side(self) -> str:
        return self._truncation_side

    @truncation_side.setter
    def truncation_side(self, value):
        if value not in ("right", "left"):
            raise ValueError(f"Truncation side should be selected between 'right' and "
                             f"'left', current value: {value}")
        self._truncation_side = value

    # -- vocabulary and special tokens ---------------------------------------------------
    @property
    def vocab_obj(self) -> Vocabulary:
        return self.tokenizer.vocab

    def _id(self, token):
        return None if token is None else self.convert_tokens_to_ids(token)

    unk_token = _named_token("unk_token")
    sep_token = _named_token("sep_token")
    pad_token = _named_token("pad_token")
    cls_token = _named_token("cls_token")
    mask_token = _named_token("mask_token")
    bos_token = _named_token("bos_token")
    eos_token = _named_token("eos_token")
    unk_token_id = _named_token_id("unk_token")
    sep_token_id = _named_token_id("sep_token")
    pad_token_id = _named_token_id("pad_token")
    cls_token_id = _named_token_id("cls_token")
    mask_token_id = _named_token_id("mask_token")
    bos_token_id = _named_token_id("bos_token")
    eos_token_id = _named_token_id("eos_token")

    @property
    def special_tokens_map(self) -> dict:
        """The named special tokens that are set (transformers 5: without the extra
        ones)."""
        return {k: str(t) for k, t in self._special_tokens_map.items() if t is not None}

    @property
    def extra_special_tokens(self) -> list:
        return [str(t) for t in self._extra_special_tokens]

    @extra_special_tokens.setter
    def extra_special_tokens(self, value):
        if value is not None and not isinstance(value, (list, tuple)):
            raise ValueError(f"extra_special_tokens must be a list or tuple, got "
                             f"{type(value)}")
        self._extra_special_tokens = [] if value is None else list(value)

    @property
    def extra_special_tokens_ids(self) -> list:
        return self.convert_tokens_to_ids(self.extra_special_tokens)

    @extra_special_tokens_ids.setter
    def extra_special_tokens_ids(self, value):
        self.extra_special_tokens = None if value is None else \
            [self.convert_ids_to_tokens(i) for i in value]

    @property
    def all_special_tokens(self) -> list:
        """Named special tokens (transformers' order: bos, eos, unk, sep, pad, cls, mask),
        then the extra ones, each once."""
        out = list(dict.fromkeys(self.special_tokens_map.values()))
        return out + [t for t in dict.fromkeys(self.extra_special_tokens) if t not in out]

    @property
    def all_special_ids(self) -> list:
        return self.convert_tokens_to_ids(self.all_special_tokens)

    def get_vocab(self) -> dict:
        v = self.vocab_obj
        out = dict(v.model_tokens)
        for t in v.special_tokens:
            out[t] = v.token_to_id(t)
        return out

    @property
    def vocab(self) -> dict:
        return self.get_vocab()

    @property
    def vocab_size(self) -> int:
        return len(self.vocab_obj.model_tokens)

    def __len__(self) -> int:
        return len(self.get_vocab())

    def get_added_vocab(self) -> dict:
        v = self.vocab_obj
        return {t: v.token_to_id(t) for t in v.special_tokens}

    @property
    def added_tokens_encoder(self) -> dict:
        return dict(sorted(self.get_added_vocab().items(), key=lambda kv: kv[1]))

    @property
    def added_tokens_decoder(self) -> dict:
        """id -> ``tokenizers.AddedToken`` of the added tokens, with the flags daskwp
        honours (needs the ``tokenizers`` package, as transformers does)."""
        try:
            from tokenizers import AddedToken
        except ImportError:
            raise NotImplementedError("added_tokens_decoder needs the tokenizers package "
                                      "(pip install tokenizers)") from None
        v = self.vocab_obj
        out = {}
        for t in v.special_tokens:
            lstrip, rstrip = self._strips.get(t, (False, False))
            special = self._added_special.get(t, self._is_special_added(t))
            out[v.token_to_id(t)] = AddedToken(t, single_word=False, lstrip=lstrip,
                                               rstrip=rstrip, normalized=False,
                                               special=special)
        return dict(sorted(out.items()))

    def _special_added_ids(self) -> set:
        v = self.vocab_obj
        return set(v.special_ids) - {v.token_to_id(t) for t in self._nonspecial_added}

    def _is_special_added(self, token: str) -> bool:
        v = self.vocab_obj
        return v.token_to_id(token) in v.special_ids and token not in self._nonspecial_added

    # -- adding tokens (transformers' add_tokens / add_special_tokens) ------------------
    def add_tokens(self, new_tokens, special_tokens: bool = False) -> int:
        """Add tokens (strings or ``tokenizers.AddedToken``) to the daskwp tokenizer, in
        place, as transformers does; returns how many were added or changed (transformers'
        count: an identical added token already there does not count).

        daskwp matches added tokens whole in the raw text: ``normalized=True`` (transformers'
        default for a plain string with ``special_tokens=False``: pass
        ``AddedToken(t, normalized=False)``), ``lstrip``, ``rstrip``, ``single_word`` and a
        WordPiece piece of the vocabulary are refused with a ValueError naming them, as are
        the strings daskwp's ``add_special_tokens`` refuses (whitespace, ``##`` ...)."""
        if not new_tokens:
            return 0
        if not isinstance(new_tokens, (list, tuple)):
            new_tokens = [new_tokens]
        v = self.vocab_obj
        plan, new, seen = [], [], set()
        for t in new_tokens:
            if is_added_token(t):
                content, special = str(t.content), bool(t.special)
                flags = {k: bool(getattr(t, k)) for k in ("normalized", "lstrip", "rstrip",
                                                          "single_word")}
            elif isinstance(t, str):
                content, special = t, bool(special_tokens)
                flags = {"normalized": not special, "lstrip": False, "rstrip": False,
                         "single_word": False}
            else:
                raise TypeError(f"Token {t!r} is not a string but a {type(t)}.")
            if not content:
                continue
            strips = (flags.pop("lstrip"), flags.pop("rstrip"))
            if any(strips) and not whitespace_vanishes(self.tokenizer.pipeline):
                raise ValueError(
                    f"add_tokens: token {content!r} has lstrip / rstrip, which daskwp supports "
                    f"only with a pre-tokenizer that removes whitespace (this tokenizer's "
                    f"keeps it)")
            bad = [k for k, on in flags.items() if on]
            if bad:
                hint = " (pass AddedToken(t, normalized=False) to match it in the raw " \
                    "text)" if bad == ["normalized"] else ""
                raise ValueError(
                    f"add_tokens: token {content!r} has {', '.join(f'{k}=True' for k in bad)},"
                    f" which daskwp does not support: daskwp matches added tokens whole, "
                    f"in the raw text{hint}")
            i = v.token_to_id(content)
            if i is not None and content not in v.special_tokens:
                raise ValueError(
                    f"add_tokens: {content!r} is a WordPiece piece of the vocabulary (id {i}); "
                    f"transformers would match it whole wherever it appears, which daskwp "
                    f"does not do")
            if i is None and content not in seen:
                new.append(content)
                seen.add(content)
            plan.append((content, special, strips))
        if new:
            self.tokenizer.add_special_tokens(new)
        count = 0
        for content, special, strips in plan:
            current = (self._added_special.get(content, self._is_special_added(content)),
                       self._strips.get(content, (False, False)))
            if any(strips):
                self._strips[content] = strips
            else:
                self._strips.pop(content, None)
            if content in seen:
                seen.discard(content)
                if not special:
                    self._nonspecial_added.add(content)
            elif current == (special, strips):
                continue                       # identical: transformers ignores it
            elif special and not current[0]:
                self._nonspecial_added.discard(content)
            self._added_special[content] = special
            count += 1
        return count

    def add_special_tokens(self, special_tokens_dict: dict,
                           replace_extra_special_tokens: bool = True) -> int:
        """transformers' ``add_special_tokens``: named tokens (``bos_token`` ...) set and
        added, ``extra_special_tokens`` (or ``additional_special_tokens``) replacing or
        extending the extra list; returns :meth:`add_tokens`' count."""
        if not special_tokens_dict:
            return 0
        d = dict(special_tokens_dict)
        if "additional_special_tokens" in d and not d.get("extra_special_tokens"):
            d["extra_special_tokens"] = d.pop("additional_special_tokens")
        allowed = set(SPECIAL_ATTRS) | {"extra_special_tokens"}
        to_add = []
        for key, value in d.items():
            if key not in allowed:
                raise ValueError(f"Key {key} is not a valid special token. Valid keys are: "
                                 f"{allowed}")
            if key == "extra_special_tokens":
                if not isinstance(value, (list, tuple)) or not all(
                        isinstance(t, str) or is_added_token(t) for t in value):
                    raise ValueError(f"Tokens {value} for key {key} should all be str or "
                                     f"AddedToken instances")
                new = [t for t in value if replace_extra_special_tokens or
                       str(t) not in self.extra_special_tokens]
                if replace_extra_special_tokens and new:
                    self._extra_special_tokens = list(new)
                else:
                    self._extra_special_tokens.extend(new)
                to_add.extend(new)
            else:
                if not (isinstance(value, str) or is_added_token(value)):
                    raise ValueError(f"Token {value} for key {key} should be a str or an "
                                     f"AddedToken instance")
                setattr(self, key, value)
                to_add.append(value)
        return self.add_tokens(to_add, special_tokens=True)

    def get_special_tokens_mask(self, token_ids_0: list, token_ids_1: list | None = None,
                                already_has_special_tokens: bool = False) -> list:
        """1 on special tokens: with ``already_has_special_tokens=True`` the ids in
        ``all_special_ids`` (transformers 5); else where BERT's template puts ``[CLS]`` /
        ``[SEP]`` around the ids (transformers 4's answer; transformers 5 raises there)."""
        if already_has_special_tokens:
            if token_ids_1 is not None:
                raise ValueError("You should not supply a second sequence if the provided "
                                 "sequence of ids is already formatted with special tokens "
                                 "for the model.")
            special = set(self.all_special_ids)
            return [1 if int(i) in special else 0 for i in token_ids_0]
        out = [1] + [0] * len(token_ids_0) + [1]
        return out if token_ids_1 is None else out + [0] * len(token_ids_1) + [1]

    # -- transformers 4's helpers for framing ids (BERT's template) --------------------
    def build_inputs_with_special_tokens(self, token_ids_0: list,
                                         token_ids_1: list | None = None) -> list:
        """``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` (transformers 4's BERT)."""
        cls, sep = [self.vocab_obj.cls_id], [self.vocab_obj.sep_id]
        out = cls + list(token_ids_0) + sep
        return out if token_ids_1 is None else out + list(token_ids_1) + sep

    def create_token_type_ids_from_sequences(self, token_ids_0: list,
                                             token_ids_1: list | None = None) -> list:
        """0 on ``[CLS] A [SEP]``, 1 on ``B [SEP]`` (transformers 4's BERT)."""
        out = [0] * (len(token_ids_0) + 2)
        return out if token_ids_1 is None else out + [1] * (len(token_ids_1) + 1)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 3 if pair else 2

    def truncate_sequences(self, ids, pair_ids=None, num_tokens_to_remove: int = 0,
                           truncation_strategy="longest_first", stride: int = 0):
        """transformers 4's ``truncate_sequences`` on ids: ``(ids, pair_ids,
        overflowing_tokens)``, ``num_tokens_to_remove`` tokens cut on ``truncation_side``
        (see ``daskwp.backends.transformers_prepare``; docs/design.md §3.6)."""
        return truncate_sequences(self, ids, pair_ids, num_tokens_to_remove,
                                  truncation_strategy, stride)

    def prepare_for_model(self, ids, pair_ids=None, **kwargs) -> BatchEncoding:
        """transformers 4's ``prepare_for_model``: ids (and pair ids) framed with the special
        tokens, truncated and padded as one text would be, with 4.x's keyword arguments
        (see ``daskwp.backends.transformers_prepare``; docs/design.md §3.6)."""
        return prepare_for_model(self, ids, pair_ids, **kwargs)

    @property
    def max_len_single_sentence(self) -> int:
        return self.model_max_length - 2

    @property
    def max_len_sentences_pair(self) -> int:
        return self.model_max_length - 3

    def convert_tokens_to_ids(self, tokens):
        if tokens is None:
            return None
        v = self.vocab_obj
        if isinstance(tokens, str):
            i = v.token_to_id(tokens)
            return v.unk_id if i is None else i
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        v = self.vocab_obj
        if isinstance(ids, (int, np.integer)):
            return self._token_of(int(ids))
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._token_of(int(i)) for i in _to_py(ids) if int(i) not in skip] \
            if v is not None else []

    def _token_of(self, i: int):
        v = self.vocab_obj
        t = v.id_to_token(i)
        if t is None or v.token_to_id(t) != i:
            return None if t is None or t == "" else t
        return t

    def convert_tokens_to_string(self, tokens) -> str:
        prefix = self.vocab_obj.continuing_subword_prefix
        out = []
        for k, t in enumerate(tokens):
            if k:
                t = t[len(prefix):] if t.startswith(prefix) else " " + t
            out.append(cleanup_token(t))
        return "".join(out)

    def clean_up_tokenization(self, text: str) -> str:
        return (text.replace(" .", ".").replace(" ?", "?").replace(" !", "!")
                .replace(" ,", ",").replace(" ' ", "'").replace(" n't", "n't")
                .replace(" 'm", "'m").replace(" 's", "'s").replace(" 've", "'ve")
                .replace(" 're", "'re"))

    # -- decoding --------------------------------------------------------------------------
    def decode(self, token_ids, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None, **kwargs):
        token_ids = _to_py(token_ids)
        if isinstance(token_ids, (list, tuple)) and token_ids and \
                isinstance(token_ids[0], (list, tuple)):
            return [self._decode(s, skip_special_tokens, clean_up_tokenization_spaces)
                    for s in token_ids]
        return self._decode(token_ids, skip_special_tokens, clean_up_tokenization_spaces)

    def batch_decode(self, sequences, skip_special_tokens: bool = False,
                     clean_up_tokenization_spaces: bool | None = None, **kwargs) -> list:
        sequences = _to_py(sequences)
        if len(sequences) == 0:
            return []
        out = self.decode(sequences, skip_special_tokens, clean_up_tokenization_spaces)
        return [out] if isinstance(out, str) else out

    def _decode(self, ids, skip_special_tokens, clean_up):
        if isinstance(ids, int):
            ids = [ids]
        if isinstance(ids, dict):
            ids = ids["input_ids"]
        ids = [int(i) for i in ids]
        if skip_special_tokens and self._nonspecial_added:
            skip = self._special_added_ids()
            ids = [i for i in ids if i not in skip]
            skip_special_tokens = False
        text = self.tokenizer.decode(ids, skip_special_tokens=bool(skip_special_tokens))
        clean_up = self.clean_up_tokenization_spaces if clean_up is None else clean_up
        return self.clean_up_tokenization(text) if clean_up else text

    # -- encoding --------------------------------------------------------------------------
    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False,
                 **kwargs) -> list:
        enc = self(text, text_pair=pair, add_special_tokens=add_special_tokens, **kwargs)
        return enc.tokens(0)

    def encode(self, text, text_pair=None, add_special_tokens: bool = True, padding=False,
               truncation=None, max_length=None, stride: int = 0, padding_side=None,
               return_tensors=None, **kwargs):
        return self(text, text_pair=text_pair, add_special_tokens=add_special_tokens,
                    padding=padding, truncation=truncation, max_length=max_length,
                    stride=stride, padding_side=padding_side, return_tensors=return_tensors,
                    **kwargs)["input_ids"]

    def encode_plus(self, text, text_pair=None, **kwargs) -> BatchEncoding:
        """One text (or pair): ``__call__`` on it (transformers 4's ``encode_plus``)."""
        if isinstance(text, (list, tuple)) and not kwargs.get("is_split_into_words"):
            raise TypeError("encode_plus takes one text (a str); use batch_encode_plus or "
                            "__call__ for a batch")
        return self(text, text_pair=text_pair, **kwargs)

    def batch_encode_plus(self, batch_text_or_text_pairs, **kwargs) -> BatchEncoding:
        """A batch of texts or ``(text, pair)`` tuples (transformers 4's
        ``batch_encode_plus``)."""
        if not isinstance(batch_text_or_text_pairs, (list, tuple)):
            raise TypeError(f"batch_text_or_text_pairs has to be a list or a tuple (got "
                            f"{type(batch_text_or_text_pairs)})")
        return self(list(batch_text_or_text_pairs), **kwargs)

    def __call__(self, text=None, text_pair=None, text_target=None, text_pair_target=None,
                 add_special_tokens: bool = True, padding=False, truncation=None,
                 max_length: int | None = None, stride: int = 0,
                 is_split_into_words: bool = False, pad_to_multiple_of: int | None = None,
                 padding_side: str | None = None, return_tensors=None,
                 return_token_type_ids: bool | None = None,
                 return_attention_mask: bool | None = None,
                 return_overflowing_tokens: bool = False,
                 return_special_tokens_mask: bool = False,
                 return_offsets_mapping: bool = False, return_length: bool = False,
                 verbose: bool = True, **kwargs) -> BatchEncoding:
        if text_target is not None or text_pair_target is not None:
            raise NotImplementedError("text_target / text_pair_target (labels for "
                                      "sequence-to-sequence models) are not available from "
                                      "daskwp's transformers drop-in")
        split = kwargs.pop("split_special_tokens", None)
        split = self.split_special_tokens if split is None else bool(split)
        if kwargs:
            raise TypeError(f"unexpected keyword argument(s) {sorted(kwargs)} for daskwp's "
                            f"transformers drop-in")
        if text is None:
            raise ValueError("You need to specify either `text` or `text_target`.")
        padding, strategy, max_length = self._strategies(padding, truncation, max_length,
                                                         pad_to_multiple_of)
        if padding_side is not None and padding_side not in ("left", "right"):
            raise ValueError(f"Invalid padding strategy:{padding_side}")
        if return_tensors is not None:
            tensor_kind(return_tensors)
        call = (text, text_pair, bool(add_special_tokens), padding, strategy, max_length,
                int(stride), bool(is_split_into_words), pad_to_multiple_of,
                padding_side or self.padding_side)
        flags = (return_token_type_ids, return_attention_mask,
                 bool(return_overflowing_tokens), bool(return_special_tokens_mask))
        if return_offsets_mapping:
            self._check_offsets_exact()
        out = self._splitting(split, lambda: self._encode(
            *call, return_tensors, *flags, bool(return_offsets_mapping), bool(return_length)))
        if max_length is None and verbose and self.model_max_length != 0:
            self._warn_if_too_long(out.data["input_ids"])
        if not return_offsets_mapping:
            sides = self.truncation_side

            def redo():
                keep, self.truncation_side = self.truncation_side, sides
                try:
                    return self._splitting(split, lambda: self._encode(*call, None, *flags,
                                                                       True, False))
                finally:
                    self.truncation_side = keep
            out._redo = redo
        return out

    def _splitting(self, split: bool, run):
        """``run()`` with the special tokens matched (``split=False``) or split as text
        (``split_special_tokens=True``)."""
        keep, self._split_now = getattr(self, "_split_now", False), split
        try:
            return run()
        finally:
            self._split_now = keep

    def _encoder(self):
        """The daskwp tokenizer this call encodes with: for ``split_special_tokens=True``,
        one built from the same vocabulary that matches only the non-special added tokens
        (transformers' ``encode_special_tokens``), cached."""
        if not getattr(self, "_split_now", False):
            return self.tokenizer
        v = self.vocab_obj
        keep = {t: v.token_to_id(t) for t in v.special_tokens
                if not self._is_special_added(t)}
        key = (v.hash, tuple(sorted(keep)))
        cached = getattr(self, "_split_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        model = v.model_tokens
        tokens = [""] * (max(model.values()) + 1)
        extra = {}
        for t, i in sorted(model.items(), key=lambda kv: kv[1]):
            if tokens[i] == "":
                tokens[i] = t
            else:
                extra[t] = i
        names = {k: n for k, n in v.special_names.items()}
        try:
            vocab = Vocabulary(tokens, continuing_subword_prefix=v.continuing_subword_prefix,
                               special_tokens=list(keep), extra_tokens=extra,
                               added_tokens={t: i for t, i in keep.items()
                                             if model.get(t) != i},
                               source=v.source, **names)
            tok = type(self.tokenizer)(vocab, **self.tokenizer.settings)
        except ValueError as e:
            raise NotImplementedError(f"split_special_tokens=True is not available for this "
                                      f"vocabulary: {e}") from None
        self._split_cache = (key, tok)
        return tok

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_split_cache", None)
        return state

    def _warn_if_too_long(self, ids) -> None:
        """transformers' ``_eventual_warn_about_too_long_sequence``: once per tokenizer
        (until ``deprecation_warnings`` is cleared), when a row is longer than
        ``model_max_length`` and no ``max_length`` applies."""
        key = "sequence-length-is-longer-than-the-specified-maximum"
        if self.deprecation_warnings.get(key):
            return
        shape = getattr(ids, "shape", None)
        if shape is not None and len(shape) == 2:
            rows = [int(shape[1])] if shape[0] else []
        elif isinstance(ids, (list, tuple, np.ndarray)) and len(ids) and \
                not isinstance(ids[0], (int, np.integer)):
            rows = [len(r) for r in ids]
        else:
            rows = [len(ids)]
        longest = next((n for n in rows if n > self.model_max_length), None)
        if longest is not None:          # transformers names the first such row
            logger.warning(
                "Token indices sequence length is longer than the specified maximum sequence "
                f"length for this model ({longest} > {self.model_max_length}). Running this "
                "sequence through the model will result in indexing errors")
            self.deprecation_warnings[key] = True

    def _strip_offsets(self, texts, docs) -> None:
        """HF's spans of added tokens with lstrip / rstrip (``AddedVocabulary::
        find_matches``): lstrip takes the White_Space before the token back to the previous
        added token's end, rstrip the White_Space after it. In place."""
        v = self.vocab_obj
        matched = {v.token_to_id(t) for t in v.special_tokens}
        flags = {v.token_to_id(t): f for t, f in self._strips.items()
                 if v.token_to_id(t) is not None}
        for text, (ids, om, _) in zip(texts, docs):
            prev = 0
            for k, i in enumerate(ids):
                if i not in matched:
                    continue
                start, end = om[k]
                lstrip, rstrip = flags.get(i, (False, False))
                if lstrip:
                    while start > prev and text[start - 1] in WHITE_SPACE:
                        start -= 1
                if rstrip:
                    while end < len(text) and text[end] in WHITE_SPACE:
                        end += 1
                om[k] = (start, end)
                prev = end

    def _words_join_exactly(self) -> bool:
        """Whether words joined by a space tokenize as each word alone (the ids of
        ``is_split_into_words=True``): BERT's normalizer (per character) or none, and a
        pre-tokenizer that always splits at whitespace."""
        tok = self._encoder()
        try:
            norm = json.loads(tok.normalizer) if tok.normalizer else None
            pre = json.loads(tok.pre_tokenizer) if tok.pre_tokenizer else None
        except (TypeError, ValueError):
            return False
        return (norm is None or norm.get("type") == "BertNormalizer") and \
            isinstance(pre, dict) and pre.get("type") in ("BertPreTokenizer", "WhitespaceSplit")

    @staticmethod
    def _core_strips(tokenizer) -> dict:
        """``{token: (lstrip, rstrip)}`` that the daskwp tokenizer's own offsets honour
        (core/added_spans.py: the flags its tokenizer.json gave)."""
        flags = (getattr(tokenizer.vocab, "config", None) or {}).get("added_token_strips")
        return {t: (bool(a), bool(b)) for t, (a, b) in (flags or {}).items() if a or b}

    def _check_offsets_exact(self) -> None:
        """Refuse character offsets where daskwp's differ from HF's: an added token with
        ``lstrip`` / ``rstrip`` (HF's span takes the whitespace next to it; the ids are the
        same, the pre-tokenizer drops that whitespace)."""
        stripped = [t for t in (self.vocab_obj.config or {}).get("stripped_added_tokens")
                    or () if t not in self._strips]
        if stripped:
            raise ValueError(
                f"character offsets are not available from daskwp for this tokenizer: added "
                f"token {stripped[0]!r} has lstrip / rstrip, and which of them is not known "
                f"here (load it with from_transformers or "
                f"daskwp.backends.transformers_loader.from_pretrained); ids, word ids and "
                f"sequence ids are exact")

    def _strategies(self, padding, truncation, max_length, pad_to_multiple_of):
        """transformers' ``_get_padding_truncation_strategies``: (padding, truncation
        strategy or None, max_length)."""
        if max_length is not None and padding is False and truncation is None:
            truncation = "longest_first"
        if padding is True:
            pad = "longest"
        elif padding is False or padding is None:
            pad = "do_not_pad"
        else:
            pad = getattr(padding, "value", padding)
            if pad not in PADDING_STRATEGIES:
                raise ValueError(f"{padding} is not a valid PaddingStrategy, please select one "
                                 f"of {list(PADDING_STRATEGIES)}")
        if truncation is True:
            strat = "longest_first"
        elif truncation is False or truncation is None:
            strat = "do_not_truncate"
        else:
            strat = getattr(truncation, "value", truncation)
            if strat not in TRUNCATION_STRATEGIES:
                raise ValueError(f"{truncation} is not a valid TruncationStrategy, please "
                                 f"select one of {list(TRUNCATION_STRATEGIES)}")
        if max_length is None:
            if pad == "max_length":
                if self.model_max_length > LARGE_INTEGER:
                    pad = "do_not_pad"
                else:
                    max_length = self.model_max_length
            if strat != "do_not_truncate":
                if self.model_max_length > LARGE_INTEGER:
                    strat = "do_not_truncate"
                else:
                    max_length = self.model_max_length
        if pad != "do_not_pad" and self.pad_token_id is None:
            raise ValueError("Asking to pad but the tokenizer does not have a padding token.")
        if strat != "do_not_truncate" and pad != "do_not_pad" and \
                pad_to_multiple_of is not None and max_length is not None and \
                max_length % pad_to_multiple_of != 0:
            raise ValueError(
                f"Truncation and padding are both activated but truncation length "
                f"({max_length}) is not a multiple of pad_to_multiple_of ({pad_to_multiple_of}).")
        if max_length is not None:
            max_length = int(max_length)
            if max_length < 0:
                raise ValueError(f"max_length must be >= 0, got {max_length}")
        return pad, (None if strat == "do_not_truncate" else strat), max_length

    # -- the work --------------------------------------------------------------------------
    def _docs(self, texts, split: bool, offsets: bool):
        """Per text: (ids list, offsets list or None, word ids list or None); None for a
        None text (a row of a mixed batch that has no pair)."""
        if any(t is None for t in texts):
            given = [k for k, t in enumerate(texts) if t is not None]
            done = self._docs([texts[k] for k in given], split, offsets) if given else []
            out = [None] * len(texts)
            for k, d in zip(given, done):
                out[k] = d
            return out
        if not split:
            flat = list(texts)
            for t in flat:
                if not isinstance(t, str):
                    raise TypeError(f"TextInputSequence must be str (got "
                                    f"{type(t).__name__} {t!r:.60} as a text of the batch)")
            enc = self._encode_flat(flat, offsets)
            return enc
        counts, words = [], []
        for doc in texts:
            doc = list(doc)
            for w in doc:
                if not isinstance(w, str):
                    raise ValueError("is_split_into_words=True takes lists of words (str)")
            counts.append(len(doc))
            words.extend(doc)
        per_word = self._encode_flat(words, offsets)
        out, k = [], 0
        for c in counts:
            chunk = per_word[k:k + c]
            k += c
            ids = [i for wi, _, _ in chunk for i in wi]
            wids = [w for w, (wi, _, _) in enumerate(chunk) for _ in wi]
            offs = [o for _, wo, _ in chunk for o in wo] if offsets else None
            out.append((ids, offs, wids))
        return out

    def _encode_flat(self, texts, offsets: bool):
        tok = self._encoder()
        if offsets:
            if not offsets_available(tok):
                raise NotImplementedError(
                    "return_offsets_mapping: this daskwp tokenizer does not give character "
                    "offsets yet (tok.encode(..., return_offsets_mapping=True) is not "
                    "available in this build)")
            enc = tok.encode(texts, return_offsets_mapping=True, return_word_ids=True,
                             offsets_unit="chars")
            ids = enc.to_list()
            off = np.asarray(enc.offsets).tolist()
            om = [tuple(x) for x in np.asarray(enc.offset_mapping).tolist()]
            wid = [None if w < 0 else w for w in np.asarray(enc.word_ids).tolist()]
            out = [(ids[d], om[off[d]:off[d + 1]], wid[off[d]:off[d + 1]])
                   for d in range(len(ids))]
            if self._strips:
                self._strip_offsets(texts, out)
            return out
        enc = tok.encode(texts)
        return [(d, None, None) for d in enc.to_list()]

    def _encode(self, text, text_pair, special, padding, strategy, max_length, stride,
                split, multiple, side, return_tensors, rtt, ram, overflow, rstm, roff, rlen):
        valid = _valid_text(text) and (text_pair is None or _valid_text(text_pair))
        if not valid:
            raise ValueError(
                "text input must be of type `str` (single example), `list[str]` (batch or "
                "single pretokenized example) or `list[list[str]]` (batch of pretokenized "
                "examples) or `list[tuple[list[str], list[str]]]` (batch of pretokenized "
                "sequence pairs).")
        if split:
            batched = isinstance(text, (list, tuple)) and bool(text) and \
                isinstance(text[0], (list, tuple))
        else:
            batched = isinstance(text, (list, tuple))
        if batched:
            if isinstance(text_pair, str):
                raise TypeError("when tokenizing batches of text, `text_pair` must be a list "
                                "or tuple with the same length as `text`.")
            if text_pair is not None and len(text) != len(text_pair):
                raise ValueError(f"batch length of `text`: {len(text)} does not match batch "
                                 f"length of `text_pair`: {len(text_pair)}.")
            firsts = list(text)
            seconds = list(text_pair) if text_pair is not None else None
            if seconds is None:
                firsts, seconds = _pair_items(firsts, split)
        else:
            firsts = [text]
            seconds = [text_pair] if text_pair else None   # transformers: "" is no pair
        if not firsts:
            raise IndexError("list index out of range (an empty batch: transformers fails "
                             "on it too)")
        if seconds is not None:
            for s in seconds:
                if split and s is not None and not isinstance(s, (list, tuple)):
                    raise ValueError("is_split_into_words=True: each text_pair must be a list "
                                     "of words")
        fast = self._windows_path(firsts, seconds, batched, special, padding, strategy,
                                  max_length, stride, split, multiple, side, return_tensors,
                                  rtt, ram, overflow, rstm, roff, rlen)
        if fast is not None:
            return fast
        docs_a = self._docs(firsts, split, roff)
        docs_b = self._docs(seconds, split, roff) if seconds is not None else None
        paired = docs_b is not None
        rtt = True if rtt is None else bool(rtt)
        ram = True if ram is None else bool(ram)
        if strategy is not None and max_length is not None and max_length >= 2 and \
                stride > max_length - 2:
            # tokenizers checks this when truncation is set (the single-text template's 2
            # special tokens, whatever add_special_tokens and pairs are).
            raise ValueError(
                f"tokenizer stride set to {stride}, which is greater than or equal to its "
                f"effective max length of {max_length - 2} (= {max_length} original max "
                f"length - 2 added special tokens)")

        def trunc_len_of(pair: bool):
            n_added = (3 if pair else 2) if special else 0
            if strategy is None or max_length is None:
                return None
            if special and max_length < n_added:
                return None           # HF: no room for the special tokens, no truncation
            return max_length - n_added
        direction = self.truncation_side
        vocab = self.vocab_obj
        cls_id = vocab.cls_id if special else None
        sep_id = vocab.sep_id if special else None
        # Rows: (sample, (doc a, range), (doc b, range) or None)
        rows, primary = [], []
        for i, da in enumerate(docs_a):
            db = docs_b[i] if paired else None
            wa, wb = truncate_pair(len(da[0]), None if db is None else len(db[0]),
                                    strategy, trunc_len_of(db is not None), stride,
                                    direction)
            merged = merged_rows(wa, wb)
            if not overflow:
                merged = merged[:1]
            for k, (ra, rb) in enumerate(merged):
                rows.append((i, ra, rb))
                primary.append(k == 0)
        # Materialize the rows (unpadded).
        ids_rows, type_rows, spec_rows, off_rows, seq_rows, word_rows = [], [], [], [], [], []
        edge = 1 if special else 0      # [CLS] before a, [SEP] after a and after b
        head, tail = [cls_id] * edge, [sep_id] * edge
        for i, ra, rb in rows:
            ia, oa, wa_ = docs_a[i]
            a_ids = ia[ra[0]:ra[1]]
            la = len(a_ids)
            ids = head + a_ids + tail
            seq = [None] * edge + [0] * la + [None] * edge
            spec = [1] * edge + [0] * la + [1] * edge
            types = [0] * len(ids)
            if roff:
                offs = [(0, 0)] * edge + oa[ra[0]:ra[1]] + [(0, 0)] * edge
            if wa_ is not None:
                words = [None] * edge + wa_[ra[0]:ra[1]] + [None] * edge
            if rb is not None:
                ib, ob, wb_ = docs_b[i]
                b_ids = ib[rb[0]:rb[1]]
                lb = len(b_ids)
                ids += b_ids + tail
                seq += [1] * lb + [None] * edge
                spec += [0] * lb + [1] * edge
                types += [1] * (lb + edge)
                if roff:
                    offs += ob[rb[0]:rb[1]] + [(0, 0)] * edge
                if wb_ is not None:
                    words += wb_[rb[0]:rb[1]] + [None] * edge
            ids_rows.append(ids)
            type_rows.append(types)
            spec_rows.append(spec)
            seq_rows.append(seq)
            off_rows.append(offs if roff else None)
            word_rows.append(words if wa_ is not None else None)
        # Padding (tokenizers' pad_encodings: the longest primary row, or max_length).
        att_rows = None
        if padding != "do_not_pad":
            if padding == "max_length":
                target = max_length
            else:
                target = max(len(r) for r, p in zip(ids_rows, primary) if p)
            if multiple is not None and multiple > 0 and target % multiple:
                target += multiple - target % multiple
            pad_id = self.pad_token_id
            # Python lists: one 8-byte slot per cell in each padded list
            lists = 5 + (1 if roff else 0) + (1 if any(w is not None for w in word_rows) else 0)
            check_padded_bytes(len(ids_rows), target, 8 * lists,
                               f"max_length={max_length}, padding={padding!r}")
            att_rows = []
            for r in range(len(ids_rows)):
                n = len(ids_rows[r])
                d = target - n
                if d <= 0:
                    att_rows.append([1] * n)
                    continue
                ids_rows[r] = padded_row(ids_rows[r], pad_id, d, side)
                type_rows[r] = padded_row(type_rows[r], 0, d, side)
                spec_rows[r] = padded_row(spec_rows[r], 1, d, side)
                seq_rows[r] = padded_row(seq_rows[r], None, d, side)
                att_rows.append(padded_row([1] * n, 0, d, side))
                if roff:
                    off_rows[r] = padded_row(off_rows[r], (0, 0), d, side)
                if word_rows[r] is not None:
                    word_rows[r] = padded_row(word_rows[r], None, d, side)
        if att_rows is None and ram:
            att_rows = [[1] * len(r) for r in ids_rows]
        data = {"input_ids": ids_rows}
        if rtt:
            data["token_type_ids"] = type_rows
        if ram:
            data["attention_mask"] = att_rows
        if rstm:
            data["special_tokens_mask"] = spec_rows
        if roff:
            data["offset_mapping"] = off_rows
        if rlen:
            data["length"] = [len(r) for r in ids_rows]
        if overflow:
            data["overflow_to_sample_mapping"] = [i for i, _, _ in rows]
        meta = [(s, w, ids, o, 1 if rb is None else 2) for s, w, ids, o, (_, _, rb) in
                zip(seq_rows, word_rows, ids_rows, off_rows, rows)]
        n_seq = 2 if paired and docs_b[0] is not None else 1
        if not batched and return_tensors is None and not overflow:
            data = {k: (v[0] if v and isinstance(v[0], list) else v) for k, v in data.items()}
        return BatchEncoding(data, return_tensors, rows=meta, n_sequences=n_seq, owner=self)

    def _windows_path(self, firsts, seconds, batched, special, padding, strategy,
                      max_length, stride, split, multiple, side, return_tensors, rtt, ram,
                      overflow, rstm, roff, rlen):
        """The common calls through daskwp's vectorized windows (``tok(texts, ...)``,
        docs/design.md §2, §2.8, §2.9): one row per text or pair, right truncation, special
        tokens, character offsets and word ids from the kernel's arrays (padding on the left
        moves the padded arrays' cells); None where the general path must answer (it gives
        the same result, slower)."""
        paired = seconds is not None
        if (overflow and paired) or not special or self.truncation_side != "right":
            return None
        joined = None
        if split:
            if self._strips or not self._words_join_exactly():
                return None
            joined = [_JoinedWords.of(firsts)] + ([_JoinedWords.of(seconds)] if paired else [])
            if None in joined:
                return None
            firsts = joined[0].texts
            seconds = joined[1].texts if paired else None
        if roff and (self._strips != self._core_strips(self.tokenizer) or
                     not offsets_available(self._encoder())):
            return None                # spans widened here, or the general path's error
        INT32_MAX = 2**31 - 1
        if strategy is None:
            if padding == "max_length":
                return None            # rows longer than max_length stay longer
            ml = INT32_MAX
        else:
            ml = max_length
            if paired:
                if ml < 4 or stride != 0:
                    return None
            elif ml < 3 or stride >= ml - 2:
                return None
        if strategy == "only_second" and not paired:
            return None                # HF's error (only when a text is too long)
        if any(not isinstance(t, str) for t in firsts) or \
                (paired and any(not isinstance(t, str) for t in seconds)):
            # (also a batch whose rows are some pairs, some single texts)
            return None
        pad = {"max_length": "max_length", "longest": "longest",
               "do_not_pad": False}[padding]
        if pad is not False and self.pad_token_id != self._id(
                self.vocab_obj.special_names.get("pad_token")):
            return None                # pad_token set to another token: the general path
        truncation = True if strategy in (None, "longest_first") else strategy
        offs = {"return_offsets_mapping": True, "return_word_ids": True,
                "offsets_unit": "chars"} if roff else {}
        try:
            bw = self._encoder()(firsts, max_length=ml, stride=stride if overflow else 0,
                                truncation=truncation,
                                padding=pad, return_tensors="np", text_pair=seconds,
                                return_token_type_ids=bool(rtt or rtt is None),
                                return_sequence_ids=True,
                                return_overflowing_tokens=overflow and strategy is not None,
                                **offs)
        except ValueError:
            return None                # let the general path raise HF's error
        ids, seq = bw["input_ids"], bw["sequence_ids"]
        types = bw.get("token_type_ids")
        att = bw["attention_mask"]
        om, wid = bw.get("offset_mapping"), bw.get("word_ids")
        n = len(ids)
        n_seq = 2 if paired else 1
        sample = bw["metadata"][:, 0].astype(np.int64)
        if joined is not None and roff:
            if pad is False:
                cells_seq, cells_om, cells_wid = seq.values, om.values, wid.values
                row_of = np.repeat(np.arange(n), np.diff(seq.offsets))
            else:
                cells_seq, cells_om, cells_wid = seq.reshape(-1), om.reshape(-1, 2), \
                    wid.reshape(-1)
                row_of = np.repeat(np.arange(n), seq.shape[1])
            for side_index, words in enumerate(joined):
                cells = np.flatnonzero(cells_seq == side_index)
                words.remap(cells_om, cells_wid, cells, sample[row_of[cells]])
        if pad is False:
            # ragged rows: lists (the general path makes the same, but this one is vectorized)
            ids_l, seq_l = ids.to_list(), seq.to_list()
            data = {"input_ids": ids_l}
            if rtt or rtt is None:
                data["token_type_ids"] = types.to_list()
            if ram or ram is None:
                data["attention_mask"] = att.to_list()
            if rstm:
                data["special_tokens_mask"] = [[1 if v < 0 else 0 for v in r] for r in seq_l]
            om_l = None
            if roff:
                spans = span_rows(om.values)
                bounds = om.offsets.tolist()
                om_l = [spans[bounds[r]:bounds[r + 1]] for r in range(n)]
                data["offset_mapping"] = om_l
            if rlen:
                data["length"] = [len(r) for r in ids_l]
            if overflow:
                data["overflow_to_sample_mapping"] = sample.tolist()
            rows = ArrayRows(seq_l, ids_l, n_seq, None if wid is None else wid.to_list(), om_l)
        else:
            width = ids.shape[1]
            if multiple is not None and multiple > 0 and width % multiple:
                extra = multiple - width % multiple
                grow = ((0, 0), (0, extra))
                ids = np.pad(ids, grow, constant_values=self.pad_token_id)
                att = np.pad(att, grow)
                seq = np.pad(seq, grow, constant_values=-1)
                if types is not None:
                    types = np.pad(types, grow)
                if roff:
                    wid = np.pad(wid, grow, constant_values=-1)
                    om = np.pad(om, grow + ((0, 0),))
                width += extra
            if side == "left":
                shift = width - att.sum(axis=1).astype(np.int64)
                ids = pad_left(ids, shift, self.pad_token_id)
                att, seq = pad_left(att, shift, 0), pad_left(seq, shift, -1)
                if types is not None:
                    types = pad_left(types, shift, 0)
                if roff:
                    wid, om = pad_left(wid, shift, -1), pad_left(om, shift, 0)
            data = {"input_ids": ids.astype(np.int64)}
            if rtt or rtt is None:
                data["token_type_ids"] = types.astype(np.int64)
            if ram or ram is None:
                data["attention_mask"] = att.astype(np.int64)
            if rstm:
                data["special_tokens_mask"] = (seq < 0).astype(np.int64)
            if roff:
                data["offset_mapping"] = om.astype(np.int64)
            if rlen:
                data["length"] = np.full(n, width, dtype=np.int64)
            if overflow:
                data["overflow_to_sample_mapping"] = sample
            if return_tensors is None:
                data = {k: span_rows(v) if k == "offset_mapping" else v.tolist()
                        for k, v in data.items()}
            elif return_tensors == "pt" or getattr(return_tensors, "value", None) == "pt":
                data = {k: as_tensor(k, v, "pt") for k, v in data.items()}
            rows = ArrayRows(seq, ids, n_seq, wid,
                            data.get("offset_mapping") if return_tensors is None else om)
        if not batched and return_tensors is None and not overflow:
            data = {k: (v[0] if v and isinstance(v[0], list) else v) for k, v in data.items()}
        elif return_tensors is not None and pad is False:
            return BatchEncoding(data, return_tensors, rows=rows, n_sequences=n_seq,
                                 owner=self)
        return BatchEncoding(data, rows=rows, n_sequences=n_seq, owner=self)

    # -- pad ---------------------------------------------------------------------------------
    def pad(self, encoded_inputs, padding=True, max_length: int | None = None,
            pad_to_multiple_of: int | None = None, padding_side: str | None = None,
            return_attention_mask: bool | None = None, return_tensors=None,
            verbose: bool = True) -> BatchEncoding:
        """transformers' ``pad``: a single encoding or a batch (dict of lists, list of dicts;
        lists, NumPy arrays or torch tensors) padded to the longest or to ``max_length``."""
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and \
                isinstance(encoded_inputs[0], (dict, UserDict)):
            encoded_inputs = {k: [ex[k] for ex in encoded_inputs] for k in encoded_inputs[0]}
        if not isinstance(encoded_inputs, (dict, UserDict)):
            raise ValueError("pad() takes a dict of lists, a BatchEncoding or a list of them")
        inputs = dict(encoded_inputs)
        if "input_ids" not in inputs:
            raise ValueError(f"You should supply an encoding or a list of encodings to this "
                             f"method that includes input_ids, but you provided "
                             f"{list(inputs)}")
        required = inputs["input_ids"]
        if required is None or len(required) == 0:
            if return_attention_mask:
                inputs["attention_mask"] = []
            return BatchEncoding(inputs)
        first = required[0]
        if isinstance(first, (list, tuple)):
            for item in required:
                if len(item) != 0:
                    first = item[0]
                    break
        if not isinstance(first, (int, list, tuple)):
            kind = "np" if isinstance(first, (np.ndarray, np.generic)) else \
                ("pt" if type(first).__module__.startswith("torch") else None)
            if kind is None:
                raise ValueError(f"type of {first} unknown: {type(first)}. Should be one of a "
                                 f"python, numpy, or pytorch object.")
            return_tensors = kind if return_tensors is None else return_tensors
            inputs = {k: _to_py(v) for k, v in inputs.items()}
        pad, _, max_length = self._strategies(padding, None, max_length, None)
        ram = "attention_mask" in self.model_input_names if return_attention_mask is None \
            else return_attention_mask
        side = padding_side if padding_side is not None else self.padding_side
        required = inputs["input_ids"]
        if required and not isinstance(required[0], (list, tuple)):
            out = self._pad_one(inputs, max_length, pad, pad_to_multiple_of, side, ram)
            return BatchEncoding(out, return_tensors)
        n = len(required)
        if pad == "longest":
            max_length = max(len(r) for r in required)
            pad = "max_length"
        batch: dict = {}
        for i in range(n):
            one = self._pad_one({k: v[i] for k, v in inputs.items()}, max_length, pad,
                                pad_to_multiple_of, side, ram)
            for k, v in one.items():
                batch.setdefault(k, []).append(v)
        return BatchEncoding(batch, return_tensors)

    def _pad_one(self, enc, max_length, pad, multiple, side, ram):
        enc = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in enc.items()}
        ids = enc["input_ids"]
        if pad == "longest":
            max_length = len(ids)
        if max_length is not None and multiple is not None and max_length % multiple:
            max_length = (max_length // multiple + 1) * multiple
        if ram and "attention_mask" not in enc:
            enc["attention_mask"] = [1] * len(ids)
        if pad != "do_not_pad" and len(ids) != max_length:
            d = max_length - len(ids)
            check_padded_bytes(1, max_length, 8 * sum(1 for v in enc.values()
                                                      if isinstance(v, list)),
                               f"max_length={max_length}, padding={pad!r}")
            fill = {"attention_mask": 0, "token_type_ids": self.pad_token_type_id,
                    "special_tokens_mask": 1, "input_ids": self.pad_token_id}
            for k, f in fill.items():
                if k == "attention_mask" and not ram:
                    continue
                if k in enc:
                    enc[k] = padded_row(enc[k], f, d, side)
        return enc

    # -- saving -----------------------------------------------------------------------------
    def save_pretrained(self, save_directory, **kwargs) -> tuple:
        """Write ``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json`` and
        ``special_tokens_map.json``: a folder that transformers' ``AutoTokenizer`` /
        ``BertTokenizerFast.from_pretrained`` and daskwp's ``from_pretrained`` load back to
        this tokenizer."""
        if kwargs.get("push_to_hub"):
            raise NotImplementedError("push_to_hub: daskwp writes local folders only")
        folder = Path(save_directory)
        if folder.is_file():
            raise ValueError(f"Provided path ({save_directory}) should be a directory, not a "
                             f"file")
        folder.mkdir(parents=True, exist_ok=True)
        v = self.vocab_obj
        tok = self.tokenizer
        model_vocab = v.model_tokens
        tokens = v.tokens
        files = []
        # vocab.txt: the WordPiece pieces in id order (added tokens live in tokenizer.json).
        n_model = max(model_vocab.values()) + 1 if model_vocab else 0
        lines = []
        for i in range(n_model):
            t = tokens[i] if i < len(tokens) else ""
            lines.append(t if model_vocab.get(t) == i else t)
        (folder / "vocab.txt").write_text("".join(t + "\n" for t in lines), encoding="utf-8")
        files.append(str(folder / "vocab.txt"))
        added = []
        nonspecial = set(v.special_tokens) - {v.id_to_token(i) for i in v.special_ids}
        for t in v.special_tokens:
            lstrip, rstrip = self._strips.get(t, (False, False))
            added.append({"id": v.token_to_id(t), "content": t, "single_word": False,
                          "lstrip": lstrip, "rstrip": rstrip, "normalized": False,
                          "special": t not in nonspecial and t not in self._nonspecial_added})
        added.sort(key=lambda a: a["id"])
        cls, sep = self.cls_token, self.sep_token
        post = None
        if cls is not None and sep is not None:
            post = {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": cls, "type_id": 0}},
                               {"Sequence": {"id": "A", "type_id": 0}},
                               {"SpecialToken": {"id": sep, "type_id": 0}}],
                    "pair": [{"SpecialToken": {"id": cls, "type_id": 0}},
                             {"Sequence": {"id": "A", "type_id": 0}},
                             {"SpecialToken": {"id": sep, "type_id": 0}},
                             {"Sequence": {"id": "B", "type_id": 1}},
                             {"SpecialToken": {"id": sep, "type_id": 1}}],
                    "special_tokens": {
                        cls: {"id": cls, "ids": [self.cls_token_id], "tokens": [cls]},
                        sep: {"id": sep, "ids": [self.sep_token_id], "tokens": [sep]}}}
        spec = {"version": "1.0", "truncation": None, "padding": None,
                "added_tokens": added,
                "normalizer": json.loads(tok.normalizer),
                "pre_tokenizer": json.loads(tok.pre_tokenizer),
                "post_processor": post,
                "decoder": {"type": "WordPiece", "prefix": v.continuing_subword_prefix,
                            "cleanup": True},
                "model": {"type": "WordPiece", "unk_token": v.unk_token,
                          "continuing_subword_prefix": v.continuing_subword_prefix,
                          "max_input_chars_per_word": tok.max_input_chars_per_word,
                          "vocab": dict(sorted(model_vocab.items(), key=lambda kv: kv[1]))}}
        (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False, indent=2),
                                               encoding="utf-8")
        files.append(str(folder / "tokenizer.json"))
        cfg = {"tokenizer_class": "BertTokenizer",
               "model_max_length": self.model_max_length,
               "padding_side": self.padding_side, "truncation_side": self.truncation_side,
               "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
               "model_input_names": list(self.model_input_names)}
        if getattr(tok, "lowercase", None) is not None:
            cfg.update(do_lower_case=tok.lowercase, strip_accents=tok.strip_accents,
                       tokenize_chinese_chars=tok.handle_chinese_chars)
        cfg.update(self.special_tokens_map)
        if self.extra_special_tokens:
            cfg["extra_special_tokens"] = list(self.extra_special_tokens)
        (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2,
                                                                 ensure_ascii=False),
                                                      encoding="utf-8")
        files.append(str(folder / "tokenizer_config.json"))
        (folder / "special_tokens_map.json").write_text(
            json.dumps(self.special_tokens_map, indent=2, ensure_ascii=False),
            encoding="utf-8")
        files.append(str(folder / "special_tokens_map.json"))
        return tuple(files)

    def __repr__(self) -> str:
        return (f"TransformersTokenizer(daskwp {self.tokenizer!r}, model_max_length="
                f"{self.model_max_length}, padding_side={self.padding_side!r}, "
                f"truncation_side={self.truncation_side!r})")


class _JoinedWords:
    """Documents of words (``is_split_into_words=True``) as one text each, the words joined
    by a space, for the windows path (:meth:`TransformersTokenizer._words_join_exactly`
    says when the ids are the same); :meth:`remap` turns the joined text's spans and word
    ids into HF's: the word's index in its document, the span within the word."""

    @classmethod
    def of(cls, docs):
        """None where the general path must answer: a row without this side (a batch of
        pairs and single texts), an empty document, a word that is not a str."""
        if any(not isinstance(d, (list, tuple)) or len(d) == 0 or
               not all(isinstance(w, str) for w in d) for d in docs):
            return None
        return cls(docs)

    def __init__(self, docs):
        counts = np.fromiter((len(d) for d in docs), np.int64, len(docs))
        flat = [w for d in docs for w in d]
        room = np.fromiter((len(w) for w in flat), np.int64, len(flat)) + 1  # word + space
        where = np.cumsum(room) - room            # start of every word in all texts
        self.first = np.concatenate(([0], np.cumsum(counts)))
        self.starts = where - np.repeat(where[self.first[:-1]], counts)
        self.texts = [" ".join(d) for d in docs]
        # one sorted key per word: its start, its document's number above every start
        self.stride = int(room.max()) + int((self.starts + room).max()) + 1
        self.keys = self.starts + np.repeat(np.arange(len(docs)), counts) * self.stride

    def remap(self, spans, words, cells, docs) -> None:
        """In place: ``spans[cells]`` (in the joined text of ``docs``) and ``words[cells]``
        as HF's for the words."""
        gi = np.searchsorted(self.keys, spans[cells, 0] + docs * self.stride, "right") - 1
        words[cells] = gi - self.first[docs]
        spans[cells] -= self.starts[gi][:, None]


def _pair_items(items: list, split: bool):
    """HF tokenizers' ``encode_batch`` inputs: each item of a batch is a text (a ``str``; a
    list of words with ``is_split_into_words``) or a pair of two, as a tuple or a list.
    Returns ``(firsts, seconds)``; seconds is None when no item is a pair, else None for
    the items that are not."""
    def one(x):
        if split:
            return isinstance(x, (list, tuple)) and all(isinstance(w, str) for w in x)
        return isinstance(x, str)

    if all(one(x) for x in items):
        return items, None
    firsts, seconds = [], []
    for x in items:
        if one(x):
            firsts.append(x)
            seconds.append(None)
        elif isinstance(x, (list, tuple)) and len(x) == 2 and one(x[0]) and one(x[1]):
            firsts.append(x[0])
            seconds.append(x[1])
        else:
            what = "lists of words" if split else "str"
            raise TypeError(f"TextEncodeInput must be Union[TextInputSequence, "
                            f"Tuple[InputSequence, InputSequence]]: each item of the batch is "
                            f"a text ({what}) or a pair of two, got {x!r:.80}")
    return firsts, seconds


def _valid_text(t) -> bool:
    if isinstance(t, str):
        return True
    if isinstance(t, (list, tuple)):
        if len(t) == 0 or isinstance(t[0], str):
            return True
        if isinstance(t[0], (list, tuple)):
            return len(t[0]) == 0 or isinstance(t[0][0], str) or (
                isinstance(t[0][0], (list, tuple)) and (len(t[0][0]) == 0
                                                        or isinstance(t[0][0][0], str)))
    return False


def _to_py(x):
    """Lists of ints from NumPy arrays, torch tensors, nested lists."""
    if hasattr(x, "tolist") and not isinstance(x, (list, tuple)):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_to_py(v) if hasattr(v, "tolist") or isinstance(v, (list, tuple)) else v
                for v in x]
    return x
