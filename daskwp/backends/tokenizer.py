"""The single-machine tokenizer: HuggingFace-exact WordPiece over whole batches."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..core import config
from ..core.cache import BoundedCache
from ..core.decode import decode as decode_ids
from ..core.normalizer import norm_blob
from ..core.options import (TOKENIZER, check, check_bool, check_opt_bool, names,
                            normalize_device)
from ..core.ragged import Encoding
from ..core.vocab import Vocabulary
from ..core.windows import WINDOW_OPTIONS, window_params
from .cpu import CPU, default_num_threads
from .protocol import KernelModel

__all__ = ["TOKENIZER_OPTIONS", "WordPieceTokenizer", "resolve_tokenizer"]

#: Tokenizer options of ``tokenize(...)`` besides ``vocab`` and ``lowercase`` (option table).
TOKENIZER_OPTIONS = tuple(n for n in names(TOKENIZER)
                          if n not in ("vocab", "lowercase", "num_threads", "device"))


class WordPieceTokenizer:
    """BERT WordPiece tokenizer with HuggingFace ``BertWordPieceTokenizer`` semantics.

    Parameters
    ----------
    vocab : Vocabulary, str or path, optional
        A :class:`Vocabulary`, or a path to ``vocab.txt`` / ``tokenizer.json`` / a model
        folder. Default: the bundled bert-base-uncased vocabulary.
    lowercase : bool, default True
        Lowercase the text (per character, as HF does).
    strip_accents : bool or None, default None
        Remove combining marks after NFD; None follows ``lowercase`` (HF's rule).
    clean_text : bool, default True
        Remove control/format characters and map whitespace to spaces.
    handle_chinese_chars : bool, default True
        Make every CJK ideograph a word of its own.
    max_input_chars_per_word : int, default 100
        A longer word (in characters after normalization) becomes the unknown token.
    num_threads : int, optional
        Threads for a batch; default all cores (1 inside a Dask worker thread).
    device : {"cpu", "cuda"}, default "cpu"
        Where ``encode`` and ``__call__`` run. cudf and other device-resident inputs always
        run on the GPU (``daskwp.backends.cuda``: the same core compiled with NVRTC), and their
        outputs stay there (CuPy arrays).

    Differences from HuggingFace
    ----------------------------
    See the README section of that name: input that is not valid UTF-8 (binary columns,
    lone surrogates) decodes to U+FFFD, which ``clean_text`` removes.
    """

    def __init__(self, vocab: Vocabulary | str | os.PathLike | None = None, *,
                 lowercase: bool = True, strip_accents: bool | None = None,
                 clean_text: bool = True, handle_chinese_chars: bool = True,
                 max_input_chars_per_word: int = 100, num_threads: int | None = None,
                 device: str = "auto"):
        if vocab is None:
            vocab = Vocabulary.default()
        elif not isinstance(vocab, Vocabulary):
            vocab = Vocabulary.from_file(vocab)
        self.vocab = vocab
        self.lowercase = check_bool("lowercase", lowercase)
        self.strip_accents = check_opt_bool("strip_accents", strip_accents)
        self.clean_text = check_bool("clean_text", clean_text)
        self.handle_chinese_chars = check_bool("handle_chinese_chars", handle_chinese_chars)
        self.max_input_chars_per_word = check("max_input_chars_per_word",
                                              max_input_chars_per_word)
        self.num_threads = check("num_threads", num_threads)
        self.device = normalize_device(device)
        strip = self.lowercase if self.strip_accents is None else self.strip_accents
        self.kernel_model = KernelModel(
            vocab=self.vocab,
            vocab_blob=np.frombuffer(self.vocab.blob, dtype=np.uint8),
            norm_blob=np.frombuffer(norm_blob(self.clean_text, self.handle_chinese_chars,
                                              strip, self.lowercase), dtype=np.uint8),
            max_input_chars_per_word=self.max_input_chars_per_word)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, **kwargs) -> "WordPieceTokenizer":
        """Load a model folder (``vocab.txt`` or ``tokenizer.json``); settings come from
        ``tokenizer_config.json`` or the ``tokenizer.json`` normalizer when present, and
        keyword arguments override them."""
        folder = Path(folder)
        vocab = Vocabulary.from_file(folder)
        settings: dict = {}
        norm = (vocab.config or {}).get("normalizer")
        if isinstance(norm, dict) and norm.get("type") == "BertNormalizer":
            settings.update(lowercase=norm.get("lowercase", True),
                            strip_accents=norm.get("strip_accents"),
                            clean_text=norm.get("clean_text", True),
                            handle_chinese_chars=norm.get("handle_chinese_chars", True))
        if "max_input_chars_per_word" in (vocab.config or {}):
            settings["max_input_chars_per_word"] = vocab.config["max_input_chars_per_word"]
        cfg_path = folder / "tokenizer_config.json" if folder.is_dir() else None
        if cfg_path is not None and cfg_path.is_file():
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            if "do_lower_case" in cfg:
                settings["lowercase"] = bool(cfg["do_lower_case"])
            if "strip_accents" in cfg:
                settings["strip_accents"] = cfg["strip_accents"]
            if "tokenize_chinese_chars" in cfg:
                settings["handle_chinese_chars"] = bool(cfg["tokenize_chinese_chars"])
        settings.update(kwargs)
        return cls(vocab, **settings)

    # -- encoding -------------------------------------------------------------------------
    def _threads(self, num_threads) -> int:
        if num_threads is not None:
            return check("num_threads", num_threads)
        return self.num_threads if self.num_threads is not None else default_num_threads()

    def encode(self, texts, *, num_threads: int | None = None) -> Encoding:
        """Token ids (no special tokens added) of every document, ragged.

        ``texts``: a str, a list of str (None/NaN are empty documents), a pandas Series
        (object, string or Arrow dtype), or a pyarrow (Large)String/Binary array or
        ChunkedArray.
        """
        threads = self._threads(num_threads)
        if self._on_gpu(texts):
            from .cuda import encode_cuda
            token_ids, offsets = encode_cuda(self, texts)
            return Encoding(token_ids, offsets)
        return CPU.encode(self.kernel_model, texts, threads)

    def __call__(self, texts, max_length: int | None = None, stride: int | None = None,
                 truncation: bool | None = None, add_special_tokens: bool | None = None,
                 padding=None, return_tensors: str | None = None, logid_offset: int = 0,
                 mask_dtype: str = "int32"):
        """Tokenize ``texts`` and cut every document into strided windows (GST outputs).

        Parameters
        ----------
        texts : str, list of str, pandas Series, pyarrow string array, cudf Series
            None/NaN, empty and whitespace-only documents each give one empty row.
        max_length : int, default 128
            Row width, special tokens included; ``L = max_length - 2`` body tokens per row
            with special tokens (so max_length >= 3), else ``L = max_length``.
        stride : int, default 0
            Tokens shared by consecutive windows (HuggingFace's meaning), ``0 <= stride < L``.
        truncation : bool, default False
            True: one row per document, tokens past ``L`` dropped. False: nothing is lost,
            ``1 + ceil((n - L) / (L - stride))`` rows for ``n > L`` tokens.
        add_special_tokens : bool, default True
            Frame every row as ``[CLS] body [SEP]`` (ids from the vocabulary).
        padding : "max_length", True, "longest", False or "do_not_pad"
            "max_length" (default) and True pad every row to ``max_length`` with the
            vocabulary's [PAD]; "longest" pads to the longest row of this batch (at most
            ``max_length``); False / "do_not_pad" return ragged rows (:class:`RaggedRows`).
            Note: unlike ``transformers``, where ``padding=True`` means "longest", True here
            means "max_length" (fixed-shape tensors are the GST use).
        return_tensors : "np", "pt" or "cp"
            NumPy arrays (default), torch tensors (zero-copy), or CuPy arrays (the default
            when the work runs on the GPU).
        logid_offset : int, default 0
            logID of the first document (the Dask layer passes the partition's global
            offset).
        mask_dtype : "int32" (default) or "int8"
            dtype of ``attention_mask``.

        Window options left at None take the configured default (``daskwp.<name>`` in
        ``dask.config``; the defaults above). Semantics: docs/design.md §2.

        Returns
        -------
        BatchWindows
            ``input_ids`` (int32) and ``attention_mask``: rows x width, or
            :class:`RaggedRows` with ``padding=False``; ``metadata``: rows x 3 int64
            ``(logID, start, stop)``, stop inclusive. Rows are in document order, then window
            order.

        Memory
        ------
        ``rows * width * (4 + mask bytes) + rows * 24`` bytes, allocated once at its exact
        size.
        """
        if self._on_gpu(texts):
            from .cuda import windows_cuda
            return windows_cuda(self, texts, max_length=max_length, stride=stride,
                                truncation=truncation, add_special_tokens=add_special_tokens,
                                padding=padding,
                                return_tensors="cp" if return_tensors is None else return_tensors,
                                logid_offset=logid_offset, mask_dtype=mask_dtype)
        p = window_params(max_length, stride, truncation, add_special_tokens, padding,
                          "np" if return_tensors is None else return_tensors, logid_offset,
                          mask_dtype)
        threads = self._threads(None)
        enc = CPU.encode(self.kernel_model, texts, threads)
        return CPU.build_windows(enc, self.vocab, p, threads)

    def _on_gpu(self, texts) -> bool:
        if self.device == "gpu":
            return True
        mod = type(texts).__module__.split(".")[0]
        if self.device == "auto" and (mod in ("cudf", "pylibcudf")
                                      or type(texts).__name__ == "DeviceStrings"):
            from .cuda import is_device_input
            return is_device_input(texts)
        return False

    def decode(self, ids, skip_special_tokens: bool = True):
        """Token ids back to text, BERT style (HF's WordPiece decoder with cleanup)."""
        return decode_ids(self.vocab, ids, skip_special_tokens=skip_special_tokens)

    # -- identity -------------------------------------------------------------------------
    @property
    def settings(self) -> dict:
        return {"lowercase": self.lowercase, "strip_accents": self.strip_accents,
                "clean_text": self.clean_text, "handle_chinese_chars": self.handle_chinese_chars,
                "max_input_chars_per_word": self.max_input_chars_per_word}

    def __dask_tokenize__(self):
        return ("daskwp.WordPieceTokenizer", self.vocab.hash,
                tuple(sorted(self.settings.items())))

    def __reduce__(self):
        return (_rebuild_tokenizer, (self.vocab, self.settings, self.num_threads, self.device))

    def __repr__(self) -> str:
        s = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"WordPieceTokenizer({self.vocab!r}, {s})"


def _rebuild_tokenizer(vocab, settings, num_threads, device="auto"):
    return WordPieceTokenizer(vocab, num_threads=num_threads, device=device, **settings)


# -- resolving what a user named ----------------------------------------------------------

_VOCABULARIES = BoundedCache("vocabularies_by_path", 8)


def _vocabulary_from_path(path) -> Vocabulary:
    """``Vocabulary.from_file``, cached by path, size and modification time."""
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        return Vocabulary.from_file(p)  # raises the reader's clear error
    return _VOCABULARIES.get_or_create(key, lambda: Vocabulary.from_file(p))


def resolve_tokenizer(vocab=None, lowercase=None, **options) -> WordPieceTokenizer:
    """The tokenizer that ``tokenize(vocab=..., lowercase=..., ...)`` describes (the
    accessors and batch jobs).

    ``vocab`` is a :class:`WordPieceTokenizer` (used as is), a :class:`Vocabulary`, a path to
    ``vocab.txt`` / ``tokenizer.json``, a model folder (read with
    :meth:`WordPieceTokenizer.from_pretrained`, so its ``tokenizer_config.json`` applies), or
    None for ``daskwp.vocab`` in ``dask.config`` (default: the bundled bert-base-uncased).
    Options left at None take the model folder's setting, else the configured default.
    """
    unknown = sorted(set(options) - set(TOKENIZER_OPTIONS))
    if unknown:
        raise TypeError(f"tokenize() got unexpected keyword argument(s) {unknown}; allowed: "
                        f"vocab, lowercase, {', '.join(TOKENIZER_OPTIONS)}, "
                        f"{', '.join(WINDOW_OPTIONS)}")
    given = {k: check(k, v) for k, v in options.items() if v is not None}
    if isinstance(vocab, WordPieceTokenizer):
        if lowercase is not None or given:
            names_ = (["lowercase"] if lowercase is not None else []) + sorted(given)
            raise ValueError(f"vocab is already a WordPieceTokenizer; options {names_} cannot "
                             f"be applied to it (build the tokenizer with them instead)")
        return vocab
    vocab = check("vocab", config.get("vocab", vocab))
    if vocab is not None and not isinstance(vocab, Vocabulary) and Path(vocab).is_dir():
        if lowercase is not None:
            given["lowercase"] = lowercase
        return WordPieceTokenizer.from_pretrained(vocab, **given)
    if vocab is None:
        vocab = Vocabulary.default()
    elif not isinstance(vocab, Vocabulary):  # a path (checked above)
        vocab = _vocabulary_from_path(vocab)
    return WordPieceTokenizer(vocab, lowercase=config.get("lowercase", lowercase), **given)
