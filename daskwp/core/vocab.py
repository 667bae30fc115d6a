"""Vocabulary: reading vocab.txt / tokenizer.json / model folders, validation, and the
compiled trie blob that the native core (CPU and GPU) reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .. import _ext
from .cache import BoundedCache

DEFAULT_VOCAB_PATH = Path(__file__).resolve().parent.parent / "data" / "bert-base-uncased-vocab.txt"

# The special tokens HuggingFace's BertWordPieceTokenizer registers (when they are in the
# vocabulary): they are matched literally in the raw text.
BERT_SPECIAL_TOKENS = ("[UNK]", "[SEP]", "[CLS]", "[PAD]", "[MASK]")

# Rust's str::trim_end removes Unicode White_Space, which differs from Python's str.isspace
# (the latter also strips U+001C..U+001F).
_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WHITE_SPACE_RE = re.compile("[" + re.escape(_WHITE_SPACE) + "]")
#: The Unicode White_Space characters (Rust's ``char::is_whitespace``).
WHITE_SPACE = frozenset(_WHITE_SPACE)
# What no special token may contain: lone surrogates and U+FFFD.
_UNSPELLABLE = re.compile("[\ud800-\udfff\ufffd]")


#: The names daskwp gives the special tokens unless told otherwise (BERT's).
DEFAULT_SPECIAL_NAMES = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                         "pad_token": "[PAD]", "mask_token": "[MASK]"}
SPECIAL_NAME_OPTIONS = tuple(DEFAULT_SPECIAL_NAMES)


class Vocabulary:
    """A WordPiece vocabulary compiled for the fused tokenizer.

    Build with :meth:`from_file` (``vocab.txt``, a HuggingFace ``tokenizer.json``, or a model
    folder holding either) or :meth:`from_tokens`. The vocabulary is validated when it is
    built and compiled once into an immutable, versioned blob (a byte trie with LinMaxMatch
    failure links and pops) that the CPU loop and the CUDA kernel read as is.

    Reading rules (the same as HuggingFace ``tokenizers``): ``vocab.txt`` is split on
    ``"\\n"`` only, each line right-trimmed; an empty line still takes an id; a duplicated
    token keeps its last id. A UTF-8 BOM and CRLF line ends are accepted and read as the
    plain file.

    Special tokens: ``unk_token`` (WordPiece's unknown token), ``cls_token`` and
    ``sep_token`` (the frame of a row), ``pad_token`` (padding) and ``mask_token`` default to
    BERT's ``[UNK] [CLS] [SEP] [PAD] [MASK]`` (a ``tokenizer.json`` names its own unknown
    token, and its post-processor and padding name the others). Those in the vocabulary are
    matched literally in the raw text, as ``BertWordPieceTokenizer`` registers them; a
    ``tokenizer.json``'s added tokens are matched instead, and are not WordPiece pieces.
    :meth:`with_special_tokens` registers more (ids after the largest in use).

    Notes
    -----
    **Memory.** The blob is about 40 bytes per trie node: ~1.3 MB for bert-base-uncased, ~9
    MB for the 119,547-token multilingual vocabulary; special tokens add about 13 bytes per
    trie node of their own plus their bytes (10,000 like ``<|tok_00042|>``: 0.6 MB).

    **Pickling.** A vocabulary pickles as its tokens and settings (about 0.3 MB for
    bert-base-uncased; the blob is rebuilt from them on loading, and checked against
    :attr:`hash`) plus a digest of that content. A process keeps the last few vocabularies
    it loaded or pickled by that digest, so loading one it already holds (every job's task
    graph on a running Dask worker) is a lookup that returns the same object.

    **Differences from HuggingFace.** A UTF-8 BOM at the start of ``vocab.txt`` is stripped
    (HF keeps it in the first token). A ``tokenizer.json`` added token with ``"normalized":
    true`` or ``"single_word": true`` is refused with a ``ValueError`` naming it
    (docs/differences-hf.md).

    Examples
    --------
    >>> import daskwp
    >>> vocab = daskwp.Vocabulary.from_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello",
    ...                                        "world", "##s"])
    >>> vocab.token_to_id("world"), vocab.unk_id, vocab.pad_id
    (5, 1, 0)
    >>> daskwp.WordPieceTokenizer(vocab).encode(["Hello worlds"]).to_list()
    [[4, 5, 6]]
    """

    def __init__(self, tokens: Sequence[str], *, unk_token: str | None = None,
                 continuing_subword_prefix: str = "##",
                 special_tokens: Iterable[str] | None = None,
                 extra_tokens: dict[str, int] | None = None,
                 added_tokens: dict[str, int] | None = None,
                 cls_token: str | None = None, sep_token: str | None = None,
                 pad_token: str | None = None, mask_token: str | None = None,
                 source: str = "<tokens>", config: dict | None = None,
                 nonspecial_tokens: Iterable[str] = ()):
        tokens = list(tokens)  # id -> token (may contain duplicates / empty strings)
        model = _token_map(tokens)  # the last occurrence wins, as in HF
        for t, i in (extra_tokens or {}).items():
            # Model tokens beyond the list or sharing an id with another token.
            model[t] = i
            while len(tokens) <= i:
                tokens.append("")
            if tokens[i] == "":
                tokens[i] = t
        added = dict(added_tokens or {})
        for t, i in added.items():
            # Added tokens are matched literally, never as WordPiece pieces; an id names
            # them first (HF's id_to_token).
            while len(tokens) <= i:
                tokens.append("")
            tokens[i] = t
        names = {"unk_token": unk_token, "cls_token": cls_token, "sep_token": sep_token,
                 "pad_token": pad_token, "mask_token": mask_token}
        self._setup(tokens, model, added, names,
                    None if special_tokens is None else tuple(special_tokens),
                    continuing_subword_prefix, source, config, tuple(nonspecial_tokens))

    def _setup(self, tokens, model, added, names, specials, prefix, source, config,
               nonspecial=(), registered=()):
        self.source = source
        self.config = dict(config or {})
        self._tokens = tokens
        self._model = model
        self._added = added
        vocab = dict(model)
        vocab.update(added)
        if not vocab or (len(vocab) == 1 and "" in vocab):
            raise ValueError(f"vocabulary {source!r} is empty")
        names = {k: (v if v is not None else DEFAULT_SPECIAL_NAMES[k])
                 for k, v in names.items()}
        for k, v in names.items():
            if not isinstance(v, str) or not v:
                raise ValueError(f"{k} must be a non-empty string, got {v!r}")
        unk_token = names["unk_token"]
        if unk_token not in vocab:
            raise ValueError(
                f"vocabulary {source!r} has no unknown token {unk_token!r}; WordPiece needs one "
                f"(pass unk_token=... to name another token of the vocabulary)")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"vocabulary {source!r}: the continuing-subword prefix "
                             f"{prefix!r} is not supported (daskwp needs a non-empty one)")
        self._vocab = vocab
        self._names = names
        self.unk_token = unk_token
        self.cls_token, self.sep_token = names["cls_token"], names["sep_token"]
        self.pad_token, self.mask_token = names["pad_token"], names["mask_token"]
        self.continuing_subword_prefix = prefix
        self._explicit_specials = specials
        if specials is None:
            # What BertWordPieceTokenizer registers: these names, where in the vocabulary.
            specials = [names[k] for k in ("unk_token", "sep_token", "cls_token", "pad_token",
                                           "mask_token") if names[k] in vocab]
        missing = [t for t in specials if t not in vocab]
        if missing:
            raise ValueError(f"special tokens {missing} are not in vocabulary {source!r}")
        # Registered with add_special_tokens: added tokens, special, after the others.
        self._registered = tuple(registered)
        self.special_tokens = tuple(dict.fromkeys(
            [t for t in specials if t] + list(self._registered)))
        # Matched literally like the others, but not special (decode keeps them, as HF).
        self._nonspecial = tuple(t for t in nonspecial if t in self.special_tokens)
        self._prefix_blobs: dict = {}
        self._prefix_choices: dict = {}
        self._derived: dict = {}
        self._blob = self._compile(prefix)
        self.hash = self._content_hash()

    def _content_hash(self) -> str:
        """:attr:`hash`: the digest of the blob, the tokens, the special names (when not
        BERT's) and the non-special added tokens."""
        names = self._names
        h = hashlib.blake2b(digest_size=16)
        h.update(self._blob)
        h.update("\n".join(self._tokens).encode("utf-8", "surrogatepass"))
        if any(names[k] != DEFAULT_SPECIAL_NAMES[k] for k in names):
            # The frame and padding tokens are not in the blob: their names enter the hash.
            h.update(("\0" + "\0".join(names[k] for k in SPECIAL_NAME_OPTIONS))
                     .encode("utf-8", "surrogatepass"))
        if self._nonspecial:
            h.update(("\0nonspecial\0" + "\0".join(self._nonspecial))
                     .encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_tokens(cls, tokens: Sequence[str], **kwargs) -> "Vocabulary":
        """A vocabulary whose ids are the positions in ``tokens``."""
        return cls(tokens, **kwargs)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **kwargs) -> "Vocabulary":
        """Read a ``vocab.txt``, a HuggingFace ``tokenizer.json``, or a model folder (its
        ``tokenizer.json`` when it has one, as HF's fast tokenizers read it, else its
        ``vocab.txt``).

        Keywords: ``unk_token``, ``cls_token``, ``sep_token``, ``pad_token``, ``mask_token``
        (another spelling of a special token; None: the file's, else BERT's),
        ``continuing_subword_prefix``, ``special_tokens``.
        """
        p = Path(path)
        if p.is_dir():
            for name in ("tokenizer.json", "vocab.txt"):
                if (p / name).is_file():
                    return cls.from_file(p / name, **kwargs)
            raise FileNotFoundError(
                f"model folder {str(p)!r} holds neither vocab.txt nor tokenizer.json")
        if not p.is_file():
            raise FileNotFoundError(f"vocabulary file {str(p)!r} does not exist")
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if p.suffix == ".json":
            return cls._from_tokenizer_json(p, **kwargs)
        return cls._from_vocab_txt(p, **kwargs)

    @classmethod
    def _from_vocab_txt(cls, p: Path, **kwargs) -> "Vocabulary":
        raw = p.read_bytes()
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            raise ValueError(f"vocabulary file {str(p)!r} is empty")
        try:   # the whole file at once (a line at a time: 3x the time of a 30k-line file)
            lines = raw.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            _raise_invalid_line(p, raw)
        if lines and lines[-1] == "":
            lines.pop()
        return cls([line.rstrip(_WHITE_SPACE) for line in lines], source=str(p), **kwargs)

    @classmethod
    def _from_tokenizer_json(cls, p: Path, **kwargs) -> "Vocabulary":
        try:
            spec = json.loads(p.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"tokenizer file {str(p)!r} is not valid JSON: {e}") from None
        if not isinstance(spec, dict) or not isinstance(spec.get("model") or {}, dict):
            raise ValueError(f"tokenizer file {str(p)!r} is not a tokenizers JSON object with "
                             f"a 'model' mapping")
        model = spec.get("model") or {}
        mtype = model.get("type")
        if mtype != "WordPiece":
            raise ValueError(
                f"tokenizer file {str(p)!r} holds a {mtype!r} model; daskwp reads WordPiece "
                f"models only")
        vocab = model.get("vocab")
        if not isinstance(vocab, dict) or not vocab:
            raise ValueError(f"tokenizer file {str(p)!r} has an empty WordPiece vocabulary")
        for t, i in vocab.items():
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 2**31 - 1:
                raise ValueError(f"tokenizer file {str(p)!r}: token {t!r} has id {i!r}; ids "
                                 f"must be integers in [0, 2**31 - 1)")
        size = max(vocab.values()) + 1
        if size > 16 * len(vocab) + 1024:
            raise ValueError(f"tokenizer file {str(p)!r}: the largest id {size - 1} is far "
                             f"beyond the {len(vocab)} tokens; ids must be (nearly) dense")
        tokens = [""] * size
        taken = [False] * size
        shared: dict[str, int] = {}  # tokens that share an id with another token
        for t, i in vocab.items():
            if taken[i]:
                shared[t] = i
            else:
                tokens[i] = t
                taken[i] = True
        specials, added, stripped, nonspecial = [], {}, [], []
        strips = {}   # content -> [lstrip, rstrip]: core/added_spans.py widens their spans
        for at in spec.get("added_tokens") or []:
            if not isinstance(at, dict) or not isinstance(at.get("content"), str):
                raise ValueError(f"tokenizer file {str(p)!r}: an added token is not an object "
                                 f"with a 'content' string: {at!r:.80}")
            content, tid = at["content"], at.get("id")
            if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid < 2**31 - 1:
                raise ValueError(f"tokenizer file {str(p)!r}: added token {content!r} has id "
                                 f"{tid!r}; ids must be integers in [0, 2**31 - 1)")
            if not content:
                continue  # HF ignores empty added tokens
            if at.get("normalized", not at.get("special", False)):
                raise ValueError(
                    f"tokenizer file {str(p)!r}: added token {content!r} has "
                    f"\"normalized\": true (HF matches it in the normalized text), which "
                    f"daskwp does not support; daskwp matches added tokens in the raw text "
                    f"(\"normalized\": false)")
            if at.get("single_word", False):
                raise ValueError(
                    f"tokenizer file {str(p)!r}: added token {content!r} has "
                    f"\"single_word\": true (HF drops a match that touches a word "
                    f"character), which daskwp does not support")
            if at.get("lstrip", False) or at.get("rstrip", False):
                stripped.append(content)  # the tokenizer checks them against its pipeline
                strips[content] = [bool(at.get("lstrip")), bool(at.get("rstrip"))]
            specials.append(content)
            if not at.get("special", False):
                nonspecial.append(content)
            if vocab.get(content) != tid:
                added[content] = tid
        names = _special_names(spec)
        config = {"normalizer": spec.get("normalizer"),
                  "pre_tokenizer": spec.get("pre_tokenizer"),
                  "max_input_chars_per_word": model.get("max_input_chars_per_word", 100),
                  "stripped_added_tokens": stripped,
                  "added_token_strips": strips,
                  # what the tokenizer frames rows with (core/postprocess.py), and the
                  # cls / sep names the file gives (a rename of them is refused there)
                  "post_processor": spec.get("post_processor"),
                  "special_names": {k: v for k, v in names.items()
                                    if v in vocab or v in added}}
        kwargs.setdefault("unk_token", model.get("unk_token", "[UNK]"))
        kwargs.setdefault("continuing_subword_prefix",
                          model.get("continuing_subword_prefix", "##"))
        kwargs.setdefault("special_tokens", specials)
        full = dict(vocab)
        full.update(added)
        for k, v in names.items():
            if v in full:  # a name the file's tokens do not have keeps BERT's
                kwargs.setdefault(k, v)
        return cls(tokens, extra_tokens=shared, added_tokens=added, source=str(p),
                   config=config, nonspecial_tokens=nonspecial, **kwargs)

    @classmethod
    def default(cls) -> "Vocabulary":
        """The bundled bert-base-uncased vocabulary (nothing is downloaded)."""
        return _default_vocab()

    def with_special_names(self, **names) -> "Vocabulary":
        """This vocabulary with other special-token names (``unk_token``, ``cls_token``,
        ``sep_token``, ``pad_token``, ``mask_token``; None keeps the current one)."""
        unknown = sorted(set(names) - set(SPECIAL_NAME_OPTIONS))
        if unknown:
            raise TypeError(f"unexpected special-token name(s) {unknown}")
        new = dict(self._names)
        new.update({k: v for k, v in names.items() if v is not None})
        if new == self._names:
            return self
        v = Vocabulary.__new__(Vocabulary)
        v._setup(list(self._tokens), self._model, self._added, new, self._explicit_specials,
                 self.continuing_subword_prefix, self.source, self.config, self._nonspecial,
                 self._registered)
        return v

    def with_special_tokens(self, tokens: Sequence[str], *,
                            _checked: bool = False) -> "Vocabulary":
        """This vocabulary with ``tokens`` registered as special tokens (a new, immutable
        vocabulary; :meth:`WordPieceTokenizer.add_special_tokens` is the tokenizer's call,
        which also checks the strings against its normalization).

        Each new token takes the next id after the largest id in use, in order (HF's rule
        for a vocabulary whose ids are dense), is matched literally in the raw text,
        case-sensitively, before normalization, even inside a word, leftmost-longest with
        the other special tokens, and is never a WordPiece piece. Refused, with a
        ``ValueError`` naming the string (:func:`check_new_special_tokens`): an empty string,
        one given twice, one already a token of this vocabulary (its id is named), one with
        a White_Space character, one that starts with the continuing-subword prefix, and one
        with a lone surrogate or U+FFFD. A string that is not a ``str`` is a ``TypeError``.
        """
        tokens = list(tokens) if _checked else check_new_special_tokens(self, tokens)
        if not tokens:
            return self
        start = len(self._tokens)  # the largest id in use, plus one
        added = dict(self._added)
        all_tokens = list(self._tokens)
        for k, t in enumerate(tokens):
            added[t] = start + k
            all_tokens.append(t)
        v = Vocabulary.__new__(Vocabulary)
        v._setup(all_tokens, self._model, added, dict(self._names), self._explicit_specials,
                 self.continuing_subword_prefix, self.source, self.config, self._nonspecial,
                 self._registered + tuple(tokens))
        # The WordPiece pieces and the prefix are the same: so are the tokenizers' choices of
        # the prefix continuation pieces hang under (Vocabulary.prefix_choice).
        v._prefix_choices = dict(self._prefix_choices)
        return v

    def _compile(self, prefix: str) -> bytes:
        tokens, ids = list(self._model), list(self._model.values())
        if prefix != self.continuing_subword_prefix:
            # Continuation pieces hang under another (internal) prefix; the tokens keep their
            # literal place, where a word that starts with the real prefix finds them.
            real = self.continuing_subword_prefix
            moved = [(prefix + t[len(real):], i) for t, i in self._model.items()
                     if t.startswith(real) and t != real]
            tokens += [t for t, _ in moved]
            ids += [i for _, i in moved]
        encoded = [t.encode("utf-8", "surrogatepass") for t in tokens]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)),
                  out=offsets[1:])
        ids = np.array(ids, dtype=np.int32)
        return _ext.build_vocab(
            b"".join(encoded), offsets, ids, self._vocab[self.unk_token], prefix,
            list(self.special_tokens),
            [self._vocab[t] for t in self.special_tokens])

    def blob_for_prefix(self, prefix: str) -> bytes:
        """The trie with the continuation pieces under ``prefix`` instead of the real
        continuing-subword prefix, and every token also at its literal place: for
        pre-tokenizers whose words may start with the real prefix (HF then looks the word's
        start up literally, which the shared trie cannot tell from a continuation).
        ``prefix`` must be a string no word can start with and no token starts with."""
        if prefix == self.continuing_subword_prefix:
            return self._blob
        blob = self._prefix_blobs.get(prefix)
        if blob is None:
            blob = self._prefix_blobs[prefix] = self._compile(prefix)
        return blob

    def prefix_choice(self, key, choose):
        """``choose()``, remembered under ``key`` for this vocabulary (the tokenizer's choice
        of the prefix continuation pieces hang under, per normalization blob)."""
        if key not in self._prefix_choices:
            self._prefix_choices[key] = choose()
        return self._prefix_choices[key]

    def derived(self, key, make):
        """``make()``, kept with this vocabulary under ``key`` (what a tokenizer builds from
        the vocabulary alone and ``key``, like its kernel model: tokenizers that share the
        vocabulary, e.g. every unpickled copy of one in a worker, share it). Not carried over
        to :meth:`with_special_tokens`' vocabulary."""
        value = self._derived.get(key)
        if value is None:
            value = self._derived.setdefault(key, make())
        return value

    # -- queries --------------------------------------------------------------------------
    @property
    def blob(self) -> bytes:
        """The compiled trie (immutable bytes, layout in ``kernels/model.hpp``)."""
        return self._blob

    def __len__(self) -> int:
        return len(self._tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    def id_to_token(self, i: int) -> str | None:
        i = int(i)
        return self._tokens[i] if 0 <= i < len(self._tokens) else None

    @property
    def tokens(self) -> list[str]:
        """id -> token."""
        return list(self._tokens)

    @property
    def model_tokens(self) -> dict[str, int]:
        """token -> id of the WordPiece pieces (without the added tokens of a
        ``tokenizer.json``, which are matched literally only)."""
        return dict(self._model)

    @property
    def registered_special_tokens(self) -> tuple[str, ...]:
        """The tokens registered with :meth:`with_special_tokens` (or the tokenizer's
        ``add_special_tokens``), in order; their ids follow the vocabulary's."""
        return self._registered

    @property
    def special_names(self) -> dict[str, str]:
        """``unk_token``, ``cls_token``, ``sep_token``, ``pad_token``, ``mask_token``."""
        return dict(self._names)

    def _id_of(self, token: str, option: str) -> int:
        i = self._vocab.get(token)
        if i is None:
            hint = "" if token != DEFAULT_SPECIAL_NAMES[option] else \
                f" (pass {option}=... to name another token of the vocabulary)"
            raise ValueError(f"vocabulary {self.source!r} has no {token!r} token{hint}")
        return i

    @property
    def unk_id(self) -> int:
        return self._vocab[self.unk_token]

    @property
    def pad_id(self) -> int:
        return self._id_of(self.pad_token, "pad_token")

    @property
    def cls_id(self) -> int:
        return self._id_of(self.cls_token, "cls_token")

    @property
    def sep_id(self) -> int:
        return self._id_of(self.sep_token, "sep_token")

    @property
    def special_ids(self) -> set[int]:
        """Ids of the special tokens (a ``tokenizer.json``'s added tokens that are not
        ``special`` are matched literally too, but are not special)."""
        return {self._vocab[t] for t in self.special_tokens if t not in self._nonspecial}

    def __repr__(self) -> str:
        return f"Vocabulary({self.source!r}, size={len(self)}, hash={self.hash[:12]})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and other.hash == self.hash

    def __hash__(self) -> int:
        return hash(self.hash)

    def __dask_tokenize__(self):
        return ("daskwp.Vocabulary", self.hash)

    def __reduce__(self):
        key, payload = self._pickled()
        return (_unpickle_vocabulary, (key, payload))

    def _pickled(self) -> tuple[str, bytes]:
        """(content key, payload): the payload is :meth:`__getstate__` without the blob
        (rebuilt from the tokens on loading), pickled once per instance; the key is its
        digest. The instance is remembered under the key, so this process loads it back
        as itself."""
        done = self.__dict__.get("_pickled_state")
        if done is None:
            state = self.__getstate__()
            del state["blob"]
            payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
            key = hashlib.blake2b(payload, digest_size=20).hexdigest()
            done = self._pickled_state = (key, payload)
            _BY_CONTENT.put(key, self)
        return done

    def __getstate__(self) -> dict:
        # The token -> id maps are rebuilt from the id -> token list on unpickling (the last
        # duplicate wins, as when reading the file), which halves what Dask ships; only what
        # differs from it is recorded.
        base = _token_map(self._tokens)
        model_overrides = {t: i for t, i in self._model.items() if base.get(t) != i}
        model_excluded = [t for t in base if t not in self._model]
        return {"tokens": self._tokens, "model_overrides": model_overrides,
                "model_excluded": model_excluded, "added": self._added,
                "names": self._names, "explicit_specials": self._explicit_specials,
                "nonspecial": self._nonspecial, "registered": self._registered,
                "prefix": self.continuing_subword_prefix,
                "special_tokens": self.special_tokens,
                "blob": self._blob, "hash": self.hash, "source": self.source,
                "config": self.config}


def check_new_special_tokens(vocab: "Vocabulary", tokens) -> list[str]:
    """``tokens`` as a list, after the checks that need only the vocabulary (the exact
    rules are in :meth:`Vocabulary.with_special_tokens`); raises the first failure, naming
    the string (and the id it already has)."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"special tokens must be a list of strings, got one "
                        f"{type(tokens).__name__} {tokens!r:.60}; pass [{tokens!r:.60}]")
    try:
        tokens = list(tokens)
    except TypeError:
        raise TypeError(f"special tokens must be a list of strings, got "
                        f"{type(tokens).__name__}") from None
    seen: dict[str, int] = {}
    prefix = vocab.continuing_subword_prefix
    for k, t in enumerate(tokens):
        if not isinstance(t, str):
            raise TypeError(f"special token {k} is not a string: {t!r:.60} "
                            f"({type(t).__name__})")
        if not t:
            raise ValueError(f"special token {k} is the empty string")
        m = _UNSPELLABLE.search(t)
        if m is not None:
            bad = m.group()
            what = "U+FFFD (the replacement of invalid input)" if bad == "\ufffd" else \
                f"a lone surrogate U+{ord(bad):04X}"
            raise ValueError(f"special token {t!r} contains {what}; a special token must be "
                             f"valid text that real input can spell")
        m = _WHITE_SPACE_RE.search(t)
        if m is not None:
            raise ValueError(
                f"special token {t!r} contains whitespace ({m.group()!r}); pre-tokenizers "
                f"split words there, so a special token may not contain any (Unicode "
                f"White_Space)")
        if t in seen:
            raise ValueError(f"special token {t!r} is given twice (positions {seen[t]} "
                             f"and {k})")
        seen[t] = k
        existing = vocab.token_to_id(t)
        if existing is not None:
            kind = "a special token" if t in vocab.special_tokens else "a token"
            raise ValueError(f"special token {t!r} is already {kind} of vocabulary "
                             f"{vocab.source!r}, with id {existing}")
        if t.startswith(prefix):
            raise ValueError(
                f"special token {t!r} starts with the continuing-subword prefix {prefix!r}; "
                f"decode would take it for a continuation piece")
    return tokens


def _raise_invalid_line(p: Path, raw: bytes):
    """The ValueError of a ``vocab.txt`` that is not UTF-8: the first line that is not, and
    the byte within it."""
    for n, line in enumerate(raw.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"vocabulary file {str(p)!r}, line {n}: invalid UTF-8 ({e.reason} at byte "
                f"{e.start}); a vocabulary must be UTF-8 text") from None
    raise AssertionError("a file that is not UTF-8 has a line that is not")


def _token_map(tokens) -> dict:
    """token -> id, the last of equal tokens winning (its place in the map, the first's)."""
    return dict(zip(tokens, range(len(tokens))))


def _special_names(spec: dict) -> dict:
    """cls/sep from a tokenizer.json's post-processor, pad from its padding (when given)."""
    names = {}
    post = spec.get("post_processor")
    if isinstance(post, dict):
        if post.get("type") in ("BertProcessing", "RobertaProcessing"):
            for key in ("cls", "sep"):
                v = post.get(key)
                if isinstance(v, list) and v and isinstance(v[0], str):
                    names[key + "_token"] = v[0]
        elif post.get("type") == "TemplateProcessing":
            single = post.get("single")
            if isinstance(single, list) and len(single) == 3:
                first, mid, last = single
                ok = (isinstance(first, dict) and "SpecialToken" in first
                      and isinstance(mid, dict) and "Sequence" in mid
                      and isinstance(last, dict) and "SpecialToken" in last)
                if ok:
                    names["cls_token"] = first["SpecialToken"].get("id")
                    names["sep_token"] = last["SpecialToken"].get("id")
    padding = spec.get("padding")
    if isinstance(padding, dict) and isinstance(padding.get("pad_token"), str):
        names["pad_token"] = padding["pad_token"]
    return {k: v for k, v in names.items() if isinstance(v, str) and v}


#: Vocabularies this process unpickled (or pickled), by the digest of their pickled content:
#: loading a vocabulary the process already holds is a lookup. Keys come from the whole
#: payload (tokens, ids, special tokens, names, prefix, source, config), so two vocabularies
#: that differ anywhere never share an entry.
_BY_CONTENT = BoundedCache("vocabularies_by_content", 4)


def _unpickle_vocabulary(key: str, payload: bytes) -> Vocabulary:
    """The vocabulary of ``payload`` (what :meth:`Vocabulary._pickled` made): this process's
    copy when it has one under ``key``, else rebuilt from the payload alone."""
    return _BY_CONTENT.get_or_create(key, lambda: _rebuild_from_payload(key, payload))


def _rebuild_from_payload(key: str, payload: bytes) -> Vocabulary:
    state = pickle.loads(payload)
    v = _rebuild_vocabulary(state)
    v._blob = v._compile(v.continuing_subword_prefix)
    if v._content_hash() != v.hash:
        raise ValueError(f"unpickled vocabulary {v.source!r} compiles to another trie than the "
                         f"one it was pickled with (hash {v.hash[:12]}); the daskwp versions "
                         f"that pickled and loaded it differ")
    v._pickled_state = (key, payload)
    return v


def _rebuild_vocabulary(state: dict) -> Vocabulary:
    v = Vocabulary.__new__(Vocabulary)
    v._tokens = state["tokens"]
    model = _token_map(v._tokens)
    for t in state["model_excluded"]:
        model.pop(t, None)
    # Tokens whose id is not their last line (e.g. an earlier duplicate's id kept by an
    # added token) were recorded explicitly.
    model.update(state["model_overrides"])
    v._model = model
    v._added = state["added"]
    vocab = dict(model)
    vocab.update(v._added)
    v._vocab = vocab
    v._names = state["names"]
    v.unk_token = v._names["unk_token"]
    v.cls_token, v.sep_token = v._names["cls_token"], v._names["sep_token"]
    v.pad_token, v.mask_token = v._names["pad_token"], v._names["mask_token"]
    v._explicit_specials = state["explicit_specials"]
    v._nonspecial = tuple(state["nonspecial"])
    v._registered = tuple(state.get("registered", ()))
    v.continuing_subword_prefix = state["prefix"]
    v.special_tokens = tuple(state["special_tokens"])
    v._blob = state.get("blob")
    v._prefix_blobs = {}
    v._prefix_choices = {}
    v._derived = {}
    v.hash = state["hash"]
    v.source = state["source"]
    v.config = state["config"]
    return v


_DEFAULT = None


def _default_vocab() -> Vocabulary:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Vocabulary.from_file(DEFAULT_VOCAB_PATH)
    return _DEFAULT
