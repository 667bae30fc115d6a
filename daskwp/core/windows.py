"""Window parameters and the fill plan shared by every backend (docs/design.md §2).

For a document with WordPiece tokens ``t[0..n)``:

* ``L = max_length - 2`` with special tokens (each row is ``[CLS] body [SEP]``), else
  ``L = max_length``; ``stride`` is the overlap of consecutive bodies (HuggingFace meaning),
  ``step = L - stride``;
* row ``k`` holds ``t[k*step : k*step + L]``; there are ``K = 1`` rows when ``n <= L`` (or
  when truncating), else ``1 + ceil((n - L) / step)`` — exactly HuggingFace's overflow
  windows, with logIDs equal to its ``overflow_to_sample_mapping`` plus ``logid_offset``;
* ``metadata[r] = (logID, start, stop)``: the columns ``start..stop`` (stop inclusive) of row
  ``r`` that the row *owns*. Over a document's rows the owned slices are disjoint and
  consecutive and rebuild ``t[0..n)`` exactly once: row 0 starts at ``b`` (1 with
  ``[CLS]``, else 0), row ``k > 0`` at ``b + floor(stride/2)``; a row that is not the last
  stops at ``b + L - ceil(stride/2) - 1``, the last row at its last body token. An empty
  document gives one row with ``stop = start - 1``.

The fill itself is native (``kernels/windows.hpp``, one source for the CPU extension and the
CUDA kernel); this module validates the parameters (:func:`window_params`), computes what the
fill needs (:func:`fill_plan`) and packs its arrays (:func:`pack_windows`) for both.
"""

from __future__ import annotations

import dataclasses

from . import config
from .buckets import check_bucket_widths
from .options import INT32_MAX, INT64_MAX, check, check_int
from .postprocess import frame_ids
from .ragged import BatchWindows, RaggedRows

__all__ = ["WINDOW_OPTIONS", "OutputSizeError", "WindowParams", "check_output_size",
           "check_padded_bytes",
           "convert_tensors", "fill_plan", "max_output_bytes", "pack_windows",
           "resolve_window_options", "window_params"]

#: The window options of the accessors and batch jobs, as ``tok(texts, ...)`` spells them.
WINDOW_OPTIONS = ("max_length", "stride", "truncation", "add_special_tokens", "padding",
                  "bucket_widths")


@dataclasses.dataclass(frozen=True)
class WindowParams:
    """Validated window parameters. ``padding`` is 'max_length', 'longest' or 'do_not_pad';
    ``body_length`` is L."""

    max_length: int
    stride: int
    truncation: bool
    add_special_tokens: bool
    padding: str
    return_tensors: str
    logid_offset: int
    mask_int8: bool
    body_length: int
    bucket_widths: object = None
    #: The special tokens and type ids around the sequences (core/postprocess.py): None
    #: for BERT's frame from the vocabulary's names (``add_special_tokens``: with them).
    #: With a frame, ``add_special_tokens`` says whether single rows are framed by the
    #: native fill's one token each side (``Frame.native_single``).
    frame: object = None

    @property
    def native(self) -> bool:
        """Whether the native fill writes the single rows (else the array pass of
        core/pairs.py does, for frames it cannot express)."""
        return self.frame is None or self.frame.native_single is not None

    @property
    def padded(self) -> bool:
        """Whether the fill pads rows (bucketing pads after a ragged fill)."""
        return self.padding not in ("do_not_pad", "bucket")


def resolve_window_options(max_length=None, stride=None, truncation=None,
                           add_special_tokens=None, padding=None, bucket_widths=None) -> dict:
    """The window options with None resolved through ``dask.config`` (``daskwp.<name>``),
    each checked by the option table (``max_length`` against ``stride`` and the bucket
    widths are checked by :func:`window_params`)."""
    given = dict(max_length=max_length, stride=stride, truncation=truncation,
                 add_special_tokens=add_special_tokens, padding=padding,
                 bucket_widths=bucket_widths)
    opts = {k: config.resolve(k, v) for k, v in given.items()}
    if isinstance(opts["bucket_widths"], list):
        opts["bucket_widths"] = tuple(opts["bucket_widths"])   # hashable, as dask tokens need
    return opts


