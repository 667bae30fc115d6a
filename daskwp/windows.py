"""GST outputs: strided windows, attention mask and (logID, start, stop) metadata; stitching
windows back into documents; the word-level view; decoding ids back to text.

The windows follow SPEC section 2. For a document with WordPiece tokens ``t[0..n)``:

* ``L = max_length - 2`` with special tokens (each row is ``[CLS] body [SEP]``), else
  ``L = max_length``; ``stride`` is the overlap of consecutive bodies (HuggingFace meaning),
  ``step = L - stride``;
* row ``k`` holds ``t[k*step : k*step + L]``; there are ``K = 1`` rows when ``n <= L`` (or
  when truncating), else ``1 + ceil((n - L) / step)`` — exactly HuggingFace's overflow
  windows, with logIDs equal to its ``overflow_to_sample_mapping`` plus ``logid_offset``;
* ``metadata[r] = (logID, start, stop)``: the columns ``start..stop`` (stop inclusive) of row
  ``r`` that the row *owns*. Over a document's rows the owned slices are disjoint and
  consecutive and rebuild ``t[0..n)`` exactly once: row 0 starts at ``b`` (1 with
  ``[CLS]``, else 0), row ``k > 0`` at ``b + floor(stride/2)``; a row that is not the last
  stops at ``b + L - ceil(stride/2) - 1``, the last row at its last body token. An empty
  document gives one row with ``stop = start - 1``.

Windows, mask and metadata are built natively over the whole batch (count rows, scan,
allocate exact-size outputs, fill each row; ``kernels/windows.hpp``): no per-window Python.
"""

from __future__ import annotations

import functools

import numpy as np

from . import _ext

__all__ = [
    "BatchWindows",
    "RaggedRows",
    "decode",
    "encode_windows",
    "merge_wordpieces",
    "stitch",
    "stitch_flat",
    "windows_from_encoding",
]

_PADDING_CHOICES = ('"max_length"', "True", '"longest"', "False", '"do_not_pad"')
_TENSOR_CHOICES = ("np", "pt", "cp")


# ---------------------------------------------------------------------------------------
# Result containers
# ---------------------------------------------------------------------------------------
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
    """

    __slots__ = ("values", "offsets")

    def __init__(self, values, offsets):
        self.values = values
        self.offsets = offsets

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def __getitem__(self, r: int):
        n = len(self)
        r = int(r)
        if r < 0:
            r += n
        if not 0 <= r < n:
            raise IndexError(f"row {r} out of range for {n} rows")
        return self.values[int(self.offsets[r]):int(self.offsets[r + 1])]

    def __iter__(self):
        off = _to_host(self.offsets).tolist()
        for r in range(len(off) - 1):
            yield self.values[off[r]:off[r + 1]]

    @property
    def lengths(self):
        """Length of every row (int64)."""
        return self.offsets[1:] - self.offsets[:-1]

    def to_list(self) -> list[list[int]]:
        vals = _to_host(self.values).tolist()
        off = _to_host(self.offsets).tolist()
        return [vals[off[r]:off[r + 1]] for r in range(len(off) - 1)]

    def to_arrow(self):
        """A ``pyarrow.LargeListArray`` sharing the buffers (NumPy-backed rows only)."""
        import pyarrow as pa

        return pa.LargeListArray.from_arrays(pa.array(np.asarray(self.offsets)),
                                             pa.array(np.asarray(self.values)))

    def __repr__(self) -> str:
        return f"RaggedRows(rows={len(self)}, values={int(self.values.shape[0])})"


class BatchWindows(dict):
    """The windows of a batch: a dict with attribute access.

    Keys (also attributes): ``input_ids``, ``attention_mask`` (rows x width, or
    :class:`RaggedRows` with ``padding=False``) and ``metadata`` (rows x 3 int64: logID,
    start, stop — stop inclusive).

    Attributes
    ----------
    doc_row_offsets : numpy.ndarray of int64, ``n_documents + 1`` entries
        The rows of document ``d`` are ``doc_row_offsets[d]:doc_row_offsets[d+1]``.
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


# ---------------------------------------------------------------------------------------
# Parameter validation (errors name the value received and what is allowed)
# ---------------------------------------------------------------------------------------
def _check_int(name: str, value, lo: int | None = None, hi: int | None = None,
               allowed: str | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r} "
                        f"({type(value).__name__})")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} must be {allowed}, got {v}")
    return v


