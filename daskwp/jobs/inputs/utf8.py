"""Invalid UTF-8, counted without decoding: Arrow validates 4 MB slices of documents, and only
a slice that fails is scanned with NumPy over its non-ASCII bytes, to count the bytes the
tokenizer reads as U+FFFD (Python's ``errors="replace"`` rule) for the job summary. Kept
string columns are written with those bytes replaced.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...core.strings import to_arrow


def _as_binary(arr) -> pa.Array | None:
    """A string/binary array (or chunked array) as a binary array of the same bytes; None
    for an array of nulls only."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_null(t):
        return None
    if pa.types.is_large_string(t):
        return arr.view(pa.large_binary())
    if pa.types.is_string(t):
        return arr.view(pa.binary())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return arr
    return _as_binary(to_arrow(arr))  # dictionary, string_view: plain strings


def value_offsets(arr: pa.Array) -> np.ndarray:
    """The ``len(arr) + 1`` value offsets of a (large) binary array, as int64."""
    dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    raw = np.frombuffer(arr.buffers()[1], dtype=dtype)
    return raw[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _invalid_positions(b: np.ndarray, is_start: np.ndarray) -> np.ndarray:
    """Positions of the bytes of ``b`` outside well-formed UTF-8 sequences; a sequence
    does not cross a document start (``is_start``). Works on the non-ASCII bytes only."""
    nz = np.flatnonzero(b >= 0x80)
    if not len(nz):
        return nz
    n = len(b)
    at = nz[(b[nz] >= 0xC2) & (b[nz] <= 0xF4)]  # the bytes that may start a sequence
    lead = b[at]

    def follower(k):  # the byte k after each lead; whether it continues the sequence
        idx = np.minimum(at + k, n - 1)
        v = b[idx]
        return v, (at + k < n) & ((v & 0xC0) == 0x80) & ~is_start[idx]

    v1, c1 = follower(1)
    c2 = follower(2)[1]
    c3 = follower(3)[1]
    seq2 = (lead <= 0xDF) & c1
    second3 = np.where(lead == 0xE0, v1 >= 0xA0, np.where(lead == 0xED, v1 <= 0x9F, True))
    seq3 = (lead >= 0xE0) & (lead <= 0xEF) & c1 & second3 & c2
    second4 = np.where(lead == 0xF0, v1 >= 0x90, np.where(lead == 0xF4, v1 <= 0x8F, True))
    seq4 = (lead >= 0xF0) & c1 & second4 & c2 & c3
    covered = np.zeros(n, dtype=bool)
    for valid, length in ((seq2, 2), (seq3, 3), (seq4, 4)):
        starts = at[valid]
        for k in range(length):
            covered[starts + k] = True
    return nz[~covered[nz]]


def invalid_utf8_per_document(texts) -> np.ndarray | None:
    """Bytes of each document outside well-formed UTF-8 sequences (the bytes the tokenizer
    reads as U+FFFD, Python's ``errors="replace"`` rule), or None when every document is
    valid UTF-8.

    Arrow validates 4 MB slices of documents; only a slice that fails is scanned with
    NumPy (over its non-ASCII bytes)."""
    arr = _as_binary(texts)
    if arr is None or len(arr) == 0:
        return None
    target = pa.large_string() if pa.types.is_large_binary(arr.type) else pa.string()
    try:
        arr.cast(target)
        return None
    except pa.ArrowInvalid:
        pass
    n = len(arr)
    offsets = value_offsets(arr)
    values = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] else \
        np.zeros(0, np.uint8)
    out = np.zeros(n, dtype=np.int64)
    step = 4 << 20
    i = 0
    while i < n:
        j = int(np.searchsorted(offsets, offsets[i] + step, side="right")) - 1
        j = min(max(j, i + 1), n)
        try:
            arr.slice(i, j - i).cast(target)
        except pa.ArrowInvalid:
            lo, hi = offsets[i], offsets[j]
            b = values[lo:hi]
            rel = offsets[i:j + 1] - lo
            is_start = np.zeros(len(b), dtype=bool)
            is_start[rel[:-1][rel[:-1] < len(b)]] = True
            bad = _invalid_positions(b, is_start)
            doc = np.searchsorted(rel, bad, side="right") - 1
            out[i:j] = np.bincount(doc, minlength=j - i)
        i = j
    if arr.null_count:
        out[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out


def count_invalid_utf8(texts) -> tuple[int, int]:
    """``(bytes, documents)``: the bytes of ``texts`` that are not well-formed UTF-8 (each
    maximal ill-formed sequence is one U+FFFD to the tokenizer; these are its bytes), and
    the documents holding any (for a table of pairs: both sides' bytes, and the pairs with
    any on either side). Vectorised: Arrow's validation, then NumPy on the 4 MB slices that
    fail."""
    if isinstance(texts, pa.Table):
        sides = [invalid_utf8_per_document(texts.column(j))
                 for j in range(texts.num_columns)]
        sides = [p for p in sides if p is not None]
        if not sides:
            return 0, 0
        per = np.sum(sides, axis=0)
        return int(per.sum()), int(np.count_nonzero(per))
    per = invalid_utf8_per_document(texts)
    if per is None:
        return 0, 0
    return int(per.sum()), int(np.count_nonzero(per))


def valid_strings(arr) -> pa.Array:
    """A string/binary array as large_string, invalid UTF-8 replaced by U+FFFD (kept
    columns: written as strings)."""
    b = _as_binary(arr)
    if b is None:
        return pa.nulls(len(arr), pa.large_string())
    b = b.cast(pa.large_binary())
    per = invalid_utf8_per_document(b)
    if per is not None:
        import pyarrow.compute as pc
        bad = np.flatnonzero(per)
        mask = np.zeros(len(b), dtype=bool)
        mask[bad] = True
        repl = pa.array([b[int(i)].as_py().decode("utf-8", "replace").encode("utf-8")
                         for i in bad], type=pa.large_binary())
        b = pc.replace_with_mask(b, pa.array(mask), repl)
    return b.cast(pa.large_string())
