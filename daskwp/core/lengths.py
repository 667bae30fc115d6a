"""Token counts and the distribution of document lengths in tokens (``daskwp count``,
``.wordpiece.count()``, the length percentiles of batch-job summaries).

A :class:`LengthCounts` is an exact distribution: the distinct lengths and how many documents
have each, so partitions merge without losing anything and percentiles are exact. Its size is
the number of distinct lengths (a few thousand for a large corpus), not the documents.

Percentiles are "nearest rank": the p-th percentile is the smallest length that at least p% of
the documents do not exceed (NumPy's ``percentile(..., method="inverted_cdf")``), always the
length of a real document.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["LengthCounts", "PERCENTILES", "TokenCounts", "count_equal", "count_tokens"]

#: The percentiles reported by default.
PERCENTILES = (50, 90, 95, 99)

#: :meth:`LengthCounts.of` counts lengths with one ``np.bincount`` (no sort) when the longest
#: is at most this or four times the number of lengths (the counts array stays small).
_BINCOUNT_MIN_TOP = 1 << 16


@dataclasses.dataclass
class LengthCounts:
    """Documents per length in tokens: ``values`` (distinct lengths, ascending, int64) and
    ``counts`` (documents of each, int64)."""

    values: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    counts: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def of(cls, lengths) -> "LengthCounts":
        """The distribution of an array of lengths."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if len(lengths) == 0:
            return cls()
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo >= 0 and hi <= max(_BINCOUNT_MIN_TOP, 4 * len(lengths)):
            # one counting pass (the lengths are small integers) instead of a sort
            per_length = np.bincount(lengths)
            values = np.flatnonzero(per_length)
            return cls(values.astype(np.int64), per_length[values].astype(np.int64))
        values, counts = np.unique(lengths, return_counts=True)
        return cls(values.astype(np.int64), counts.astype(np.int64))

    @classmethod
    def of_rows(cls, logid, owned, doc_row_offsets=None) -> "LengthCounts":
        """The distribution of document lengths from rows of windows: each row's logID and
        the tokens it owns (``stop - start + 1``). Every document has a row (an empty one a
        row owning none); rows may come in any order.

        ``doc_row_offsets`` (``documents + 1`` entries, as the tokenizer's output gives
        them): the rows are in document order, document ``d``'s rows
        ``doc_row_offsets[d]:doc_row_offsets[d + 1]``; its length is their sum (``logid``
        is then not read)."""
        if doc_row_offsets is not None:
            starts = np.asarray(doc_row_offsets, dtype=np.int64)
            owned = np.asarray(owned, dtype=np.int64)
            if len(starts) < 2:
                return cls()
            rows = np.diff(starts)
            if len(rows) == len(owned) and (rows == 1).all():   # one row per document
                return cls.of(owned)
            first = starts[:-1] - starts[0]
            if (rows > 0).all():
                return cls.of(np.add.reduceat(owned, first))
            lengths = np.zeros(len(rows), dtype=np.int64)   # documents without a row: 0
            has = rows > 0
            if has.any():
                lengths[has] = np.add.reduceat(owned, first[has])
            return cls.of(lengths)
        logid = np.asarray(logid, dtype=np.int64)
        if len(logid) == 0:
            return cls()
        return cls.of(np.bincount(logid - logid.min(), weights=owned).astype(np.int64))

    @classmethod
    def merge(cls, parts) -> "LengthCounts":
        """The distribution of several (of partitions, files, ...) together."""
        parts = [p for p in parts if len(p.values)]
        if not parts:
            return cls()
        values = np.concatenate([p.values for p in parts])
        counts = np.concatenate([p.counts for p in parts])
        uniq, inv = np.unique(values, return_inverse=True)
        return cls(uniq.astype(np.int64), np.bincount(inv, weights=counts,
                                                      minlength=len(uniq)).astype(np.int64))

    def to_json(self) -> dict:
        return {"values": self.values.tolist(), "counts": self.counts.tolist()}

    @classmethod
    def from_json(cls, obj) -> "LengthCounts":
        if not obj:
            return cls()
        return cls(np.asarray(obj["values"], np.int64), np.asarray(obj["counts"], np.int64))

    @property
    def documents(self) -> int:
        return int(self.counts.sum())

    @property
    def tokens(self) -> int:
        return int(np.dot(self.values, self.counts)) if len(self.values) else 0

    def percentile(self, q: float) -> int | None:
        """The nearest-rank ``q``-th percentile (``0 < q <= 100``); None without documents."""
        if not 0 < q <= 100:
            raise ValueError(f"a percentile must be in (0, 100], got {q!r}")
        n = self.documents
        if n == 0:
            return None
        rank = int(np.ceil(q / 100 * n))   # the rank-th smallest length, 1-based
        return int(self.values[np.searchsorted(np.cumsum(self.counts), max(rank, 1))])

    def summary(self, percentiles=PERCENTILES) -> dict:
        """``{"min", "p50", ..., "max", "mean"}`` (None without documents): what job summaries
        record."""
        n = self.documents
        out = {"min": int(self.values[0]) if n else None}
        out.update({f"p{q:g}": self.percentile(q) for q in percentiles})
        out["max"] = int(self.values[-1]) if n else None
        out["mean"] = round(self.tokens / n, 2) if n else None
        return out

    def share_at_most(self, length: int) -> float:
        """The share of documents of at most ``length`` tokens."""
        n = self.documents
        return float(self.counts[self.values <= length].sum() / n) if n else 0.0

    def histogram(self) -> list[tuple[int, int, int]]:
        """``(low, high, documents)`` per power-of-two bin of lengths: 0, 1, 2-3, 4-7, ...
        up to the longest document."""
        if self.documents == 0:
            return []
        top = int(self.values[-1])
        edges = [0, 1] + [1 << k for k in range(1, max(top, 1).bit_length() + 1)]
        out = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            sel = (self.values >= lo) & (self.values < hi)
            out.append((lo, hi - 1, int(self.counts[sel].sum())))
            if hi > top:
                break
        return out


