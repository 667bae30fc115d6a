#!/usr/bin/env python
"""Generate ``unicode_tables.npz``: per-code-point character tables that reproduce
HuggingFace ``tokenizers``' BertNormalizer + BertPreTokenizer exactly.

Everything is derived from HF itself (its Rust Unicode tables are older than
Python's ``unicodedata``), by normalizing / pre-tokenizing every Unicode scalar
value one at a time.  HF (``tokenizers``) is a generation-time dependency only.

Run (from anywhere; it writes daskwp/kernels/unicode_tables.npz):
      python tools/gen_unicode_tables.py

Arrays written (np.savez_compressed):

props  uint8[0x110000]
    bits 0-1  pre-tokenizer class: 0 other, 1 whitespace (dropped, splits),
              2 punctuation (isolated as its own word)
    bit 2 (4)   clean_text removes the char
    bit 3 (8)   clean_text maps the char to " " (set for U+0020 itself too:
                the bit means "clean_text output is exactly one space")
    bit 4 (16)  handle_chinese_chars pads the char: " " + c + " "
    bit 5 (32)  surrogate code point (D800-DFFF, not a scalar value; no other bit)
    bit 6 (64)  canonical non-starter: NFD(c) consists only of characters with
                canonical combining class > 0 (per HF's normalization tables).
                Such chars do NOT break a canonical-reordering run (strip modes).
{mode}_cps / {mode}_offsets / {mode}_utf8   for mode in lower, strip, strip_lower
    BertNormalizer(clean_text=False, handle_chinese_chars=False,
    strip_accents="strip" in mode, lowercase="lower" in mode) applied to chr(cp),
    for every cp whose output != chr(cp): sorted int32 cps, int64 offsets
    (len+1, from 0) into the uint8 concatenation of the outputs' UTF-8.
strip_ccc_cps / strip_ccc_vals   int32 / uint8
    Characters that SURVIVE accent stripping yet have a canonical combining class
    > 0 in HF's NFD (newer Mn marks unknown to HF's category table, Mc marks such
    as viramas or U+1D165).  In strip modes HF runs NFD over the whole string, so
    these are canonically reordered (stable sort by ccc) within a run of
    non-starters.  Model (verified against HF here): per cp take the strip-table
    output m; if m is empty the run continues iff props bit 6 is set (else it
    breaks, e.g. U+034F); otherwise each char of m that is in this table is
    stable-inserted into the current run by ccc, any other char is appended and
    breaks the run.  Chars removed by clean_text do not break a run; clean-text
    spaces and Chinese padding do.  See UNICODE_TABLES.md.
composition_exceptions  int32   code points violating the per-cp composition
    rule (see ``compose`` below); empty when none.
meta   uint8  UTF-8 JSON: versions, date, counts, differences vs unicodedata.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import unicodedata

import numpy as np
import tokenizers
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

N = 0x110000
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "daskwp",
                   "kernels", "unicode_tables.npz")

WS, PUNCT = 1, 2
REMOVE, SPACE, CHINESE, SURROGATE, NONSTARTER = 4, 8, 16, 32, 64
MODES = {"lower": (False, True), "strip": (True, False), "strip_lower": (True, True)}

CPS = [c for c in range(N) if not 0xD800 <= c <= 0xDFFF]
CHARS = [chr(c) for c in CPS]


def hexs(cps, k=12):
    return ["U+%04X" % c for c in list(cps)[:k]]


def run_norm(clean, chinese, strip, lower):
    n = BertNormalizer(clean_text=clean, handle_chinese_chars=chinese,
                       strip_accents=strip, lowercase=lower)
    f = n.normalize_str
    return [f(c) for c in CHARS]


def mode_of(strip, lower):
    if strip and lower:
        return "strip_lower"
    if strip:
        return "strip"
    if lower:
        return "lower"
    return None


def main():
    t0 = datetime.datetime.now()
    props = np.zeros(N, dtype=np.uint8)
    props[0xD800:0xE000] = SURROGATE

    # ---- pre-tokenizer class ---------------------------------------------
    pt = BertPreTokenizer().pre_tokenize_str
    for cp, c in zip(CPS, CHARS):
        r = [w for w, _ in pt("a" + c + "a")]
        if r == ["a", "a"]:
            props[cp] |= WS
        elif r == ["a", c, "a"]:
            props[cp] |= PUNCT
        elif r != ["a" + c + "a"]:
            raise RuntimeError("unexpected pre-tokenization of U+%04X: %r" % (cp, r))
    assert props[ord("a")] & 3 == 0

    # ---- clean_text / handle_chinese_chars -------------------------------
    clean = run_norm(True, False, False, False)
    chin = run_norm(False, True, False, False)
    odd = []
    for cp, c, o, h in zip(CPS, CHARS, clean, chin):
        if o == "":
            props[cp] |= REMOVE
        elif o == " ":
            props[cp] |= SPACE
        elif o != c:
            odd.append(cp)
        if h == " " + c + " ":
            props[cp] |= CHINESE
        elif h != c:
            odd.append(cp)
    if odd:
        raise RuntimeError("clean_text/chinese outputs outside the model: %s" % hexs(odd))

    # ---- mapping tables ----------------------------------------------------
    tables = {}   # mode -> dict cp -> str
    arrays = {}
    for mode, (strip, lower) in MODES.items():
        outs = run_norm(False, False, strip, lower)
        d = {cp: o for cp, c, o in zip(CPS, CHARS, outs) if o != c}
        tables[mode] = d
        keys = sorted(d)
        enc = [d[k].encode("utf-8") for k in keys]
        off = np.zeros(len(keys) + 1, dtype=np.int64)
        off[1:] = np.cumsum([len(e) for e in enc])
        arrays[mode + "_cps"] = np.array(keys, dtype=np.int32)
        arrays[mode + "_offsets"] = off
        arrays[mode + "_utf8"] = np.frombuffer(b"".join(enc), dtype=np.uint8).copy()
        for o in d.values():   # outputs are scalar values, hence covered by props
            for ch in o:
                assert ord(ch) < N and not 0xD800 <= ord(ch) <= 0xDFFF

    # ---- canonical reordering data for strip modes -------------------------
    ns = BertNormalizer(clean_text=False, handle_chinese_chars=False,
                        strip_accents=True, lowercase=False).normalize_str
    HI, LO = "\u302e", "\u1b44"   # survivors with ccc 224 (Mc) and 9 (Mc)
    assert ns(HI + LO) == LO + HI and ns(HI) == HI and ns(LO) == LO
    for cp, c in zip(CPS, CHARS):
        o = ns(HI + c + LO)
        if o.index(LO) < o.index(HI):
            props[cp] |= NONSTARTER
    # survivors: chars left by stripping that have ccc > 0 (Python ccc is stable
    # across versions once assigned; HF knows a char iff it reorders vs a probe)
    strip_tab = tables["strip"]
    cand = set()
    for cp, c in zip(CPS, CHARS):
        o = strip_tab.get(cp, c)
        for ch in o:
            if unicodedata.combining(ch):
                cand.add(ord(ch))
    ccc = {}
    for x in sorted(cand):
        c = unicodedata.combining(chr(x))
        if c > 9:
            known = ns(chr(x) + LO) == LO + chr(x)
        else:
            known = ns(HI + chr(x)) == chr(x) + HI
        if known:
            ccc[x] = c
    # Reordering model (what the kernel implements in strip modes), checked
    # against HF on probe + c + probe for every code point:
    #   for each cp: m = strip table output; if m == "": the run continues iff
    #   props bit 6 (non-starter), else it breaks; otherwise each char y of m:
    #   y a survivor (in ccc) -> stable-insert into the current run by ccc,
    #   else append y and break the run.
    def strip_model(s):
        out, run = [], None
        for c in s:
            m = strip_tab.get(ord(c), c)
            if not m:
                if not props[ord(c)] & NONSTARTER:
                    run = None
                continue
            for y in m:
                k = ccc.get(ord(y), 0)
                if k == 0:
                    out.append(y)
                    run = None
                    continue
                if run is None:
                    run = len(out)
                j = len(out)
                while j > run and ccc.get(ord(out[j - 1]), 0) > k:
                    j -= 1
                out.insert(j, y)
        return "".join(out)

    bad = []
    for cp, c in zip(CPS, CHARS):
        for s in (HI + c, c + LO, HI + c + LO):
            if ns(s) != strip_model(s):
                bad.append(cp)
                break
    if bad:
        raise RuntimeError("strip reordering model fails on %d cps: %s" % (len(bad), hexs(bad)))
    # pairwise check of the reordering model on all survivor pairs
    sv = sorted(ccc)
    for x in sv:
        for y in sv:
            s = chr(x) + chr(y)
            exp = s if ccc[x] <= ccc[y] else chr(y) + chr(x)
            if ns(s) != exp:
                raise RuntimeError("reorder model fails on U+%04X U+%04X" % (x, y))
    arrays["strip_ccc_cps"] = np.array(sv, dtype=np.int32)
    arrays["strip_ccc_vals"] = np.array([ccc[x] for x in sv], dtype=np.uint8)

    # ---- composition self-check: all 16 flag combos (+8 strip=None) --------
    def compose(cp, c, cl, ch, mode):
        p = props[cp]
        if cl and p & REMOVE:
            return ""
        if cl and p & SPACE:
            return " "
        m = tables[mode].get(cp, c) if mode else c
        return " " + m + " " if ch and p & CHINESE else m

    exceptions = {}
    ncombos = 0
    for cl in (False, True):
        for ch in (False, True):
            for strip in (False, True, None):
                for lower in (False, True):
                    eff = lower if strip is None else strip
                    mode = mode_of(eff, lower)
                    outs = run_norm(cl, ch, strip, lower)
                    ncombos += 1
                    for cp, c, o in zip(CPS, CHARS, outs):
                        if o != compose(cp, c, cl, ch, mode):
                            exceptions.setdefault(cp, []).append(
                                {"clean_text": cl, "handle_chinese_chars": ch,
                                 "strip_accents": strip, "lowercase": lower,
                                 "hf": [ord(x) for x in o]})
    if exceptions:
        print("COMPOSITION EXCEPTIONS (%d cps):" % len(exceptions))
        for cp in sorted(exceptions)[:50]:
            print("  U+%04X" % cp, exceptions[cp][:2])
    arrays["composition_exceptions"] = np.array(sorted(exceptions), dtype=np.int32)

    # ---- informational comparison with Python's unicodedata ----------------
    def py_punct(c):
        o = ord(c)
        return (33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126
                or unicodedata.category(c).startswith("P"))

    def py_remove(c):
        if c in "\t\n\r":
            return False
        return c in "\x00\ufffd" or unicodedata.category(c) in ("Cc", "Cf", "Cn", "Co")

    def py_remove_no_cn(c):
        if c in "\t\n\r":
            return False
        return c in "\x00\ufffd" or unicodedata.category(c) in ("Cc", "Cf", "Co")

    def py_space(c):
        return not py_remove(c) and (c in " \t\n\r" or unicodedata.category(c) == "Zs")

    def py_chinese(o):
        return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0x20000 <= o <= 0x2A6DF
                or 0x2A700 <= o <= 0x2B73F or 0x2B740 <= o <= 0x2B81F
                or 0x2B820 <= o <= 0x2CEAF or 0xF900 <= o <= 0xFAFF
                or 0x2F800 <= o <= 0x2FA1F)

    def py_map(c, mode):
        s = c
        if "strip" in mode:
            s = "".join(x for x in unicodedata.normalize("NFD", s)
                        if unicodedata.category(x) != "Mn")
        if "lower" in mode:
            s = "".join(x.lower() for x in s)
        return s

    diffs = {"pretok_whitespace": [], "pretok_punctuation": [], "clean_remove": [],
             "clean_remove_excl_Cn": [], "clean_space": [], "chinese": [], "lower": [], "strip": [], "strip_lower": []}
    for cp, c in zip(CPS, CHARS):
        p = int(props[cp])
        if bool(p & 3 == WS) != c.isspace():
            diffs["pretok_whitespace"].append(cp)
        if bool(p & 3 == PUNCT) != py_punct(c):
            diffs["pretok_punctuation"].append(cp)
        if bool(p & REMOVE) != py_remove(c):
            diffs["clean_remove"].append(cp)
        if bool(p & REMOVE) != py_remove_no_cn(c):
            diffs["clean_remove_excl_Cn"].append(cp)
        if bool(p & SPACE) != py_space(c):
            diffs["clean_space"].append(cp)
        if bool(p & CHINESE) != py_chinese(cp):
            diffs["chinese"].append(cp)
        for mode in MODES:
            if tables[mode].get(cp, c) != py_map(c, mode):
                diffs[mode].append(cp)
    any_class, any_class_no_cn = set(), set()
    for k in ("pretok_whitespace", "pretok_punctuation", "clean_remove", "clean_space", "chinese"):
        any_class.update(diffs[k])
    for k in ("pretok_whitespace", "pretok_punctuation", "clean_remove_excl_Cn",
              "clean_space", "chinese"):
        any_class_no_cn.update(diffs[k])

    counts = {
        "whitespace": int(((props & 3) == WS).sum()),
        "punctuation": int(((props & 3) == PUNCT).sum()),
        "clean_remove": int((props & REMOVE).astype(bool).sum()),
        "clean_space": int((props & SPACE).astype(bool).sum()),
        "chinese": int((props & CHINESE).astype(bool).sum()),
        "surrogate": int((props & SURROGATE).astype(bool).sum()),
        "nonstarter": int((props & NONSTARTER).astype(bool).sum()),
        "strip_survivors_with_ccc": len(sv),
    }
    for mode in MODES:
        counts[mode + "_entries"] = len(tables[mode])
        counts[mode + "_max_output_chars"] = max(len(v) for v in tables[mode].values())
        counts[mode + "_max_output_bytes"] = max(len(v.encode()) for v in tables[mode].values())
        counts[mode + "_empty_outputs"] = sum(1 for v in tables[mode].values() if v == "")
    meta = {
        "generator": "tools/gen_unicode_tables.py",
        "tokenizers_version": tokenizers.__version__,
        "python_version": sys.version.split()[0],
        "python_unidata_version": unicodedata.unidata_version,
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "bits": {"class_mask": 3, "whitespace": WS, "punctuation": PUNCT,
                 "clean_remove": REMOVE, "clean_space_incl_U+0020": SPACE,
                 "chinese_pad": CHINESE, "surrogate": SURROGATE, "nonstarter": NONSTARTER},
        "counts": counts,
        "diff_vs_python_unicodedata": {
            "any_class_bit": len(any_class),
            "any_class_bit_control_excl_Cn": len(any_class_no_cn),
            "note": "python rules: whitespace str.isspace(); punctuation ASCII "
                    "punct or category P*; clean_remove \\0, U+FFFD or category "
                    "Cc/Cf/Cn/Co except \\t\\n\\r (HF keeps unassigned Cn); "
                    "clean_space ' ', \\t, \\n, \\r or Zs; chinese = original "
                    "BERT ranges (incl. 2B820-2B91F); lower str.lower per char; "
                    "strip NFD minus Mn",
            **{k: {"count": len(v), "examples": hexs(v)} for k, v in diffs.items()},
        },
        "self_check": {"combos_checked": ncombos, "code_points_per_combo": len(CPS),
                       "composition_exceptions": len(exceptions),
                       "exception_details": {"U+%04X" % k: v[:4] for k, v in
                                             sorted(exceptions.items())[:200]}},
    }
    arrays["props"] = props
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8).copy()
    np.savez_compressed(OUT, **arrays)

    print("wrote %s (%d bytes) in %.0fs" % (OUT, os.path.getsize(OUT),
                                            (datetime.datetime.now() - t0).total_seconds()))
    print("tokenizers %s, python %s, unicodedata %s" % (
        meta["tokenizers_version"], meta["python_version"], meta["python_unidata_version"]))
    print("counts:", json.dumps(counts))
    print("diffs vs unicodedata:", json.dumps(
        {k: len(v) for k, v in diffs.items()}), "any class bit:", len(any_class),
        "(control rule without Cn: %d)" % len(any_class_no_cn))
    print("self-check: %d combos x %d cps, %d composition exceptions" % (
        ncombos, len(CPS), len(exceptions)))
    if exceptions:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
