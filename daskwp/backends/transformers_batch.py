"""The drop-in's result: a ``BatchEncoding`` look-alike (docs/design.md §3.6).

:class:`BatchEncoding` is what :class:`~daskwp.backends.transformers_compat.TransformersTokenizer`
returns: the model inputs as a mapping with attribute access, as transformers' class, and the
alignment methods (``word_ids``, ``sequence_ids``, ``token_to_chars`` ... over
:mod:`daskwp.backends.transformers_alignment`). Its rows come from the general path as lists,
or from the vectorized windows as :class:`ArrayRows`, which keeps the kernel's arrays and
converts a table to lists only when a row of it is first asked for. The conversions to
transformers' output types (lists of ``(start, end)`` tuples, NumPy int64 arrays, torch
tensors) live here too. It holds no tokenizer state of its own: what needs the tokenizer
(``tokens()``, word ids asked for late) goes through the owner it was made by, which does
not travel when it is pickled.
"""

from __future__ import annotations

import gc
import inspect
from collections import UserDict

import numpy as np

from . import transformers_alignment as align

__all__ = ["ArrayRows", "BatchEncoding", "as_tensor", "offsets_available", "pad_left",
           "span_rows", "tensor_kind"]


def offsets_available(tok) -> bool:
    """Whether the daskwp tokenizer ``tok`` gives character offsets and word ids
    (``tok.encode(..., return_offsets_mapping=True, return_word_ids=True,
    offsets_unit="chars")``). The one feature check of this module: where it is False,
    ``return_offsets_mapping=True`` and ``BatchEncoding.word_ids`` raise NotImplementedError."""
    try:
        params = inspect.signature(tok.encode).parameters
    except (TypeError, ValueError):
        return False
    return all(k in params for k in ("return_offsets_mapping", "return_word_ids",
                                     "offsets_unit"))


_DETACHED = ("{what} needs the tokenizer, which a BatchEncoding does not carry when it is "
             "pickled (the inputs, sequence ids and any word ids already asked for do): ask "
             "for it before pickling, or call the tokenizer again")


