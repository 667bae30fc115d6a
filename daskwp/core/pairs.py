"""Sentence pairs and question-answering windows, HuggingFace-exact (docs/design.md §2.8).

``tok(texts, text_pair=others, ...)`` gives rows ``[CLS] a [SEP] b [SEP]`` (``a b`` without
special tokens), ``token_type_ids`` 0 on the first segment (its [CLS] and [SEP] included) and 1
on the second, ``sequence_ids`` 0 / 1 on the sequences' tokens and -1 elsewhere, as HF's
``Encoding``. ``M = max_length - 3`` with special tokens (else ``max_length``) tokens are
shared by the two sequences.

What HuggingFace ``tokenizers`` does (``utils/truncation.rs::truncate_encodings``,
``Encoding::truncate``, ``Encoding::merge_with``), with ``na + nb > M``:

* ``only_first`` / ``only_second``: the named side is cut to ``M - n_other`` tokens, its
  overflow into strided windows (``Encoding::truncate``: starts ``0, step, 2 step, ...``,
  ``step = room - stride``, the last one reaching the end); each row repeats the other side
  whole. ``n_other >= M`` is HF's "Sequence to truncate too short" error; ``stride >= room``
  is a panic in HF. Both are a ``ValueError`` here naming both lengths.
* ``longest_first``: the longer side is cut to ``max(n1, M - n1)``, or both to ``M // 2`` and
  ``M // 2 + M % 2``; ``merge_with`` then pairs **every** window of one side with every window
  of the other (and nests duplicates in the overflows' own overflows). That is no windowing of
  a document (tokens appear in many rows, in no order a stitch can use), so with overflow
  ``longest_first`` is refused; without overflow its one row is HF's first encoding exactly.

Rows here: overflow (``truncation=False``, or a strategy with
``return_overflowing_tokens=True``) gives HF's first encoding followed by its ``overflowing``;
``truncation=False`` windows the second sequence (``only_second``, the extractive-QA layout).
A strategy without overflow gives one row per pair, HF's first encoding.

Metadata: the triple ``(logID, start, stop)`` owns columns of the *windowed* side (the
truncated one: first for ``only_first``, second otherwise), with §2.3's rule applied to that
side with ``L = room``; so :func:`daskwp.stitch` rebuilds the windowed sequence of every pair
exactly once (with overflow). Empty sides are empty token lists: one row, ``stop = start - 1``
when the windowed side is empty.

The fill is one vectorized pass in the array module of the token ids (NumPy on the CPU,
CuPy on the GPU), the same code for both backends (as :mod:`daskwp.core.buckets`).
"""

from __future__ import annotations

import numpy as np

from .. import _ext
from .buckets import bucket_windows
from .options import OptionValueError
from .postprocess import frame_for
from .ragged import BatchWindows, Encoding, RaggedRows
from .windows import check_output_size, pack_windows

__all__ = ["PAIR_STRATEGIES", "build_pair_windows", "framed_single_windows", "pair_mode",
           "sequence_extras", "window_extras"]

#: The per-token outputs that offsets add (docs/design.md §2.9), with their fill on
#: special and padding positions.
EXTRA_OUTPUTS = ("offset_mapping", "word_ids", "special_tokens_mask")

PAIR_STRATEGIES = ("longest_first", "only_first", "only_second")


def strategy_of(truncation) -> str | None:
    """HF's strategy name for a checked ``truncation`` value (None: do not truncate)."""
    if truncation is False:
        return None
    if truncation is True:
        return "longest_first"
    return truncation


def pair_mode(truncation, return_overflowing_tokens: bool) -> tuple[str, bool, int]:
    """``(strategy, overflow, windowed side)`` of a pair call; refuses what is not a
    windowing."""
    strategy = strategy_of(truncation)
    overflow = strategy is None or bool(return_overflowing_tokens)
    if strategy is None:
        strategy = "only_second"
    if overflow and strategy == "longest_first":
        raise OptionValueError(
            "truncation='longest_first' (or True) with overflow is refused for sentence pairs: "
            "HuggingFace pairs every window of one sequence with every window of the other "
            "(a cross product with duplicates), which is no windowing; use "
            "truncation='only_second' (window the second sequence, as for question "
            "answering) or 'only_first' with return_overflowing_tokens=True, truncation=False "
            "(the same as 'only_second' with overflow), or longest_first without overflow "
            "(one row per pair)")
    return strategy, overflow, 0 if strategy == "only_first" else 1


