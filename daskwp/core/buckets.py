"""Length buckets: windows grouped by width, so that padding does not waste a model's work
(docs/design.md §7).

``tok(texts, max_length=128, padding="bucket", bucket_widths=(16, 32, 64, 128))`` puts each
window row in the smallest bucket width that holds it (its [CLS]/[SEP] included) and pads it
to that width. Buckets come in increasing width; empty ones are left out. The rows of a
document may sit in several buckets, and the metadata of all rows after a document's first
share one ``start``, so every bucket carries ``window`` (the row's index within its
document) and :func:`daskwp.stitch` takes the lists (``stitch([ids per bucket], [metadata
per bucket], window=[window per bucket])``).

``bucket_widths="auto"`` chooses at most :data:`AUTO_BUCKETS` widths for the batch that
minimise its padding tokens, among the multiples of 8 up to ``max_length`` and
``max_length`` itself (an exact dynamic program over the histogram of row lengths). Explicit
widths are sorted; ``max_length`` is added when the largest is smaller, so every row has a
bucket.

On the CPU, single texts are bucketed in one native pass from the encoding
(:func:`fill_buckets`: each row written straight into its bucket, no ragged rows first);
sentence pairs and the GPU bucket their ragged windows with :func:`bucket_windows`, a pass
in the array module of the result (NumPy or CuPy). Both give the same buckets.
"""

from __future__ import annotations

import numpy as np

from .. import _ext
from .options import OptionValueError, check_int
from .outputs import OutputMapping, position_output
from .postprocess import frame_ids
from .ragged import BatchWindows, RaggedRows, array_module, to_host

__all__ = ["AUTO_BUCKETS", "BucketedWindows", "auto_bucket_widths", "bucket_windows",
           "check_bucket_widths", "fill_buckets"]

#: Widths ``bucket_widths="auto"`` chooses at most.
AUTO_BUCKETS = 4
_ALIGN = 8


class BucketedWindows(OutputMapping):
    """The windows of a batch grouped by width: ``buckets`` is a list of ``(width,
    windows)`` in increasing width, each ``windows`` a :class:`BatchWindows` whose rows are
    ``width`` wide (``input_ids``, ``attention_mask``, ``metadata``, ``window``).

    Iterating yields the ``(width, windows)`` pairs; ``len`` is the number of buckets. As
    every result it is also a mapping of its outputs (:class:`~daskwp.core.outputs.
    OutputMapping`): ``bw["input_ids"]`` is :meth:`column` (one array per bucket, what
    :func:`daskwp.stitch` takes), ``bw.keys()`` the outputs of the buckets.
    """

    def __init__(self, buckets: list):
        self.buckets = buckets

    def __iter__(self):
        return iter(self.buckets)

    def __len__(self) -> int:
        return len(self.buckets)

    @property
    def widths(self) -> list[int]:
        return [w for w, _ in self.buckets]

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for _, b in self.buckets)

    def column(self, name: str) -> list:
        """One array per bucket, in the buckets' order (what :func:`daskwp.stitch` takes)."""
        return [b[name] for _, b in self.buckets]

    def keys(self) -> list:
        """The outputs of the buckets (each bucket holds the same)."""
        if not self.buckets:
            return ["input_ids", "attention_mask", "metadata", "window"]
        return list(self.buckets[0][1].keys())

    def output(self, key: str) -> list:
        return self.column(key)

    def __repr__(self) -> str:
        parts = ", ".join(f"{w}: {b.num_rows} rows" for w, b in self.buckets)
        return f"BucketedWindows({parts})"


def check_bucket_widths(value, max_length: int):
    """Sorted unique widths in [1, max_length] with max_length last, or "auto"."""
    if isinstance(value, str):
        if value == "auto":
            return "auto"
        raise OptionValueError(f"bucket_widths must be a sequence of integers or 'auto', got "
                               f"{value!r}")
    try:
        items = list(value)
    except TypeError:
        raise OptionValueError(f"bucket_widths must be a sequence of integers or 'auto', got "
                               f"{value!r}") from None
    if not items:
        raise OptionValueError("bucket_widths must hold at least one width, got an empty "
                               "sequence")
    widths = sorted({check_int("bucket_widths", w, lo=1, hi=max_length,
                               allowed=f"in [1, max_length={max_length}]") for w in items})
    if widths[-1] != max_length:
        widths.append(max_length)
    return tuple(widths)


