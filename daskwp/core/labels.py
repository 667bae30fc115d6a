"""Labels, both ways: word labels onto tokens (training), character spans onto tokens
(training from annotated raw text), and token predictions back onto character spans of the
original documents (parsing). docs/design.md §7.1.

The three functions share one notion: a token's *word* is its ``word_ids`` entry (-1 on
special and padding positions), and a word's *first piece* is a token whose word differs
from the token before it in the same row (HuggingFace's token-classification convention:
``previous_word_idx`` starts at None in every row, so a window that begins inside a word
labels that word's first piece in the window). :func:`daskwp.merge_wordpieces` finds its
words the same way, from the ``##`` prefix instead of ``word_ids``.

All work is vectorized in the array module of the inputs (NumPy or CuPy); the spans returned
by :func:`labels_to_spans` are Python tuples (one per word).
"""

from __future__ import annotations

import numpy as np

from .ragged import RaggedRows, array_module, to_host
from .stitch import stitch_flat

__all__ = ["IGNORE_INDEX", "align_labels", "first_pieces", "labels_to_spans",
           "spans_to_labels"]

IGNORE_INDEX = -100
"""The label of positions a loss ignores (PyTorch's ``CrossEntropyLoss`` default, HF's)."""


def first_pieces(word_ids):
    """Boolean mask of the first piece of each word, per row.

    ``word_ids``: rows x width (or 1-D: one row), -1 on special and padding positions. A
    position is a first piece when its word id is >= 0 and differs from the position before
    it in the same row (the first position of a row always starts a word).
    """
    xp = array_module(word_ids)
    w = xp.asarray(word_ids)
    prev = xp.full(w.shape, -1, dtype=w.dtype)
    prev[..., 1:] = w[..., :-1]
    return (w >= 0) & (w != prev)


def _rows(word_ids, name: str):
    """(2-D matrix, rebuild) of a word_ids-like argument: a matrix (rows x width), a 1-D
    array (one row), RaggedRows or a list of 1-D arrays; ``rebuild(matrix)`` gives an output
    of the same form. Ragged inputs are padded with -1 into a matrix."""
    if isinstance(word_ids, RaggedRows):
        xp = array_module(word_ids.values)
        off = to_host(word_ids.offsets).astype(np.int64)
        lens = np.diff(off)
        mat = _pad(xp, word_ids.values[int(off[0]):int(off[-1])], lens)

        def rebuild(m):
            keep = xp.asarray(np.arange(m.shape[1])[None, :] < lens[:, None])
            return RaggedRows(m[keep], xp.asarray(off))
        return mat, rebuild
    if isinstance(word_ids, (list, tuple)):
        if not word_ids:
            return np.zeros((0, 0), dtype=np.int64), lambda m: []
        xp = array_module(word_ids[0])
        seqs = [xp.asarray(s) for s in word_ids]
        if any(s.ndim != 1 for s in seqs):
            raise ValueError(f"{name}: a list must hold 1-D sequences, one per row")
        lens = np.array([int(s.shape[0]) for s in seqs], dtype=np.int64)
        mat = _pad(xp, xp.concatenate(seqs), lens)
        return mat, lambda m: [m[r, :lens[r]] for r in range(len(lens))]
    xp = array_module(word_ids)
    arr = xp.asarray(word_ids)
    if arr.ndim == 1:
        return arr[None, :], lambda m: m[0]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be rows x width, 1-D, RaggedRows or a list of 1-D "
                         f"sequences, got shape {tuple(arr.shape)}")
    return arr, lambda m: m


def _pad(xp, flat, lens):
    """Rows of ``lens`` values laid out one after another in ``flat`` as a matrix padded
    with -1: one scatter, no per-row Python."""
    rows = len(lens)
    width = int(lens.max()) if rows else 0
    mat = xp.full((rows, width), -1, dtype=flat.dtype)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    row = np.repeat(np.arange(rows, dtype=np.int64), lens)
    col = np.arange(int(lens.sum()), dtype=np.int64) - starts[row]
    mat[xp.asarray(row), xp.asarray(col)] = flat
    return mat


