"""Per-position outputs of ``tok(...)`` besides ``input_ids`` / ``attention_mask``
(docs/design.md §3.3): their dtypes and the values padding positions hold. The one table the
bucket fill (:mod:`daskwp.core.buckets`), the frames, the parts, the jobs and
``read_tokenized`` all read.
"""

from __future__ import annotations

import dataclasses

__all__ = ["BY_NAME", "POSITION_OUTPUTS", "OutputMapping", "PositionOutput", "ResultMapping",
           "position_output"]


@dataclasses.dataclass(frozen=True)
class PositionOutput:
    """A per-position output of ``tok(...)`` besides ``input_ids`` / ``attention_mask``
    (docs/design.md §3.3): one value (``values`` of them) per token position of a row.

    ``dtype``: what the tokenizer returns ("mask": the dtype of ``attention_mask``);
    ``pad``: its value on padding positions (what ``daskwp.read_tokenized`` fills in when it
    pads ragged rows, as ``tok(..., padding="max_length")`` does); ``values``: values per
    position (2 for ``offset_mapping``'s ``[begin, end)``), stored flat in the row's list.
    """

    name: str
    dtype: str
    pad: int
    values: int = 1


#: Every per-position output that the frames, parts, jobs and ``read_tokenized`` carry, in
#: column order: the ONE list (a new output needs a row here and nothing else; an output
#: missing here is still carried, with pad 0 and its values per position taken from the
#: data).
POSITION_OUTPUTS = (
    PositionOutput("token_type_ids", "mask", 0),
    PositionOutput("sequence_ids", "int8", -1),
    PositionOutput("special_tokens_mask", "mask", 1),
    PositionOutput("word_ids", "int32", -1),
    PositionOutput("offset_mapping", "int64", 0, 2),
)
BY_NAME = {o.name: o for o in POSITION_OUTPUTS}


def position_output(name: str) -> PositionOutput:
    """The :class:`PositionOutput` of ``name`` (one not in :data:`POSITION_OUTPUTS`: pad 0,
    one value per position)."""
    return BY_NAME.get(name) or PositionOutput(name, "int32", 0)


class OutputMapping:
    """The mapping interface every result of daskwp shares (as HF's ``BatchEncoding`` and
    :class:`~daskwp.core.ragged.BatchWindows`): ``r["input_ids"]``, ``"token_type_ids" in
    r``, ``r.keys()``, ``r.items()``, ``r.values()``, ``r.get(key, default)``. A subclass
    gives :meth:`keys` (its output names) and :meth:`output` (one output by name); an
    unknown key is a ``KeyError`` naming the keys there are."""

    def keys(self) -> list:
        raise NotImplementedError

    def output(self, key: str):
        raise NotImplementedError

    def __getitem__(self, key):
        if not isinstance(key, str) or key not in self.keys():
            raise KeyError(f"{type(self).__name__} has no output {key!r}; keys: "
                           f"{', '.join(self.keys())}")
        return self.output(key)

    def __contains__(self, key) -> bool:
        return isinstance(key, str) and key in self.keys()

    def __iter__(self):
        return iter(self.keys())

    def get(self, key, default=None):
        return self[key] if key in self else default

    def items(self) -> list:
        return [(k, self[k]) for k in self.keys()]

    def values(self) -> list:
        return [self[k] for k in self.keys()]


class ResultMapping(OutputMapping):
    """:class:`OutputMapping` of a result whose outputs are attributes (the accessors'):
    ``input_ids``, ``attention_mask``, ``metadata`` and each per-position output of its
    ``position_outputs``; ``r[key]`` is ``getattr(r, key)``."""

    def keys(self) -> list:
        return ["input_ids", "attention_mask", "metadata", *self.position_outputs]

    def output(self, key: str):
        return getattr(self, key)
