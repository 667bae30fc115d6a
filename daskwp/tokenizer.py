"""The single-machine tokenizer: HuggingFace-exact WordPiece over whole batches."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from . import _ext
from ._input import chunk_buffers, to_arrow
from .normalize import norm_blob
from .vocab import Vocabulary


class Encoding:
    """Ragged token ids of a batch: ``token_ids[offsets[i]:offsets[i+1]]`` is document i.

    Attributes
    ----------
    token_ids : numpy.ndarray of int32
    offsets : numpy.ndarray of int64, length n + 1
    """

    __slots__ = ("token_ids", "offsets")

    def __init__(self, token_ids: np.ndarray, offsets: np.ndarray):
        self.token_ids = token_ids
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"document {i} out of range for {n} documents")
        return self.token_ids[self.offsets[i]:self.offsets[i + 1]]

    @property
    def lengths(self):
        """Tokens per document (int64; a CuPy array for GPU results)."""
        return self.offsets[1:] - self.offsets[:-1]

    def to_list(self) -> list[list[int]]:
        ids = self.token_ids.tolist()
        off = self.offsets.tolist()
        return [ids[off[i]:off[i + 1]] for i in range(len(off) - 1)]

    def __repr__(self) -> str:
        return f"Encoding(documents={len(self)}, tokens={len(self.token_ids)})"


def _default_num_threads() -> int:
    """All cores, except inside a Dask worker thread, where the worker owns parallelism."""
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker
            get_worker()
            return 1
        except (ValueError, ImportError):
            pass
    return 0


def _as_bool(name: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


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
        run on the GPU (``daskwp.cuda``: the same core compiled with NVRTC), and their
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
                 device: str = "cpu"):
        if vocab is None:
            vocab = Vocabulary.default()
        elif not isinstance(vocab, Vocabulary):
            vocab = Vocabulary.from_file(vocab)
        self.vocab = vocab
        self.lowercase = _as_bool("lowercase", lowercase)
        if strip_accents is not None:
            strip_accents = _as_bool("strip_accents", strip_accents)
        self.strip_accents = strip_accents
        self.clean_text = _as_bool("clean_text", clean_text)
        self.handle_chinese_chars = _as_bool("handle_chinese_chars", handle_chinese_chars)
        if isinstance(max_input_chars_per_word, bool) or not isinstance(
                max_input_chars_per_word, (int, np.integer)) or max_input_chars_per_word < 1 \
                or max_input_chars_per_word > 2**31 - 1:
            raise ValueError(f"max_input_chars_per_word must be an integer in [1, 2**31-1], "
                             f"got {max_input_chars_per_word!r}")
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        if num_threads is not None and (not isinstance(num_threads, (int, np.integer))
                                        or num_threads < 0):
            raise ValueError(f"num_threads must be a non-negative integer or None, got "
                             f"{num_threads!r}")
        self.num_threads = num_threads
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        self.device = device
        strip = self.lowercase if self.strip_accents is None else self.strip_accents
        self._norm = np.frombuffer(
            norm_blob(self.clean_text, self.handle_chinese_chars, strip, self.lowercase),
            dtype=np.uint8)
        self._vocab_blob = np.frombuffer(self.vocab.blob, dtype=np.uint8)

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
    def encode(self, texts, *, num_threads: int | None = None) -> Encoding:
        """Token ids (no special tokens added) of every document, ragged.

        ``texts``: a str, a list of str (None/NaN are empty documents), a pandas Series
        (object, string or Arrow dtype), or a pyarrow (Large)String/Binary array or
        ChunkedArray.
        """
        if self._on_gpu(texts):
            from .cuda import encode_cuda
            token_ids, offsets = encode_cuda(self, texts)
            return Encoding(token_ids, offsets)
        arr = to_arrow(texts)
        threads = num_threads if num_threads is not None else self.num_threads
        if threads is None:
            threads = _default_num_threads()
        ids_parts, off_parts, base = [], [np.zeros(1, dtype=np.int64)], 0
        for chunk in arr.chunks:
            if len(chunk) == 0:
                continue
            b = chunk_buffers(chunk)
            fn = _ext.encode64 if b.offsets.dtype == np.int64 else _ext.encode32
            ids, off = fn(self._vocab_blob, self._norm, self.max_input_chars_per_word,
                          np.ascontiguousarray(b.offsets), b.data, b.validity,
                          b.validity_offset, int(threads))
            ids_parts.append(ids)
            off_parts.append(off[1:] + base)
            base += len(ids)
        if len(ids_parts) == 1:
            return Encoding(ids_parts[0], np.concatenate(off_parts))
        token_ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int32)
        return Encoding(token_ids.astype(np.int32, copy=False), np.concatenate(off_parts))

    def __call__(self, texts, max_length: int = 128, stride: int = 0,
                 truncation: bool = False, add_special_tokens: bool = True,
                 padding="max_length", return_tensors: str | None = None,
                 logid_offset: int = 0, mask_dtype: str = "int32"):
        """Strided windows with attention mask and (logID, start, stop) metadata.

        See :func:`daskwp.windows.encode_windows` (SPEC §2 semantics). ``return_tensors``
        defaults to "np", or "cp" when the work runs on the GPU.
        """
        if self._on_gpu(texts):
            from .cuda import windows_cuda
            return windows_cuda(self, texts, max_length=max_length, stride=stride,
                                truncation=truncation, add_special_tokens=add_special_tokens,
                                padding=padding, return_tensors=return_tensors or "cp",
                                logid_offset=logid_offset, mask_dtype=mask_dtype)
        if return_tensors is None:
            return_tensors = "np"
        from .windows import encode_windows
        return encode_windows(self, texts, max_length=max_length, stride=stride,
                              truncation=truncation, add_special_tokens=add_special_tokens,
                              padding=padding, return_tensors=return_tensors,
                              logid_offset=logid_offset, mask_dtype=mask_dtype)

    def _on_gpu(self, texts) -> bool:
        if self.device == "cuda":
            return True
        mod = type(texts).__module__.split(".")[0]
        if mod in ("cudf", "pylibcudf") or type(texts).__name__ == "DeviceStrings":
            from .cuda import is_device_input
            return is_device_input(texts)
        return False

    def decode(self, ids, skip_special_tokens: bool = True):
        """Token ids back to text, BERT style (HF's WordPiece decoder with cleanup)."""
        from .windows import decode
        return decode(self.vocab, ids, skip_special_tokens=skip_special_tokens)

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


def _rebuild_tokenizer(vocab, settings, num_threads, device="cpu"):
    return WordPieceTokenizer(vocab, num_threads=num_threads, device=device, **settings)
