"""Stitching: per-row values back to one sequence per document (docs/design.md §2).

Every row owns the columns ``start..stop`` (stop inclusive) of its metadata triple; the owned
slices of a document's rows, in window order, rebuild its tokens exactly once. These
functions work on any per-token array aligned with ``input_ids`` (ids, labels, logits), NumPy
or CuPy, vectorized in the array's own module.
"""

from __future__ import annotations

import numpy as np

from .ragged import RaggedRows, array_module, to_host

__all__ = ["stitch", "stitch_flat"]


def _metadata_array(metadata, xp):
    if hasattr(metadata, "columns") and all(c in metadata.columns
                                            for c in ("logID", "start", "stop")):
        metadata = metadata[["logID", "start", "stop"]]
        metadata = metadata.values if xp is not np else metadata.to_numpy()
    meta = xp.asarray(metadata) if xp is not np else to_host(metadata)
    if meta.ndim != 2 or meta.shape[1] != 3:
        raise ValueError(f"metadata must have shape (rows, 3) = (logID, start, stop), got "
                         f"shape {tuple(meta.shape)}")
    if meta.dtype.kind not in "iu":
        raise TypeError(f"metadata must hold integers, got dtype {meta.dtype}")
    return meta.astype(np.int64, copy=False)


def _rows_of(values, meta_rows: int, xp):
    """(flat values, row base offsets, row lengths) of one values argument: a matrix
    (rows x width [x ...]) or RaggedRows."""
    if isinstance(values, RaggedRows):
        row_off = xp.asarray(values.offsets).astype(np.int64, copy=False)
        if int(row_off.shape[0]) != meta_rows + 1:
            raise ValueError(f"values has {int(row_off.shape[0]) - 1} rows but metadata has "
                             f"{meta_rows}")
        flat = values.values if xp is not np else np.asarray(values.values)
        return flat, row_off[:-1], row_off[1:] - row_off[:-1]
    base_values = values if xp is not np else np.asarray(values)
    if base_values.ndim < 2:
        raise ValueError(f"values must be rows x width [x ...] (or RaggedRows), got shape "
                         f"{tuple(base_values.shape)}")
    rows = int(base_values.shape[0])
    if rows != meta_rows:
        raise ValueError(f"values has {rows} rows but metadata has {meta_rows}")
    width = int(base_values.shape[1])
    flat = base_values.reshape((rows * width,) + tuple(base_values.shape[2:]))
    return flat, xp.arange(rows, dtype=np.int64) * width, xp.full(rows, width, dtype=np.int64)


def _window_array(window, rows: int, xp):
    w = xp.asarray(window) if xp is not np else to_host(window)
    if w.ndim != 1 or int(w.shape[0]) != rows:
        raise ValueError(f"window must hold one integer per row ({rows}), got shape "
                         f"{tuple(w.shape)}")
    if w.dtype.kind not in "iu":
        raise TypeError(f"window must hold integers, got dtype {w.dtype}")
    return w.astype(np.int64, copy=False)


