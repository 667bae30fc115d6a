"""Running normalizer steps on one code point at a time, from HF's own tables
(``pipeline_tables.npz``, by ``tools/gen_pipeline_tables.py``): the output characters of a
code point, each with the combining class it sorts by at the last canonical reordering, and
the pre-tokenizer class of every output character. What cannot be computed one code point at
a time raises :class:`NotPerCodePoint`; large sets that only clean_text or
handle_chinese_chars touch are run once, as a :class:`BulkStandIn`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from .blob import (CLASS_MASK, CLASS_PUNCT, CLASS_SPACE, N_CODEPOINTS, P_CHINESE, P_REMOVE,
                   P_TO_SPACE, load_tables)


PIPELINE_TABLES_PATH = Path(__file__).resolve().parents[1] / "pipeline_tables.npz"


@functools.lru_cache(maxsize=1)
def load_pipeline_tables() -> dict:
    """The generated tables of the other normalizers and pre-tokenizers (cached): ``nfd``,
    ``nfkd``, ``lower`` ({cp: str}), ``marks`` and ``mn`` (frozensets of cps StripAccents and
    BertNormalizer's accent stripping remove), ``ccc`` ({cp: class} of HF's non-starters),
    ``numeric`` (bool[0x110000], Digits), ``meta``."""
    out = {}
    with np.load(PIPELINE_TABLES_PATH) as z:
        for name in ("nfd", "nfkd", "lower"):
            cps = z[name + "_cps"].tolist()
            off = z[name + "_offsets"].tolist()
            buf = z[name + "_utf8"].tobytes()
            out[name] = {cp: buf[off[i]:off[i + 1]].decode("utf-8")
                         for i, cp in enumerate(cps)}
        out["marks"] = frozenset(z["mark_cps"].tolist())
        out["mn"] = frozenset(z["mn_cps"].tolist())
        out["ccc"] = dict(zip(z["ccc_cps"].tolist(), z["ccc_vals"].tolist()))
        numeric = np.zeros(N_CODEPOINTS, dtype=bool)
        numeric[z["numeric_cps"]] = True
        out["numeric"] = numeric
        out["meta"] = json.loads(bytes(z["meta"]).decode("utf-8"))
    return out


def split_classes(splits) -> np.ndarray:
    """Pre-tokenizer class of every code point as an output character: a character one step
    removes is whitespace (dropped, splits), else one a step isolates is punctuation (a piece
    of its own), else other. Steps compose so because each looks at one character."""
    props = load_tables()["props"]
    removed = np.zeros(N_CODEPOINTS, dtype=bool)
    isolated = np.zeros(N_CODEPOINTS, dtype=bool)
    for pred, behavior in splits:
        if pred == "whitespace":
            m = (props & CLASS_MASK) == CLASS_SPACE
        elif pred == "punctuation":
            m = (props & CLASS_MASK) == CLASS_PUNCT
        elif pred == "numeric":
            m = load_pipeline_tables()["numeric"]
        else:  # ("char", c)
            m = np.zeros(N_CODEPOINTS, dtype=bool)
            m[ord(pred[1])] = True
        if behavior == "removed":
            removed |= m
        else:
            isolated |= m
    cls = np.zeros(N_CODEPOINTS, dtype=np.uint8)
    cls[isolated] = CLASS_PUNCT
    cls[removed] = CLASS_SPACE
    return cls


RUN_BREAK = None  # an item: a starter removed after reordering (it ended a run of marks)


class BulkStandIn:
    """Stands for every code point of a large set that only clean_text (removes it) or
    handle_chinese_chars (pads it) touches; such code points are starters (class 0)."""

    __slots__ = ("remove", "chinese")

    def __init__(self, remove: bool, chinese: bool):
        self.remove, self.chinese = remove, chinese


class NotPerCodePoint(Exception):
    """A pipeline's result on a code point cannot be computed one code point at a time (a
    second reordering would change a non-starter's class); the message says where."""


class Composer:
    """Runs normalizer steps on one code point as items: ``(char, eff)`` (``eff``: None
    before any reordering, else the combining class the character's source had at the last
    reordering, which the kernel's waiting marks sort by) or ``RUN_BREAK``."""

    def __init__(self, steps: tuple, classes: np.ndarray):
        T, P = load_tables(), load_pipeline_tables()
        self.props = T["props"]
        self.ccc = P["ccc"]
        self.classes = classes
        self.ops = []
        for s in steps:
            self.ops.append(s)
            if s in ("nfd", "nfkd"):
                self.ops.append("reorder")
        self.has_reorder = "reorder" in self.ops
        self.maps = {"nfd": P["nfd"], "nfkd": P["nfkd"], "lower": P["lower"]}
        self.sets = {"strip_mn": P["mn"], "strip_marks": P["marks"]}

    def apply(self, op: str, ch):
        """One step on one character (or a BulkStandIn stand-in): its output, a list."""
        if isinstance(ch, BulkStandIn):
            if op == "clean_text" and ch.remove:
                return []
            if op == "chinese" and ch.chinese:
                return [" ", ch, " "]
            return [ch]
        cp = ord(ch)
        if op == "clean_text":
            p = self.props[cp]
            return [] if p & P_REMOVE else [" "] if p & P_TO_SPACE else [ch]
        if op == "chinese":
            return [" ", ch, " "] if self.props[cp] & P_CHINESE else [ch]
        if op in self.maps:
            out = self.maps[op].get(cp)
            return [ch] if out is None else list(out)
        return [] if cp in self.sets[op] else [ch]

    def ccc_of(self, ch) -> int:
        return 0 if isinstance(ch, BulkStandIn) else self.ccc.get(ord(ch), 0)

    def simulate(self, ch) -> list:
        items = [(ch, None)]
        seen = False
        for op in self.ops:
            if op == "reorder":
                new = []
                for it in items:
                    if it is RUN_BREAK:
                        continue  # this reordering sees the run joined
                    c, eff = it
                    k = self.ccc_of(c)
                    # Reordering twice equals reordering once only when what lies between
                    # kept every non-starter's class.
                    if seen and eff and k != eff:
                        raise NotPerCodePoint(f"a {op} after another changes the class of "
                                             f"U+{ord(c):04X}")
                    new.append((c, k))
                items, seen = new, True
                continue
            new = []
            for it in items:
                if it is RUN_BREAK:
                    new.append(it)
                    continue
                c, eff = it
                out = self.apply(op, c)
                if len(out) == 1 and out[0] is c:
                    new.append(it)
                elif not seen:
                    new.extend((o, None) for o in out)
                elif out:
                    new.extend((o, eff) for o in out)
                elif eff == 0:
                    new.append(RUN_BREAK)  # a starter gone after reordering ended a run
            items = new
        return items