def _check_bool(name: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def _check_truncation(value) -> bool:
    if isinstance(value, str):
        if value in ("longest_first", "only_first"):
            return True
        if value == "do_not_truncate":
            return False
        raise ValueError(f"truncation must be True, False, 'longest_first', 'only_first' or "
                         f"'do_not_truncate', got {value!r}")
    return _check_bool("truncation", value)


def _check_padding(value) -> str:
    """'max_length' (pad every row to max_length), 'longest' or 'ragged'."""
    if isinstance(value, (bool, np.bool_)):
        return "max_length" if value else "ragged"
    if isinstance(value, str):
        if value == "max_length":
            return "max_length"
        if value == "longest":
            return "longest"
        if value == "do_not_pad":
            return "ragged"
    raise ValueError(f"padding must be one of {', '.join(_PADDING_CHOICES)}, got {value!r}")


def _check_tensors(value) -> str:
    if isinstance(value, str) and value in _TENSOR_CHOICES:
        return value
    raise ValueError(f"return_tensors must be one of {_TENSOR_CHOICES}, got {value!r}")


def _check_mask_dtype(value) -> bool:
    """True for int8, False for int32."""
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt == np.int32:
        return False
    if dt == np.int8:
        return True
    raise ValueError(f"mask_dtype must be int32 or int8, got {value!r}")


class _Params:
    __slots__ = ("max_length", "stride", "truncation", "add_special_tokens", "padding",
                 "return_tensors", "logid_offset", "mask_int8", "body_length")


def _validate(max_length, stride, truncation, add_special_tokens, padding, return_tensors,
              logid_offset, mask_dtype) -> _Params:
    p = _Params()
    p.add_special_tokens = _check_bool("add_special_tokens", add_special_tokens)
    n_special = 2 if p.add_special_tokens else 0
    p.max_length = _check_int(
        "max_length", max_length, lo=1 + n_special, hi=2**31 - 1,
        allowed=("in [3, 2**31-1] with add_special_tokens=True (room for [CLS], [SEP] and "
                 "at least one token)" if n_special else "in [1, 2**31-1]"))
    p.body_length = p.max_length - n_special
    p.stride = _check_int(
        "stride", stride, lo=0, hi=p.body_length - 1,
        allowed=(f"in [0, {p.body_length}) (the overlap must be smaller than the "
                 f"{p.body_length} tokens a row holds with max_length={p.max_length}"
                 + (" and special tokens" if n_special else "") + ")"))
    p.truncation = _check_truncation(truncation)
    p.padding = _check_padding(padding)
    p.return_tensors = _check_tensors(return_tensors)
    p.logid_offset = _check_int("logid_offset", logid_offset, lo=0, hi=2**63 - 1,
                                allowed="a non-negative integer")
    p.mask_int8 = _check_mask_dtype(mask_dtype)
    return p


# ---------------------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------------------
def _convert(arr, return_tensors: str):
    if return_tensors == "np":
        return arr
    if return_tensors == "pt":
        try:
            import torch
        except ImportError:
            raise ImportError("return_tensors='pt' needs PyTorch, which is not installed; "
                              "use return_tensors='np' (or 'cp' with CuPy)") from None
        return torch.from_numpy(arr)
    try:
        import cupy
    except ImportError:
        raise ImportError("return_tensors='cp' needs CuPy, which is not installed; use "
                          "return_tensors='np' (or 'pt' with PyTorch)") from None
    return cupy.asarray(arr)


def _fill_plan(vocab, p: _Params, offsets):
    """(padded, cls_id, sep_id, pad_id, width) for the native fill, CPU or GPU alike.

    ``offsets`` may be a NumPy or CuPy array; "longest" reads its largest document."""
    padded = p.padding != "ragged"
    special = p.add_special_tokens
    width = p.max_length
    if p.padding == "longest":
        n_docs = int(offsets.shape[0]) - 1
        longest = int((offsets[1:] - offsets[:-1]).max()) if n_docs else 0
        width = min(longest, p.body_length) + (2 if special else 0) if n_docs else 0
    return (padded, vocab.cls_id if special else -1, vocab.sep_id if special else -1,
            vocab.pad_id if padded else -1, width)


def _pack(ids, mask, meta, row_offsets, doc_rows, padded: bool, convert) -> BatchWindows:
    """The fill's arrays as a :class:`BatchWindows`, each passed through ``convert``."""
    if padded:
        data = {"input_ids": convert(ids), "attention_mask": convert(mask)}
    else:
        offs = convert(row_offsets)
        data = {"input_ids": RaggedRows(convert(ids), offs),
                "attention_mask": RaggedRows(convert(mask), offs)}
    data["metadata"] = convert(meta)
    return BatchWindows(data, doc_rows)


def _windows(token_ids: np.ndarray, offsets: np.ndarray, vocab, p: _Params,
             num_threads: int) -> BatchWindows:
    token_ids = np.ascontiguousarray(token_ids, dtype=np.int32)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    padded, cls_id, sep_id, pad_id, width = _fill_plan(vocab, p, offsets)
    out = _ext.build_windows(
        token_ids, offsets, p.max_length, p.stride, p.truncation, p.add_special_tokens,
        cls_id, sep_id, pad_id, p.logid_offset, padded, p.mask_int8, width, num_threads)
    return _pack(*out, padded, lambda a: _convert(a, p.return_tensors))


def windows_from_encoding(encoding, vocab, *, max_length: int = 128, stride: int = 0,
                          truncation: bool = False, add_special_tokens: bool = True,
                          padding="max_length", return_tensors: str = "np",
                          logid_offset: int = 0, mask_dtype="int32",
                          num_threads: int = 0) -> BatchWindows:
    """Strided windows of already tokenized documents.

    Parameters
    ----------
    encoding : daskwp.Encoding
        Ragged token ids (``token_ids`` int32, ``offsets`` int64, ``n + 1`` entries), without
        special tokens — what :meth:`WordPieceTokenizer.encode` returns.
    vocab : daskwp.Vocabulary
        Source of the [CLS], [SEP] and [PAD] ids (never constants). [CLS]/[SEP] are only
        looked up with ``add_special_tokens=True``, [PAD] only when padding.
    Other parameters
        As :func:`encode_windows`.

    Returns
    -------
    BatchWindows
    """
    p = _validate(max_length, stride, truncation, add_special_tokens, padding, return_tensors,
                  logid_offset, mask_dtype)
    threads = _check_int("num_threads", num_threads, lo=0, allowed="a non-negative integer")
    return _windows(encoding.token_ids, encoding.offsets, vocab, p, threads)


def encode_windows(tok, texts, *, max_length: int = 128, stride: int = 0,
                   truncation: bool = False, add_special_tokens: bool = True,
                   padding="max_length", return_tensors: str = "np", logid_offset: int = 0,
                   mask_dtype="int32") -> BatchWindows:
    """Tokenize ``texts`` and cut every document into strided windows (GST outputs).

    This is ``WordPieceTokenizer.__call__``.

    Parameters
    ----------
    tok : WordPieceTokenizer
    texts : str, list of str, pandas Series, pyarrow string array
        None/NaN, empty and whitespace-only documents each give one empty row.
    max_length : int, default 128
        Row width, special tokens included; ``L = max_length - 2`` body tokens per row with
        special tokens (so max_length >= 3), else ``L = max_length``.
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
        NumPy arrays, torch tensors (zero-copy from NumPy), or CuPy arrays.
    logid_offset : int, default 0
        logID of the first document (the Dask layer passes the partition's global offset).
    mask_dtype : "int32" (default) or "int8"
        dtype of ``attention_mask``.

    Returns
    -------
    BatchWindows
        ``input_ids`` (int32) and ``attention_mask``: rows x width, or :class:`RaggedRows`
        with ``padding=False``; ``metadata``: rows x 3 int64 ``(logID, start, stop)``, stop
        inclusive. Rows are in document order, then window order.

    Memory
    ------
    ``rows * width * (4 + mask bytes) + rows * 24`` bytes, allocated once at its exact size.
    """
    p = _validate(max_length, stride, truncation, add_special_tokens, padding, return_tensors,
                  logid_offset, mask_dtype)
    from .tokenizer import _default_num_threads

    threads = tok.num_threads if tok.num_threads is not None else _default_num_threads()
    enc = tok.encode(texts, num_threads=threads)
    return _windows(enc.token_ids, enc.offsets, tok.vocab, p, int(threads))


# ---------------------------------------------------------------------------------------
# Stitching
# ---------------------------------------------------------------------------------------
def _array_module(a):
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def _to_host(a) -> np.ndarray:
    if type(a).__module__.split(".")[0] == "cupy":
        return a.get()
    return np.asarray(a)


def _metadata_array(metadata, xp):
    if hasattr(metadata, "columns") and all(c in metadata.columns
                                            for c in ("logID", "start", "stop")):
        metadata = metadata[["logID", "start", "stop"]]
        metadata = metadata.values if xp is not np else metadata.to_numpy()
    meta = xp.asarray(metadata) if xp is not np else _to_host(metadata)
    if meta.ndim != 2 or meta.shape[1] != 3:
        raise ValueError(f"metadata must have shape (rows, 3) = (logID, start, stop), got "
                         f"shape {tuple(meta.shape)}")
    if meta.dtype.kind not in "iu":
        raise TypeError(f"metadata must hold integers, got dtype {meta.dtype}")
    return meta.astype(np.int64, copy=False)


def stitch_flat(values, metadata):
    """Owned slices of every row, concatenated per logID: ``(flat, offsets, logids)``.

    The array form of :func:`stitch`: document ``logids[i]`` is
    ``flat[offsets[i]:offsets[i+1]]``. All work is vectorized in the array module of
    ``values`` (NumPy or CuPy; no per-row host round trip).

    Parameters
    ----------
    values : array (rows x width [x ...]) or RaggedRows
        Anything aligned with ``input_ids``: the ids, model labels, logits
        (rows x width x classes), ...
    metadata : array (rows x 3) or DataFrame with columns logID, start, stop

    Returns
    -------
    flat : array, ``(total_tokens, ...)``, dtype of ``values``
    offsets : array of int64, ``documents + 1`` entries
    logids : array of int64, ascending, one per document
    """
    ragged = isinstance(values, RaggedRows)
    base_values = values.values if ragged else values
    xp = _array_module(base_values)
    if xp is np:
        base_values = np.asarray(base_values)
    meta = _metadata_array(metadata, xp)
    rows = int(meta.shape[0])
    if ragged:
        row_off = xp.asarray(values.offsets).astype(np.int64, copy=False)
        if int(row_off.shape[0]) != rows + 1:
            raise ValueError(f"values has {int(row_off.shape[0]) - 1} rows but metadata has "
                             f"{rows}")
        base = row_off[:-1]
        row_len = row_off[1:] - row_off[:-1]
        flat_values = base_values
    else:
        if base_values.ndim < 2:
            raise ValueError(f"values must be rows x width [x ...] (or RaggedRows), got shape "
                             f"{tuple(base_values.shape)}")
        if int(base_values.shape[0]) != rows:
            raise ValueError(f"values has {int(base_values.shape[0])} rows but metadata has "
                             f"{rows}")
        width = int(base_values.shape[1])
        base = xp.arange(rows, dtype=np.int64) * width
        row_len = width
        flat_values = base_values.reshape((rows * width,) + tuple(base_values.shape[2:]))
    logid, start, stop = meta[:, 0], meta[:, 1], meta[:, 2]
    length = stop - start + 1
    if rows and bool(((length < 0) | (start < 0) | ((length > 0) & (stop >= row_len))).any()):
        raise ValueError("metadata slices must satisfy 0 <= start <= stop + 1 and stop < row "
                         "width; got an out-of-range (start, stop)")
    if rows > 1 and bool((logid[1:] < logid[:-1]).any()):
        # Group by logID, keeping the rows of a document in their original order.
        order = xp.lexsort(xp.stack([xp.arange(rows), logid]))
        logid, start, length, base = logid[order], start[order], length[order], base[order]
    ends = xp.cumsum(length)
    total = int(ends[-1]) if rows else 0
    pos = xp.arange(total, dtype=np.int64)
    row_of = xp.searchsorted(ends, pos, side="right")
    within = pos - (ends - length)[row_of]
    flat = flat_values[base[row_of] + start[row_of] + within]
    if rows == 0:
        return flat, xp.zeros(1, dtype=np.int64), xp.zeros(0, dtype=np.int64)
    new_doc = xp.ones(rows, dtype=bool)
    new_doc[1:] = logid[1:] != logid[:-1]
    first_row = xp.nonzero(new_doc)[0]
    offsets = xp.concatenate([(ends - length)[first_row],
                              xp.asarray([total], dtype=np.int64)])
    return flat, offsets, logid[first_row]


def stitch(values, metadata) -> list:
    """Per-row values back to one sequence per document (logID), in ascending logID order.

    Uses only each row's owned slice ``[start, stop]`` (stop inclusive), so overlapping
    windows contribute every token exactly once: ``stitch(out.input_ids, out.metadata)``
    equals ``tok.encode(texts).to_list()`` (as arrays) for ``truncation=False``.

    Parameters
    ----------
    values : array (rows x width [x ...]) or RaggedRows
        Any per-token array aligned with ``input_ids``: ids, predicted labels, logits
        (rows x width x classes, giving one ``(n_tokens, classes)`` array per document).
        NumPy or CuPy (CuPy stays on the device; the work is vectorized).
    metadata : array (rows x 3) or DataFrame with columns logID, start, stop
        The rows of one document must keep their window order (they may be interleaved
        with other documents' rows).

    Returns
    -------
    list of arrays
        One per distinct logID, ascending (use :func:`stitch_flat` for the logIDs and the
        flat form).
    """
    flat, offsets, _ = stitch_flat(values, metadata)
    xp = _array_module(flat)
    cuts = _to_host(offsets)[1:-1].tolist()
    return xp.split(flat, cuts) if cuts or int(offsets.shape[0]) > 1 else []


# ---------------------------------------------------------------------------------------
# Word-level view and decoding
# ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _decode_table(vocab):
    """id -> token as HuggingFace's reverse vocabulary sees it (None where an id lost its
    token to a later duplicate), special ids, and the prefix."""
    table = []
    for i, t in enumerate(vocab.tokens):
        table.append(t if vocab.token_to_id(t) == i else None)
    return table, frozenset(vocab.special_ids), vocab.continuing_subword_prefix


def _as_vocab(vocab):
    from .vocab import Vocabulary

    if isinstance(vocab, Vocabulary):
        return vocab
    inner = getattr(vocab, "vocab", None)
    if isinstance(inner, Vocabulary):
        return inner
    raise TypeError(f"vocab must be a daskwp.Vocabulary or WordPieceTokenizer, got "
                    f"{type(vocab).__name__}")


def _id_rows(ids):
    """(rows, batched): ids as a list of 1-D int arrays, and whether the input was a batch."""
    if isinstance(ids, RaggedRows):
        return [np.asarray(r) for r in RaggedRows(_to_host(ids.values),
                                                  _to_host(ids.offsets))], True
    if isinstance(ids, (list, tuple)):
        if len(ids) and not isinstance(ids[0], (int, np.integer)) and \
                getattr(ids[0], "ndim", 1) != 0:
            return [_to_host(r).reshape(-1) for r in ids], True
        arr = np.asarray(ids) if len(ids) else np.zeros(0, dtype=np.int64)
    else:
        arr = _to_host(ids)
    if arr.ndim == 2:
        return list(arr), True
    if arr.ndim > 2:
        raise ValueError(f"ids must be 1-D or 2-D, got shape {arr.shape}")
    return [arr.reshape(-1)], False


def _check_ids(arr: np.ndarray) -> list[int]:
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, got dtype {arr.dtype}")
    vals = arr.tolist()
    if arr.size and int(arr.min()) < 0:
        bad = next(v for v in vals if v < 0)
        raise ValueError(f"token ids must be >= 0, got {bad}")
    return vals


def _cleanup(token: str) -> str:
    # HF's WordPiece decoder cleanup, applied to every token separately.
    return (token.replace(" .", ".").replace(" ?", "?").replace(" !", "!")
            .replace(" ,", ",").replace(" ' ", "'").replace(" n't", "n't")
            .replace(" 'm", "'m").replace(" do not", " don't").replace(" 's", "'s")
            .replace(" 've", "'ve").replace(" 're", "'re"))


def _decode_one(ids: list[int], table, specials, prefix, skip: bool) -> str:
    out = []
    n_table = len(table)
    for i in ids:
        t = table[i] if i < n_table else None
        if t is None or (skip and i in specials):
            continue  # ids with no token are dropped, as HF does
        if out:
            t = t.replace(prefix, "", 1) if t.startswith(prefix) else " " + t
        out.append(_cleanup(t))
    return "".join(out)


def decode(vocab, ids, skip_special_tokens: bool = True):
    """Token ids back to text, as HuggingFace's BERT decoding does.

    Special tokens are dropped (``skip_special_tokens``); pieces are joined with a space,
    except that a continuation piece ("##") loses its prefix and sticks to the previous
    one; each piece then gets HF's cleanup (no space before ``. ? ! ,`` and a few English
    contractions). This equals ``tokenizers.decoders.WordPiece(prefix, cleanup=True)`` /
    ``BertWordPieceTokenizer.decode``; like HF, an id with no token is skipped.

    Parameters
    ----------
    vocab : Vocabulary
    ids : list of int, 1-D array -> str; list of lists, 2-D array, RaggedRows -> list of str
    skip_special_tokens : bool, default True
    """
    v = _as_vocab(vocab)
    skip = _check_bool("skip_special_tokens", skip_special_tokens)
    table, specials, prefix = _decode_table(v)
    rows, batched = _id_rows(ids)
    texts = [_decode_one(_check_ids(r), table, specials, prefix, skip) for r in rows]
    return texts if batched else texts[0]


def merge_wordpieces(ids, values=None, *, vocab, skip_special_tokens: bool = True):
    """The word-level view of one document: "##" pieces merged into words, each word
    carrying the value of its FIRST piece (cyBERT's log-parsing convention).

    Use it on stitched sequences (:func:`stitch`): there every token appears once, so no
    piece is lost at window boundaries (cyBERT sliced windows with ``[start:stop]`` while
    ``stop`` is inclusive, dropping the last token of every window).

    Parameters
    ----------
    ids : 1-D ints (list, NumPy or CuPy array)
        Token ids of one document; a list of such sequences gives a list of results.
    values : array aligned with ``ids`` along axis 0, optional
        Per-token values (labels, probabilities, logits rows). NumPy or CuPy; a list of
        them when ``ids`` is a list of sequences.
    vocab : Vocabulary or WordPieceTokenizer
    skip_special_tokens : bool, default True
        Drop [CLS], [SEP] and [PAD] pieces (other special tokens such as [UNK] are words).

    Returns
    -------
    (words, word_values)
        ``words``: list of str (pieces concatenated, prefix removed); ``word_values``:
        ``values[first_piece_index]`` (same array module as ``values``), or None.
        A document that starts with a continuation piece starts a word with it.
    """
    v = _as_vocab(vocab)
    skip = _check_bool("skip_special_tokens", skip_special_tokens)
    rows, batched = _id_rows(ids)
    if batched:
        if values is not None and len(values) != len(rows):
            raise ValueError(f"got {len(rows)} id sequences but {len(values)} value arrays")
        return [_merge_one(r, None if values is None else values[i], v, skip)
                for i, r in enumerate(rows)]
    return _merge_one(rows[0], values, v, skip)


def _merge_one(ids: np.ndarray, values, v, skip: bool):
    table, _, prefix = _decode_table(v)
    ids_list = _check_ids(ids)
    if values is not None and int(values.shape[0] if hasattr(values, "shape")
                                  else len(values)) != len(ids_list):
        raise ValueError(f"values has {len(values)} entries along axis 0 but ids has "
                         f"{len(ids_list)}")
    drop = set()
    if skip:
        for name in ("[CLS]", "[SEP]", "[PAD]"):
            i = v.token_to_id(name)
            if i is not None:
                drop.add(i)
    words: list[str] = []
    first: list[int] = []
    n_table = len(table)
    for pos, i in enumerate(ids_list):
        if i in drop:
            continue
        t = table[i] if i < n_table else None
        if t is None:
            t = v.unk_token
        if prefix and t.startswith(prefix):
            piece = t[len(prefix):]
            if words:
                words[-1] += piece
                continue
            t = piece
        words.append(t)
        first.append(pos)
    if values is None:
        return words, None
    xp = _array_module(values)
    vals = values if xp is not np else np.asarray(values)
    return words, vals[xp.asarray(np.asarray(first, dtype=np.int64))]