def _owner(counts, total: int, xp):
    """``repeat(arange(len(counts)), counts)`` (searchsorted: CuPy's repeat takes no array of
    counts)."""
    if xp is np:
        return np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    return xp.searchsorted(xp.cumsum(counts), xp.arange(total, dtype=np.int64), side="right")


def _scan(counts, xp):
    out = xp.zeros(counts.shape[0] + 1, dtype=np.int64)
    if counts.shape[0]:
        out[1:] = xp.cumsum(counts)
    return out


def _host_int(x) -> int:
    return int(x.get()) if hasattr(x, "get") else int(x)


def _length_error(i, logid, na, nb, p, room, windowed, strategy, overflow, n_special):
    fixed = "first" if windowed == 1 else "second"
    wname = "second" if windowed == 1 else "first"
    need = f"more than stride={p.stride}" if overflow else "at least 1"
    other = "only_first" if windowed == 1 else "only_second"
    return OptionValueError(
        f"pair {i} (logID {logid}): the first sequence has {na} tokens and the second {nb}; "
        f"with max_length={p.max_length} ({n_special} special tokens) the {fixed} sequence "
        f"leaves {room} tokens per row for the {wname} ({strategy}), which must be {need} "
        f"(HuggingFace: 'Sequence to truncate too short'); raise max_length, shorten the "
        f"{fixed} sequence, or truncate the other one (truncation={other!r})")


def _layout(pre, mid, post, vocab) -> str:
    """A frame's rows as text, e.g. "[CLS] a [SEP] b [SEP]"."""
    def names(group):
        return [str(vocab.id_to_token(i)) for i, _ in group]
    return " ".join(names(pre) + ["a"] + names(mid) + ["b"] + names(post))


