"""Ragged containers: a batch's token ids (:class:`Encoding`), rows of different lengths
(:class:`RaggedRows`) and the windows of a batch (:class:`BatchWindows`).

All three are the same shape of data: flat values plus int64 offsets, the layout of an Arrow
``LargeListArray``. They hold NumPy or CuPy arrays and import neither backend.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BatchWindows", "Encoding", "RaggedRows", "array_module", "to_host"]


def array_module(a):
    """``cupy`` for a CuPy array, else ``numpy``."""
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def to_host(a) -> np.ndarray:
    """A NumPy array of ``a`` (copied from the device for CuPy)."""
    if type(a).__module__.split(".")[0] == "cupy":
        return a.get()
    return np.asarray(a)


class RaggedRows:
    """Rows of different lengths stored flat: row ``r`` is ``values[offsets[r]:offsets[r+1]]``.

    This is what ``input_ids`` and ``attention_mask`` are with ``padding=False``: the layout
    of an Arrow ``LargeListArray`` (see :meth:`to_arrow`), which list-column writers store
    as is. Indexing gives one row (a view), iteration yields the rows, ``len`` is the
    number of rows.

    Attributes
    ----------
    values : array (int32 ids, or the mask dtype), flat
    offsets : array of int64, ``rows + 1`` entries

    Examples
    --------
    >>> import daskwp
    >>> out = daskwp.WordPieceTokenizer()(["Hello world!", "hi"], max_length=8, padding=False)
    >>> rows = out.input_ids                     # RaggedRows: no padding
    >>> rows.to_list()
    [[101, 7592, 2088, 999, 102], [101, 7632, 102]]
    >>> rows.lengths
    array([5, 3], dtype=int64)
    >>> rows.to_arrow().type
    LargeListType(large_list<item: int32>)
    """

    __slots__ = ("values", "offsets")
    _item = "row"

    def __init__(self, values, offsets):
        self.values = values
        self.offsets = offsets

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def __getitem__(self, r):
        """Row ``r`` (a view of ``values``), or for a slice the selected rows as a new
        container of the same type (values copied, offsets rebased to 0)."""
        n = len(self)
        if isinstance(r, slice):
            lo, hi, step = r.indices(n)
            if step != 1:
                raise ValueError(f"{type(self).__name__} slices must be contiguous (step 1), "
                                 f"got step {step}")
            hi = max(hi, lo)
            offs = self.offsets[lo:hi + 1]
            first = int(offs[0]) if hi > lo else 0
            values = self.values[first:int(offs[-1])] if hi > lo else self.values[:0]
            return type(self)(values.copy(), (offs - first) if hi > lo
                              else array_module(self.offsets).zeros(1, dtype=np.int64))
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise TypeError(f"{type(self).__name__} indices must be integers or slices, got "
                            f"{type(r).__name__}")
        r = int(r)
        if r < 0:
            r += n
        if not 0 <= r < n:
            raise IndexError(f"{self._item} {r} out of range for {n} {self._item}s")
        return self.values[int(self.offsets[r]):int(self.offsets[r + 1])]

    def __iter__(self):
        off = to_host(self.offsets).tolist()
        for r in range(len(off) - 1):
            yield self.values[off[r]:off[r + 1]]

    @property
    def lengths(self):
        """Length of every row (int64)."""
        return self.offsets[1:] - self.offsets[:-1]

    def to_list(self) -> list[list[int]]:
        vals = to_host(self.values).tolist()
        off = to_host(self.offsets).tolist()
        return [vals[off[r]:off[r + 1]] for r in range(len(off) - 1)]

    def to_arrow(self):
        """A ``pyarrow.LargeListArray`` sharing the buffers (NumPy-backed rows only)."""
        import pyarrow as pa

        return pa.LargeListArray.from_arrays(pa.array(np.asarray(self.offsets)),
                                             pa.array(np.asarray(self.values)))

    def __repr__(self) -> str:
        return f"RaggedRows(rows={len(self)}, values={int(self.values.shape[0])})"


class Encoding(RaggedRows):
    """Ragged token ids of a batch: ``token_ids[offsets[i]:offsets[i+1]]`` is document i.

    The documents view of :class:`RaggedRows` (one row per document): ``enc[i]`` is the ids of
    document ``i``, ``enc[a:b]`` an Encoding of documents ``a..b-1``.

    Attributes
    ----------
    token_ids : numpy.ndarray of int32 (CuPy for GPU results); the same array as ``values``
    offsets : numpy.ndarray of int64, length n + 1
    offset_mapping : numpy.ndarray of int64, tokens x 2, or None
        With ``return_offsets_mapping=True``: ``[begin, end)`` of every token in its ORIGINAL
        document, in ``offsets_unit`` (``"chars"``: HF's ``Encoding.offsets``; ``"bytes"``:
        UTF-8 positions), flat like ``token_ids`` (docs/design.md §2.9).
    word_ids : numpy.ndarray of int32, or None
        With ``return_word_ids=True``: the index of every token's pre-tokenized word within
        its document (HF's ``Encoding.word_ids``; a literal special token is a word).
    offsets_unit : str or None
        The unit of ``offset_mapping``.

    :meth:`count_id` counts an id among ``token_ids`` (``enc.count_id(vocab.unk_id)``: the
    batch's ``[UNK]``); the CPU extension counts the ``[UNK]`` while it writes the ids.

    Examples
    --------
    >>> import daskwp
    >>> enc = daskwp.WordPieceTokenizer().encode(["Hello world!", None, "café"])
    >>> enc.token_ids, enc.offsets               # flat ids; document i is ids[offsets[i]:offsets[i+1]]
    (array([7592, 2088,  999, 7668], dtype=int32), array([0, 3, 3, 4], dtype=int64))
    >>> len(enc), enc[2]
    (3, array([7668], dtype=int32))
    """

    __slots__ = ("offset_mapping", "word_ids", "offsets_unit", "_counted")
    _item = "document"

    def __init__(self, token_ids, offsets, offset_mapping=None, word_ids=None,
                 offsets_unit=None, counted=None):
        super().__init__(token_ids, offsets)
        self.offset_mapping = offset_mapping
        self.word_ids = word_ids
        self.offsets_unit = offsets_unit if offset_mapping is not None else None
        #: ``(token_id, n)``: ``n`` of ``token_ids`` are ``token_id``, counted by the kernel
        #: that wrote them (:meth:`count_id`); None: not counted
        self._counted = counted

    @property
    def token_ids(self):
        return self.values

    @token_ids.setter
    def token_ids(self, value):
        self.values = value
        self._counted = None

    def count_id(self, token_id: int) -> int:
        """How many of ``token_ids`` equal ``token_id`` (``enc.count_id(vocab.unk_id)``: the
        batch's ``[UNK]``).

        The CPU extension counts the vocabulary's ``[UNK]`` as it writes the ids, a block at
        a time while they are in the cache: for that id this is no pass over the ids. Any
        other id (or ids from elsewhere: the GPU, a slice) is counted here, in one pass (on
        the device for CuPy ids). The count is of the ids as made: ``token_ids`` changed in
        place afterwards are not counted again (assigning ``enc.token_ids`` is)."""
        counted = self._counted
        if counted is not None and counted[0] == int(token_id):
            return int(counted[1])
        if array_module(self.values) is np:
            from .lengths import count_equal
            return count_equal(self.values, int(token_id))
        return int((self.values == int(token_id)).sum())

    def keys(self) -> list:
        """The outputs ``enc[name]`` gives, one row per document (the mapping every result
        of daskwp answers): ``input_ids``, ``attention_mask``, then ``offset_mapping`` and
        ``word_ids`` where asked for."""
        return ["input_ids", "attention_mask",
                *(k for k in ("offset_mapping", "word_ids") if getattr(self, k) is not None)]

    def _output(self, key: str) -> RaggedRows:
        if key not in self.keys():
            raise KeyError(f"Encoding has no output {key!r}; keys: {', '.join(self.keys())}")
        values = {"input_ids": self.values, "offset_mapping": self.offset_mapping,
                  "word_ids": self.word_ids}.get(key)
        if values is None:   # attention_mask: 1 on every token
            values = array_module(self.values).ones(self.values.shape, dtype=np.int32)
        return RaggedRows(values, self.offsets)

    def items(self) -> list:
        return [(k, self._output(k)) for k in self.keys()]

    def get(self, key, default=None):
        return self._output(key) if key in self.keys() else default

    def __contains__(self, item) -> bool:
        if isinstance(item, str):
            return item in self.keys()
        return any(np.array_equal(row, item) for row in self)

    def __getitem__(self, r):
        """As :meth:`RaggedRows.__getitem__`; a slice keeps ``offset_mapping`` and
        ``word_ids`` (the offsets stay relative to each document). A name
        (``enc["input_ids"]``, :meth:`keys`) gives that output as RaggedRows, one row per
        document."""
        if isinstance(r, str):
            return self._output(r)
        out = super().__getitem__(r)
        if isinstance(r, slice) and (self.offset_mapping is not None or
                                     self.word_ids is not None):
            lo, hi, _ = r.indices(len(self))
            hi = max(hi, lo)
            a = int(self.offsets[lo]) if hi > lo else 0
            b = int(self.offsets[hi]) if hi > lo else 0
            if self.offset_mapping is not None:
                out.offset_mapping = self.offset_mapping[a:b].copy()
                out.offsets_unit = self.offsets_unit
            if self.word_ids is not None:
                out.word_ids = self.word_ids[a:b].copy()
        return out

    def __reduce__(self):
        return (Encoding, (self.values, self.offsets, self.offset_mapping, self.word_ids,
                           self.offsets_unit, self._counted))

    def __repr__(self) -> str:
        extra = "".join(f", {k}" for k in ("offset_mapping", "word_ids")
                        if getattr(self, k) is not None)
        return f"Encoding(documents={len(self)}, tokens={int(self.values.shape[0])}{extra})"


class BatchWindows(dict):
    """The windows of a batch: a dict with attribute access.

    Keys (also attributes): ``input_ids``, ``attention_mask`` (rows x width, or
    :class:`RaggedRows` with ``padding=False``) and ``metadata`` (rows x 3 int64: logID,
    start, stop — stop inclusive).

    Attributes
    ----------
    doc_row_offsets : numpy.ndarray of int64, ``n_documents + 1`` entries
        The rows of document ``d`` are ``doc_row_offsets[d]:doc_row_offsets[d+1]``.

    Examples
    --------
    >>> import daskwp
    >>> out = daskwp.WordPieceTokenizer()(["Hello world!", "a longer text than one row holds"],
    ...                                   max_length=6, stride=1)
    >>> out.input_ids.shape, out.attention_mask.shape
    ((3, 6), (3, 6))
    >>> out.metadata                             # the second document has two rows
    array([[0, 1, 3],
           [1, 1, 3],
           [1, 1, 4]], dtype=int64)
    >>> out.doc_row_offsets
    array([0, 1, 3], dtype=int64)
    """

    def __init__(self, data, doc_row_offsets=None):
        super().__init__(data)
        self.doc_row_offsets = doc_row_offsets

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"BatchWindows has no attribute {name!r}; keys: {sorted(self)}") from None

    @property
    def num_rows(self) -> int:
        return int(self["metadata"].shape[0])

    def __reduce__(self):
        return (_rebuild_batch, (dict(self), self.doc_row_offsets))

    def __repr__(self) -> str:
        parts = []
        for k, v in self.items():
            if isinstance(v, RaggedRows):
                parts.append(f"{k}={v!r}")
            else:
                parts.append(f"{k}={type(v).__module__.split('.')[0]}"
                             f"{tuple(v.shape)}:{v.dtype}")
        return "BatchWindows(" + ", ".join(parts) + ")"


def _rebuild_batch(data, doc_row_offsets):
    return BatchWindows(data, doc_row_offsets)

