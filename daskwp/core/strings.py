"""Turning user inputs into Arrow string buffers (offsets + UTF-8 bytes + validity).

No per-document Python work happens here for Arrow and Arrow-backed pandas inputs; a list
of Python strings is encoded once (C-level ``str.encode``) into one Arrow array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass
class StringBuffers:
    """One contiguous Arrow string chunk, as the native core reads it."""

    offsets: np.ndarray          # int32 or int64, len n + 1 (absolute positions in data)
    data: np.ndarray             # uint8
    validity: np.ndarray | None  # uint8 bitmap, or None when all valid
    validity_offset: int
    n: int


_STRING_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())
_LARGE_TYPES = (pa.large_string(), pa.large_binary())


def _describe(obj) -> str:
    dtype = getattr(obj, "dtype", None) or getattr(obj, "type", None)
    return f"{type(obj).__name__}" + (f" of dtype {dtype}" if dtype is not None else "")


def _from_str_list(texts) -> pa.Array | None:
    """``pa.array(texts, pa.large_string())`` for a (short) list of ``str`` alone, from the
    strings' UTF-8 bytes (as fast: one C-level ``str.encode`` each, as pyarrow's conversion);
    None when an item is not a ``str`` or does not encode (a lone surrogate). pyarrow's
    conversion of a Python sequence imports pandas (about 0.2 s of CPU, a tokenizer's first
    call on a list paid it); this does not."""
    try:
        enc = list(map(str.encode, texts))
    except (TypeError, UnicodeEncodeError):
        return None
    n = len(enc)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=n), out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), n,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(enc))])


#: Lists up to this many items are encoded by :func:`_from_str_list` (a longer one goes to
#: pyarrow: its bytes are copied once, not twice, and the pandas import is a small share of it)
STR_LIST_ITEMS = 1 << 16


def _from_python_list(texts) -> pa.Array:
    arr = _from_str_list(texts) if len(texts) <= STR_LIST_ITEMS else None
    if arr is not None:
        return arr
    try:
        return pa.array(texts, type=pa.large_string(), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
        pass
    # Lone surrogates cannot be UTF-8 encoded strictly; they are kept as their (invalid)
    # surrogate-pass bytes, which the core decodes to U+FFFD like any invalid input.
    out = []
    for i, t in enumerate(texts):
        if t is None or (isinstance(t, float) and t != t):
            out.append(None)
        elif isinstance(t, str):
            out.append(t.encode("utf-8", "surrogatepass"))
        elif isinstance(t, (bytes, bytearray, memoryview)):
            out.append(bytes(t))
        else:
            raise TypeError(
                f"texts[{i}] is a {type(t).__name__} ({t!r:.40}); expected str, bytes or None")
    return pa.array(out, type=pa.large_binary())


def _arrow_chunks(series) -> pa.ChunkedArray | None:
    """The chunked Arrow array behind a pandas Series of Arrow-backed strings
    (``string[pyarrow]``, ``ArrowDtype`` of a string type), zero-copy; else None."""
    import pandas as pd
    if not isinstance(series.dtype, (pd.StringDtype, pd.ArrowDtype)):
        return None
    arrow = getattr(series.array, "__arrow_array__", None)
    arr = arrow() if arrow is not None else None
    if not isinstance(arr, pa.ChunkedArray) or not (
            pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return None
    return arr


def to_arrow(texts) -> pa.ChunkedArray:
    """Any accepted text collection as a chunked Arrow string/binary array."""
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    if isinstance(texts, pa.ChunkedArray):
        arr = texts
    elif isinstance(texts, pa.Array):
        arr = pa.chunked_array([texts], type=texts.type)
    else:
        mod = type(texts).__module__
        if mod.startswith("pandas"):
            import pandas as pd
            if isinstance(texts, pd.DataFrame):
                raise TypeError("expected a text column (Series), got a DataFrame; select "
                                "the column, e.g. df['text']")
            dtype = texts.dtype
            if isinstance(dtype, pd.CategoricalDtype):
                # The categories are the texts: an Arrow dictionary array, decoded below.
                arr = pa.chunked_array([pa.array(texts, from_pandas=True)])
            elif (chunks := _arrow_chunks(texts)) is not None:
                # pandas' Arrow-backed strings as they are, chunks and all: pa.array() of
                # a Series of several chunks went through Python objects (4x the
                # tokenizing CPU of a 64 MB partition read in 8 chunks)
                arr = chunks
            elif isinstance(dtype, pd.ArrowDtype) or str(dtype).startswith("string") or \
                    dtype == object or str(dtype) == "str":
                try:
                    arr = pa.chunked_array([pa.array(texts, from_pandas=True)])
                except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
                    arr = pa.chunked_array([_from_python_list(list(texts))])
            elif dtype.kind == "f" and bool(texts.isna().all()):
                # What pandas makes of an all-empty text column: null documents.
                arr = pa.chunked_array([pa.nulls(len(texts), pa.string())])
            else:
                raise TypeError(f"expected a column of strings, got a pandas Series of dtype "
                                f"{dtype}")
        elif isinstance(texts, np.ndarray):
            if texts.dtype.kind not in "OUS":
                raise TypeError(f"expected an array of strings, got a numpy array of dtype "
                                f"{texts.dtype}")
            arr = pa.chunked_array([_from_python_list(texts.tolist())])
        elif isinstance(texts, (list, tuple)):
            arr = pa.chunked_array([_from_python_list(texts)])
        elif isinstance(texts, (dict, set, frozenset)) or hasattr(texts, "keys"):
            # A dict iterates its keys and a set has no order: neither is a batch of texts.
            raise TypeError(f"expected texts as a list of str, a pandas Series, or a pyarrow "
                            f"string array; got a {type(texts).__name__} (pass "
                            f"list(d.values()) for a dict's texts, sorted(s) for a set)")
        elif hasattr(texts, "__iter__"):
            arr = pa.chunked_array([_from_python_list(list(texts))])
        else:
            raise TypeError(f"expected texts as a list of str, a pandas Series, or a pyarrow "
                            f"string array; got {_describe(texts)}")
    if arr.type == pa.null():
        arr = pa.chunked_array([pa.nulls(len(arr), pa.string())])
    if arr.type not in _STRING_TYPES:
        if pa.types.is_dictionary(arr.type) and arr.type.value_type in _STRING_TYPES:
            arr = arr.cast(arr.type.value_type)
        elif pa.types.is_string_view(arr.type):
            arr = arr.cast(pa.large_string())
        else:
            raise TypeError(f"expected a string column, got Arrow type {arr.type}")
    return arr


def text_chunks(texts) -> list:
    """The non-empty chunks of ``texts`` as :func:`to_arrow` reads it. A plain Arrow string
    or binary array is its own one chunk, without the chunked wrapper (a short call's cost
    is mostly such code run cold: docs/design.md §3.5)."""
    if isinstance(texts, pa.Array) and texts.type in _STRING_TYPES:
        return [texts] if len(texts) else []
    return [c for c in to_arrow(texts).chunks if len(c)]


def chunk_buffers(chunk: pa.Array) -> StringBuffers:
    """The raw buffers of one Arrow string/binary chunk (zero copy)."""
    validity_buf, offsets_buf, data_buf = chunk.buffers()[:3]
    large = chunk.type in _LARGE_TYPES
    odt = np.int64 if large else np.int32
    n = len(chunk)
    offsets = np.frombuffer(offsets_buf, dtype=odt)[chunk.offset:chunk.offset + n + 1] \
        if offsets_buf is not None else np.zeros(n + 1, dtype=odt)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else \
        np.zeros(0, dtype=np.uint8)
    validity = None
    if chunk.null_count and validity_buf is not None:
        validity = np.frombuffer(validity_buf, dtype=np.uint8)
    return StringBuffers(offsets=offsets, data=data, validity=validity,
                         validity_offset=chunk.offset, n=n)


def piece_ranges(offsets, piece_bytes: int):
    """``(start, stop)`` document ranges of about ``piece_bytes`` of text each, from a
    chunk's ``offsets`` (at least one document each; none for no documents)."""
    n, start = len(offsets) - 1, 0
    while start < n:
        stop = int(np.searchsorted(offsets, int(offsets[start]) + piece_bytes, side="right")) - 1
        stop = min(max(stop, start + 1), n)
        yield start, stop
        start = stop
