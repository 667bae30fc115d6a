"""Post-processors: the special tokens and type ids around the sequences of a row
(docs/design.md §1.7, §2.1, §2.8).

A ``tokenizer.json``'s ``post_processor`` decides what HF adds around the tokens of a text
(``single``) or a pair (``pair``) and the type id of every position. daskwp's rows express
one shape: some special tokens, the first sequence, some special tokens, the second
sequence, some special tokens, each special token and each sequence with its own type id.
:func:`read_post_processor` reads every post-processor of that shape:

* none (``null``, or an empty ``Sequence``): nothing added; type ids 0 on the first
  sequence, 1 on the second (HF's default processing);
* ``BertProcessing``: ``cls $A sep`` / ``cls $A sep $B:1 sep:1``;
* ``TemplateProcessing`` whose single template holds ``$A`` once and whose pair template
  holds ``$A`` then ``$B`` once each, with any special tokens (each may stand for several
  ids) and type ids around them;
* a ``Sequence`` of processors holding at most one of those (HF runs the others, none here).

and refuses the rest by name (``RobertaProcessing``, ``ByteLevel``, templates with ``$B``
before ``$A`` or a sequence twice, ...). A :class:`PostProcessor` is the parsed description
(the ids a template names, or "the vocabulary's ``cls_token`` / ``sep_token``" for BERT's
frame); :meth:`PostProcessor.frame` gives the :class:`Frame` a fill uses: the ids and type
ids of each group, with or without special tokens (``add_special_tokens=False`` drops the
special tokens and keeps the sequences' type ids, as HF's templates do).
"""

from __future__ import annotations

import dataclasses
import json

__all__ = ["BERT", "Frame", "PostProcessor", "frame_for", "frame_ids", "read_post_processor"]

#: Type ids are stored in the attention mask's dtype (int8 with ``mask_dtype="int8"``).
MAX_TYPE_ID = 127
#: Post-processors daskwp refuses, and why.
_REFUSED = {
    "RobertaProcessing": "it frames pairs as <s> A </s></s> B </s> and trims offsets",
    "ByteLevel": "it rewrites the offsets of byte-level tokens",
}


@dataclasses.dataclass(frozen=True)
class Frame:
    """The special tokens and type ids around the sequences of a row, resolved to ids.

    Single texts: ``pre`` ``$A`` ``post``; pairs: ``pair_pre`` ``$A`` ``pair_mid`` ``$B``
    ``pair_post``. Each group is a tuple of ``(id, type_id)``; ``a_type`` / ``b_type`` the
    type id of the first / second sequence's tokens."""

    pre: tuple = ()
    a_type: int = 0
    post: tuple = ()
    pair_pre: tuple = ()
    pair_a_type: int = 0
    pair_mid: tuple = ()
    pair_b_type: int = 1
    pair_post: tuple = ()

    @property
    def n_single(self) -> int:
        """Special tokens a single text's row holds."""
        return len(self.pre) + len(self.post)

    @property
    def native_single(self):
        """``(cls_id, sep_id)`` when single rows are what the native fill writes (one token
        each side, or none: ``(-1, -1)``, all type ids 0), else None."""
        types = [t for _, t in self.pre + self.post] + [self.a_type]
        if any(types):
            return None
        if not self.pre and not self.post:
            return (-1, -1)
        if len(self.pre) == 1 and len(self.post) == 1:
            return (self.pre[0][0], self.post[0][0])
        return None

    def single_groups(self) -> tuple:
        """The groups of a single text as a pair with an empty second sequence."""
        return self.pre, self.a_type, self.post, 0, ()

    def pair_groups(self) -> tuple:
        return self.pair_pre, self.pair_a_type, self.pair_mid, self.pair_b_type, \
            self.pair_post