def stitch_flat(values, metadata, window=None):
    """Owned slices of every row, concatenated per logID: ``(flat, offsets, logids)``.

    The array form of :func:`stitch`: document ``logids[i]`` is
    ``flat[offsets[i]:offsets[i+1]]``. All work is vectorized in the array module of
    ``values`` (NumPy or CuPy; no per-row host round trip).

    Parameters
    ----------
    values : array (rows x width [x ...]) or RaggedRows, or a list of them
        Anything aligned with ``input_ids``: the ids, model labels, logits
        (rows x width x classes), ... A list holds one array per bucket of a bucketed
        result (``padding="bucket"``; widths may differ, trailing dimensions may not).
    metadata : array (rows x 3) or DataFrame with columns logID, start, stop; a list of
        them (one per bucket) when ``values`` is a list
    window : array of int (rows), or a list of them (one per bucket), optional
        Each row's index within its document. With it, a document's rows are put in window
        order wherever they are; without it they must keep their window order (they may be
        interleaved with other documents' rows). Required for a list of buckets.

    Returns
    -------
    flat : array, ``(total_tokens, ...)``, dtype of ``values``
    offsets : array of int64, ``documents + 1`` entries
    logids : array of int64, ascending, one per document

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> out = tok(["Hello world!", "a longer text than one row holds"], max_length=6, stride=1)
    >>> flat, offsets, logids = daskwp.stitch_flat(out.input_ids, out.metadata)
    >>> offsets, logids
    (array([ 0,  3, 10], dtype=int64), array([0, 1], dtype=int64))
    """
    if isinstance(values, (list, tuple)):
        if not isinstance(metadata, (list, tuple)) or not isinstance(window, (list, tuple)) \
                or not len(values) == len(metadata) == len(window):
            raise ValueError("a list of values (one per bucket) needs a list of metadata and a "
                             "list of window arrays of the same length, in the buckets' order")
        if not values:
            raise ValueError("no buckets to stitch")
        xp = array_module(values[0].values if isinstance(values[0], RaggedRows)
                          else values[0])
        parts, metas, wins, bases, lens, at = [], [], [], [], [], 0
        for v, m, w in zip(values, metadata, window):
            meta_b = _metadata_array(m, xp)
            flat_b, base_b, len_b = _rows_of(v, int(meta_b.shape[0]), xp)
            parts.append(flat_b)
            metas.append(meta_b)
            wins.append(_window_array(w, int(meta_b.shape[0]), xp))
            bases.append(base_b + at)
            lens.append(len_b)
            at += int(flat_b.shape[0])
        tails = {tuple(p.shape[1:]) for p in parts}
        if len(tails) > 1:
            raise ValueError(f"bucket values differ beyond their width: {sorted(tails)}")
        flat_values = xp.concatenate(parts)
        meta, win = xp.concatenate(metas), xp.concatenate(wins)
        base, row_len = xp.concatenate(bases), xp.concatenate(lens)
    else:
        xp = array_module(values.values if isinstance(values, RaggedRows) else values)
        meta = _metadata_array(metadata, xp)
        flat_values, base, row_len = _rows_of(values, int(meta.shape[0]), xp)
        win = None if window is None else _window_array(window, int(meta.shape[0]), xp)
    rows = int(meta.shape[0])
    logid, start, stop = meta[:, 0], meta[:, 1], meta[:, 2]
    length = stop - start + 1
    if rows and bool(((length < 0) | (start < 0) | ((length > 0) & (stop >= row_len))).any()):
        raise ValueError("metadata slices must satisfy 0 <= start <= stop + 1 and stop < row "
                         "width; got an out-of-range (start, stop)")
    if win is not None and rows > 1:
        # Group by logID, each document's rows in window order.
        order = xp.lexsort(xp.stack([win, logid]))
        logid, start, length, base = logid[order], start[order], length[order], base[order]
    elif rows > 1 and bool((logid[1:] < logid[:-1]).any()):
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


def stitch(values, metadata, window=None) -> list:
    """Per-row values back to one sequence per document (logID), in ascending logID order.

    Uses only each row's owned slice ``[start, stop]`` (stop inclusive), so overlapping
    windows contribute every token exactly once: ``stitch(out.input_ids, out.metadata)``
    equals ``tok.encode(texts).to_list()`` (as arrays) for ``truncation=False``.

    Parameters
    ----------
    values : array (rows x width [x ...]) or RaggedRows, or a list of them (buckets)
        Any per-token array aligned with ``input_ids``: ids, predicted labels, logits
        (rows x width x classes, giving one ``(n_tokens, classes)`` array per document).
        NumPy or CuPy (CuPy stays on the device; the work is vectorized).
    metadata : array (rows x 3) or DataFrame with columns logID, start, stop (a list of
        them for buckets)
        Without ``window``, the rows of one document must keep their window order (they
        may be interleaved with other documents' rows).
    window : array (rows), or a list of them for buckets, optional
        Each row's index within its document (see :func:`stitch_flat`).

    Returns
    -------
    list of arrays
        One per distinct logID, ascending (use :func:`stitch_flat` for the logIDs and the
        flat form).

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> texts = ["Hello world!", "a longer text than one row holds"]
    >>> out = tok(texts, max_length=6, stride=1)
    >>> docs = daskwp.stitch(out.input_ids, out.metadata)   # each token once per document
    >>> [d.tolist() for d in docs] == tok.encode(texts).to_list()
    True
    """
    flat, offsets, _ = stitch_flat(values, metadata, window)
    xp = array_module(flat)
    cuts = to_host(offsets)[1:-1].tolist()
    return xp.split(flat, cuts) if cuts or int(offsets.shape[0]) > 1 else []
