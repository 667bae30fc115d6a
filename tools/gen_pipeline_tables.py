#!/usr/bin/env python
"""Generate ``daskwp/core/pipeline_tables.npz``: the per-code-point behaviour of the
HuggingFace ``tokenizers`` normalizers and pre-tokenizers that daskwp composes into one
normalization blob (``daskwp/core/normalizer/``, ``compile_pipeline``), besides
BertNormalizer + BertPreTokenizer (whose tables are ``daskwp/kernels/unicode_tables.npz``).

Like that file, everything is derived from HF itself, one code point at a time (its Rust
Unicode tables are older than Python's ``unicodedata`` and differ from it); HF is a
generation-time dependency only.

Run:  python tools/gen_pipeline_tables.py      (about a minute; needs tokenizers, numpy)

Arrays (np.savez_compressed):

{nfd,nfkd,lower}_cps / _offsets / _utf8
    ``NFD()``, ``NFKD()``, ``Lowercase()`` applied to chr(cp), for every cp whose output
    differs from the char: sorted int32 cps, int64 offsets (len+1) into the uint8
    concatenation of the outputs' UTF-8.
mark_cps   int32   chars ``StripAccents()`` removes (General_Category Mark in HF's
           unicode-normalization tables; it does not decompose first)
mn_cps     int32   chars that BertNormalizer's accent stripping removes once NFD has run
           (is_mark_nonspacing, HF's unicode_categories): NFD-stable chars only
ccc_cps / ccc_vals   int32 / uint8   every NFD-stable char with a canonical combining class
           > 0 in HF's NFD, with that class (NFD and NFKD stably sort runs of them by it)
numeric_cps  int32   chars ``Digits`` splits on (Rust ``char::is_numeric``)
meta       uint8   UTF-8 JSON: versions, counts, checks, differences from unicodedata

Checked here against HF: the punctuation of ``Punctuation`` and the whitespace of
``WhitespaceSplit`` and ``Strip`` equal BertPreTokenizer's classes (unicode_tables.npz); the
model "per-char decomposition, then a stable sort of each run of non-starters by class"
equals HF's NFD and NFKD on probes around every code point; every non-starter's class
orders against one reference mark of every class as HF orders it.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import unicodedata

import numpy as np
import tokenizers
from tokenizers import normalizers as N
from tokenizers import pre_tokenizers as P

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "daskwp", "core", "pipeline_tables.npz")
BERT_TABLES = os.path.join(REPO, "daskwp", "kernels", "unicode_tables.npz")
NCP = 0x110000
CPS = [c for c in range(NCP) if not 0xD800 <= c <= 0xDFFF]
CHARS = [chr(c) for c in CPS]
WS, PUNCT = 1, 2


def hexs(cps, k=12):
    return ["U+%04X" % c for c in sorted(cps)[:k]]


def sparse_map(outs):
    d = {cp: o for cp, c, o in zip(CPS, CHARS, outs) if o != c}
    keys = sorted(d)
    enc = [d[k].encode("utf-8") for k in keys]
    off = np.zeros(len(keys) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(e) for e in enc])
    return d, (np.array(keys, dtype=np.int32), off,
               np.frombuffer(b"".join(enc), dtype=np.uint8).copy())


def main() -> int:
    t0 = datetime.datetime.now()
    with np.load(BERT_TABLES) as z:
        props = z["props"].copy()
        strip_ccc = dict(zip(z["strip_ccc_cps"].tolist(), z["strip_ccc_vals"].tolist()))
        bert_lower = {int(c) for c in z["lower_cps"]}
    arrays = {}

    # ---- per-char maps ----------------------------------------------------------------
    nfd = N.NFD().normalize_str
    nfkd = N.NFKD().normalize_str
    maps = {}
    for name, f in (("nfd", nfd), ("nfkd", nfkd), ("lower", N.Lowercase().normalize_str)):
        d, (cps, off, utf8) = sparse_map([f(c) for c in CHARS])
        maps[name] = d
        arrays[name + "_cps"], arrays[name + "_offsets"], arrays[name + "_utf8"] = cps, off, utf8
    if set(maps["lower"]) != bert_lower:
        raise RuntimeError("Lowercase() differs from BertNormalizer's lowercasing")

    sa = N.StripAccents().normalize_str
    marks = []
    for cp, c in zip(CPS, CHARS):
        o = sa(c)
        if o == "":
            marks.append(cp)
        elif o != c:
            raise RuntimeError("StripAccents maps U+%04X to %r" % (cp, o))
    arrays["mark_cps"] = np.array(marks, dtype=np.int32)

    stable = [(cp, c) for cp, c in zip(CPS, CHARS) if cp not in maps["nfd"]]
    bs = N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                          lowercase=False).normalize_str
    mn = []
    for cp, c in stable:
        o = bs(c)
        if o == "":
            mn.append(cp)
        elif o != c:
            raise RuntimeError("BertNormalizer(strip) maps NFD-stable U+%04X to %r" % (cp, o))
    arrays["mn_cps"] = np.array(mn, dtype=np.int32)

    # ---- canonical combining classes (HF's) ------------------------------------------------
    LO, HI = "\u0334", "\u0301"   # ccc 1 and 230, in every Unicode version
    ccc = {}
    for cp, c in stable:
        known = nfd(c + LO) == LO + c or nfd(HI + c) == c + HI
        k = unicodedata.combining(c)
        if known:
            if k == 0:
                raise RuntimeError("HF's NFD reorders U+%04X, which Python calls a starter" % cp)
            ccc[cp] = k
    # One reference mark per class; every non-starter orders against all of them as HF does.
    ladder = {}
    for cp in sorted(ccc):
        ladder.setdefault(ccc[cp], cp)
    for cp, k in ccc.items():
        c = chr(cp)
        for kr, r in ladder.items():
            if r == cp:
                continue
            rc = chr(r)
            if (nfd(rc + c) == c + rc) != (kr > k) or (nfd(c + rc) == rc + c) != (k > kr):
                raise RuntimeError("class of U+%04X (%d) orders against U+%04X (%d) "
                                   "unlike HF" % (cp, k, r, kr))
    for cp, k in strip_ccc.items():
        if ccc.get(cp) != k:
            raise RuntimeError("strip survivor U+%04X: class %r here, %d in unicode_tables"
                               % (cp, ccc.get(cp), k))
    arrays["ccc_cps"] = np.array(sorted(ccc), dtype=np.int32)
    arrays["ccc_vals"] = np.array([ccc[c] for c in sorted(ccc)], dtype=np.uint8)

    # The decomposition model against HF's NFD / NFKD on probes around every code point.
    def model(s, table):
        out = []
        for ch in s:
            out.extend(table.get(ord(ch), ch))
        i = 0
        while i < len(out):
            if ccc.get(ord(out[i]), 0) == 0:
                i += 1
                continue
            j = i
            while j < len(out) and ccc.get(ord(out[j]), 0):
                j += 1
            out[i:j] = sorted(out[i:j], key=lambda x: ccc[ord(x)])
            i = j
        return "".join(out)

    probes = ("a\u0316" + "{}" + "\u0334\u0345", "\u0301{}\u05b0", "{}\u0f71\u0334",
              "\u302e{}\u1b44")
    bad = []
    for name, f in (("nfd", nfd), ("nfkd", nfkd)):
        table = maps[name]
        for cp, c in zip(CPS, CHARS):
            for p in probes:
                s = p.format(c)
                if f(s) != model(s, table):
                    bad.append((name, cp))
                    break
    if bad:
        raise RuntimeError("decomposition model fails on %d probes: %s" % (
            len(bad), [(n, "U+%04X" % c) for n, c in bad[:12]]))

    # ---- pre-tokenizer predicates ----------------------------------------------------------
    digits = P.Digits(individual_digits=True).pre_tokenize_str
    punct = P.Punctuation().pre_tokenize_str
    wsplit = P.WhitespaceSplit().pre_tokenize_str
    strip = N.Strip().normalize_str
    numeric, odd = [], []
    for cp, c in zip(CPS, CHARS):
        s = "a" + c + "a"
        r = [w for w, _ in digits(s)]
        if r == ["a", c, "a"]:
            numeric.append(cp)
        elif r != [s]:
            odd.append(("Digits", cp))
        r = [w for w, _ in punct(s)]
        is_p = r == ["a", c, "a"]
        if not is_p and r != [s]:
            odd.append(("Punctuation", cp))
        if is_p != (props[cp] & 3 == PUNCT):
            odd.append(("Punctuation class", cp))
        r = [w for w, _ in wsplit(s)]
        is_ws = r == ["a", "a"]
        if not is_ws and r != [s]:
            odd.append(("WhitespaceSplit", cp))
        if is_ws != (props[cp] & 3 == WS):
            odd.append(("WhitespaceSplit class", cp))
        if (strip("a" + c) == "a") != is_ws or (strip(c + "a") == "a") != is_ws:
            odd.append(("Strip", cp))
    if odd:
        raise RuntimeError("pre-tokenizer predicates outside the model: %s" % [
            (n, "U+%04X" % c) for n, c in odd[:12]])
    arrays["numeric_cps"] = np.array(numeric, dtype=np.int32)

    # ---- informational: differences from Python's unicodedata ------------------------------
    py_nfd = [cp for cp, c in zip(CPS, CHARS)
              if unicodedata.normalize("NFD", c) != maps["nfd"].get(cp, c)]
    py_nfkd = [cp for cp, c in zip(CPS, CHARS)
               if unicodedata.normalize("NFKD", c) != maps["nfkd"].get(cp, c)]
    py_mark = set(cp for cp, c in zip(CPS, CHARS) if unicodedata.category(c).startswith("M"))
    py_numeric = set(cp for cp, c in zip(CPS, CHARS) if unicodedata.category(c) in
                     ("Nd", "Nl", "No"))
    py_ccc = set(cp for cp, c in stable if unicodedata.combining(c))
    meta = {
        "generator": "tools/gen_pipeline_tables.py",
        "tokenizers_version": tokenizers.__version__,
        "python_version": sys.version.split()[0],
        "python_unidata_version": unicodedata.unidata_version,
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "counts": {"nfd": len(maps["nfd"]), "nfkd": len(maps["nfkd"]),
                   "lower": len(maps["lower"]), "mark": len(marks), "mn": len(mn),
                   "nonstarters": len(ccc), "numeric": len(numeric),
                   "ccc_classes": len(ladder)},
        "checks": {"decomposition_probes_per_cp": len(probes),
                   "class_ladder": len(ladder), "predicates": "Digits, Punctuation, "
                   "WhitespaceSplit, Strip on 'a'+c+'a' for every code point"},
        "diff_vs_python_unicodedata": {
            "nfd": {"count": len(py_nfd), "examples": hexs(py_nfd)},
            "nfkd": {"count": len(py_nfkd), "examples": hexs(py_nfkd)},
            "mark": {"count": len(py_mark ^ set(marks)), "examples": hexs(py_mark ^ set(marks))},
            "numeric": {"count": len(py_numeric ^ set(numeric)),
                        "examples": hexs(py_numeric ^ set(numeric))},
            "nonstarter": {"count": len(py_ccc ^ set(ccc)), "examples": hexs(py_ccc ^ set(ccc))},
        },
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(),
                                   dtype=np.uint8).copy()
    np.savez_compressed(OUT, **arrays)
    print("wrote %s (%d bytes) in %.0fs" % (OUT, os.path.getsize(OUT),
                                            (datetime.datetime.now() - t0).total_seconds()))
    print(json.dumps(meta["counts"]), json.dumps(
        {k: v["count"] for k, v in meta["diff_vs_python_unicodedata"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