class BatchEncoding(UserDict):
    """What :class:`TransformersTokenizer` returns: a mapping of the model inputs with
    attribute access (``enc.input_ids``), as transformers' ``BatchEncoding``.

    ``word_ids(i)``, ``sequence_ids(i)`` and ``tokens(i)`` describe row ``i`` (for an
    un-batched result, ``i = 0``); ``to(device)`` moves torch tensors; ``convert_to_tensors``
    converts in place. Integer indexing (transformers' ``tokenizers.Encoding`` objects) is not
    available.
    """

    def __init__(self, data=None, tensor_type=None, *, rows=None, n_sequences=None,
                 owner=None, redo=None):
        super().__init__(data or {})
        self._rows = rows              # per row: (sequence ids, word ids or None, ids)
        self._n_sequences = n_sequences
        self._owner = owner
        self._redo = redo              # the same call with word ids (made when asked)
        if tensor_type is not None:
            self.convert_to_tensors(tensor_type)

    def __getattr__(self, item):
        if item.startswith("__") or item in ("data", "_rows", "_n_sequences", "_owner",
                                             "_redo"):
            raise AttributeError(item)
        try:
            return self.data[item]
        except KeyError:
            raise AttributeError(item) from None

    def __getitem__(self, item):
        if isinstance(item, str):
            return self.data[item]
        if isinstance(item, slice):
            return {k: v[item] for k, v in self.data.items()}
        raise KeyError("Invalid key: this BatchEncoding takes strings (the inputs' names) and "
                       "slices; integer indices (HF's tokenizers.Encoding objects) are not "
                       "available from daskwp")

    def __getstate__(self):
        return {"data": self.data, "rows": self._rows, "n_sequences": self._n_sequences}

    def __setstate__(self, state):
        self.data = state["data"]
        self._rows = state.get("rows")
        self._n_sequences = state.get("n_sequences")
        self._owner = None
        self._redo = None

    @property
    def n_sequences(self):
        return self._n_sequences

    @property
    def is_fast(self) -> bool:
        return True

    @property
    def encodings(self):
        return None

    def _row(self, batch_index: int):
        if self._rows is None:
            raise ValueError("this BatchEncoding was not built by the tokenizer (pad() or a "
                             "copy): it has no word or sequence ids")
        return self._rows[batch_index]

    def sequence_ids(self, batch_index: int = 0) -> list:
        """Per token of row ``batch_index``: 0 or 1 (the sequence it comes from), None for
        special tokens and padding."""
        return list(self._row(batch_index)[0])

    def _complete(self, batch_index: int, offsets: bool = False):
        """Row ``batch_index`` with its word ids (and offsets): the same call made again
        with offsets the first time they are asked for."""
        row = self._row(batch_index)
        if row[1] is None or (offsets and row[3] is None):
            if self._redo is not None and self._owner is not None and \
                    offsets_available(self._owner.tokenizer):
                self._rows = self._redo()._rows   # the same rows, with word ids, offsets
                self._redo = None
                row = self._row(batch_index)
            elif self._owner is None:
                raise ValueError(_DETACHED.format(what="word ids and offsets"))
            else:
                raise NotImplementedError(
                    "word_ids / offsets: this daskwp tokenizer does not give word ids yet "
                    "(tok.encode(..., return_word_ids=True) is not available in this build)")
        if offsets:
            if self._owner is not None:
                self._owner._check_offsets_exact()
            if row[3] is None:
                raise ValueError("character offsets are not available for this row")
        return row

    def word_ids(self, batch_index: int = 0) -> list:
        """Per token of row ``batch_index``: the index of the word it comes from (in its own
        sequence), None for special tokens and padding."""
        return list(self._complete(batch_index)[1])

    def words(self, batch_index: int = 0) -> list:
        """``word_ids`` (transformers' older name)."""
        return self.word_ids(batch_index)

    @staticmethod
    def _where(a, b, what):
        """transformers' (batch index, index) of ``f(i)`` / ``f(batch, i)``; a negative
        index is an AttributeError there (its BatchEncoding has no ``_seq_len``)."""
        batch, index = (a, b) if b is not None else (0, a)
        if batch < 0 or (what and index < 0):
            raise AttributeError(f"negative {'batch' if batch < 0 else what} index: "
                                 f"transformers' BatchEncoding has no '_seq_len' / "
                                 f"'_batch_size' to resolve it")
        return batch, index

    def token_to_sequence(self, batch_or_token_index: int, token_index: int | None = None):
        """The sequence (0 / 1) token ``token_index`` of a row comes from; None for special
        tokens and padding."""
        b, t = self._where(batch_or_token_index, token_index, "token")
        return align.token_to_sequence(self._row(b)[0], t)

    def token_to_word(self, batch_or_token_index: int, token_index: int | None = None):
        """The word (in its own sequence) a token comes from; None for special tokens."""
        b, t = self._where(batch_or_token_index, token_index, "token")
        row = self._complete(b)
        return align.token_to_word(row[0], row[1], t)

    def token_to_chars(self, batch_or_token_index: int, token_index: int | None = None):
        """``CharSpan(start, end)`` of a token in its own text; None for special tokens."""
        b, t = self._where(batch_or_token_index, token_index, None)
        row = self._complete(b, offsets=True)
        return align.token_to_chars(row[0], row[3], t)

    def char_to_token(self, batch_or_char_index: int, char_index: int | None = None,
                      sequence_index: int = 0):
        """The first token of sequence ``sequence_index`` whose span holds the character;
        None where none does."""
        b, c = self._where(batch_or_char_index, char_index, None)
        row = self._complete(b, offsets=True)
        return align.char_to_token(row[0], row[3], row[4], c, sequence_index)

    def char_to_word(self, batch_or_char_index: int, char_index: int | None = None,
                     sequence_index: int = 0):
        """The word of the token :meth:`char_to_token` finds."""
        b, c = self._where(batch_or_char_index, char_index, None)
        row = self._complete(b, offsets=True)
        return align.char_to_word(row[0], row[1], row[3], row[4], c, sequence_index)

    def word_to_tokens(self, batch_or_word_index: int, word_index: int | None = None,
                       sequence_index: int = 0):
        """``TokenSpan(start, end)`` of a word of sequence ``sequence_index``; None if it
        has no tokens."""
        b, w = self._where(batch_or_word_index, word_index, "word")
        row = self._complete(b)
        return align.word_to_tokens(row[0], row[1], row[4], w, sequence_index)

    def word_to_chars(self, batch_or_word_index: int, word_index: int | None = None,
                      sequence_index: int = 0):
        """``CharSpan(start, end)`` of a word; a TypeError where it has no tokens (as
        transformers)."""
        b, w = self._where(batch_or_word_index, word_index, None)
        row = self._complete(b, offsets=True)
        return align.word_to_chars(row[0], row[1], row[3], row[4], w, sequence_index)

    def tokens(self, batch_index: int = 0) -> list:
        """The token strings of row ``batch_index``."""
        ids = self._row(batch_index)[2]
        if self._owner is None:
            raise ValueError(_DETACHED.format(what="tokens()"))
        return self._owner.convert_ids_to_tokens(list(ids))

    def convert_to_tensors(self, tensor_type=None, prepend_batch_axis: bool = False):
        if tensor_type is None:
            return self
        kind = tensor_kind(tensor_type)
        for key, value in list(self.data.items()):
            if prepend_batch_axis:
                value = [value]
            self.data[key] = as_tensor(key, value, kind)
        return self

    def to(self, device, *, non_blocking: bool = False):
        """Every torch tensor moved to ``device`` (this object, changed in place)."""
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ImportError("BatchEncoding.to() needs PyTorch, which is not installed") \
                from None
        self.data = {k: v.to(device=device, non_blocking=non_blocking)
                     if hasattr(v, "to") and callable(v.to) else v
                     for k, v in self.data.items()}
        return self

    def __repr__(self) -> str:
        return repr(self.data)


