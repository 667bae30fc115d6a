"""Compiling a :class:`Pipeline` into a normalization blob: BERT's own pipeline takes the bundled
tables, any other is composed code point by code point (:mod:`.composer`), checked for what
one pass cannot carry (a character sorting as two classes, a removed starter inside one
code point's output), encoded as entries and packed. Also what tokenizers built on a
compiled pipeline ask of it: whether whitespace vanishes, and where the trie keeps
continuation pieces.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .bert import norm_blob
from .blob import (CLASS_MASK, CLASS_PUNCT, CLASS_SPACE, ISOLATE, MAPPED, MAP_SHIFT,
                   MARK_PENDING, NORM_BLOBS, N_CODEPOINTS, P_CHINESE, P_REMOVE, P_TO_SPACE,
                   REMOVE, TO_SPACE, load_tables, pack_norm_blob)
from .composer import (BulkStandIn, Composer, NotPerCodePoint, RUN_BREAK, load_pipeline_tables,
                       split_classes)
from .pipeline import Pipeline


def _wait_class(eff) -> int:
    """How an output character waits, from its class at the last reordering (``eff``, None
    before any): 0, an ordinary character; k > 0, a waiting mark that sorts by class k."""
    return eff or 0


def compile_pipeline(pipeline: Pipeline) -> "CompiledPipeline":
    """The normalization blob of ``pipeline`` and the class of every output character
    (cached per pipeline)."""
    return NORM_BLOBS.get_or_create(("pipeline", pipeline),
                                     lambda: _compile_pipeline(pipeline))


class CompiledPipeline:
    """``blob`` (bytes, model.hpp's layout) and ``classes`` (uint8[0x110000]: the
    pre-tokenizer class of each code point as an output character)."""

    __slots__ = ("blob", "classes", "ascii_free", "digest")

    def __init__(self, blob: bytes, classes: np.ndarray, ascii_free: tuple):
        self.blob = blob
        #: 16-byte digest of ``blob`` (the key of per-vocabulary choices made for it)
        self.digest = hashlib.blake2b(blob, digest_size=16).digest()
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
    classes = split_classes(pipeline.splits)
    comp = Composer(pipeline.steps, classes)
    props = load_tables()["props"]
    P = load_pipeline_tables()

    # Code points some step maps (simulated one by one), and the two large sets only
    # clean_text and handle_chinese_chars touch (simulated once each, as a stand-in).
    small: set = set()
    bulk_remove = np.zeros(N_CODEPOINTS, dtype=bool)
    bulk_chinese = np.zeros(N_CODEPOINTS, dtype=bool)
    for step in pipeline.steps:
        if step == "clean_text":
            small.update(np.flatnonzero(props & P_TO_SPACE).tolist())
            bulk_remove |= (props & P_REMOVE) != 0
        elif step == "chinese":
            bulk_chinese |= (props & P_CHINESE) != 0
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
        except NotPerCodePoint as e:
            bad.append((cp, str(e)))
    templates = {}
    for rem in (False, True):
        for chi in (False, True):
            if rem and chi:
                continue
            templates[(rem, chi)] = comp.simulate(BulkStandIn(rem, chi))

    # Wait classes of output characters: a waiting mark of class k (k > 0) or an ordinary one.
    wait_classes: dict = {}
    conflicts = []

    def note_wait_class(ch, eff):
        r = _wait_class(eff) if comp.has_reorder else 0
        old = wait_classes.setdefault(ord(ch), r)
        if old != r:
            conflicts.append(ord(ch))

    for items in results.values():
        for it in items:
            if it is not RUN_BREAK:
                note_wait_class(*it)
    for items in templates.values():
        for it in items:
            if it is not RUN_BREAK and not isinstance(it[0], BulkStandIn):
                note_wait_class(*it)
    # Code points no step touches are their own output (a mark waits by its own class).
    ccc_arr = np.zeros(N_CODEPOINTS, dtype=np.uint8)
    ccc_arr[list(P["ccc"])] = list(P["ccc"].values())
    identity_wait_class = ccc_arr if comp.has_reorder else np.zeros(N_CODEPOINTS, dtype=np.uint8)
    touched = np.zeros(N_CODEPOINTS, dtype=bool)
    touched[list(small)] = True
    touched |= bulk
    for cp, r in list(wait_classes.items()):
        if not touched[cp] and identity_wait_class[cp] != r:
            conflicts.append(cp)
    if conflicts or bad:
        where = sorted(set(conflicts) | {cp for cp, _ in bad})
        detail = bad[0][1] if bad else "a character would have to sort as two classes"
        raise ValueError(
            f"normalizer steps {'+'.join(pipeline.steps)} are not supported: their result "
            f"cannot be computed one code point at a time ({detail}; code points "
            f"{', '.join(f'U+{c:04X}' for c in where[:8])})")

    pending = identity_wait_class.copy()
    pending[touched] = 0
    for cp, r in wait_classes.items():
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
        chars = [it[0] for it in items if it is not RUN_BREAK]
        text = "".join(chars)
        if not chars:
            if RUN_BREAK in items and comp.has_reorder:
                return MAPPED | (map_index("") << MAP_SHIFT)  # ends a run of marks
            return REMOVE
        # A removed starter between two waiting marks would end their run: the blob cannot
        # say that inside one code point's output.
        for k, it in enumerate(items):
            if it is not RUN_BREAK:
                continue
            left = next((x for x in reversed(items[:k]) if x is not RUN_BREAK), None)
            right = next((x for x in items[k + 1:] if x is not RUN_BREAK), None)
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
        if all(it is not RUN_BREAK and isinstance(it[0], BulkStandIn) for it in items) and \
                len(items) == 1:
            continue  # unchanged
        if not any(it is not RUN_BREAK and isinstance(it[0], BulkStandIn) for it in items):
            bits = encode(-1, items)  # the output does not contain the code point
            entry[cps] |= bits
            continue
        chars = [it[0] for it in items if it is not RUN_BREAK]
        k = next(i for i, c in enumerate(chars) if isinstance(c, BulkStandIn))
        head, tail = chars[:k], chars[k + 1:]
        if (len(chars) == len(items) and head and tail and not any(isinstance(c, BulkStandIn)
                                                                   for c in tail)
                and all(is_space(c) and not pending[ord(c)] for c in head + tail)):
            entry[cps] |= ISOLATE  # padded with pre-tokenizer whitespace
            continue
        for cp in cps.tolist():
            inst = [RUN_BREAK if it is RUN_BREAK else
                    ((chr(cp), it[1]) if isinstance(it[0], BulkStandIn) else it) for it in items]
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
    blob = pack_norm_blob(entry, map_offsets, map_utf8, marks.astype(np.uint32),
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
    comp = Composer(pipeline.steps, classes)
    ws = np.flatnonzero((load_tables()["props"] & CLASS_MASK) == CLASS_SPACE)
    for cp in ws.tolist():
        for it in comp.simulate(chr(cp)):
            if it is not RUN_BREAK and classes[ord(it[0])] != CLASS_SPACE:
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
