"""HuggingFace tokenizers' truncation and padding rules as index ranges (docs/design.md §3.6).

``Encoding::truncate`` (:func:`truncate_windows`: the kept window of a sequence and its
overflowing windows, right or left, with stride), ``truncate_encodings`` (:func:`truncate_pair`:
the three strategies for a text or a pair, and their two errors), ``Encoding::merge_with``'s
row order for pairs (:func:`merged_rows`) and one padded row (:func:`padded_row`); and
transformers 4's own Python rules for ids (``truncate_sequences``: :func:`cut_one` and
:func:`longest_first_cuts`), which differ from HF tokenizers' (one overflow of the removed
tokens and ``stride`` more, no stride check, nothing cut where the sequence is too short). Plain
functions on lengths, so the drop-in's general path can cut the ids, offsets and word ids of
a row with the same ranges; HF's panics are ``ValueError`` here.
"""

from __future__ import annotations

__all__ = ["cut_one", "longest_first_cuts", "merged_rows", "padded_row", "truncate_pair",
           "truncate_windows"]


def truncate_windows(n: int, max_len: int, stride: int, direction: str):
    """``Encoding::truncate(max_len, stride, direction)`` of a sequence of ``n`` tokens: the
    ``(start, stop)`` ranges of the kept part, then of its overflows."""
    if max_len >= n:
        return [(0, n)]
    if max_len == 0:
        return [(0, 0), (0, n)]
    if stride >= max_len:
        raise ValueError(
            f"stride={stride} must be smaller than the {max_len} tokens a sequence keeps "
            f"(max_length less the special tokens, and for pairs less the other sequence); "
            f"HuggingFace tokenizers panics here (`stride` must be strictly less than "
            f"`max_len={max_len}`)")
    step = max_len - stride
    out = []
    if direction == "right":
        for start in range(0, n, step):
            stop = min(start + max_len, n)
            out.append((start, stop))
            if stop == n:
                break
    else:
        for last in range(n - 1, -1, -step):
            stop = last + 1
            start = max(0, stop - max_len)
            out.append((start, stop))
            if start == 0:
                break
    return out


def truncate_pair(na: int, nb: int | None, strategy: str | None, max_len: int | None,
                   stride: int, direction: str):
    """``truncate_encodings``: the windows of the first and (for pairs) second sequence."""
    whole_a = [(0, na)]
    whole_b = None if nb is None else [(0, nb)]
    if strategy is None or max_len is None:
        return whole_a, whole_b
    if max_len == 0:
        return (truncate_windows(na, 0, stride, direction),
                None if nb is None else truncate_windows(nb, 0, stride, direction))
    total = na + (nb or 0)
    if total <= max_len:
        return whole_a, whole_b
    to_remove = total - max_len
    if strategy == "longest_first":
        if nb is None:
            return truncate_windows(na, total - to_remove, stride, direction), None
        n1, n2, swap = na, nb, False
        if n1 > n2:
            n1, n2, swap = n2, n1, True
        n2 = n1 if n1 > max_len else max(n1, max_len - n1)
        if n1 + n2 > max_len:
            n1 = max_len // 2
            n2 = n1 + max_len % 2
        if swap:
            n1, n2 = n2, n1
        return (truncate_windows(na, n1, stride, direction), truncate_windows(nb, n2, stride, direction))
    if strategy == "only_second" and nb is None:
        raise ValueError("Truncation error: Second sequence not provided (truncation="
                         "'only_second' needs a text_pair)")
    target = na if strategy == "only_first" else nb
    if target <= to_remove:
        raise ValueError(
            f"Truncation error: Sequence to truncate too short to respect the provided "
            f"max_length (truncation={strategy!r}: the sequences have {na} and {nb} tokens, "
            f"{max_len} fit)")
    keep = truncate_windows(target, target - to_remove, stride, direction)
    return (keep, whole_b) if strategy == "only_first" else (whole_a, keep)


def padded_row(row: list, fill, d: int, side: str) -> list:
    """``row`` with ``d`` copies of ``fill`` on ``side`` ("right" or "left")."""
    return row + [fill] * d if side == "right" else [fill] * d + row


def merged_rows(wa, wb):
    """The rows ``Encoding::merge_with`` makes of two sides' windows (primary first, then
    transformers' flat ``[encoding] + encoding.overflowing``)."""
    if wb is None:
        return [(a, None) for a in wa]
    rows = [(wa[0], wb[0])]
    for a in wa[1:]:
        for b in wb:
            rows.append((a, b))
    for b in wb[1:]:
        rows.append((wa[0], b))
    return rows


def cut_one(n: int, remove: int, stride: int, side: str):
    """transformers 4's cut of one sequence of ``n`` tokens by ``remove`` > 0 tokens
    (``truncate_sequences``' ``only_first`` / ``only_second``, and ``longest_first`` without a
    pair): ``((start, stop) kept, (start, stop) overflowing)``, the overflow being the removed
    tokens and the ``stride`` tokens next to them (at most ``n``); None where ``n <= remove``
    (transformers 4 then logs an error and cuts nothing)."""
    if n <= remove:
        return None
    window = min(n, stride + remove)
    if side == "left":
        return (remove, n), (0, window)
    return (0, n - remove), (n - window, n)


def longest_first_cuts(na: int, nb: int, remove: int, side: str):
    """transformers 4's ``longest_first`` for a pair: the kept ``(start, stop)`` of each
    sequence when ``remove`` tokens go, first from the longer one down to the other's length,
    then half from each (the extra one from the second); a side may be cut to nothing."""
    first = min(abs(nb - na), remove)
    second = remove - first
    if na > nb:
        cut_a, cut_b = first + second // 2, second - second // 2
    else:
        cut_a, cut_b = second // 2, first + second - second // 2

    def kept(n, cut):
        return (min(cut, n), n) if side == "left" else (0, max(0, n - cut))
    return kept(na, cut_a), kept(nb, cut_b)