class ArrayRows:
    """Per-row (sequence ids, word ids or None, ids, offsets or None, number of sequences)
    of the vectorized path, made when asked from its arrays (a 2-D array, or a list of rows,
    each: sequence ids and word ids with -1 for None, token ids; offsets a 3-D array or a
    list of rows of ``(start, end)`` tuples). A table is converted to Python lists the
    first time one of its rows is asked for (one NumPy pass, not one per row), so
    ``word_ids(i)`` over every row costs one conversion. Plain data: a BatchEncoding
    holding it pickles."""

    def __init__(self, seq, ids, n_sequences, words=None, offsets=None):
        self._src = {"seq": seq, "ids": ids, "words": words, "offsets": offsets}
        self._lists: dict = {}
        self._n = n_sequences
        self._len = len(ids)

    def __getstate__(self):
        return {"src": self._src, "n": self._n}

    def __setstate__(self, state):
        if "src" not in state:     # pickled before offsets came along (_seq, _ids, _n)
            state = {"src": {"seq": state["_seq"], "ids": state["_ids"], "words": None,
                             "offsets": None}, "n": state["_n"]}
        self._src, self._n = state["src"], state["n"]
        self._lists = {}
        self._len = len(self._src["ids"])

    def _table(self, key):
        if key not in self._lists:
            src = self._src[key]
            if src is None:
                self._lists[key] = None
            elif key in ("seq", "words"):
                self._lists[key] = _none_rows(src)
            elif key == "offsets" and isinstance(src, np.ndarray):
                self._lists[key] = span_rows(src)
            else:
                self._lists[key] = src.tolist() if isinstance(src, np.ndarray) else src
        return self._lists[key]

    def __getitem__(self, i):
        if not -self._len <= i < self._len:
            raise IndexError(f"batch index {i} out of range for {self._len} rows")
        return _LazyRow(self, i)

    def __len__(self):
        return self._len