def auto_bucket_widths(lengths, max_length: int, n_buckets: int = AUTO_BUCKETS) -> tuple:
    """At most ``n_buckets`` widths minimising the padding of rows of ``lengths`` (each
    <= max_length), among the multiples of 8 up to ``max_length`` and ``max_length``.

    The exact dynamic program over the histogram of the lengths (the extension's, the one
    the native bucketed fill runs): the candidates below the longest row and the smallest
    that holds it; among equal paddings the fewest widths, then the earliest split."""
    lengths = to_host(lengths).astype(np.int64)
    if lengths.size == 0:
        return (max_length,)
    if int(lengths.max()) > max_length:
        raise ValueError(f"a row of {int(lengths.max())} tokens is longer than "
                         f"max_length={max_length}")
    return tuple(_ext.auto_bucket_widths(np.bincount(lengths), int(max_length),
                                         int(n_buckets)))


#: The arrays of ``_ext.build_buckets``' buckets, in its order (the order
#: :func:`bucket_windows` gives them too).
_NATIVE_KEYS = ("input_ids", "attention_mask", "metadata", "window", "token_type_ids",
                "sequence_ids", "offset_mapping", "word_ids", "special_tokens_mask")


def fill_buckets(encoding, vocab, p, seq: dict | None, extras: dict | None, convert,
                 num_threads: int) -> BucketedWindows:
    """The bucketed windows of single texts on the host, in one native pass
    (``_ext.build_buckets``): each row's length from the window rule, the widths (given, or
    "auto" from the histogram of those lengths), then every row written straight into its
    bucket's ids, mask, metadata, window and the per-position outputs asked (``seq``:
    token_type_ids / sequence_ids; ``extras``: offset_mapping / word_ids /
    special_tokens_mask) — what :func:`bucket_windows` makes of the ragged fill, without
    it. ``p``: the window parameters (``padding="bucket"``)."""
    extras = extras or {}
    seq = seq or {}
    spans = words = None
    if extras.get("offset_mapping"):
        if encoding.offset_mapping is None:
            raise ValueError("the encoding has no offset_mapping (encode with "
                             "return_offsets_mapping=True)")
        spans = np.ascontiguousarray(encoding.offset_mapping, dtype=np.int64).reshape(-1)
    if extras.get("word_ids"):
        if encoding.word_ids is None:
            raise ValueError("the encoding has no word_ids (encode with return_word_ids=True)")
        words = np.ascontiguousarray(encoding.word_ids, dtype=np.int32)
    special = p.add_special_tokens
    cls_id, sep_id = frame_ids(vocab, p)
    widths = p.bucket_widths
    out = _ext.build_buckets(
        np.ascontiguousarray(encoding.token_ids, dtype=np.int32),
        np.ascontiguousarray(encoding.offsets, dtype=np.int64), p.max_length, p.stride,
        bool(p.truncation), special, cls_id, sep_id, vocab.pad_id, p.logid_offset,
        None if widths == "auto" else np.asarray(widths, dtype=np.int64), AUTO_BUCKETS,
        p.mask_int8, spans, words, bool(extras.get("special_tokens_mask")),
        bool(seq.get("return_token_type_ids")), bool(seq.get("return_sequence_ids")),
        int(num_threads))
    buckets = []
    for width, *arrays in out:
        data = {}
        for key, v in zip(_NATIVE_KEYS, arrays):
            if v is not None:
                data[key] = convert(v)
        buckets.append((int(width), BatchWindows(data)))
    return BucketedWindows(buckets)


def _owner(lengths, total: int, xp):
    """For ``total = sum(lengths)`` items laid out group after group, each item's group:
    ``repeat(arange(n), lengths)`` (with searchsorted on CuPy, whose repeat takes no array of
    counts)."""
    if xp is np:
        return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return xp.searchsorted(xp.cumsum(lengths), xp.arange(total, dtype=np.int64),
                           side="right")


