"""A normalizer and pre-tokenizer reduced to a :class:`Pipeline` (steps and splits), the
hashable key its compiled blob is cached under. :func:`make_pipeline` builds one from
``tokenizer.json`` objects, and folds a Strip normalizer away where the pre-tokenizer drops
the whitespace it would remove anyway.
"""

from __future__ import annotations

import itertools

import numpy as np

from .blob import CLASS_MASK, CLASS_SPACE, load_tables
from .composer import Composer, RUN_BREAK, split_classes
from .steps import BERT_SPLITS, bert_steps, normalizer_steps, pre_tokenizer_splits


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
        classes = split_classes(splits)
        ws = np.flatnonzero((load_tables()["props"] & CLASS_MASK) == CLASS_SPACE)
        for at, step in enumerate(steps):
            if step != "strip":
                continue
            comp = Composer(tuple(x for x in steps[at + 1:] if x != "strip"), classes)
            for cp in ws.tolist():
                items = comp.simulate(chr(cp))
                if any(it is not RUN_BREAK and classes[ord(it[0])] != CLASS_SPACE
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
