"""Per-position outputs of ``tok(...)`` besides ``input_ids`` / ``attention_mask``
(docs/design.md §3.3): their dtypes and the values padding positions hold. The one table the
bucket fill (:mod:`daskwp.core.buckets`), the frames, the parts, the jobs and
``read_tokenized`` all read.
"""

from __future__ import annotations

import dataclasses

__all__ = ["BY_NAME", "POSITION_OUTPUTS", "PositionOutput", "position_output"]


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