def bucket_windows(ragged: BatchWindows, widths, pad_id: int, max_length: int,
                   convert) -> BucketedWindows:
    """Ragged windows (``padding="do_not_pad"``: RaggedRows ids and mask) as buckets.

    ``widths``: the checked widths, or "auto"; ``convert`` turns each array into the
    requested type. Memory: one padded matrix per bucket, ``sum(rows_b * width_b)`` cells.
    """
    ids: RaggedRows = ragged["input_ids"]
    mask: RaggedRows = ragged["attention_mask"]
    xp = array_module(ids.values)
    offsets = xp.asarray(ids.offsets).astype(np.int64, copy=False)
    lengths = offsets[1:] - offsets[:-1]
    rows = int(lengths.shape[0])
    meta = ragged["metadata"]
    doc_rows = xp.asarray(ragged.doc_row_offsets).astype(np.int64, copy=False)
    if xp is np:   # each row's index within its document
        window = (np.arange(rows, dtype=np.int64)
                  - np.repeat(doc_rows[:-1], np.diff(doc_rows))).astype(np.int32)
    else:
        doc_of = _owner(doc_rows[1:] - doc_rows[:-1], rows, xp)   # each row's document
        window = (xp.arange(rows, dtype=np.int64) - doc_rows[:-1][doc_of]).astype(np.int32)
    if widths == "auto":
        widths = auto_bucket_widths(lengths, max_length)
    w_arr = xp.asarray(np.asarray(widths, dtype=np.int64))
    if xp is np and rows:   # a lookup of each length's bucket (lengths <= max_length)
        lut = np.searchsorted(w_arr, np.arange(int(lengths.max()) + 1), side="left")
        which = lut[lengths]
    else:
        which = xp.searchsorted(w_arr, lengths, side="left")
    counts = to_host(xp.bincount(which, minlength=len(widths)))
    # Each stored cell's bucket, so that one boolean gather takes a bucket's cells in row
    # order (the rows of a bucket keep their order, and the ragged values are in row order).
    total = int(offsets[-1] - offsets[0]) if rows else 0
    cell_bucket = which[_owner(lengths, total, xp)] if total and xp is not np \
        else xp.zeros(0, np.int64)
    # Other per-token outputs (offset_mapping, word_ids, special_tokens_mask, ...: ragged
    # like the ids) are carried into every bucket, padded with their own fill.
    extra = [k for k, v in ragged.items()
             if k not in ("input_ids", "attention_mask", "metadata") and isinstance(v, RaggedRows)]
    if extra and total and xp is np:
        cell_bucket = which[_owner(lengths, total, xp)]
    values = ids.values[int(offsets[0]):int(offsets[-1])] if rows else ids.values[:0]
    mvalues = mask.values[int(offsets[0]):int(offsets[-1])] if rows else mask.values[:0]
    buckets = []
    native = xp is np and isinstance(ids.values, np.ndarray)
    for b, width in enumerate(widths):
        n_b = int(counts[b])
        if n_b == 0:
            continue
        in_b = which == b
        if native:   # the extension's fill: one pass over the bucket's rows
            sel = np.flatnonzero(in_b)   # row numbers: one integer take per array below
            out_ids, out_mask = _ext.pad_rows(
                np.ascontiguousarray(ids.values, dtype=np.int32), offsets, sel,
                int(width), int(pad_id), mask.values.dtype == np.int8)
            buckets.append((int(width), _with_extras(BatchWindows({
                "input_ids": convert(out_ids), "attention_mask": convert(out_mask),
                "metadata": convert(np.take(meta, sel, axis=0)),
                "window": convert(window.take(sel))}),
                ragged, extra, offsets, lengths.take(sel), cell_bucket, b, width, convert,
                xp)))
            continue
        lens = lengths[in_b]
        real = xp.arange(width, dtype=np.int64)[None, :] < lens[:, None]   # n_b x width
        out_ids = xp.full((n_b, width), pad_id, dtype=np.int32)
        out_mask = xp.zeros((n_b, width), dtype=mask.values.dtype)
        if total:
            cells = cell_bucket == b
            out_ids[real] = values[cells]
            out_mask[real] = mvalues[cells]
        buckets.append((int(width), _with_extras(BatchWindows({
            "input_ids": convert(out_ids), "attention_mask": convert(out_mask),
            "metadata": convert(meta[in_b]), "window": convert(window[in_b])}),
            ragged, extra, offsets, lens, cell_bucket, b, width, convert, xp)))
    return BucketedWindows(buckets)


def _with_extras(bw: BatchWindows, ragged: BatchWindows, extra, offsets, lens, cell_bucket,
                 b: int, width: int, convert, xp) -> BatchWindows:
    """``bw`` with bucket ``b``'s rows of every extra ragged output of ``ragged``, padded
    to ``width`` with each output's pad value (:data:`daskwp.core.outputs.POSITION_OUTPUTS`)."""
    if not extra:
        return bw
    real = xp.arange(width, dtype=np.int64)[None, :] < lens[:, None]
    total = int(offsets[-1] - offsets[0]) if offsets.shape[0] > 1 else 0
    cells = cell_bucket == b if total else None
    for key in extra:
        v = ragged[key].values
        v = v[int(offsets[0]):int(offsets[-1])] if total else v[:0]
        out = xp.full((int(lens.shape[0]), width) + tuple(v.shape[1:]), position_output(key).pad,
                      dtype=v.dtype)
        if total:
            out[real] = v[cells]
        bw[key] = convert(out)
    return bw