@dataclasses.dataclass(frozen=True)
class PostProcessor:
    """A post-processor daskwp runs (:func:`read_post_processor`).

    ``kind``: ``"bert"`` (``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B:1 [SEP]:1`` with the
    vocabulary's ``cls_token`` and ``sep_token``), ``"none"`` or ``"template"`` (``single``
    and ``pair``: pieces ``("A", type_id)``, ``("B", type_id)`` or ``(ids, type_id)`` with
    the ids of a special token). ``name``: how the file spells it, for messages."""

    kind: str = "bert"
    single: tuple = ()
    pair: tuple = ()
    name: str = "BERT's [CLS] $A [SEP]"

    def counts(self, add_special_tokens: bool) -> tuple[int, int]:
        """(special tokens of a single row, of a pair's row)."""
        if not add_special_tokens or self.kind == "none":
            return 0, 0
        if self.kind == "bert":
            return 2, 3
        return (sum(len(p[0]) for p in self.single if p[0] not in ("A", "B")),
                sum(len(p[0]) for p in self.pair if p[0] not in ("A", "B")))

    def frame(self, vocab, add_special_tokens: bool) -> Frame:
        """The :class:`Frame` of this post-processor with ``vocab`` (BERT's frame looks up
        ``cls_token`` and ``sep_token`` only with special tokens: a clear error when the
        vocabulary lacks one)."""
        if self.kind == "none":
            return Frame()
        if self.kind == "bert":
            if not add_special_tokens:
                return Frame()
            cls, sep = vocab.cls_id, vocab.sep_id
            return Frame(((cls, 0),), 0, ((sep, 0),), ((cls, 0),), 0, ((sep, 0),), 1,
                         ((sep, 1),))
        single = _groups(self.single, add_special_tokens)
        pair = _groups(self.pair, add_special_tokens)
        return Frame(single[0], single[1], single[2], pair[0], pair[1], pair[2], pair[3],
                     pair[4])


#: The frame of a ``vocab.txt`` (and of the option's default): BERT's, from the names.
BERT = PostProcessor()


def _groups(pieces, special: bool) -> tuple:
    """(pre, A type, mid, B type, post) of a template's pieces."""
    out, cur, types = [], [], {}
    for what, type_id in pieces:
        if what in ("A", "B"):
            out.append(tuple(cur))
            cur = []
            types[what] = type_id
        elif special:
            cur.extend((i, type_id) for i in what)
    out.append(tuple(cur))
    if len(out) == 2:   # single: pre, post
        return out[0], types["A"], out[1], 0, ()
    return out[0], types["A"], out[1], types["B"], out[2]


def describe(spec) -> str:
    """A post-processor's name as a message shows it (``Sequence[...]`` spelled out)."""
    if spec is None:
        return "none"
    if isinstance(spec, dict) and spec.get("type") == "Sequence":
        return "Sequence[" + ", ".join(describe(x) for x in spec.get("processors") or []) \
            + "]"
    return str(spec.get("type")) if isinstance(spec, dict) else repr(spec)


