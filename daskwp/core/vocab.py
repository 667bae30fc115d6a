"""Vocabulary: reading vocab.txt / tokenizer.json / model folders, validation, and the
compiled trie blob that the native core (CPU and GPU) reads.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .. import _ext

DEFAULT_VOCAB_PATH = Path(__file__).resolve().parent.parent / "data" / "bert-base-uncased-vocab.txt"

# The special tokens HuggingFace's BertWordPieceTokenizer registers (when they are in the
# vocabulary): they are matched literally in the raw text.
BERT_SPECIAL_TOKENS = ("[UNK]", "[SEP]", "[CLS]", "[PAD]", "[MASK]")

# Rust's str::trim_end removes Unicode White_Space, which differs from Python's str.isspace
# (the latter also strips U+001C..U+001F).
_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


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

    Memory
    ------
    The blob is about 40 bytes per trie node: ~1.3 MB for bert-base-uncased, ~9 MB for the
    119,547-token multilingual vocabulary. It pickles as bytes, so Dask ships it once per
    worker keyed by :attr:`hash`.
    """

    def __init__(self, tokens: Sequence[str], *, unk_token: str = "[UNK]",
                 continuing_subword_prefix: str = "##",
                 special_tokens: Iterable[str] | None = None,
                 extra_tokens: dict[str, int] | None = None,
                 source: str = "<tokens>", config: dict | None = None):
        self.source = source
        self.config = dict(config or {})
        self._tokens = list(tokens)  # id -> token (may contain duplicates / empty strings)
        vocab: dict[str, int] = {}
        for i, t in enumerate(self._tokens):
            vocab[t] = i  # the last occurrence wins, as in HF
        for t, i in (extra_tokens or {}).items():
            # Tokens beyond the list (added tokens) or sharing an id with another token.
            vocab[t] = i
            while len(self._tokens) <= i:
                self._tokens.append("")
            if self._tokens[i] == "":
                self._tokens[i] = t
        if not vocab or (len(vocab) == 1 and "" in vocab):
            raise ValueError(f"vocabulary {source!r} is empty")
        if unk_token not in vocab:
            raise ValueError(
                f"vocabulary {source!r} has no unknown token {unk_token!r}; WordPiece needs one "
                f"(pass unk_token=... to name another token of the vocabulary)")
        self._vocab = vocab
        self.unk_token = unk_token
        self.continuing_subword_prefix = continuing_subword_prefix
        if special_tokens is None:
            special_tokens = [t for t in BERT_SPECIAL_TOKENS if t in vocab]
        missing = [t for t in special_tokens if t not in vocab]
        if missing:
            raise ValueError(f"special tokens {missing} are not in vocabulary {source!r}")
        self.special_tokens = tuple(dict.fromkeys(special_tokens))
        self._blob = self._compile()
        h = hashlib.blake2b(digest_size=16)
        h.update(self._blob)
        h.update("\n".join(self._tokens).encode("utf-8", "surrogatepass"))
        self.hash = h.hexdigest()

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_tokens(cls, tokens: Sequence[str], **kwargs) -> "Vocabulary":
        """A vocabulary whose ids are the positions in ``tokens``."""
        return cls(tokens, **kwargs)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **kwargs) -> "Vocabulary":
        """Read a ``vocab.txt``, a HuggingFace ``tokenizer.json``, or a model folder."""
        p = Path(path)
        if p.is_dir():
            for name in ("vocab.txt", "tokenizer.json"):
                if (p / name).is_file():
                    return cls.from_file(p / name, **kwargs)
            raise FileNotFoundError(
                f"model folder {str(p)!r} holds neither vocab.txt nor tokenizer.json")
        if not p.is_file():
            raise FileNotFoundError(f"vocabulary file {str(p)!r} does not exist")
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
        lines = raw.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        tokens = []
        for n, line in enumerate(lines, 1):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"vocabulary file {str(p)!r}, line {n}: invalid UTF-8 ({e.reason} at byte "
                    f"{e.start}); a vocabulary must be UTF-8 text") from None
            tokens.append(text.rstrip(_WHITE_SPACE))
        return cls(tokens, source=str(p), **kwargs)

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
        specials, extra = [], dict(shared)
        for at in spec.get("added_tokens") or []:
            content, tid = at["content"], at["id"]
            if at.get("normalized", False) and not at.get("special", False):
                raise ValueError(
                    f"tokenizer file {str(p)!r}: added token {content!r} is matched after "
                    f"normalization, which daskwp does not support")
            specials.append(content)
            if vocab.get(content) != tid:
                extra[content] = tid
        config = {"normalizer": spec.get("normalizer"),
                  "max_input_chars_per_word": model.get("max_input_chars_per_word", 100)}
        kwargs.setdefault("unk_token", model.get("unk_token", "[UNK]"))
        kwargs.setdefault("continuing_subword_prefix",
                          model.get("continuing_subword_prefix", "##"))
        kwargs.setdefault("special_tokens", specials)
        return cls(tokens, extra_tokens=extra, source=str(p), config=config, **kwargs)

    @classmethod
    def default(cls) -> "Vocabulary":
        """The bundled bert-base-uncased vocabulary (nothing is downloaded)."""
        return _default_vocab()

    def _compile(self) -> bytes:
        items = list(self._vocab.items())
        encoded = [t.encode("utf-8", "surrogatepass") for t, _ in items]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        ids = np.fromiter((i for _, i in items), dtype=np.int32, count=len(items))
        return _ext.build_vocab(
            b"".join(encoded), offsets, ids, self._vocab[self.unk_token],
            self.continuing_subword_prefix,
            list(self.special_tokens),
            [self._vocab[t] for t in self.special_tokens])

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

    def _id_of(self, token: str) -> int:
        i = self._vocab.get(token)
        if i is None:
            raise ValueError(f"vocabulary {self.source!r} has no {token!r} token")
        return i

    @property
    def unk_id(self) -> int:
        return self._vocab[self.unk_token]

    @property
    def pad_id(self) -> int:
        return self._id_of("[PAD]")

    @property
    def cls_id(self) -> int:
        return self._id_of("[CLS]")

    @property
    def sep_id(self) -> int:
        return self._id_of("[SEP]")

    @property
    def special_ids(self) -> set[int]:
        return {self._vocab[t] for t in self.special_tokens}

    def __repr__(self) -> str:
        return f"Vocabulary({self.source!r}, size={len(self)}, hash={self.hash[:12]})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and other.hash == self.hash

    def __hash__(self) -> int:
        return hash(self.hash)

    def __dask_tokenize__(self):
        return ("daskwp.Vocabulary", self.hash)

    def __reduce__(self):
        return (_rebuild_vocabulary, (self.__getstate__(),))

    def __getstate__(self) -> dict:
        # The token -> id map is rebuilt from the id -> token list on unpickling (the last
        # duplicate wins, as when reading the file), which halves what Dask ships.
        overrides = {t: i for t, i in self._vocab.items()
                     if not (i < len(self._tokens) and self._tokens[i] == t)}
        return {"tokens": self._tokens, "overrides": overrides, "unk_token": self.unk_token,
                "prefix": self.continuing_subword_prefix, "special_tokens": self.special_tokens,
                "blob": self._blob, "hash": self.hash, "source": self.source,
                "config": self.config}


def _rebuild_vocabulary(state: dict) -> Vocabulary:
    v = Vocabulary.__new__(Vocabulary)
    v._tokens = state["tokens"]
    vocab: dict[str, int] = {}
    for i, t in enumerate(v._tokens):
        vocab[t] = i
    # Tokens whose id is not their last line (e.g. an earlier duplicate's id kept by an
    # added token) were recorded explicitly.
    for t, i in state["overrides"].items():
        vocab[t] = i
    v._vocab = vocab
    v.unk_token = state["unk_token"]
    v.continuing_subword_prefix = state["prefix"]
    v.special_tokens = tuple(state["special_tokens"])
    v._blob = state["blob"]
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