def window_params(max_length=None, stride=None, truncation=None, add_special_tokens=None,
                  padding=None, return_tensors="np", logid_offset=0,
                  mask_dtype="int32", bucket_widths="auto", post=None,
                  vocab=None) -> WindowParams:
    """Validate window parameters (None: the configured default); errors name the value
    received and what is allowed. ``post``: the tokenizer's
    :class:`~daskwp.core.postprocess.PostProcessor` (None: BERT's), resolved with ``vocab``;
    its special tokens per single row make the room ``L`` (docs/design.md §2.1)."""
    opts = resolve_window_options(max_length, stride, truncation, add_special_tokens, padding,
                                  bucket_widths)
    special = opts["add_special_tokens"]
    frame = None
    if post is not None and post.kind != "bert":
        frame = post.frame(vocab, special)
        n_special = frame.n_single
        allowed = (f"in [{1 + n_special}, 2**31-1] with add_special_tokens=True (room for "
                   f"the {n_special} special tokens of the post-processor {post.name} and at "
                   f"least one token)" if n_special else "in [1, 2**31-1]")
    else:
        n_special = 2 if special else 0
        allowed = ("in [3, 2**31-1] with add_special_tokens=True (room for [CLS], [SEP] and "
                   "at least one token)" if n_special else "in [1, 2**31-1]")
    ml = check_int("max_length", opts["max_length"], lo=1 + n_special, hi=INT32_MAX,
                   allowed=allowed)
    body = ml - n_special
    stride = check_int("stride", opts["stride"], lo=0, hi=body - 1,
                       allowed=(f"in [0, {body}) (the overlap must be smaller than the {body} "
                                f"tokens a row holds with max_length={ml}"
                                + (" and special tokens" if n_special else "") + ")"))
    if frame is not None:
        # the native fill's frame: one token each side (b = 1), or none (b = 0)
        special = frame.native_single not in (None, (-1, -1))
    return WindowParams(
        frame=frame,
        max_length=ml, stride=stride, truncation=opts["truncation"],
        add_special_tokens=special, padding=opts["padding"],
        return_tensors=check("return_tensors", "np" if return_tensors is None else return_tensors),
        logid_offset=check_int("logid_offset", logid_offset, lo=0, hi=INT64_MAX,
                               allowed="a non-negative integer"),
        mask_int8=check("mask_dtype", mask_dtype) == "int8", body_length=body,
        bucket_widths=(check_bucket_widths(opts["bucket_widths"], ml)
                       if opts["padding"] == "bucket" else None))


class OutputSizeError(MemoryError, ValueError):
    """The padded output of a call would exceed ``max_output_bytes`` (refused before any
    allocation).

    Examples
    --------
    >>> import daskwp
    >>> import dask
    >>> tok = daskwp.WordPieceTokenizer()
    >>> with dask.config.set({"daskwp.max_output_bytes": 1_000_000}):   # 1 MB per call at most
    ...     try:
    ...         tok(["a"] * 1000, max_length=512)
    ...     except daskwp.OutputSizeError:
    ...         print("refused before allocating")
    refused before allocating
    """


def max_output_bytes() -> int:
    """The configured ``daskwp.max_output_bytes``, else a quarter of physical memory."""
    cap = config.resolve("max_output_bytes")
    if cap is not None:
        return cap
    import os
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):   # no sysconf: no cap
        return INT64_MAX


def cell_bytes(p: WindowParams, seq: dict | None = None, extras: dict | None = None) -> int:
    """Bytes of one padded cell: the ids, the mask, and each per-position output asked."""
    mask = 1 if p.mask_int8 else 4
    seq, extras = seq or {}, extras or {}
    return (4 + mask + (mask if seq.get("return_token_type_ids") else 0)
            + (1 if seq.get("return_sequence_ids") else 0)
            + (16 if extras.get("offset_mapping") else 0)
            + (4 if extras.get("word_ids") else 0)
            + (mask if extras.get("special_tokens_mask") else 0))


