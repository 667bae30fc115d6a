"""The bundled BertNormalizer + BertPreTokenizer blob: for one combination of BERT's four
flags, the generated properties folded into entries (removed, to space, isolated CJK,
mapped by lowercasing and/or accent stripping, marks that wait for canonical reordering)
and packed. The default tokenizer's path; cached per flag combination.
"""

from __future__ import annotations

import numpy as np

from .blob import (CLASS_MASK, ISOLATE, MAPPED, MAP_SHIFT, MARK_PENDING, NONSTARTER_GONE,
                   NORM_BLOBS, P_CHINESE, P_NONSTARTER, P_REMOVE, P_TO_SPACE, REMOVE, TO_SPACE,
                   load_tables, pack_norm_blob)


def norm_blob(clean_text: bool, handle_chinese_chars: bool, strip_accents: bool,
              lowercase: bool) -> bytes:
    """The compiled normalization blob for one flag combination (cached per combination)."""
    key = (bool(clean_text), bool(handle_chinese_chars), bool(strip_accents), bool(lowercase))
    return NORM_BLOBS.get_or_create(key, lambda: _build_norm_blob(*key))


def _build_norm_blob(clean_text: bool, handle_chinese_chars: bool, strip_accents: bool,
                     lowercase: bool) -> bytes:
    t = load_tables()
    props = t["props"].astype(np.uint32)
    entry = props & CLASS_MASK
    if clean_text:
        entry |= np.where(props & P_REMOVE, REMOVE, 0).astype(np.uint32)
        entry |= np.where(props & P_TO_SPACE, TO_SPACE, 0).astype(np.uint32)
    if handle_chinese_chars:
        entry |= np.where(props & P_CHINESE, ISOLATE, 0).astype(np.uint32)
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
        gone = empty[(props[empty] & P_NONSTARTER) != 0]
        entry[gone] |= NONSTARTER_GONE
    else:
        ccc_cps = np.zeros(0, dtype=np.uint32)
        ccc_vals = np.zeros(0, dtype=np.uint8)
    flags = (int(clean_text) | int(handle_chinese_chars) << 1 | int(strip_accents) << 2
             | int(lowercase) << 3)
    return pack_norm_blob(entry, map_offsets, map_utf8, ccc_cps, ccc_vals, flags)
