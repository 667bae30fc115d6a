"""The small protocol between the tokenizer and its backends.

A backend turns texts into ragged token ids and ragged ids into windows. It reads only a
:class:`KernelModel` — the compiled vocabulary blob and normalization blob that every backend
consumes byte for byte (docs/design.md §8) — and the validated
:class:`~daskwp.core.windows.WindowParams`. Backends:

* ``cpu`` (:mod:`daskwp.backends.cpu`): the native extension, multi-threaded;
* ``gpu`` (:mod:`daskwp.backends.cuda`): the same core compiled with NVRTC, via CuPy;
* the pure-Python reference (:mod:`daskwp.backends.reference`), for tests only.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Protocol

import numpy as np

from ..core.ragged import BatchWindows, Encoding
from ..core.vocab import Vocabulary
from ..core.windows import WindowParams

__all__ = ["Backend", "KernelModel", "kernel_model"]


@dataclasses.dataclass(frozen=True, eq=False)
class KernelModel:
    """What the kernels read: the vocabulary blob, the normalization blob, the word limit.

    Attributes
    ----------
    vocab : Vocabulary
        Source of the blob and of the special-token ids the window fill needs.
    vocab_blob, norm_blob : numpy.ndarray of uint8
    max_input_chars_per_word : int
    """

    vocab: Vocabulary
    vocab_blob: np.ndarray
    norm_blob: np.ndarray
    max_input_chars_per_word: int

    @functools.cached_property
    def key(self) -> tuple:
        """Identity of what the kernels compute: vocabulary hash, normalization digest and
        word limit (the key of every per-model cache; computed once per model, which
        tokenizers sharing a vocabulary share)."""
        return (self.vocab.hash, hashlib.blake2b(self.norm_blob, digest_size=16).hexdigest(),
                self.max_input_chars_per_word)


def kernel_model(obj) -> KernelModel:
    """``obj`` itself when it is a KernelModel, else its ``kernel_model`` (a tokenizer)."""
    if isinstance(obj, KernelModel):
        return obj
    km = getattr(obj, "kernel_model", None)
    if isinstance(km, KernelModel):
        return km
    raise TypeError(f"expected a WordPieceTokenizer or a KernelModel, got "
                    f"{type(obj).__name__}")


class Backend(Protocol):
    """One way to run the kernels."""

    name: str

    def encode(self, model: KernelModel, texts, num_threads: int) -> Encoding:
        """Ragged token ids (no special tokens) of every document."""

    def build_windows(self, encoding: Encoding, vocab: Vocabulary, params: WindowParams,
                      num_threads: int) -> BatchWindows:
        """The windows, mask and metadata of already tokenized documents."""