@dataclasses.dataclass
class TokenCounts:
    """Documents, tokens (WordPiece tokens of the text, no special tokens), ``[UNK]`` among
    them, UTF-8 text bytes and the distribution of document lengths in tokens."""

    documents: int = 0
    tokens: int = 0
    unknown_tokens: int = 0
    text_bytes: int = 0
    lengths: LengthCounts = dataclasses.field(default_factory=LengthCounts)

    @property
    def unknown_token_rate(self) -> float:
        return self.unknown_tokens / self.tokens if self.tokens else 0.0

    @classmethod
    def merge(cls, parts) -> "TokenCounts":
        parts = list(parts)
        return cls(sum(p.documents for p in parts), sum(p.tokens for p in parts),
                   sum(p.unknown_tokens for p in parts), sum(p.text_bytes for p in parts),
                   LengthCounts.merge(p.lengths for p in parts))

    def to_json(self) -> dict:
        return {"documents": self.documents, "tokens": self.tokens,
                "unknown_tokens": self.unknown_tokens,
                "unknown_token_rate": self.unknown_token_rate, "text_bytes": self.text_bytes,
                "length_percentiles": self.lengths.summary(),
                "length_counts": self.lengths.to_json()}


#: Ids compared at a time by :func:`count_equal` (its boolean buffer stays in cache).
_COUNT_STEP = 1 << 18


def count_equal(values, value: int) -> int:
    """How many of ``values`` (a 1-D NumPy array) equal ``value``, compared in steps of
    :data:`_COUNT_STEP` into one reused buffer (no temporary as large as ``values``: a
    token-sized bool array was fresh memory, page faults included, per partition)."""
    values = np.asarray(values)
    if len(values) <= _COUNT_STEP:
        return int(np.count_nonzero(values == value))
    buf = np.empty(_COUNT_STEP, dtype=bool)
    n = 0
    for i in range(0, len(values), _COUNT_STEP):
        part = values[i:i + _COUNT_STEP]
        hit = buf[:len(part)]
        np.equal(part, value, out=hit)
        n += int(np.count_nonzero(hit))
    return n


def count_tokens(tokenizer, texts, text_bytes: int = 0) -> TokenCounts:
    """:class:`TokenCounts` of ``texts`` (anything ``tokenizer.encode`` takes), from
    ``tokenizer.count_lengths``: the documents' lengths in tokens and the ``[UNK]`` total,
    counted without making the token ids on the CPU (on the GPU the counts are made there
    and only they come back)."""
    lengths, unknown = tokenizer.count_lengths(texts)
    lengths = np.asarray(lengths, dtype=np.int64)
    return TokenCounts(len(lengths), int(lengths.sum()), int(unknown), text_bytes,
                       LengthCounts.of(lengths))