def _check_int(a, name: str):
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {a.dtype}")


def _document_of_row(document_of_row, rows: int, n_docs: int, xp):
    if document_of_row is None:
        if rows != n_docs:
            raise ValueError(f"got {rows} rows but {n_docs} documents: pass document_of_row "
                             f"(each row's document, e.g. metadata[:, 0] - logid_offset, or "
                             f"HF's overflow_to_sample_mapping)")
        return xp.arange(rows, dtype=np.int64)
    d = xp.asarray(document_of_row)
    if d.ndim != 1 or int(d.shape[0]) != rows:
        raise ValueError(f"document_of_row must hold one integer per row ({rows}), got shape "
                         f"{tuple(d.shape)}")
    _check_int(d, "document_of_row")
    d = d.astype(np.int64, copy=False)
    if rows and (int(d.min()) < 0 or int(d.max()) >= n_docs):
        raise ValueError(f"document_of_row must lie in [0, {n_docs}) (one entry per "
                         f"document given), got values in [{int(d.min())}, {int(d.max())}]")
    return d


def _flat_docs(per_doc, name: str, xp, trailing=()):
    """(flat array, int64 offsets) of a list of per-document sequences."""
    arrs = [xp.asarray(a) for a in per_doc]
    for a in arrs:
        if a.ndim != 1 + len(trailing) or tuple(a.shape[1:]) != tuple(trailing):
            raise ValueError(f"{name}: every document's entry must have shape (n,"
                             f"{''.join(f' {t},' for t in trailing)}), got {tuple(a.shape)}")
    lens = np.array([int(a.shape[0]) for a in arrs], dtype=np.int64)
    off = np.zeros(len(arrs) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    if arrs and off[-1]:
        flat = xp.concatenate([a.astype(np.int64, copy=False) for a in arrs])
    else:
        flat = xp.zeros((0,) + tuple(trailing), dtype=np.int64)
    return flat, xp.asarray(off)


def align_labels(word_labels, word_ids, label_all_tokens: bool = False, *,
                 document_of_row=None, ignore_index: int = IGNORE_INDEX):
    """Word labels onto tokens: HF's token-classification convention (docs/design.md §7.1).

    Each word's label goes on its first piece; the word's other pieces get ``ignore_index``
    (or the word's label with ``label_all_tokens=True``); special and padding positions
    (``word_ids == -1``) get ``ignore_index``.

    Parameters
    ----------
    word_labels : list of 1-D integer sequences
        One per document: the label of each of its words (index = word id).
    word_ids : rows x width array, 1-D array, RaggedRows or list of 1-D arrays
        From ``tok(..., return_word_ids=True)["word_ids"]`` (or a ``word_ids`` of an
        encoding); -1 on special and padding positions.
    label_all_tokens : bool, default False
    document_of_row : 1-D ints, optional
        Each row's document (index into ``word_labels``): for windows,
        ``metadata[:, 0] - logid_offset``. Default: row ``r`` is document ``r``.
    ignore_index : int, default -100

    Returns
    -------
    int64 labels of the same form as ``word_ids``.

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> out = tok(["Ada Lovelace wrote"], max_length=8, return_word_ids=True)
    >>> out.word_ids
    array([[-1,  0,  1,  1,  2, -1, -1, -1]], dtype=int32)
    >>> daskwp.align_labels([[1, 1, 0]], out.word_ids)   # one label per word
    array([[-100,    1,    1, -100,    0, -100, -100, -100]])
    """
    mat, rebuild = _rows(word_ids, "word_ids")
    _check_int(mat, "word_ids")
    xp = array_module(mat)
    if not isinstance(word_labels, (list, tuple)):
        raise TypeError(f"word_labels must be a list of per-document label sequences, got "
                        f"{type(word_labels).__name__}")
    flat, off = _flat_docs(word_labels, "word_labels", xp)
    if word_labels:
        _check_int(xp.asarray(word_labels[0]) if len(word_labels[0]) else flat, "word_labels")
    rows = int(mat.shape[0])
    doc = _document_of_row(document_of_row, rows, len(word_labels), xp)
    w = mat.astype(np.int64, copy=False)
    has = w >= 0
    n_words = (off[1:] - off[:-1])[doc][:, None]
    bad = has & (w >= n_words)
    if bool(bad.any()):
        r = int(xp.nonzero(bad.any(axis=1))[0][0])
        raise ValueError(f"row {r} has word id {int(w[r][bad[r]].max())} but its document "
                         f"{int(doc[r])} has {int(n_words[r, 0])} word labels")
    idx = xp.where(has, off[:-1][doc][:, None] + w, 0)
    labels = flat[idx] if int(flat.shape[0]) else xp.zeros(w.shape, dtype=np.int64)
    keep = first_pieces(w) if not label_all_tokens else has
    return rebuild(xp.where(keep, labels, ignore_index).astype(np.int64))


def _offsets_rows(offset_mapping):
    """offset_mapping as a rows x width x 2 matrix and a rebuild for the labels."""
    if isinstance(offset_mapping, RaggedRows):
        xp = array_module(offset_mapping.values)
        vals = xp.asarray(offset_mapping.values)
        if vals.ndim != 2 or vals.shape[1] != 2:
            vals = vals.reshape(-1, 2)
        begin, rebuild = _rows(RaggedRows(vals[:, 0], offset_mapping.offsets), "offset_mapping")
        end, _ = _rows(RaggedRows(vals[:, 1], offset_mapping.offsets), "offset_mapping")
        return xp.stack([begin, end], axis=-1), rebuild
    if isinstance(offset_mapping, (list, tuple)):
        seqs = [array_module(s).asarray(s) for s in offset_mapping]
        if any(s.ndim != 2 or s.shape[1] != 2 for s in seqs):
            raise ValueError("offset_mapping: a list must hold (tokens, 2) arrays, one per row")
        begin, rebuild = _rows([s[:, 0] for s in seqs], "offset_mapping")
        end, _ = _rows([s[:, 1] for s in seqs], "offset_mapping")
        xp = array_module(begin)
        return xp.stack([begin, end], axis=-1), rebuild
    xp = array_module(offset_mapping)
    om = xp.asarray(offset_mapping)
    if om.ndim == 2 and om.shape[1] == 2:
        return om[None], lambda m: m[0]
    if om.ndim != 3 or om.shape[2] != 2:
        raise ValueError(f"offset_mapping must be rows x width x 2 (or tokens x 2 for one "
                         f"row), got shape {tuple(om.shape)}")
    return om, lambda m: m


def spans_to_labels(char_spans, offset_mapping, *, document_of_row=None, outside: int = 0,
                    ignore_index: int = IGNORE_INDEX):
    """Labelled character spans of the raw text onto tokens (docs/design.md §7.1).

    A token takes the label of the span that holds its first character
    (``begin <= token_begin < end``), else ``outside``; special and padding positions (an
    empty offset ``(b, b)``, HF's ``(0, 0)``) get ``ignore_index``. Spans of one document must
    not overlap (a ValueError names the two).

    Parameters
    ----------
    char_spans : list of sequences of (begin, end, label)
        One per document, in the offsets' unit (characters by default, or bytes).
    offset_mapping : rows x width x 2 array, tokens x 2 (one row), RaggedRows or a list of
        (tokens, 2) arrays: ``tok(..., return_offsets_mapping=True)["offset_mapping"]``.
    document_of_row : 1-D ints, optional
        Each row's document (see :func:`align_labels`).
    outside : int, default 0
        The label of tokens in no span.

    Returns
    -------
    int64 labels of the row form of ``offset_mapping`` (rows x width, one row, ...).

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> out = tok(["Ada Lovelace wrote"], max_length=8, return_offsets_mapping=True)
    >>> daskwp.spans_to_labels([[(0, 12, 1)]], out.offset_mapping)   # "Ada Lovelace" is 1
    array([[-100,    1,    1,    1,    0, -100, -100, -100]])
    """
    om, rebuild = _offsets_rows(offset_mapping)
    _check_int(om, "offset_mapping")
    xp = array_module(om)
    if not isinstance(char_spans, (list, tuple)):
        raise TypeError(f"char_spans must be a list (one entry per document) of (begin, end, "
                        f"label) sequences, got {type(char_spans).__name__}")
    spans = []
    for d, doc_spans in enumerate(char_spans):
        s = np.asarray(list(doc_spans), dtype=np.int64).reshape(-1, 3)
        if bool((s[:, 1] < s[:, 0]).any()):
            i = int(np.nonzero(s[:, 1] < s[:, 0])[0][0])
            raise ValueError(f"document {d}: span {tuple(s[i].tolist())} ends before it begins")
        s = s[np.argsort(s[:, 0], kind="stable")]
        over = np.nonzero(s[1:, 0] < s[:-1, 1])[0]
        if over.size:
            i = int(over[0])
            raise ValueError(f"document {d}: spans {tuple(s[i].tolist())} and "
                             f"{tuple(s[i + 1].tolist())} overlap")
        spans.append(s)
    rows, width = int(om.shape[0]), int(om.shape[1])
    doc = to_host(_document_of_row(document_of_row, rows, len(spans), xp))
    flat, off = _flat_docs(spans, "char_spans", np, trailing=(3,))
    begin = to_host(om[..., 0]).astype(np.int64)
    special = to_host(om[..., 1] <= om[..., 0])
    # One sorted key space over all documents: (document, position).
    scale = int(max(int(flat[:, 1].max()) if flat.shape[0] else 0,
                    int(begin.max()) if begin.size else 0)) + 2
    span_doc = np.repeat(np.arange(len(spans), dtype=np.int64), np.diff(off))
    keys = span_doc * scale + flat[:, 0]
    tok_keys = doc[:, None] * scale + begin
    j = np.searchsorted(keys, tok_keys, side="right") - 1
    jj = np.clip(j, 0, max(int(flat.shape[0]) - 1, 0))
    inside = (j >= 0) & (flat.shape[0] > 0)
    if flat.shape[0]:
        inside &= (span_doc[jj] == doc[:, None]) & (begin < flat[jj, 1])
        labels = np.where(inside, flat[jj, 2], outside)
    else:
        labels = np.full((rows, width), outside, dtype=np.int64)
    labels = np.where(special, ignore_index, labels).astype(np.int64)
    return rebuild(xp.asarray(labels))


def labels_to_spans(token_labels, offset_mapping, word_ids, metadata=None, *, window=None,
                    outside: int | None = None, ignore_index: int = IGNORE_INDEX) -> dict:
    """Per-token predictions back to labelled character spans of each original document, one
    per word (docs/design.md §7.1).

    With ``metadata``, the three per-row arrays are stitched first (:func:`daskwp.stitch`:
    each token once, overlapping windows resolved by the metadata). A word's label is its
    first piece's; its span runs from its first piece's begin to its last piece's end, in the
    offsets' unit. Words labelled ``outside`` (when given) or ``ignore_index`` are left out.

    Parameters
    ----------
    token_labels : rows x width integers (or RaggedRows, or a list per bucket)
        E.g. ``logits.argmax(-1)``.
    offset_mapping : rows x width x 2 (same rows)
    word_ids : rows x width (same rows), -1 on special and padding positions
    metadata : rows x 3 (logID, start, stop), or a list per bucket, optional
        Without it each row is taken as one whole document (row ``i``: logID ``i``).
    window : each row's index within its document (needed for buckets), optional

    Returns
    -------
    dict logID -> list of (begin, end, label), in logID order, words in text order.

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> out = tok(["Ada Lovelace wrote"], max_length=8, return_offsets_mapping=True,
    ...           return_word_ids=True)
    >>> predictions = daskwp.spans_to_labels([[(0, 12, 1)]], out.offset_mapping)
    >>> daskwp.labels_to_spans(predictions, out.offset_mapping, out.word_ids, out.metadata)
    {0: [(0, 3, 1), (4, 12, 1), (13, 18, 0)]}
    """
    if metadata is None:
        lab_rows, _ = _rows(token_labels, "token_labels")
        om, _ = _offsets_rows(offset_mapping)
        wid, _ = _rows(word_ids, "word_ids")
        xp = array_module(lab_rows)
        rows = int(lab_rows.shape[0])
        if not (int(om.shape[0]) == int(wid.shape[0]) == rows):
            raise ValueError(f"token_labels, offset_mapping and word_ids must have the same "
                             f"rows: {rows}, {int(om.shape[0])}, {int(wid.shape[0])}")
        width = int(lab_rows.shape[1]) if rows else 0
        meta = np.stack([np.arange(rows), np.zeros(rows, dtype=np.int64),
                         np.full(rows, width - 1, dtype=np.int64)], axis=1)
        meta = xp.asarray(meta)
        token_labels, offset_mapping, word_ids, metadata = lab_rows, om, wid, meta
    lab, off, logids = stitch_flat(token_labels, metadata, window)
    om, off2, _ = stitch_flat(offset_mapping, metadata, window)
    wid, off3, _ = stitch_flat(word_ids, metadata, window)
    lab, om, wid = to_host(lab), to_host(om), to_host(wid)
    off, logids = to_host(off), to_host(logids)
    if not (lab.shape[0] == om.shape[0] == wid.shape[0]) or not (
            np.array_equal(off, to_host(off2)) and np.array_equal(off, to_host(off3))):
        raise ValueError("token_labels, offset_mapping and word_ids must be aligned (the same "
                         "rows and widths)")
    if om.ndim != 2 or om.shape[1] != 2:
        raise ValueError(f"offset_mapping must be rows x width x 2, got tokens of shape "
                         f"{tuple(om.shape[1:])}")
    _check_int(lab, "token_labels")
    _check_int(wid, "word_ids")
    n = int(wid.shape[0])
    doc_of = np.repeat(np.arange(len(logids)), np.diff(off))
    wid = wid.astype(np.int64)
    prev = np.full(n, -1, dtype=np.int64)
    prev[1:] = wid[:-1]
    new_doc = np.zeros(n, dtype=bool)
    new_doc[off[:-1][off[:-1] < n]] = True
    starts = (wid >= 0) & ((wid != prev) | new_doc)
    # Between one word start and the next lie only the word's own pieces and special
    # positions (every word begins with a start), so a max over that run with special
    # positions masked is the word's end.
    begin_at = np.nonzero(starts)[0]
    masked_end = np.where(wid >= 0, om[:, 1].astype(np.int64), -1)
    ends = (np.maximum.reduceat(masked_end, begin_at) if begin_at.size
            else np.zeros(0, dtype=np.int64))
    word_label = lab[begin_at]
    keep = word_label != ignore_index
    if outside is not None:
        keep &= word_label != outside
    out: dict = {int(x): [] for x in logids.tolist()}
    docs = doc_of[begin_at]
    for d, b, e, lb in zip(docs[keep].tolist(), om[begin_at, 0][keep].tolist(),
                           ends[keep].tolist(), word_label[keep].tolist()):
        out[int(logids[d])].append((int(b), int(e), int(lb)))
    return out
