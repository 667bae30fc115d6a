"""The normalization blob the native core reads (layout: ``daskwp/kernels/model.hpp``): the
entry bits of a code point, the raw property bits of the generated tables
(``unicode_tables.npz``, from HuggingFace ``tokenizers`` by
``daskwp/kernels/gen_unicode_tables.py``), and packing per-code-point entries into the flat
two-level table with its ASCII fast path. The BERT blob (:mod:`.bert`) and every composed
pipeline (:mod:`.compiled`) are packed here and cached in one :data:`NORM_BLOBS`.
"""

from __future__ import annotations

import functools
import json
import struct
from pathlib import Path

import numpy as np

from ... import _ext
from ..cache import BoundedCache


TABLES_PATH = Path(__file__).resolve().parents[2] / "kernels" / "unicode_tables.npz"

# Entry bits (must match model.hpp).
CLASS_MASK = 3
CLASS_OTHER, CLASS_SPACE, CLASS_PUNCT = 0, 1, 2
REMOVE = 4
TO_SPACE = 8
ISOLATE = 16
MAPPED = 32
MARK_PENDING = 64
NONSTARTER_GONE = 128
MAP_SHIFT = 8

# Raw property bits in the generated table.
P_REMOVE = 4
P_TO_SPACE = 8
P_CHINESE = 16
P_NONSTARTER = 64

NORM_MAGIC = 0x4E505744
BLOB_VERSION = _ext.BLOB_VERSION  # kBlobVersion of model.hpp, as the extension was built
_HEADER = struct.Struct("<6I3Q2I5Q")  # NormHeader in model.hpp
N_CODEPOINTS = 0x110000

# ASCII fast-path kinds (model.hpp).
ASCII_SLOW, ASCII_FEED, ASCII_SPACE, ASCII_PUNCT, ASCII_REMOVE = 0, 1, 2, 3, 4


def _ascii_table(entry: np.ndarray, map_offsets: np.ndarray, map_utf8: np.ndarray) -> bytes:
    """kind[128] + byte[128]: what each ASCII byte does, derived from the full entries."""
    kind = np.zeros(128, dtype=np.uint8)
    out = np.zeros(128, dtype=np.uint8)
    for c in range(128):
        e = int(entry[c])
        if e & REMOVE:
            kind[c] = ASCII_REMOVE
            continue
        if e & TO_SPACE:
            kind[c] = ASCII_SPACE
            continue
        if e & ISOLATE:
            continue  # slow path
        b = c
        if e & MAPPED:
            m = e >> MAP_SHIFT
            mapped = bytes(map_utf8[map_offsets[m]:map_offsets[m + 1]])
            if len(mapped) != 1 or mapped[0] >= 128:
                continue  # slow path
            b = mapped[0]
        cls = int(entry[b]) & CLASS_MASK
        kind[c] = {CLASS_OTHER: ASCII_FEED, CLASS_SPACE: ASCII_SPACE,
                   CLASS_PUNCT: ASCII_PUNCT}[cls]
        out[c] = b
    return kind.tobytes() + out.tobytes()


@functools.lru_cache(maxsize=1)
def load_tables() -> dict:
    """The generated per-code-point tables (cached)."""
    with np.load(TABLES_PATH) as z:
        tables = {k: z[k] for k in z.files}
    tables["meta"] = json.loads(bytes(tables["meta"]).decode("utf-8"))
    return tables


def _align8(n: int) -> int:
    return (n + 7) & ~7


NORM_BLOBS = BoundedCache("norm_blobs", 16)


def _unique_blocks(blocks2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(blocks2d, axis=0, return_inverse=True)`` (the distinct 256-entry blocks in
    lexicographic order, and each block's index among them as uint16), by hashing each
    block's bytes rather than sorting them: ``np.unique`` sorts the 4,352 rows as 1 KB
    records, many times slower, a cost every new tokenizer and every Dask worker that
    unpickles one would pay (tests/test_core_cases.py checks the result is the same)."""
    rows = np.ascontiguousarray(blocks2d, dtype=np.uint32)
    first: dict = {}
    inverse = np.fromiter((first.setdefault(r, len(first)) for r in
                           rows.view(np.dtype((np.void, rows.shape[1] * 4))).reshape(-1)
                           .tolist()), dtype=np.int64, count=rows.shape[0])
    distinct = np.frombuffer(b"".join(first), dtype=np.uint32).reshape(-1, rows.shape[1])
    order = np.lexsort(distinct.T[::-1])        # column 0 the primary key
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[inverse].astype(np.uint16)


def pack_norm_blob(entry: np.ndarray, map_offsets: np.ndarray, map_utf8: np.ndarray,
                    ccc_cps: np.ndarray, ccc_vals: np.ndarray, flags: int) -> bytes:
    """The blob (NormHeader + sections, model.hpp) of per-code-point entries."""
    map_offsets = map_offsets.astype(np.int32)
    map_utf8 = map_utf8.astype(np.uint8)
    ccc_cps = ccc_cps.astype(np.uint32)
    ccc_vals = ccc_vals.astype(np.uint8)
    # Surrogates never reach the core (the UTF-8 decoder turns them into U+FFFD).
    uniq, index = _unique_blocks(entry.reshape(N_CODEPOINTS // 256, 256))

    off = _align8(_HEADER.size)
    off_index = off
    off = _align8(off + index.nbytes)
    off_blocks = off
    off = _align8(off + uniq.astype(np.uint32).nbytes)
    off_map_offsets = off
    off = _align8(off + map_offsets.nbytes)
    off_map_utf8 = off
    off = _align8(off + map_utf8.nbytes)
    ascii_tab = _ascii_table(entry, map_offsets, map_utf8)
    off_ascii = off
    off = _align8(off + len(ascii_tab))
    off_ccc_cps = off
    off = _align8(off + ccc_cps.nbytes)
    off_ccc_vals = off
    off = _align8(off + ccc_vals.nbytes)
    buf = bytearray(off)
    _HEADER.pack_into(buf, 0, NORM_MAGIC, BLOB_VERSION, len(uniq), len(map_offsets) - 1, flags,
                      0, off_ascii, off_ccc_cps, off_ccc_vals, len(ccc_cps), 0, off_index,
                      off_blocks, off_map_offsets, off_map_utf8, off)
    buf[off_ascii:off_ascii + len(ascii_tab)] = ascii_tab
    buf[off_ccc_cps:off_ccc_cps + ccc_cps.nbytes] = ccc_cps.tobytes()
    buf[off_ccc_vals:off_ccc_vals + ccc_vals.nbytes] = ccc_vals.tobytes()
    buf[off_index:off_index + index.nbytes] = index.tobytes()
    ub = uniq.astype(np.uint32).tobytes()
    buf[off_blocks:off_blocks + len(ub)] = ub
    buf[off_map_offsets:off_map_offsets + map_offsets.nbytes] = map_offsets.tobytes()
    buf[off_map_utf8:off_map_utf8 + map_utf8.nbytes] = map_utf8.tobytes()
    return bytes(buf)