def build_pair_windows(enc_a, enc_b, vocab, p, *, strategy: str, overflow: bool,
                       windowed: int, return_token_type_ids: bool, return_sequence_ids: bool,
                       convert, xp, extras: dict | None = None) -> BatchWindows:
    """The rows of the pairs ``(enc_a[i], enc_b[i])`` (ragged ids and offsets of both sides,
    NumPy or CuPy, ``xp`` their module) as a :class:`BatchWindows`, framed by the special
    tokens and type ids of ``p``'s frame (core/postprocess.py; BERT's by default).
    ``enc_b`` None: the rows of single texts ``enc_a`` in that frame (``windowed=0``,
    ``strategy="only_first"``, ``overflow`` unless truncating), for the frames the native
    fill does not write (a post-processor with other special tokens or type ids).

    ``p`` is the checked :class:`~daskwp.core.windows.WindowParams`; ``convert`` turns each
    output array into the requested type. ``extras`` (:func:`extras_options`) adds
    ``offset_mapping`` / ``word_ids`` (from each side's Encoding: positions in whichever text
    the token came from, as HF) and ``special_tokens_mask`` (docs/design.md §2.9). Memory:
    the outputs plus a few int64 temporaries of the output's size.
    """
    a_ids, a_off = enc_a.values, xp.asarray(enc_a.offsets).astype(np.int64)
    n = int(a_off.shape[0]) - 1
    frame = frame_for(vocab, p)
    if enc_b is None:       # single texts: an empty second sequence, no groups after it
        enc_b = Encoding(xp.zeros(0, dtype=np.int32), xp.zeros(n + 1, dtype=np.int64),
                         xp.zeros((0, 2), dtype=np.int64), xp.zeros(0, dtype=np.int32))
        pre, a_type, mid, b_type, post = frame.single_groups()
    else:
        pre, a_type, mid, b_type, post = frame.pair_groups()
    b_ids, b_off = enc_b.values, xp.asarray(enc_b.offsets).astype(np.int64)
    if int(b_off.shape[0]) - 1 != n:
        raise ValueError(f"text_pair must have one entry per text: got {n} texts and "
                         f"{int(b_off.shape[0]) - 1} pairs")
    n_pre, n_mid = len(pre), len(mid)
    n_special = n_pre + n_mid + len(post)
    ml, stride = p.max_length, p.stride
    M = ml - n_special
    if M < 1:
        raise OptionValueError(
            f"max_length must be >= {n_special + 1} for sentence pairs with special tokens "
            f"({_layout(pre, mid, post, vocab)} and at least one token), got {ml}")
    na = a_off[1:] - a_off[:-1]
    nb = b_off[1:] - b_off[:-1]
    total = na + nb
    needs = total > M
    if windowed == 0 or strategy == "only_first":
        nw, nf = na, nb
    else:
        nw, nf = nb, na
    # -- per pair: kept lengths (no overflow) or the windowed side's window length -------
    if overflow or strategy != "longest_first":
        room = M - nf
        bad = needs & ((room <= stride) if overflow else (room < 1))
        if n and bool(xp.any(bad)):
            i = _host_int(xp.argmax(bad))
            raise _length_error(i, p.logid_offset + i, _host_int(na[i]), _host_int(nb[i]), p,
                                _host_int(room[i]), windowed, strategy, overflow, n_special)
        keep_w = xp.where(needs, room, nw)          # window length (or kept length)
        keep_f = nf
    else:   # longest_first, one row: HF's rule
        swap = na > nb
        n1 = xp.minimum(na, nb)
        n2 = xp.where(n1 > M, n1, xp.maximum(n1, M - n1))
        both = n1 + n2 > M
        n1 = xp.where(both, M // 2, n1)
        n2 = xp.where(both, M // 2 + M % 2, n2)
        ta, tb = xp.where(swap, n2, n1), xp.where(swap, n1, n2)
        la = xp.where(needs, xp.minimum(na, ta), na)
        lb = xp.where(needs, xp.minimum(nb, tb), nb)
        keep_w, keep_f = lb, la                     # windowed (owned) side: the second
    # -- rows ------------------------------------------------------------------------------
    if overflow:
        step = xp.maximum(keep_w - stride, 1)
        k_rows = xp.where(needs, 1 + (nw - keep_w + step - 1) // step, 1)
    else:
        step = xp.ones_like(keep_w)
        k_rows = xp.ones_like(keep_w)
    doc_rows = _scan(k_rows, xp)
    rows = _host_int(doc_rows[-1]) if n else 0
    pair = _owner(k_rows, rows, xp)
    k = xp.arange(rows, dtype=np.int64) - doc_rows[:-1][pair]
    last = k == k_rows[pair] - 1
    w_len_full = keep_w[pair]
    w_start = k * step[pair]
    w_len = xp.minimum(w_len_full, nw[pair] - w_start) if overflow else w_len_full
    f_len = keep_f[pair]
    if windowed == 0:
        la_r, a_start, lb_r, b_start = w_len, w_start, f_len, xp.zeros_like(w_start)
    else:
        la_r, a_start, lb_r, b_start = f_len, xp.zeros_like(w_start), w_len, w_start
    # columns: pre a mid b post ([CLS] a [SEP] b [SEP] for BERT)
    a_lo = n_pre
    b_lo = n_pre + la_r + n_mid
    row_len = b_lo + lb_r + len(post)
    w_col = a_lo if windowed == 0 else b_lo
    w_col = w_col + xp.zeros_like(w_start)
    start = xp.where(k == 0, w_col, w_col + stride // 2)
    stop = xp.where(last, w_col + w_len - 1, w_col + w_len_full - (stride + 1) // 2 - 1)
    logid = pair + p.logid_offset
    meta = xp.stack([logid, start, stop], axis=1).astype(np.int64) if rows else \
        xp.zeros((0, 3), dtype=np.int64)
    # -- cells -----------------------------------------------------------------------------
    padded = p.padded
    if padded:
        width = ml
        if p.padding == "longest":
            width = _host_int(row_len.max()) if rows else 0
        check_output_size(p, width, rows=rows, extras=extras, seq={
            "return_token_type_ids": return_token_type_ids,
            "return_sequence_ids": return_sequence_ids})
        col = xp.arange(width, dtype=np.int64)[None, :]
        def per_row(x):
            return x[:, None]
        row_offsets = None
    else:
        row_offsets = _scan(row_len, xp)
        cells = _host_int(row_offsets[-1]) if rows else 0
        cell_row = _owner(row_len, cells, xp)
        col = xp.arange(cells, dtype=np.int64) - row_offsets[:-1][cell_row]
        def per_row(x):
            return x[cell_row]
    pa_ = per_row(pair)
    la_c, lb_c, b_lo_c, len_c = per_row(la_r), per_row(lb_r), per_row(b_lo), per_row(row_len)
    in_a = (col >= a_lo) & (col < a_lo + la_c)
    in_b = (col >= b_lo_c) & (col < b_lo_c + lb_c)
    real = col < len_c
    a_src = xp.where(in_a, a_off[:-1][pa_] + per_row(a_start) + col - a_lo, 0)
    b_src = xp.where(in_b, b_off[:-1][pa_] + per_row(b_start) + col - b_lo_c, 0)
    a_vals = a_ids if a_ids.shape[0] else xp.zeros(1, dtype=np.int32)
    b_vals = b_ids if b_ids.shape[0] else xp.zeros(1, dtype=np.int32)
    pad_id = vocab.pad_id if padded else -1
    groups = pre + mid + post
    if groups:
        # each special position's place in pre + mid + post
        a_hi = a_lo + la_c
        b_hi = b_lo_c + lb_c
        g = xp.where(col < a_lo, col, xp.where(col < b_lo_c, n_pre + col - a_hi,
                                               n_pre + n_mid + col - b_hi))
        g = xp.minimum(xp.maximum(g, 0), len(groups) - 1)
        special = xp.asarray(np.array([i for i, _ in groups], dtype=np.int32))[g]
        special_types = xp.asarray(np.array([t for _, t in groups], dtype=np.int32))[g]
    else:
        special = special_types = 0
    ids = xp.where(in_a, a_vals[a_src], xp.where(in_b, b_vals[b_src],
                                                 xp.where(real, special, pad_id)))
    ids = ids.astype(np.int32)
    mask_dt = np.int8 if p.mask_int8 else np.int32
    data = {"input_ids": ids, "attention_mask": real.astype(mask_dt)}
    if return_token_type_ids:
        # HF sets a template's sequence type ids on its first encoding only: the tokens of
        # its overflowing windows keep their encode-time type (0 for $A, 1 for $B)
        if overflow and windowed == 0 and a_type != 0:
            a_type = per_row(xp.where(k == 0, a_type, 0))
        if overflow and windowed == 1 and b_type != 1:
            b_type = per_row(xp.where(k == 0, b_type, 1))
        types = xp.where(in_a, a_type, xp.where(in_b, b_type, special_types))
        data["token_type_ids"] = xp.where(real, types, 0).astype(mask_dt)
    if return_sequence_ids:
        data["sequence_ids"] = xp.where(in_a, 0, xp.where(in_b, 1, -1)).astype(np.int8)
    extras = extras or {}
    if extras.get("offset_mapping"):
        sa, sb = _spans_of(enc_a, xp), _spans_of(enc_b, xp)
        data["offset_mapping"] = xp.where(in_a[..., None], sa[a_src],
                                          xp.where(in_b[..., None], sb[b_src], 0))
    if extras.get("word_ids"):
        wa, wb = _words_of(enc_a, xp), _words_of(enc_b, xp)
        data["word_ids"] = xp.where(in_a, wa[a_src], xp.where(in_b, wb[b_src], -1)
                                    ).astype(np.int32)
    if extras.get("special_tokens_mask"):
        data["special_tokens_mask"] = (~(in_a | in_b)).astype(mask_dt)
    bucketed = p.padding == "bucket"
    conv = (lambda a: a) if bucketed else convert   # buckets convert their own arrays
    out = {}
    for key, v in data.items():
        out[key] = conv(v) if padded else RaggedRows(conv(v), conv(row_offsets))
    out["metadata"] = conv(meta)
    if bucketed:
        return bucket_windows(BatchWindows(out, doc_rows), p.bucket_widths, vocab.pad_id,
                              p.max_length, convert)
    return BatchWindows(out, doc_rows)


def framed_single_windows(enc, vocab, p, seq: dict | None, extras: dict | None, convert,
                          xp) -> BatchWindows:
    """The rows of single texts in a frame the native fill does not write (``not
    p.native``: a post-processor with other special tokens or type ids), by the array pass
    of :func:`build_pair_windows`; the same code on NumPy and CuPy."""
    seq = seq or {}
    return build_pair_windows(
        enc, None, vocab, p, strategy="only_first", overflow=p.truncation is False,
        windowed=0, return_token_type_ids=bool(seq.get("return_token_type_ids")),
        return_sequence_ids=bool(seq.get("return_sequence_ids")),
        convert=lambda a: convert(xp.ascontiguousarray(a)), xp=xp, extras=extras)


def sequence_extras(bw: BatchWindows, add_special_tokens: bool, return_token_type_ids: bool,
                    return_sequence_ids: bool, xp) -> BatchWindows:
    """``token_type_ids`` (zeros) and ``sequence_ids`` (0 on body tokens, -1 on [CLS], [SEP]
    and padding) of single-text windows, from the real length of each row."""
    if not (return_token_type_ids or return_sequence_ids):
        return bw
    ids, mask = bw["input_ids"], bw["attention_mask"]
    b = 1 if add_special_tokens else 0
    if isinstance(mask, RaggedRows):
        off = mask.offsets
        lengths = off[1:] - off[:-1]
        cells = int(mask.values.shape[0])
        row = _owner(lengths, cells, xp)
        col = xp.arange(cells, dtype=np.int64) - off[:-1][row]
        length = lengths[row]
        wrap = lambda v: RaggedRows(v, off)   # noqa: E731
        like = mask.values
    else:
        length = mask.astype(np.int64).sum(axis=1)[:, None]
        col = xp.arange(mask.shape[1], dtype=np.int64)[None, :]
        wrap = lambda v: v                    # noqa: E731
        like = mask
    if return_token_type_ids:
        bw["token_type_ids"] = wrap(xp.zeros_like(like))
    if return_sequence_ids:
        body = (col >= b) & (col < length - b)
        bw["sequence_ids"] = wrap(xp.where(body, 0, -1).astype(np.int8))
    del ids
    return bw


def _spans_of(enc, xp):
    """The Encoding's offset_mapping, never empty (a gather source)."""
    spans = enc.offset_mapping
    if spans is None:
        raise ValueError("the encoding has no offset_mapping (encode with "
                         "return_offsets_mapping=True)")
    spans = xp.asarray(spans)
    return spans if spans.shape[0] else xp.zeros((1, 2), dtype=np.int64)


def _words_of(enc, xp):
    words = enc.word_ids
    if words is None:
        raise ValueError("the encoding has no word_ids (encode with return_word_ids=True)")
    words = xp.asarray(words)
    return words if words.shape[0] else xp.zeros(1, dtype=np.int32)


def extras_options(return_offsets_mapping=None, return_word_ids=None,
                   return_special_tokens_mask=None, offsets_unit=None) -> dict:
    """The checked extra-output options of a call (docs/design.md §2.9): a dict with
    ``offset_mapping``, ``word_ids``, ``special_tokens_mask`` (bools) and ``offsets_unit``."""
    from .options import check

    def flag(name, v):
        return check(name, False if v is None else v)

    return {"offset_mapping": flag("return_offsets_mapping", return_offsets_mapping),
            "word_ids": flag("return_word_ids", return_word_ids),
            "special_tokens_mask": flag("return_special_tokens_mask",
                                        return_special_tokens_mask),
            "offsets_unit": check("offsets_unit",
                                  "chars" if offsets_unit is None else offsets_unit)}


def window_extras(bw: BatchWindows, enc, p, extras: dict, xp,
                  num_threads: int = 1) -> BatchWindows:
    """``offset_mapping``, ``word_ids`` and ``special_tokens_mask`` of single-text windows
    (docs/design.md §2.9), gathered from ``enc`` (its ``offset_mapping`` / ``word_ids``)
    by each cell's document token: ``(0, 0)``, -1 and 1 on [CLS], [SEP] and padding (as
    HF's overflow encodings). ``bw``: the fill's rows of ``enc`` (padded or ragged).
    ``num_threads``: the host fill's threads (<= 0: all cores)."""
    if not any(extras.get(k) for k in EXTRA_OUTPUTS):
        return bw
    mask = bw["attention_mask"]
    if xp is np:
        return _window_extras_native(bw, enc, p, extras, mask, num_threads)
    tok_off = xp.asarray(enc.offsets).astype(np.int64)
    doc_rows = xp.asarray(bw.doc_row_offsets).astype(np.int64)
    rows = int(doc_rows[-1]) if doc_rows.shape[0] else 0
    doc = _owner(doc_rows[1:] - doc_rows[:-1], rows, xp)
    k = xp.arange(rows, dtype=np.int64) - doc_rows[:-1][doc]
    n = (tok_off[1:] - tok_off[:-1])[doc]
    L = p.body_length
    first = k * (L - p.stride)
    body = xp.minimum(xp.maximum(n - first, 0), L)
    b = 1 if p.add_special_tokens else 0
    if isinstance(mask, RaggedRows):
        off = xp.asarray(mask.offsets).astype(np.int64)
        cells = int(off[-1]) if off.shape[0] else 0
        row = _owner(off[1:] - off[:-1], cells, xp)
        col = xp.arange(cells, dtype=np.int64) - off[:-1][row]
        def per_row(x):
            return x[row]
        wrap = lambda v: RaggedRows(v, off)   # noqa: E731
    else:
        col = xp.arange(mask.shape[1], dtype=np.int64)[None, :]
        def per_row(x):
            return x[:, None]
        wrap = lambda v: v                    # noqa: E731
    in_body = (col >= b) & (col < b + per_row(body))
    src = xp.where(in_body, per_row(tok_off[:-1][doc] + first) + col - b, 0)
    if extras.get("offset_mapping"):
        bw["offset_mapping"] = wrap(xp.where(in_body[..., None], _spans_of(enc, xp)[src], 0))
    if extras.get("word_ids"):
        bw["word_ids"] = wrap(xp.where(in_body, _words_of(enc, xp)[src], -1).astype(np.int32))
    if extras.get("special_tokens_mask"):
        like = mask.values if isinstance(mask, RaggedRows) else mask
        bw["special_tokens_mask"] = wrap((~in_body).astype(like.dtype))
    return bw

def _window_extras_native(bw: BatchWindows, enc, p, extras: dict, mask,
                          num_threads: int = 1) -> BatchWindows:
    """:func:`window_extras` on the host: the extension's one-pass fill."""
    ragged = isinstance(mask, RaggedRows)
    like = mask.values if ragged else mask
    spans = _spans_of(enc, np).reshape(-1) if extras.get("offset_mapping") else None
    words = _words_of(enc, np) if extras.get("word_ids") else None
    om, wid, stm = _ext.window_extras(
        np.ascontiguousarray(enc.offsets, dtype=np.int64),
        np.ascontiguousarray(bw.doc_row_offsets, dtype=np.int64),
        np.ascontiguousarray(mask.offsets, dtype=np.int64) if ragged else None,
        0 if ragged else int(mask.shape[1]), p.body_length, p.stride, p.add_special_tokens,
        None if spans is None else np.ascontiguousarray(spans, dtype=np.int64),
        None if words is None else np.ascontiguousarray(words, dtype=np.int32),
        bool(extras.get("special_tokens_mask")), like.dtype == np.int8, int(num_threads))
    for key, v in (("offset_mapping", om), ("word_ids", wid), ("special_tokens_mask", stm)):
        if v is not None:
            bw[key] = RaggedRows(v, mask.offsets) if ragged else v
    return bw



def sequence_options(p, paired: bool, return_overflowing_tokens=None,
                     return_token_type_ids=None, return_sequence_ids=None):
    """The checked pair / sequence options of a call: ``(p, seq)`` where ``p`` is the window
    parameters to use (single texts with a strategy and overflow window as
    ``truncation=False``) and ``seq`` a dict with ``paired``, ``strategy``, ``overflow``,
    ``windowed``, ``return_token_type_ids``, ``return_sequence_ids``."""
    import dataclasses

    from .options import check

    rot = check("return_overflowing_tokens",
                False if return_overflowing_tokens is None else return_overflowing_tokens)
    # None: on for pairs (HF returns them for BERT's pairs), off for single texts.
    rtt = check("return_token_type_ids",
                paired if return_token_type_ids is None else return_token_type_ids)
    rsi = check("return_sequence_ids",
                False if return_sequence_ids is None else return_sequence_ids)
    seq = dict(paired=paired, strategy=None, overflow=None, windowed=None,
               return_token_type_ids=rtt, return_sequence_ids=rsi)
    if paired:
        seq["strategy"], seq["overflow"], seq["windowed"] = pair_mode(p.truncation, rot)
        return p, seq
    if p.truncation == "only_second":
        raise OptionValueError("truncation='only_second' truncates the second sequence of a "
                               "pair, but no text_pair was given (HuggingFace: 'Second "
                               "sequence not provided'); use True or 'only_first' for single "
                               "texts")
    if p.truncation is not False and rot:
        p = dataclasses.replace(p, truncation=False)
    return p, seq


def finish_windows(out, enc, p, seq: dict | None, extras: dict | None, convert, xp, vocab,
                   num_threads: int = 1):
    """The windows result of a fill's raw ``out`` (:func:`~daskwp.core.windows.pack_windows`'s
    arguments) of ``enc``: with ``token_type_ids`` / ``sequence_ids`` (``seq``) and the
    offsets outputs (``extras``) when asked, bucketed with ``padding="bucket"`` (the fill's
    rows are then ragged; the buckets pad with ``vocab.pad_id``), each array converted with
    ``convert``. The one composition both backends use (docs/design.md §2.8, §2.9);
    ``num_threads``: the host extras fill's."""
    extras = extras or {}
    sequence = bool(seq) and (seq["return_token_type_ids"] or seq["return_sequence_ids"])
    more = any(extras.get(k) for k in EXTRA_OUTPUTS)
    bucketed = p.padding == "bucket"
    if not (bucketed or sequence or more):
        return pack_windows(*out, p.padded, convert)
    bw = pack_windows(*out, p.padded, lambda a: a)
    if sequence:
        bw = sequence_extras(bw, p.add_special_tokens, seq["return_token_type_ids"],
                             seq["return_sequence_ids"], xp)
    if more:
        bw = window_extras(bw, enc, p, extras, xp, num_threads)
    if bucketed:
        return bucket_windows(bw, p.bucket_widths, vocab.pad_id, p.max_length, convert)
    return convert_batch(bw, lambda a: convert(xp.ascontiguousarray(a)))


def convert_batch(bw: BatchWindows, convert) -> BatchWindows:
    """Every array of ``bw`` (ragged rows' values and offsets too) through ``convert``."""
    out = {}
    for key, v in bw.items():
        out[key] = RaggedRows(convert(v.values), convert(v.offsets)) \
            if isinstance(v, RaggedRows) else convert(v)
    return BatchWindows(out, bw.doc_row_offsets)
