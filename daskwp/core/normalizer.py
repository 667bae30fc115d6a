"""Normalization tables: the per-code-point behaviour of a tokenizer's normalizer and
pre-tokenizer, compiled into the blob the native core reads.

The raw properties are generated from HuggingFace ``tokenizers`` itself: BertNormalizer +
BertPreTokenizer by ``daskwp/kernels/gen_unicode_tables.py`` (``unicode_tables.npz``; see
``daskwp/kernels/UNICODE_TABLES.md`` for the Unicode version), the other normalizers and
pre-tokenizers by ``tools/gen_pipeline_tables.py`` (``pipeline_tables.npz``).
:func:`norm_blob` folds them, for one combination of BERT flags, into the flat two-level table
that the native core reads (layout: ``daskwp/kernels/model.hpp``); :func:`compile_pipeline`
does the same for any pipeline of a ``tokenizer.json`` that one pass over the code points can
carry (:func:`make_pipeline` says which, and refuses the others by name).
"""

from __future__ import annotations

import functools
import itertools
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
    flags = (int(clean_text) | int(handle_chinese_chars) << 1 | int(strip_accents) << 2
             | int(lowercase) << 3)
    return _pack_norm_blob(entry, map_offsets, map_utf8, ccc_cps, ccc_vals, flags)