def check_output_size(p: WindowParams, width: int, offsets=None, rows=None,
                      seq: dict | None = None, extras: dict | None = None) -> None:
    """Refuse (:class:`OutputSizeError`) a padded output larger than
    :func:`max_output_bytes`, before anything is allocated: ``rows`` x ``width`` cells of
    :func:`cell_bytes` plus 24 bytes of metadata per row. ``rows``: known (pairs), else
    counted from the documents' ``offsets`` (NumPy or CuPy) by the window rule; a cheap
    bound is tried first, so a call far below the cap counts nothing."""
    if not p.padded:
        return
    per_cell = cell_bytes(p, seq, extras)
    per_row = width * per_cell + 24
    cap = max_output_bytes()
    if rows is None:
        docs = int(offsets.shape[0]) - 1
        if docs <= 0:
            return
        total = int(offsets[-1]) - int(offsets[0])
        step = p.body_length - p.stride
        bound = docs if p.truncation is not False else docs + -(-total // step)
        if bound * per_row <= cap:
            return
        if p.truncation is not False:
            rows = docs
        else:
            n = offsets[1:] - offsets[:-1]
            extra = (n - p.body_length + step - 1) // step
            rows = docs + int((extra * (n > p.body_length)).sum())
    check_padded_bytes(rows, width, per_cell,
                       f"max_length={p.max_length}, stride={p.stride}, "
                       f"padding={p.padding!r}, truncation={p.truncation!r}", cap)


def check_padded_bytes(rows: int, width: int, per_cell: int, parameters: str,
                       cap: int | None = None) -> None:
    """Refuse (:class:`OutputSizeError`) ``rows`` x ``width`` padded cells of ``per_cell``
    bytes (plus 24 bytes of metadata per row) above :func:`max_output_bytes`; the message
    names the size and ``parameters`` (the call's, as text)."""
    cap = max_output_bytes() if cap is None else cap
    size = rows * (width * per_cell + 24)
    if size > cap:
        raise OutputSizeError(
            f"the padded output would take {size:,} bytes ({size / 2**30:.1f} GiB): {rows:,} "
            f"rows x {width:,} columns x {per_cell} bytes per cell, plus "
            f"metadata ({parameters}); that is more than "
            f"max_output_bytes={cap:,} (daskwp.max_output_bytes in dask.config; default a "
            f"quarter of physical memory). Use a smaller max_length, padding='longest' or "
            f"padding=False (ragged rows), or raise daskwp.max_output_bytes")


def convert_tensors(arr, return_tensors: str):
    """A NumPy array as the requested array type ("np", "pt" zero-copy, "cp" uploaded)."""
    if return_tensors == "np":
        return arr
    if return_tensors == "pt":
        try:
            import torch
        except ImportError:
            raise ImportError("return_tensors='pt' needs PyTorch, which is not installed; "
                              "use return_tensors='np' (or 'cp' with CuPy)") from None
        return torch.from_numpy(arr)
    try:
        import cupy
    except ImportError:
        raise ImportError("return_tensors='cp' needs CuPy, which is not installed; use "
                          "return_tensors='np' (or 'pt' with PyTorch)") from None
    return cupy.asarray(arr)


def fill_plan(vocab, p: WindowParams, offsets):
    """(padded, cls_id, sep_id, pad_id, width) for the native fill, CPU or GPU alike.

    ``offsets`` may be a NumPy or CuPy array; "longest" reads its largest document."""
    padded = p.padded
    special = p.add_special_tokens
    width = p.max_length
    if p.padding == "longest":
        n_docs = int(offsets.shape[0]) - 1
        longest = int((offsets[1:] - offsets[:-1]).max()) if n_docs else 0
        width = min(longest, p.body_length) + (2 if special else 0) if n_docs else 0
    cls_id, sep_id = frame_ids(vocab, p)
    return (padded, cls_id, sep_id, vocab.pad_id if padded else -1, width)


def pack_windows(ids, mask, meta, row_offsets, doc_rows, padded: bool,
                 convert) -> BatchWindows:
    """The fill's arrays as a :class:`BatchWindows`, each passed through ``convert``."""
    if padded:
        data = {"input_ids": convert(ids), "attention_mask": convert(mask)}
    else:
        offs = convert(row_offsets)
        data = {"input_ids": RaggedRows(convert(ids), offs),
                "attention_mask": RaggedRows(convert(mask), offs)}
    data["metadata"] = convert(meta)
    return BatchWindows(data, doc_rows)
