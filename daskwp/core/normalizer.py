"""Normalization tables: the per-code-point behaviour of BertNormalizer + BertPreTokenizer.

The raw properties are generated from HuggingFace ``tokenizers`` itself by
``tools/gen_unicode_tables.py`` (see ``daskwp/kernels/UNICODE_TABLES.md`` for the
Unicode version). :func:`norm_blob` folds them, for one combination of flags, into the flat
two-level table that the native core reads (layout: ``daskwp/kernels/model.hpp``).
"""

from __future__ import annotations

import functools
import json
import struct
from pathlib import Path

import numpy as np

from .. import _ext
from .cache import BoundedCache

TABLES_PATH = Path(__file__).resolve().parent.parent / "kernels" / "unicode_tables.npz"

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
_P_REMOVE = 4
_P_TO_SPACE = 8
_P_CHINESE = 16
_P_NONSTARTER = 64

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


_NORM_BLOBS = BoundedCache("norm_blobs", 16)


def norm_blob(clean_text: bool, handle_chinese_chars: bool, strip_accents: bool,
              lowercase: bool) -> bytes:
    """The compiled normalization blob for one flag combination (cached per combination)."""
    key = (bool(clean_text), bool(handle_chinese_chars), bool(strip_accents), bool(lowercase))
    return _NORM_BLOBS.get_or_create(key, lambda: _build_norm_blob(*key))


def _build_norm_blob(clean_text: bool, handle_chinese_chars: bool, strip_accents: bool,
                     lowercase: bool) -> bytes:
    t = load_tables()
    props = t["props"].astype(np.uint32)
    entry = props & CLASS_MASK
    if clean_text:
        entry |= np.where(props & _P_REMOVE, REMOVE, 0).astype(np.uint32)
        entry |= np.where(props & _P_TO_SPACE, TO_SPACE, 0).astype(np.uint32)
    if handle_chinese_chars:
        entry |= np.where(props & _P_CHINESE, ISOLATE, 0).astype(np.uint32)
    mode = ("strip_" if strip_accents else "") + ("lower" if lowercase else "")
    if mode == "strip_":
        mode = "strip"
    if mode:
        cps = t[f"{mode}_cps"].astype(np.int64)
        map_offsets = t[f"{mode}_offsets"].astype(np.int32)
        map_utf8 = t[f"{mode}_utf8"].astype(np.uint8)
        entry[cps] |= MAPPED | (np.arange(len(cps), dtype=np.uint32) << MAP_SHIFT)
    else:
        map_offsets = np.zeros(1, dtype=np.int32)
        map_utf8 = np.zeros(0, dtype=np.uint8)
    if strip_accents:
        # NFD reorders combining marks across code points (see UNICODE_TABLES.md).
        ccc_cps = t["strip_ccc_cps"].astype(np.uint32)
        ccc_vals = t["strip_ccc_vals"].astype(np.uint8)
        entry[ccc_cps.astype(np.int64)] |= MARK_PENDING
        empty = cps[map_offsets[1:] == map_offsets[:-1]] if mode else np.zeros(0, np.int64)
        gone = empty[(props[empty] & _P_NONSTARTER) != 0]
        entry[gone] |= NONSTARTER_GONE
    else:
        ccc_cps = np.zeros(0, dtype=np.uint32)
        ccc_vals = np.zeros(0, dtype=np.uint8)
    # Surrogates never reach the core (the UTF-8 decoder turns them into U+FFFD).
    blocks2d = entry.reshape(N_CODEPOINTS // 256, 256)
    uniq, index = np.unique(blocks2d, axis=0, return_inverse=True)
    # Keep block 0 (ASCII and Latin-1) first so the hot rows stay together.
    index = index.reshape(-1).astype(np.uint16)

    flags = (int(clean_text) | int(handle_chinese_chars) << 1 | int(strip_accents) << 2
             | int(lowercase) << 3)
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