class _LazyRow:
    """One row of :class:`ArrayRows`; ``row[k]`` as the general path's row tuples."""

    __slots__ = ("_rows", "_i")
    _KEYS = ("seq", "words", "ids", "offsets")

    def __init__(self, rows, i):
        self._rows, self._i = rows, i

    def __getitem__(self, k):
        if k == 4:
            return self._rows._n
        table = self._rows._table(self._KEYS[k])
        return None if table is None else table[self._i]


def pad_left(a, shift, fill):
    """Right-padded rows of ``a`` (2-D, or 3-D for offsets) with their padding moved to the
    left: row ``r``'s cells shifted ``shift[r]`` places right, ``fill`` before them."""
    src = np.arange(a.shape[1], dtype=np.int64)[None, :] - shift[:, None]
    keep = src >= 0
    src = np.where(keep, src, 0)
    if a.ndim == 3:
        src, keep = src[..., None], keep[..., None]
    return np.where(keep, np.take_along_axis(a, src, axis=1), fill).astype(a.dtype)


#: One (start, end) span as a NumPy record: a span array viewed with it converts to tuples.
_SPAN = np.dtype([("start", np.int64), ("end", np.int64)])


def span_rows(a) -> list:
    """An int (..., 2) array of spans as (nested) lists of ``(start, end)`` tuples, as HF
    gives ``offset_mapping``: one NumPy conversion, with the garbage collector paused (its
    passes over the growing list of new tuples would otherwise cost more than making
    them)."""
    spans = np.ascontiguousarray(a, dtype=np.int64).view(_SPAN)[..., 0]
    paused = gc.isenabled()
    gc.disable()
    try:
        return spans.tolist()
    finally:
        if paused:
            gc.enable()


def _none_rows(a) -> list:
    """Rows of ``a`` (a 2-D integer array or a list of lists) as lists with None for the
    negative values (special tokens, padding)."""
    if isinstance(a, np.ndarray):
        o = a.astype(object)
        o[a < 0] = None
        return o.tolist()
    return [[None if v < 0 else v for v in r] for r in a]


def tensor_kind(tensor_type) -> str:
    kind = getattr(tensor_type, "value", tensor_type)
    if kind not in ("np", "pt"):
        raise ValueError(f"return_tensors={tensor_type!r} is not available from daskwp's "
                         f"transformers drop-in; use None (lists), 'np' or 'pt'")
    return kind


def as_tensor(key, value, kind):
    if kind == "pt":
        try:
            import torch
        except ImportError:
            raise ImportError("Unable to convert output to PyTorch tensors format, PyTorch is "
                              "not installed.") from None
        if torch.is_tensor(value):
            return value
        if isinstance(value, np.ndarray):
            return torch.from_numpy(value)
        try:
            if isinstance(value, list) and len(value) == 0:
                return torch.tensor(value, dtype=torch.int64)
            return torch.tensor(value)
        except (ValueError, TypeError, RuntimeError) as e:
            raise ValueError(
                f"Unable to create tensor, you should probably activate truncation and/or "
                f"padding with 'padding=True' 'truncation=True' to have batched tensors with "
                f"the same length (`{key}` has rows of different lengths).") from e
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)) and value and \
            isinstance(value[0], (list, tuple, np.ndarray)):
        if len({len(v) for v in value}) > 1:
            out = np.empty(len(value), dtype=object)
            for i, v in enumerate(value):
                out[i] = np.asarray(v)
            return out
    if isinstance(value, (list, tuple)) and len(value) == 0:
        return np.asarray(value, dtype=np.int64)
    return np.asarray(value)