def _type_id(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or \
            not 0 <= value <= MAX_TYPE_ID:
        raise ValueError(f"{where}: type id {value!r} is not supported (daskwp stores type "
                         f"ids in the attention mask's dtype: integers in [0, "
                         f"{MAX_TYPE_ID}])")
    return value


def _template(spec: dict, where: str) -> PostProcessor:
    specials = spec.get("special_tokens") or {}
    if not isinstance(specials, dict):
        raise ValueError(f"{where}: its special_tokens are not a mapping: {specials!r:.80}")

    def pieces(key: str, want: tuple):
        items = spec.get(key)
        if not isinstance(items, list):
            raise ValueError(f"{where}: its {key!r} template is not a list: {items!r:.80}")
        out, seen = [], []
        for it in items:
            if isinstance(it, dict) and isinstance(it.get("Sequence"), dict):
                sid = it["Sequence"].get("id")
                if sid not in ("A", "B"):
                    raise ValueError(f"{where}: its {key!r} template names sequence {sid!r}")
                seen.append(sid)
                out.append((sid, _type_id(it["Sequence"].get("type_id", 0),
                                          f"{where}, {key} ${sid}")))
            elif isinstance(it, dict) and isinstance(it.get("SpecialToken"), dict):
                name = it["SpecialToken"].get("id")
                entry = specials.get(name)
                ids = entry.get("ids") if isinstance(entry, dict) else None
                if not isinstance(ids, list) or not ids or not all(
                        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**31 - 1
                        for i in ids):
                    raise ValueError(f"{where}: the special token {name!r} of its {key!r} "
                                     f"template has no ids in special_tokens "
                                     f"({entry!r:.80})")
                out.append((tuple(ids), _type_id(it["SpecialToken"].get("type_id", 0),
                                                 f"{where}, {key} {name}")))
            else:
                raise ValueError(f"{where}: its {key!r} template holds {it!r:.80}, neither "
                                 f"a Sequence nor a SpecialToken")
        if tuple(seen) != want:
            shape = " ".join("$" + s for s in seen) or "no sequence"
            raise ValueError(
                f"{where}: its {key!r} template holds {shape}; daskwp's rows hold "
                f"{' then '.join('$' + s for s in want)}, each once (special tokens "
                f"anywhere around them)")
        return tuple(out)

    single = pieces("single", ("A",))
    pair = pieces("pair", ("A", "B"))
    return PostProcessor("template", single, pair, "TemplateProcessing")


def _bert_processing(spec: dict, where: str) -> PostProcessor:
    pieces = {}
    for key in ("cls", "sep"):
        v = spec.get(key)
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
                and isinstance(v[1], int) and not isinstance(v[1], bool)
                and 0 <= v[1] < 2**31 - 1):
            raise ValueError(f"{where}: its {key!r} is not a [token, id] pair: {v!r:.80}")
        pieces[key] = (v[1],)
    cls, sep = pieces["cls"], pieces["sep"]
    return PostProcessor("template", ((cls, 0), ("A", 0), (sep, 0)),
                         ((cls, 0), ("A", 0), (sep, 0), ("B", 1), (sep, 1)),
                         "BertProcessing")


def read_post_processor(spec, where: str = "tokenizer") -> PostProcessor:
    """The :class:`PostProcessor` of a tokenizers ``post_processor`` (a mapping, its JSON
    text, or None / ``"null"``: none). Refused with a ``ValueError`` naming ``where`` and the
    processor: what daskwp's rows cannot express (module docstring)."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    where = f"{where}: the post_processor ({describe(spec)})"
    found = []

    def walk(s):
        if s is None:
            return
        if not isinstance(s, dict):
            raise ValueError(f"{where} is not a tokenizers JSON object: {s!r:.80}")
        t = s.get("type")
        if t == "Sequence":
            items = s.get("processors")
            if not isinstance(items, list):
                raise ValueError(f"{where}: a Sequence without a processors list")
            for x in items:
                walk(x)
        elif t == "TemplateProcessing":
            found.append(_template(s, where))
        elif t == "BertProcessing":
            found.append(_bert_processing(s, where))
        elif t in _REFUSED:
            raise ValueError(f"{where} is not supported: daskwp's rows cannot express "
                             f"{t} ({_REFUSED[t]}); use BertProcessing, TemplateProcessing "
                             f"or none")
        else:
            raise ValueError(f"{where} is not supported: daskwp runs BertProcessing, "
                             f"TemplateProcessing, none, and a Sequence of at most one of "
                             f"them; got {t!r}")

    walk(spec)
    if len(found) > 1:
        raise ValueError(f"{where} is not supported: it applies {len(found)} templates one "
                         f"after the other; daskwp runs at most one")
    return found[0] if found else PostProcessor("none", name="none")


def frame_ids(vocab, p) -> tuple[int, int]:
    """(cls_id, sep_id) that the native fill frames single rows with (-1: none), for the
    window parameters ``p`` (:class:`~daskwp.core.windows.WindowParams`)."""
    if not p.add_special_tokens:
        return -1, -1
    if p.frame is not None:
        return p.frame.native_single
    return vocab.cls_id, vocab.sep_id


def frame_for(vocab, p) -> Frame:
    """The :class:`Frame` of the window parameters ``p``: theirs, else BERT's from
    ``vocab`` (with ``p.add_special_tokens``)."""
    return p.frame if p.frame is not None else BERT.frame(vocab, p.add_special_tokens)
