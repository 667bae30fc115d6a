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
    xp = array_module(base_values)
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
    xp = array_module(flat)
    cuts = to_host(offsets)[1:-1].tolist()
    return xp.split(flat, cuts) if cuts or int(offsets.shape[0]) > 1 else []