def _unique_blocks(blocks2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(blocks2d, axis=0, return_inverse=True)`` (the distinct 256-entry blocks in
    lexicographic order, and each block's index among them as uint16), by hashing each
    block's bytes: the same result in ~5 ms instead of ~200 ms (``np.unique`` sorts the
    4,352 rows as 1 KB records), which every new tokenizer and every Dask worker that
    unpickles one would pay."""
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


def _pack_norm_blob(entry: np.ndarray, map_offsets: np.ndarray, map_utf8: np.ndarray,
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



# =========================================================================================
# tokenizer.json pipelines: normalizers and pre-tokenizers composed into one blob
# =========================================================================================
#
# HF runs a normalizer over the whole text (between added tokens), then a pre-tokenizer over
# the normalized text, then WordPiece over each piece. The kernel makes one pass over the
# code points: each input code point maps to an output string (blob entry), each output
# character has a class (other: continues the word; space: ends it and is dropped;
# punctuation: a word of its own), and the one context effect it knows is canonical
# reordering of waiting combining marks. So a pipeline is supported exactly when:
#
# * every normalizer step maps each code point on its own (NFD and NFKD decompose each code
#   point, then reorder runs of non-starters: the kernel's waiting marks), and
# * every pre-tokenizer step splits on a predicate of one character, removing the matches or
#   isolating each match as a piece of its own.
#
# The composition is computed here, per code point, from HF's own tables; what it cannot
# express is refused with a ValueError naming the component.

PIPELINE_TABLES_PATH = Path(__file__).resolve().parent / "pipeline_tables.npz"

#: Pre-tokenizer steps of BertPreTokenizer: whitespace removed, punctuation isolated.
BERT_SPLITS = (("whitespace", "removed"), ("punctuation", "isolated"))

_REFUSED_NORMALIZERS = {
    "NFC": "it composes characters, which looks at more than one code point",
    "NFKC": "it composes characters, which looks at more than one code point",
    "Replace": "it replaces patterns that may span code points",
    "Prepend": "it inserts text at the start of the normalized string",
    "Precompiled": "it applies SentencePiece's precompiled character map, which matches "
                   "strings of several code points",
    "ByteLevel": "it maps bytes to characters (a byte-level BPE step)",
    "Nmt": "daskwp has no tables for it",
}
_REFUSED_PRE_TOKENIZERS = {
    "Whitespace": "it splits with the regex \\w+|[^\\w\\s]+, which keeps runs of punctuation "
                  "together ('...' is one piece); daskwp's single pass makes every "
                  "punctuation character a piece of its own",
    "Metaspace": "it replaces spaces by a meta symbol and prepends one (SentencePiece)",
    "ByteLevel": "it maps bytes to characters (a byte-level BPE step)",
    "UnicodeScripts": "it splits where the script changes, which looks at two characters",
    "FixedLength": "it cuts pieces by length",
}


def _step_name(spec) -> str:
    return spec.get("type") if isinstance(spec, dict) else repr(spec)


def normalizer_steps(spec) -> tuple:
    """The per-code-point steps of a HF normalizer (its ``tokenizer.json`` object; None: no
    normalizer). Raises ValueError naming a normalizer daskwp cannot run exactly."""
    if spec is None:
        return ()
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ValueError(f"a normalizer must be a tokenizers JSON object with a 'type', got "
                         f"{spec!r:.80}")
    kind = spec["type"]
    if kind == "Sequence":
        parts = spec.get("normalizers")
        if not isinstance(parts, list):
            raise ValueError("normalizer Sequence has no 'normalizers' list")
        return tuple(s for part in parts for s in normalizer_steps(part))
    if kind == "BertNormalizer":
        flags = []
        for key, default in (("clean_text", True), ("handle_chinese_chars", True),
                             ("strip_accents", None), ("lowercase", True)):
            v = spec.get(key, default)
            if not (isinstance(v, bool) or (v is None and key == "strip_accents")):
                raise ValueError(f"normalizer BertNormalizer: {key} must be true or false, "
                                 f"got {v!r}")
            flags.append(v)
        return bert_steps(*flags)
    if kind == "NFD":
        return ("nfd",)
    if kind == "NFKD":
        return ("nfkd",)
    if kind == "Lowercase":
        return ("lower",)
    if kind == "StripAccents":
        return ("strip_marks",)
    if kind == "Strip":
        if spec.get("strip_left", True) or spec.get("strip_right", True):
            return ("strip",)
        return ()
    reason = _REFUSED_NORMALIZERS.get(kind, "daskwp does not know it")
    raise ValueError(f"normalizer {kind} is not supported: {reason}")


def bert_steps(clean_text: bool, handle_chinese_chars: bool, strip_accents, lowercase: bool
               ) -> tuple:
    """BertNormalizer's steps, in HF's order (strip_accents None follows lowercase)."""
    strip = lowercase if strip_accents is None else strip_accents
    steps = []
    if clean_text:
        steps.append("clean_text")
    if handle_chinese_chars:
        steps.append("chinese")
    if strip:
        steps += ["nfd", "strip_mn"]
    if lowercase:
        steps.append("lower")
    return tuple(steps)


def pre_tokenizer_splits(spec) -> tuple:
    """The per-character splits of a HF pre-tokenizer (its ``tokenizer.json`` object; None:
    none), each ``(predicate, "removed" | "isolated")``. Raises ValueError naming a
    pre-tokenizer daskwp cannot run exactly."""
    if spec is None:
        return ()
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ValueError(f"a pre-tokenizer must be a tokenizers JSON object with a 'type', "
                         f"got {spec!r:.80}")
    kind = spec["type"]
    if kind == "Sequence":
        parts = spec.get("pretokenizers")
        if not isinstance(parts, list):
            raise ValueError("pre-tokenizer Sequence has no 'pretokenizers' list")
        return tuple(s for part in parts for s in pre_tokenizer_splits(part))
    if kind == "BertPreTokenizer":
        return BERT_SPLITS
    if kind == "WhitespaceSplit":
        return (("whitespace", "removed"),)
    if kind == "Punctuation":
        behavior = _behavior(spec.get("behavior", "Isolated"))
        if behavior is None:
            raise ValueError(f"pre-tokenizer Punctuation with behavior "
                             f"{spec.get('behavior')!r} is not supported: daskwp runs "
                             f"Punctuation with behavior Isolated or Removed only")
        return (("punctuation", behavior),)
    if kind == "Digits":
        if spec.get("individual_digits", False) is True:
            return (("numeric", "isolated"),)
        raise ValueError("pre-tokenizer Digits with individual_digits=false is not "
                         "supported: it keeps runs of digits together ('123' is one piece); "
                         "daskwp's single pass can only make each digit a piece of its own "
                         "(individual_digits=true)")
    if kind == "CharDelimiterSplit":
        d = spec.get("delimiter")
        if not isinstance(d, str) or len(d) != 1:
            raise ValueError(f"pre-tokenizer CharDelimiterSplit: delimiter must be one "
                             f"character, got {d!r}")
        return ((("char", d), "removed"),)
    if kind == "Split":
        pattern = spec.get("pattern")
        behavior = _behavior(spec.get("behavior"))
        text = pattern.get("String") if isinstance(pattern, dict) else None
        if (isinstance(text, str) and len(text) == 1 and behavior is not None
                and not spec.get("invert", False)):
            return ((("char", text), behavior),)
        raise ValueError(f"pre-tokenizer Split ({pattern!r:.60}, behavior "
                         f"{spec.get('behavior')!r}, invert {spec.get('invert', False)!r}) is "
                         f"not supported: daskwp runs Split only on one literal character, "
                         f"with behavior Removed or Isolated and invert false")
    reason = _REFUSED_PRE_TOKENIZERS.get(kind, "daskwp does not know it")
    raise ValueError(f"pre-tokenizer {kind} is not supported: {reason}")


def _behavior(value):
    v = value.lower() if isinstance(value, str) else None
    return {"isolated": "isolated", "removed": "removed"}.get(v)


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


class Pipeline:
    """A normalizer and pre-tokenizer reduced to what the kernel runs: ``steps`` (per code
    point normalizer steps, in order) and ``splits`` (per character pre-tokenizer splits).
    Build with :func:`make_pipeline`. Hashable; equal pipelines compile to one blob."""

    __slots__ = ("steps", "splits")

    def __init__(self, steps: tuple, splits: tuple):
        self.steps = tuple(steps)
        self.splits = tuple(splits)

    def _key(self):
        return (self.steps, self.splits)

    def __eq__(self, other):
        return isinstance(other, Pipeline) and other._key() == self._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"Pipeline(steps={self.steps}, splits={self.splits})"

    @property
    def bert_flags(self):
        """``(clean_text, handle_chinese_chars, strip_accents, lowercase)`` when this is
        BertNormalizer + BertPreTokenizer (the bundled tables), else None."""
        if self.splits != BERT_SPLITS:
            return None
        for flags in itertools.product((False, True), repeat=4):
            if bert_steps(*flags) == self.steps:
                return flags
        return None


def make_pipeline(normalizer_spec=None, pre_tokenizer_spec=None) -> Pipeline:
    """The pipeline of a HF normalizer and pre-tokenizer (``tokenizer.json`` objects; None:
    none), or ValueError naming the component daskwp cannot run exactly."""
    steps = normalizer_steps(normalizer_spec)
    splits = pre_tokenizer_splits(pre_tokenizer_spec)
    if "strip" in steps:
        # Strip removes White_Space at both ends of the text; that changes no id when every
        # such character still ends up as pre-tokenizer whitespace (or nothing).
        classes = _classes(splits)
        ws = np.flatnonzero((load_tables()["props"] & CLASS_MASK) == CLASS_SPACE)
        for at, step in enumerate(steps):
            if step != "strip":
                continue
            comp = _Composer(tuple(x for x in steps[at + 1:] if x != "strip"), classes)
            for cp in ws.tolist():
                items = comp.simulate(chr(cp))
                if any(it is not _BREAK and classes[ord(it[0])] != CLASS_SPACE
                       for it in items):
                    raise ValueError(
                        f"normalizer Strip is not supported with this pre-tokenizer: it "
                        f"removes whitespace (U+{cp:04X}) at the ends of the text that the "
                        f"pre-tokenizer {_splits_name(splits)} keeps in a piece")
        steps = tuple(x for x in steps if x != "strip")
    return Pipeline(steps, splits)


def _splits_name(splits) -> str:
    return "+".join(f"{p if isinstance(p, str) else repr(p[1])}:{b}" for p, b in splits) \
        or "(none)"


def _classes(splits) -> np.ndarray:
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


_BREAK = None  # an item: a starter removed after reordering (it ended a run of marks)


class _Bulk:
    """Stands for every code point of a large set that only clean_text (removes it) or
    handle_chinese_chars (pads it) touches; such code points are starters (class 0)."""

    __slots__ = ("remove", "chinese")

    def __init__(self, remove: bool, chinese: bool):
        self.remove, self.chinese = remove, chinese


class _Inexpressible(Exception):
    pass


class _Composer:
    """Runs normalizer steps on one code point as items: ``(char, eff)`` (``eff``: None
    before any reordering, else the combining class the character's source had at the last
    reordering, which the kernel's waiting marks sort by) or ``_BREAK``."""

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
        """One step on one character (or a _Bulk stand-in): its output, a list."""
        if isinstance(ch, _Bulk):
            if op == "clean_text" and ch.remove:
                return []
            if op == "chinese" and ch.chinese:
                return [" ", ch, " "]
            return [ch]
        cp = ord(ch)
        if op == "clean_text":
            p = self.props[cp]
            return [] if p & _P_REMOVE else [" "] if p & _P_TO_SPACE else [ch]
        if op == "chinese":
            return [" ", ch, " "] if self.props[cp] & _P_CHINESE else [ch]
        if op in self.maps:
            out = self.maps[op].get(cp)
            return [ch] if out is None else list(out)
        return [] if cp in self.sets[op] else [ch]

    def ccc_of(self, ch) -> int:
        return 0 if isinstance(ch, _Bulk) else self.ccc.get(ord(ch), 0)

    def simulate(self, ch) -> list:
        items = [(ch, None)]
        seen = False
        for op in self.ops:
            if op == "reorder":
                new = []
                for it in items:
                    if it is _BREAK:
                        continue  # this reordering sees the run joined
                    c, eff = it
                    k = self.ccc_of(c)
                    # Reordering twice equals reordering once only when what lies between
                    # kept every non-starter's class.
                    if seen and eff and k != eff:
                        raise _Inexpressible(f"a {op} after another changes the class of "
                                             f"U+{ord(c):04X}")
                    new.append((c, k))
                items, seen = new, True
                continue
            new = []
            for it in items:
                if it is _BREAK:
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
                    new.append(_BREAK)  # a starter gone after reordering ended a run
            items = new
        return items


def _role(eff) -> int:
    """0: an ordinary output character; k > 0: a waiting mark that sorts by class k."""
    return eff or 0


def compile_pipeline(pipeline: Pipeline) -> "CompiledPipeline":
    """The normalization blob of ``pipeline`` and the class of every output character
    (cached per pipeline)."""
    return _NORM_BLOBS.get_or_create(("pipeline", pipeline),
                                     lambda: _compile_pipeline(pipeline))


class CompiledPipeline:
    """``blob`` (bytes, model.hpp's layout) and ``classes`` (uint8[0x110000]: the
    pre-tokenizer class of each code point as an output character)."""

    __slots__ = ("blob", "classes", "ascii_free")

    def __init__(self, blob: bytes, classes: np.ndarray, ascii_free: tuple):
        self.blob = blob
        self.classes = classes
        #: ASCII characters that never start a word: pre-tokenizer whitespace, or never
        #: output by the normalizer
        self.ascii_free = ascii_free


def _compile_pipeline(pipeline: Pipeline, general: bool = False) -> CompiledPipeline:
    flags = pipeline.bert_flags
    if flags is not None and not general:
        # The bundled BertNormalizer + BertPreTokenizer tables (the default path).
        classes = (load_tables()["props"] & CLASS_MASK).astype(np.uint8)
        free = tuple(a for a in range(128) if classes[a] == CLASS_SPACE)
        return CompiledPipeline(norm_blob(*flags), classes, free)
    classes = _classes(pipeline.splits)
    comp = _Composer(pipeline.steps, classes)
    props = load_tables()["props"]
    P = load_pipeline_tables()

    # Code points some step maps (simulated one by one), and the two large sets only
    # clean_text and handle_chinese_chars touch (simulated once each, as a stand-in).
    small: set = set()
    bulk_remove = np.zeros(N_CODEPOINTS, dtype=bool)
    bulk_chinese = np.zeros(N_CODEPOINTS, dtype=bool)
    for step in pipeline.steps:
        if step == "clean_text":
            small.update(np.flatnonzero(props & _P_TO_SPACE).tolist())
            bulk_remove |= (props & _P_REMOVE) != 0
        elif step == "chinese":
            bulk_chinese |= (props & _P_CHINESE) != 0
        elif step in comp.maps:
            small.update(comp.maps[step])
        else:
            small.update(comp.sets[step])
    bulk = (bulk_remove | bulk_chinese)
    bulk[list(small)] = False
    bulk[0xD800:0xE000] = False
    bulk_ccc = [cp for cp in np.flatnonzero(bulk).tolist() if cp in comp.ccc]
    if bulk_ccc:  # not starters: simulate them one by one
        small.update(bulk_ccc)
        bulk[bulk_ccc] = False
    small.difference_update(range(0xD800, 0xE000))

    results = {}   # cp -> items
    bad = []
    for cp in sorted(small):
        try:
            results[cp] = comp.simulate(chr(cp))
        except _Inexpressible as e:
            bad.append((cp, str(e)))
    templates = {}
    for rem in (False, True):
        for chi in (False, True):
            if rem and chi:
                continue
            templates[(rem, chi)] = comp.simulate(_Bulk(rem, chi))

    # Roles of output characters: a waiting mark of class k (k > 0) or an ordinary one.
    roles: dict = {}
    conflicts = []

    def note(ch, eff):
        r = _role(eff) if comp.has_reorder else 0
        old = roles.setdefault(ord(ch), r)
        if old != r:
            conflicts.append(ord(ch))

    for items in results.values():
        for it in items:
            if it is not _BREAK:
                note(*it)
    for items in templates.values():
        for it in items:
            if it is not _BREAK and not isinstance(it[0], _Bulk):
                note(*it)
    # Code points no step touches are their own output (a mark waits by its own class).
    ccc_arr = np.zeros(N_CODEPOINTS, dtype=np.uint8)
    ccc_arr[list(P["ccc"])] = list(P["ccc"].values())
    identity_role = ccc_arr if comp.has_reorder else np.zeros(N_CODEPOINTS, dtype=np.uint8)
    touched = np.zeros(N_CODEPOINTS, dtype=bool)
    touched[list(small)] = True
    touched |= bulk
    for cp, r in list(roles.items()):
        if not touched[cp] and identity_role[cp] != r:
            conflicts.append(cp)
    if conflicts or bad:
        where = sorted(set(conflicts) | {cp for cp, _ in bad})
        detail = bad[0][1] if bad else "a character would have to sort as two classes"
        raise ValueError(
            f"normalizer steps {'+'.join(pipeline.steps)} are not supported: their result "
            f"cannot be computed one code point at a time ({detail}; code points "
            f"{', '.join(f'U+{c:04X}' for c in where[:8])})")

    pending = identity_role.copy()
    pending[touched] = 0
    for cp, r in roles.items():
        pending[cp] = r

    entry = classes.astype(np.uint32)
    maps: dict = {}

    def map_index(text: str) -> int:
        i = maps.get(text)
        if i is None:
            i = maps[text] = len(maps)
        return i

    def is_space(ch) -> bool:
        return classes[ord(ch)] == CLASS_SPACE

    unexpressed = []

    def encode(cp: int, items: list) -> int:
        chars = [it[0] for it in items if it is not _BREAK]
        text = "".join(chars)
        if not chars:
            if _BREAK in items and comp.has_reorder:
                return MAPPED | (map_index("") << MAP_SHIFT)  # ends a run of marks
            return REMOVE
        # A removed starter between two waiting marks would end their run: the blob cannot
        # say that inside one code point's output.
        for k, it in enumerate(items):
            if it is not _BREAK:
                continue
            left = next((x for x in reversed(items[:k]) if x is not _BREAK), None)
            right = next((x for x in items[k + 1:] if x is not _BREAK), None)
            if (left is None or pending[ord(left[0])]) and \
                    (right is None or pending[ord(right[0])]):
                unexpressed.append(cp)
                break
        if cp >= 0 and text == chr(cp):
            return 0
        if all(is_space(c) and not pending[ord(c)] for c in chars):
            return TO_SPACE
        lo, hi = 0, len(chars)
        while lo < hi and is_space(chars[lo]) and not pending[ord(chars[lo])]:
            lo += 1
        while hi > lo and is_space(chars[hi - 1]) and not pending[ord(chars[hi - 1])]:
            hi -= 1
        if 0 < lo and hi < len(chars):
            inner = "".join(chars[lo:hi])
            return ISOLATE | (0 if inner == chr(cp) else MAPPED | (map_index(inner) << MAP_SHIFT))
        return MAPPED | (map_index(text) << MAP_SHIFT)

    for cp, items in results.items():
        entry[cp] |= encode(cp, items)
    for (rem, chi), items in templates.items():
        sel = bulk & (bulk_remove == rem) & (bulk_chinese == chi)
        cps = np.flatnonzero(sel)
        if not len(cps):
            continue
        if all(it is not _BREAK and isinstance(it[0], _Bulk) for it in items) and \
                len(items) == 1:
            continue  # unchanged
        if not any(it is not _BREAK and isinstance(it[0], _Bulk) for it in items):
            bits = encode(-1, items)  # the output does not contain the code point
            entry[cps] |= bits
            continue
        chars = [it[0] for it in items if it is not _BREAK]
        k = next(i for i, c in enumerate(chars) if isinstance(c, _Bulk))
        head, tail = chars[:k], chars[k + 1:]
        if (len(chars) == len(items) and head and tail and not any(isinstance(c, _Bulk)
                                                                   for c in tail)
                and all(is_space(c) and not pending[ord(c)] for c in head + tail)):
            entry[cps] |= ISOLATE  # padded with pre-tokenizer whitespace
            continue
        for cp in cps.tolist():
            inst = [_BREAK if it is _BREAK else
                    ((chr(cp), it[1]) if isinstance(it[0], _Bulk) else it) for it in items]
            entry[cp] |= encode(cp, inst)
    if unexpressed:
        raise ValueError(
            f"normalizer steps {'+'.join(pipeline.steps)} are not supported: a character "
            f"they remove would end a run of combining marks inside one code point's output "
            f"({', '.join(f'U+{c:04X}' for c in unexpressed[:8])})")

    marks = np.flatnonzero(pending)
    entry[marks] |= MARK_PENDING
    entry[0xD800:0xE000] = 0
    texts = sorted(maps, key=maps.get)  # a map's index is its insertion rank
    enc = [t.encode("utf-8") for t in texts]
    map_offsets = np.zeros(len(enc) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in enc], out=map_offsets[1:])
    map_utf8 = np.frombuffer(b"".join(enc), dtype=np.uint8)
    blob = _pack_norm_blob(entry, map_offsets, map_utf8, marks.astype(np.uint32),
                           pending[marks].astype(np.uint8), _PIPELINE_FLAG)
    produced = {c for t in texts for c in t.encode("utf-8") if c < 128}
    free = tuple(a for a in range(128)
                 if classes[a] == CLASS_SPACE or
                 (a not in produced and entry[a] & (REMOVE | MAPPED | TO_SPACE)))
    return CompiledPipeline(blob, classes, free)


#: NormHeader.flags of a composed pipeline's blob (informational; bits 0-3 are BERT's flags).
_PIPELINE_FLAG = 1 << 4


def whitespace_vanishes(pipeline: Pipeline) -> bool:
    """Whether every White_Space character comes out of the normalizer as pre-tokenizer
    whitespace only (or nothing): then whitespace that an added token with lstrip/rstrip
    takes, or that Strip removes, changes no id."""
    classes = compile_pipeline(pipeline).classes
    comp = _Composer(pipeline.steps, classes)
    ws = np.flatnonzero((load_tables()["props"] & CLASS_MASK) == CLASS_SPACE)
    for cp in ws.tolist():
        for it in comp.simulate(chr(cp)):
            if it is not _BREAK and classes[ord(it[0])] != CLASS_SPACE:
                return False
    return True


def internal_prefix(compiled: "CompiledPipeline", prefix: str, tokens):
    """The prefix the trie should hang continuation pieces under, or None for the real one.

    The kernel's trie shares the node of the continuing-subword prefix between "a word that
    starts with these characters" and "a continuation piece". That is exact only when no word
    can start with the prefix: with ``##`` and BertPreTokenizer, '#' is punctuation, a word
    of its own. Otherwise (WhitespaceSplit keeps "##" as a word, which HF looks up
    literally) the continuation pieces move under one ASCII character that never starts a
    word (pre-tokenizer whitespace, or a character the normalizer never outputs) and that
    no token starts with, else under two punctuation characters.

    The builder computes failure links breadth-first, which is exact when the prefix is one
    byte, or two bytes that sort before the start of every longer token (as "##" does in
    BERT's vocabularies); a prefix that is neither is moved too."""
    classes = compiled.classes
    enc = [t.encode("utf-8", "surrogatepass") for t in tokens]

    def free(p: bytes) -> bool:
        return not any(t.startswith(p) for t in enc)

    def ordered(p: bytes) -> bool:
        # Every token of two bytes or more that does not start with p sorts after p's
        # subtree at each depth, so the links it needs are computed before it.
        if len(p) == 1:
            return True
        if len(p) > 2:
            return False
        return all(t[:2] > p for t in enc if len(t) >= 2 and not t.startswith(p))

    real = prefix.encode("utf-8", "surrogatepass")
    unreachable = any(classes[ord(c)] == CLASS_SPACE for c in prefix) or \
        (len(prefix) >= 2 and classes[ord(prefix[0])] == CLASS_PUNCT)
    if unreachable and ordered(real):
        return None
    for a in compiled.ascii_free:
        if free(bytes([a])):
            return chr(a)
    for a in range(0x21, 0x7F):
        p = bytes([a, a])
        if classes[a] == CLASS_PUNCT and free(p) and ordered(p):
            return chr(a) * 2
    raise ValueError(
        f"the continuing-subword prefix {prefix!r} may start a word of this pipeline (its "
        f"pre-tokenizer neither removes nor isolates its characters), and daskwp finds no "
        f"character to keep continuation pieces apart from such words")
