"""Comparisons that name the first differing document: encodings, window results (every
array, bucketed or not) and tokenized frames read back from a job.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import daskwp

from .device import to_host


def doc_snippet(docs, d) -> str:
    if docs is None or d is None or d < 0 or d >= len(docs):
        return ""
    t = docs[d]
    return "" if t is None else repr(t[:160])


def diff_encoding(g_ids, g_off, e_ids, e_off, docs=None) -> str | None:
    """None when equal, else a message naming the first differing document."""
    g_ids, g_off = to_host(g_ids), to_host(g_off)
    if g_ids.dtype != np.int32 or g_off.dtype != np.int64:
        return f"dtypes {g_ids.dtype}/{g_off.dtype}, expected int32/int64"
    if g_off.shape != e_off.shape:
        return f"{g_off.shape[0] - 1} documents, expected {e_off.shape[0] - 1}"
    if np.array_equal(g_off, e_off) and np.array_equal(g_ids, e_ids):
        return None
    n = len(e_off) - 1
    d = 0
    bad = np.flatnonzero(g_off != e_off)
    first_off = int(bad[0]) - 1 if bad.size else n
    for d in range(n):
        if d >= first_off or not np.array_equal(g_ids[g_off[d]:g_off[d + 1]],
                                                e_ids[e_off[d]:e_off[d + 1]]):
            break
    return (f"first differing document {d} {doc_snippet(docs, d)}: got "
            f"{g_ids[g_off[d]:g_off[d + 1]].tolist()[:32]} expected "
            f"{e_ids[e_off[d]:e_off[d + 1]].tolist()[:32]}")


def flatten_windows(w) -> list[tuple[str, np.ndarray]]:
    """A windows result (BatchWindows or BucketedWindows) as named host arrays."""
    if hasattr(w, "buckets"):
        out = [("bucket_widths", np.asarray(w.widths, dtype=np.int64))]
        for width, b in w.buckets:
            out += [(f"bucket{width}.{k}", a) for k, a in flatten_windows(b)]
        return out
    out = []
    for k in sorted(w):
        v = w[k]
        if isinstance(v, daskwp.RaggedRows):
            out += [(f"{k}.values", to_host(v.values)), (f"{k}.offsets", to_host(v.offsets))]
        else:
            out.append((k, to_host(v)))
    if w.doc_row_offsets is not None:
        out.append(("doc_row_offsets", to_host(w.doc_row_offsets)))
    return out


def diff_windows(got, exp, docs=None, logid_offset: int = 0) -> str | None:
    """None when equal (names, dtypes, shapes, values), else the first differing
    document."""
    g, e = dict(flatten_windows(got)), dict(flatten_windows(exp))
    if list(g) != list(e):
        return f"arrays {list(g)}, expected {list(e)}"
    for name, ea in e.items():
        ga = g[name]
        if ga.dtype != ea.dtype:
            return f"{name}: dtype {ga.dtype}, expected {ea.dtype}"
        if ga.shape == ea.shape and np.array_equal(ga, ea):
            continue
        prefix = name.rsplit(".", 1)[0] + "." if name.startswith("bucket") and "." in name \
            else ""
        meta = e.get(prefix + "metadata")
        row = None
        if name.endswith("doc_row_offsets"):
            m = min(len(ga), len(ea))
            bad = np.flatnonzero(ga[:m] != ea[:m])
            d = int(bad[0]) - 1 if bad.size else m - 1
            return (f"{name}: first differing document {max(d, 0)} "
                    f"{doc_snippet(docs, max(d, 0))}")
        if ga.ndim >= 1 and ea.ndim >= 1:
            m = min(ga.shape[0], ea.shape[0])
            if ga.ndim == 2 and ga.shape[1:] == ea.shape[1:]:
                bad = np.flatnonzero(np.any(ga[:m] != ea[:m], axis=1))
            elif ga.ndim == 1:
                bad = np.flatnonzero(ga[:m] != ea[:m])
            else:
                bad = np.array([0])
            idx = int(bad[0]) if bad.size else m
            row = idx
            if name.endswith(".values"):   # a flat ragged value: its row
                offs = e.get(name[:-len("values")] + "offsets")
                if offs is not None:
                    row = int(np.searchsorted(offs, idx, side="right")) - 1
        d = None
        if meta is not None and row is not None and 0 <= row < len(meta):
            d = int(meta[row, 0]) - logid_offset
        shapes = f" (shape {ga.shape}, expected {ea.shape})" if ga.shape != ea.shape else ""
        return (f"{name}{shapes}: first differing row {row}, document {d} "
                f"{doc_snippet(docs, d)}")
    return None


def compare_frames(fa, fb) -> str | None:
    """None when two tokenized frames hold the same rows, else the first differing logID."""
    cols = [c for c in ("logID", "window", "start", "stop", "input_ids", "attention_mask")
            if c in fb.columns]
    if [c for c in cols if c not in fa.columns]:
        return f"columns {list(fa.columns)}, expected {list(fb.columns)}"
    fa = fa.sort_values(["logID", "window"]).reset_index(drop=True)
    fb = fb.sort_values(["logID", "window"]).reset_index(drop=True)
    if len(fa) != len(fb):
        return f"{len(fa)} rows, expected {len(fb)}"
    for c in cols:
        ta = pa.array(fa[c]) if not hasattr(fa[c].array, "_pa_array") else \
            fa[c].array._pa_array.combine_chunks()
        tb = pa.array(fb[c]) if not hasattr(fb[c].array, "_pa_array") else \
            fb[c].array._pa_array.combine_chunks()
        if not ta.equals(tb):
            i = next((i for i in range(len(ta)) if ta[i] != tb[i]), 0)
            return f"column {c}: first differing row {i}, logID {int(fb['logID'].iloc[i])}"
    return None
