"""GPU path: the shared WordPiece core and window fill, launched over whole partitions.

The kernels (``kernels/wordpiece.cu``) include the same headers as the CPU extension
(``wordpiece_core.hpp``, ``windows.hpp``); this module compiles them at run time with NVRTC
through CuPy, keeps the compiled module and the uploaded blobs per device, cuts a
partition into chunks and launches count / scan / write. Nothing here runs per document.

Public functions
----------------
encode_cuda(tok, texts)            ragged ids on the device: (token_ids int32, offsets int64)
windows_cuda(tok, texts, ...)      ``tok(texts, ...)`` on the device: :class:`BatchWindows`
build_windows_cuda(ids, offsets, ...)  the device twin of ``_ext.build_windows``
device_strings(texts)              any accepted input as :class:`DeviceStrings`
is_device_input(texts)             True for cudf / CuPy / DeviceStrings input
stage_timing(hook)                 run the launcher's stages inside ``hook(name)`` (timing)

CuPy is imported lazily: importing this module never needs a GPU.

Caches
------
* compiled module: one per (process, device); the source handed to NVRTC begins with a
  digest of every file in ``kernels/``, so CuPy's on-disk kernel cache can never serve a
  binary built from older headers;
* device model (vocabulary blob, normalization blob, boundary table): one per
  (vocabulary hash, normalization digest, device), least recently used of
  ``_MODEL_CACHE_SIZE`` kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.cache import BoundedCache
from ..core.strings import chunk_buffers, to_arrow
from ..core.windows import check_output_size, fill_plan, window_params
from .protocol import kernel_model

__all__ = [
    "DeviceStrings",
    "build_windows_cuda",
    "count_cuda",
    "device_strings",
    "encode_cuda",
    "is_device_input",
    "kernel_source",
    "stage_timing",
    "windows_cuda",
]

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
KERNEL_FILE = "wordpiece.cu"
BLOCK = 128                   # threads per block for every launch
_MODEL_CACHE_SIZE = 8
_MODULE_CACHE_SIZE = 64
_MIN_CHUNK_BYTES = 256
_MAX_CHUNK_BYTES = 4096

_lock = threading.Lock()     # one compilation at a time
_modules = BoundedCache("cuda_modules", _MODULE_CACHE_SIZE)         # device id -> RawModule
_models = BoundedCache("cuda_device_models", _MODEL_CACHE_SIZE)     # model key + device id
_source_cache: list = []


def _cupy():
    try:
        import cupy
    except ImportError:
        raise ImportError("the GPU path needs CuPy (pip install cupy-cuda12x), which is not "
                          "installed; use device='cpu'") from None
    return cupy


# ---------------------------------------------------------------------------------------
# Compilation
# ---------------------------------------------------------------------------------------
def kernel_source() -> tuple[str, tuple[str, ...]]:
    """The code and NVRTC options of the kernel module.

    The code is ``wordpiece.cu`` preceded by a comment holding the SHA-256 of every
    ``.cu``/``.cuh``/``.hpp`` file of ``kernels/`` (the headers are found through ``-I``).
    """
    if not _source_cache:
        h = hashlib.sha256()
        for p in sorted(KERNEL_DIR.iterdir()):
            if p.suffix in (".cu", ".cuh", ".hpp"):
                h.update(p.name.encode())
                h.update(p.read_bytes())
        code = (f"// daskwp kernel sources sha256 {h.hexdigest()}\n"
                + (KERNEL_DIR / KERNEL_FILE).read_text(encoding="utf-8"))
        options = ("-std=c++17", f"-I{KERNEL_DIR}", "-DDASKWP_NVRTC=1")
        _source_cache.append((code, options))
    return _source_cache[0]


def _module():
    """The compiled kernels for the current device (compiled once per process and device)."""
    cp = _cupy()
    dev = cp.cuda.Device().id
    mod = _modules.get(dev)
    if mod is None:
        with _lock:
            mod = _modules.get(dev)
            if mod is None:
                code, options = kernel_source()
                mod = cp.RawModule(code=code, options=options, backend="nvrtc")
                mod.get_function("dwp_chunk_tokenize")   # compile now, errors surface here
                mod = _modules.put(dev, mod)
    return mod


@dataclass(frozen=True)
class _DeviceModel:
    vocab: object     # cupy uint8: the vocabulary blob
    norm: object      # cupy uint8: the normalization blob
    boundary: object  # cupy uint8[256]: bytes a chunk may start at


def _device_model(tok) -> _DeviceModel:
    """The tokenizer's blobs on the current device, uploaded once and cached (keyed by the
    vocabulary hash, the normalization blob's digest and the device)."""
    cp = _cupy()
    dev = cp.cuda.Device().id
    km = kernel_model(tok)
    key = (km.key, dev)

    def upload() -> _DeviceModel:
        mod = _module()
        vocab = cp.asarray(km.vocab_blob)
        norm_d = cp.asarray(km.norm_blob)
        boundary = cp.zeros(256, dtype=cp.uint8)
        mod.get_function("dwp_boundary_bytes")((1,), (256,), (vocab, norm_d, boundary))
        return _DeviceModel(vocab, norm_d, boundary)

    return _models.get_or_create(key, upload)


def clear_caches() -> None:
    """Drop the compiled modules and the device-resident blobs."""
    _modules.clear()
    _models.clear()


# ---------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------
@dataclass
class DeviceStrings:
    """A string column as Arrow-style device buffers (CuPy arrays).

    Attributes
    ----------
    offsets : cupy.ndarray of int32 or int64, ``n + 1`` entries
        Document ``d`` is ``data[offsets[d]:offsets[d+1]]`` (absolute positions).
    data : cupy.ndarray of uint8
        UTF-8 bytes (invalid UTF-8 decodes to U+FFFD, as on the CPU).
    validity : cupy.ndarray of uint8, optional
        Arrow validity bitmap (LSB first); a null document is empty.
    validity_offset : int
        Bit of document 0 in ``validity``.
    """

    offsets: object
    data: object
    validity: object = None
    validity_offset: int = 0

    @property
    def n(self) -> int:
        return int(self.offsets.shape[0]) - 1


def is_device_input(texts) -> bool:
    """True for inputs that live on a GPU: cudf Series/Index/Column, DeviceStrings."""
    if isinstance(texts, DeviceStrings):
        return True
    mod = type(texts).__module__.split(".")[0]
    return mod in ("cudf", "pylibcudf")


def _cudf_strings(obj) -> DeviceStrings | None:
    """The device buffers of a cudf string column, without copying (None if unreadable).

    Uses pylibcudf's documented ``Column`` accessors (``offset``, ``size``, ``null_mask``,
    ``child(0)`` = offsets, ``data`` = chars); every buffer exposes
    ``__cuda_array_interface__``.
    """
    cp = _cupy()
    col = getattr(obj, "_column", obj)
    try:
        plc = col.to_pylibcudf(mode="read") if hasattr(col, "to_pylibcudf") else col
        n = int(plc.size())
        start = int(plc.offset())
        if n == 0:
            return DeviceStrings(cp.zeros(1, dtype=cp.int64), cp.zeros(0, dtype=cp.uint8))
        offsets_col = plc.child(0)
        odt = np.dtype(np.int64) if offsets_col.type().id().name == "INT64" else \
            np.dtype(np.int32)
        raw = cp.asarray(offsets_col.data()).view(odt)
        o0 = int(offsets_col.offset()) + start
        offsets = raw[o0:o0 + n + 1]
        chars = plc.data()
        data = cp.asarray(chars).view(cp.uint8) if chars is not None else \
            cp.zeros(0, dtype=cp.uint8)
        mask = plc.null_mask() if plc.null_count() else None
        validity = cp.asarray(mask).view(cp.uint8) if mask is not None else None
        return DeviceStrings(offsets, data, validity, start)
    except (AttributeError, TypeError, ValueError, IndexError):
        return None


def _host_strings(texts) -> DeviceStrings:
    """Host input through Arrow, copied to the device: one transfer per buffer."""
    import pyarrow as pa

    cp = _cupy()
    arr = to_arrow(texts)
    if arr.num_chunks == 1:
        chunk = arr.chunk(0)
    elif arr.num_chunks == 0:
        chunk = pa.array([], type=pa.large_string())
    else:
        large = pa.large_binary() if pa.types.is_binary(arr.type) or \
            pa.types.is_large_binary(arr.type) else pa.large_string()
        chunk = pa.concat_arrays([c.cast(large) for c in arr.chunks])
    b = chunk_buffers(chunk)
    o0 = int(b.offsets[0]) if b.n else 0
    o1 = int(b.offsets[-1]) if b.n else 0
    offsets = b.offsets.astype(np.int64) - o0
    data = b.data[o0:o1]
    validity = None
    if b.validity is not None:
        validity = cp.asarray(b.validity)
    return DeviceStrings(cp.asarray(offsets), cp.asarray(data), validity, b.validity_offset)


def device_strings(texts) -> DeviceStrings:
    """Any accepted input as device buffers: cudf columns without a copy, host input in
    one transfer per buffer."""
    if isinstance(texts, DeviceStrings):
        return texts
    mod = type(texts).__module__.split(".")[0]
    if mod in ("cudf", "pylibcudf"):
        s = _cudf_strings(texts)
        if s is not None:
            return s
        if hasattr(texts, "to_arrow"):   # fallback: through the host
            return _host_strings(texts.to_arrow())
        raise TypeError(f"cannot read the device buffers of {type(texts).__name__}")
    return _host_strings(texts)


# ---------------------------------------------------------------------------------------
# Launch helpers
# ---------------------------------------------------------------------------------------
def _grid(n: int, cp) -> tuple[int]:
    """Blocks for a grid-stride loop over n items (capped at 32 resident blocks per SM)."""
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    return (max(1, min((n + BLOCK - 1) // BLOCK, sms * 32)),)


def _auto_chunk_bytes(total_bytes: int, cp) -> int:
    """Chunk size that gives every resident thread slot a few chunks: a power of two in
    [256, 4096]."""
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    want = max(1, total_bytes // (sms * 2048 * 2))
    c = _MIN_CHUNK_BYTES
    while c < want and c < _MAX_CHUNK_BYTES:
        c *= 2
    return c


def _i32(x) -> np.int32:
    return np.int32(x)


def _i64(x) -> np.int64:
    return np.int64(x)


def _exclusive_scan(counts, cp):
    """[0, c0, c0+c1, ...] (len(counts) + 1 entries, int64)."""
    out = cp.empty(counts.shape[0] + 1, dtype=cp.int64)
    out[0] = 0
    if counts.shape[0]:
        out[1:] = cp.cumsum(counts)
    return out


# ---------------------------------------------------------------------------------------
# Stage timing: off unless a hook is installed
# ---------------------------------------------------------------------------------------
#: The stages of :func:`encode_cuda`, in the order they run.
STAGES = ("upload", "checks", "plan", "count", "scan", "write")
_NO_STAGE = contextlib.nullcontext()   # one shared no-op context: nothing made per call
_stage_hook: list = []                 # [(hook, plan dict)] while stage_timing is active


def _stage(name: str):
    """The context one launcher stage runs in: the installed hook's ``hook(name)``, else
    the shared no-op one."""
    return _stage_hook[-1][0](name) if _stage_hook else _NO_STAGE


def _note_plan(**facts) -> None:
    """Give the installed hook's plan dict the launch's shape (no-op without a hook)."""
    if _stage_hook:
        _stage_hook[-1][1].update(facts)


@contextlib.contextmanager
def stage_timing(hook):
    """Within the block, :func:`encode_cuda` runs each of its :data:`STAGES` inside
    ``hook(name)`` (a context manager: a timer that synchronizes the device around the
    stage, records CUDA events, ...). Yields a dict that each launch fills with its plan:
    ``n_docs``, ``chunk_bytes``, ``n_slots``, ``grid``, ``tokens``.

    For measurement (``benchmarks/gpu_check.py``): the hook is process-wide while the
    block runs, and the launcher does exactly what it does without one. Without a hook a
    stage costs one shared no-op context."""
    plan: dict = {}
    _stage_hook.append((hook, plan))
    try:
        yield plan
    finally:
        _stage_hook.pop()


# ---------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------
def _plan_chunks(mod, model, doc_off, data, validity, has_validity, validity_offset, n,
                 chunk_bytes, cp):
    """Cut the documents into chunks: ``(n_slots, piece_first, chunk_begin, chunk_end)``.

    Slot j is chunk ``data[chunk_begin[j]:chunk_end[j]]`` or dead (-1); document d owns
    slots ``piece_first[d]:piece_first[d+1]``. No host round trip.
    """
    size = int(data.shape[0])
    # Every document has at most bytes/chunk_bytes + 1 pieces.
    n_slots = n + size // chunk_bytes + 1
    piece_counts = cp.empty(n + 1, dtype=cp.int64)
    mod.get_function("dwp_piece_counts")(
        _grid(n, cp), (BLOCK,),
        (doc_off, validity, _i64(validity_offset), _i32(has_validity), _i64(n),
         _i64(chunk_bytes), piece_counts))
    piece_first = cp.cumsum(piece_counts)          # piece_first[0] == 0
    chunk_begin = cp.empty(n_slots, dtype=cp.int64)
    mod.get_function("dwp_chunk_starts")(
        _grid(n_slots, cp), (BLOCK,),
        (doc_off, piece_first, _i64(n), _i64(n_slots), _i64(chunk_bytes), data,
         model.boundary, chunk_begin))
    chunk_end = cp.empty(n_slots, dtype=cp.int64)
    mod.get_function("dwp_chunk_ends")(
        _grid(n_slots, cp), (BLOCK,),
        (doc_off, piece_first, _i64(n), _i64(n_slots), chunk_begin, chunk_end))
    return n_slots, piece_first, chunk_begin, chunk_end


def count_cuda(tok, texts, *, chunk_bytes: int | None = None) -> tuple:
    """``(lengths, unknown_tokens)`` of ``texts`` on the current device (``tok.count_lengths``
    on the GPU): the tokens of every document (host int64 array) and the ``[UNK]`` among
    them, from :func:`encode_cuda`'s ids and offsets, which stay on the device; only the
    counts come back."""
    token_ids, offsets = encode_cuda(tok, texts, chunk_bytes=chunk_bytes)
    unknown = int((token_ids == tok.vocab.unk_id).sum()) if len(token_ids) else 0
    return (offsets[1:] - offsets[:-1]).get(), unknown


def encode_cuda(tok, texts, *, chunk_bytes: int | None = None, offsets_unit=None,
                word_ids: bool = False):
    """Token ids of every document (no special tokens), computed on the current device.

    Parameters
    ----------
    tok : WordPieceTokenizer
    texts : DeviceStrings, cudf Series/Column, or any host input ``tok.encode`` accepts
        Device buffers are read in place; host input is copied to the device once.
    chunk_bytes : int, optional
        Nominal chunk size (bytes per thread); default: from the input size and the number
        of SMs. The result does not depend on it.

    offsets_unit : "chars", "bytes" or None; word_ids : bool
        Also the offsets / word ids (docs/design.md §2.9): then four arrays are returned.

    Returns
    -------
    (token_ids, offsets) : cupy int32 array, cupy int64 array of ``n + 1`` entries
        Document ``d`` is ``token_ids[offsets[d]:offsets[d+1]]``; equal to ``tok.encode``.
        With ``offsets_unit`` or ``word_ids``: ``(token_ids, offsets, offset_mapping,
        word_ids)``, the last two (tokens x 2 int64, int32) None when not asked, equal to
        ``tok.encode(..., return_offsets_mapping=..., return_word_ids=...)``.

    Notes
    -----
    **Memory.** Besides the output: 32 bytes per chunk slot (``n + bytes / chunk_bytes``) and, for
    int32 offsets, an int64 copy of the offsets. The bytes are never copied on the device.
    """
    cp = _cupy()
    with _stage("upload"):
        s = device_strings(texts)
    n = s.n
    if n < 0:
        raise ValueError("offsets must have at least one entry")
    extras = offsets_unit is not None or word_ids
    if n == 0:
        if extras:
            return (cp.zeros(0, dtype=cp.int32), cp.zeros(1, dtype=cp.int64),
                    cp.zeros((0, 2), dtype=cp.int64) if offsets_unit else None,
                    cp.zeros(0, dtype=cp.int32) if word_ids else None)
        return cp.zeros(0, dtype=cp.int32), cp.zeros(1, dtype=cp.int64)
    if s.data.dtype != cp.uint8 or s.data.ndim != 1:
        raise TypeError(f"data must be a 1-D uint8 array, got {s.data.dtype} "
                        f"with shape {tuple(s.data.shape)}")
    if s.offsets.dtype not in (cp.int32, cp.int64):
        raise TypeError(f"offsets must be int32 or int64, got {s.offsets.dtype}")
    with _stage("checks"):
        doc_off = cp.ascontiguousarray(s.offsets, dtype=cp.int64)
        size = int(s.data.shape[0])
        # The CPU extension's checks, in its order and with its words (one backend contract).
        decreasing, outside = (bool(x) for x in cp.stack([
            cp.any(doc_off[1:] < doc_off[:-1]),
            (doc_off[0] < 0) | (doc_off[-1] > size)]).get())
        if decreasing:
            raise ValueError("offsets are not non-decreasing")
        if outside:
            raise ValueError("offsets point outside the data buffer")
        data = s.data if s.data.flags.c_contiguous else cp.ascontiguousarray(s.data)
        validity = s.validity
        has_validity = validity is not None
        if validity is not None:
            validity = cp.ascontiguousarray(validity).view(cp.uint8)
            if int(validity.shape[0]) * 8 < int(s.validity_offset) + n:
                raise ValueError("validity bitmap too short")
        else:
            validity = cp.zeros(1, dtype=cp.uint8)

        if chunk_bytes is None:
            chunk_bytes = _auto_chunk_bytes(size, cp)
        chunk_bytes = int(chunk_bytes)
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")

        model = _device_model(tok)
        mod = _module()
    with _stage("plan"):
        n_slots, piece_first, chunk_begin, chunk_end = _plan_chunks(
            mod, model, doc_off, data, validity, has_validity, int(s.validity_offset), n,
            chunk_bytes, cp)
    _note_plan(n_docs=n, chunk_bytes=chunk_bytes, n_slots=int(n_slots),
               grid=_grid(n_slots, cp)[0])

    max_chars = _i32(kernel_model(tok).max_input_chars_per_word)
    if extras:
        return _encode_extras(mod, model, max_chars, data, n, n_slots, piece_first,
                              chunk_begin, chunk_end, offsets_unit, word_ids, cp)
    tokenize = mod.get_function("dwp_chunk_tokenize")
    with _stage("count"):
        counts = cp.empty(n_slots, dtype=cp.int64)
        dummy_off, dummy_ids = cp.zeros(1, dtype=cp.int64), cp.zeros(1, dtype=cp.int32)
        tokenize(_grid(n_slots, cp), (BLOCK,),
                 (model.vocab, model.norm, max_chars, data, chunk_begin, chunk_end,
                  _i64(n_slots), _i32(0), counts, dummy_off, dummy_ids))
    with _stage("scan"):
        tok_off = _exclusive_scan(counts, cp)
        total = int(tok_off[-1])
    _note_plan(tokens=total)
    with _stage("write"):
        ids = cp.empty(max(total, 1), dtype=cp.int32)
        tokenize(_grid(n_slots, cp), (BLOCK,),
                 (model.vocab, model.norm, max_chars, data, chunk_begin, chunk_end,
                  _i64(n_slots), _i32(1), counts, tok_off, ids))
        out = ids[:total], tok_off[piece_first]
    return out


def _encode_extras(mod, model, max_chars, data, n, n_slots, piece_first, chunk_begin,
                   chunk_end, offsets_unit, word_ids, cp):
    """encode_cuda's count / scan / write with offsets and word ids: the count pass also
    counts each chunk's words and units, whose per-document exclusive scans shift the write
    pass's spans and word ids."""
    tokenize = mod.get_function("dwp_chunk_tokenize_offsets")
    dummy64, dummy32 = cp.zeros(2, dtype=cp.int64), cp.zeros(1, dtype=cp.int32)
    flags = (_i32(offsets_unit == "chars"), _i32(offsets_unit is not None), _i32(bool(word_ids)))
    with _stage("count"):
        counts = cp.empty(n_slots, dtype=cp.int64)
        words = cp.empty(n_slots, dtype=cp.int64)
        units = cp.empty(n_slots, dtype=cp.int64)
        tokenize(_grid(n_slots, cp), (BLOCK,),
                 (model.vocab, model.norm, max_chars, data, chunk_begin, chunk_end,
                  _i64(n_slots), _i32(0)) + flags +
                 (counts, words, units, dummy64, dummy64, dummy64, piece_first, _i64(n),
                  dummy32, dummy64, dummy32))
    with _stage("scan"):
        tok_off = _exclusive_scan(counts, cp)
        word_off = _exclusive_scan(words, cp)
        unit_off = _exclusive_scan(units, cp)
        total = int(tok_off[-1])
    _note_plan(tokens=total)
    with _stage("write"):
        ids = cp.empty(max(total, 1), dtype=cp.int32)
        spans = cp.empty(max(2 * total, 2), dtype=cp.int64) if offsets_unit else dummy64
        wids = cp.empty(max(total, 1), dtype=cp.int32) if word_ids else dummy32
        tokenize(_grid(n_slots, cp), (BLOCK,),
                 (model.vocab, model.norm, max_chars, data, chunk_begin, chunk_end,
                  _i64(n_slots), _i32(1)) + flags +
                 (counts, words, units, tok_off, word_off, unit_off, piece_first, _i64(n),
                  ids, spans, wids))
        out = (ids[:total], tok_off[piece_first],
               spans[:2 * total].reshape(total, 2) if offsets_unit else None,
               wids[:total] if word_ids else None)
    return out


# ---------------------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------------------
def build_windows_cuda(token_ids, offsets, max_length: int, stride: int, truncation: bool,
                       add_special_tokens: bool, cls_id: int, sep_id: int, pad_id: int,
                       logid_offset: int, padding: bool, mask_int8: bool = False,
                       pad_width: int = -1, num_threads: int = 0):
    """The device twin of ``_ext.build_windows`` (same arguments, same results, CuPy arrays).

    Returns ``(input_ids, attention_mask, metadata, row_offsets, doc_row_offsets)``:
    padded: ``input_ids``/``attention_mask`` are rows x pad_width (default max_length) and
    ``row_offsets`` is None; ragged (``padding=False``): they are flat and row ``r`` is
    ``[row_offsets[r], row_offsets[r+1])``. ``metadata`` is rows x 3 int64 (logID, start,
    stop), stop inclusive. ``num_threads`` is accepted for symmetry and ignored.
    """
    del num_threads
    cp = _cupy()
    max_length, stride = int(max_length), int(stride)
    if max_length < 1 or max_length > 2**31 - 1:
        raise ValueError(f"max_length must be in [1, 2**31-1], got {max_length}")
    body = max_length - (2 if add_special_tokens else 0)
    if body < 1:
        raise ValueError(f"max_length {max_length} leaves no room for tokens (with special "
                         f"tokens it must be >= 3)")
    if stride < 0 or stride >= body:
        raise ValueError(f"stride must be in [0, {body}), got {stride}")
    token_ids = cp.ascontiguousarray(cp.asarray(token_ids), dtype=cp.int32)
    doc_tok_off = cp.ascontiguousarray(cp.asarray(offsets), dtype=cp.int64)
    if doc_tok_off.shape[0] < 1:
        raise ValueError("offsets must not be empty")
    n = int(doc_tok_off.shape[0]) - 1
    # The CPU extension's checks, in its order and with its words (one backend contract).
    size = int(token_ids.shape[0])
    if n >= 0:
        outside, decreasing = (bool(x) for x in cp.stack([
            (doc_tok_off[0] < 0) | (doc_tok_off[-1] > size),
            cp.any(doc_tok_off[1:] < doc_tok_off[:-1]) if n else cp.asarray(False)]).get())
        if outside:
            raise ValueError("offsets point outside token_ids")
        if decreasing:
            raise ValueError("offsets are not non-decreasing")
    logid_offset = int(logid_offset)
    # n documents take logIDs logid_offset .. logid_offset + n - 1
    if logid_offset < 0 or logid_offset > 2**63 - 1 - max(n - 1, 0):
        raise ValueError(f"logid_offset must be >= 0 and leave room for the batch, got "
                         f"{logid_offset}")
    pad_width = int(pad_width)
    if pad_width < 0:
        pad_width = max_length
    if pad_width > max_length:
        raise ValueError(f"pad_width {pad_width} exceeds max_length {max_length}")
    mask_dt = cp.int8 if mask_int8 else cp.int32
    if n == 0:
        ids = cp.zeros((0, pad_width) if padding else (0,), dtype=cp.int32)
        mask = cp.zeros(ids.shape, dtype=mask_dt)
        row_off = None if padding else cp.zeros(1, dtype=cp.int64)
        return ids, mask, cp.zeros((0, 3), dtype=cp.int64), row_off, \
            cp.zeros(1, dtype=cp.int64)

    mod = _module()
    flags = (_i32(max_length), _i32(stride), _i32(bool(truncation)),
             _i32(bool(add_special_tokens)))
    rows = cp.empty(n + 1, dtype=cp.int64)
    cells = cp.empty(n + 1, dtype=cp.int64)
    width0 = cp.empty(n, dtype=cp.int32)
    mod.get_function("dwp_window_counts")(
        _grid(n, cp), (BLOCK,), (doc_tok_off, _i64(n)) + flags + (rows, cells, width0))
    doc_rows = cp.cumsum(rows)
    if padding:
        n_rows, longest = (int(x) for x in cp.stack(
            [doc_rows[-1], width0.max().astype(cp.int64)]).get())
        if pad_width < longest:
            raise ValueError(f"row width {pad_width} is shorter than the longest row "
                             f"({longest} tokens)")
        doc_cells = cells   # unused when padded
        n_cells = n_rows * pad_width
    else:
        doc_cells = cp.cumsum(cells)
        n_rows, n_cells = (int(x) for x in cp.stack([doc_rows[-1], doc_cells[-1]]).get())
    ids = cp.empty(max(n_cells, 1), dtype=cp.int32)
    mask = cp.empty(max(n_cells, 1), dtype=mask_dt)
    meta = cp.empty(max(3 * n_rows, 1), dtype=cp.int64)
    row_off = cp.empty(n_rows + 1, dtype=cp.int64) if not padding else cp.zeros(1, cp.int64)
    kernel = "dwp_window_fill_mask8" if mask_int8 else "dwp_window_fill_mask32"
    mod.get_function(kernel)(
        _grid(n_rows, cp), (BLOCK,),
        (token_ids, doc_tok_off, doc_rows, doc_cells, _i64(n), _i64(n_rows),
         _i64(logid_offset)) + flags +
        (_i32(cls_id), _i32(sep_id), _i32(pad_id), _i32(bool(padding)), _i32(pad_width),
         ids, mask, meta, row_off))
    meta = meta[:3 * n_rows].reshape(n_rows, 3)
    if padding:
        shape = (n_rows, pad_width)
        return ids[:n_cells].reshape(shape), mask[:n_cells].reshape(shape), meta, None, \
            doc_rows
    return ids[:n_cells], mask[:n_cells], meta, row_off, doc_rows


def _convert_device(arr, return_tensors: str):
    if return_tensors == "cp":
        return arr
    if return_tensors == "np":
        return arr.get() if hasattr(arr, "get") else arr
    import torch

    return torch.from_dlpack(arr)


def windows_cuda(tok, texts, *, max_length: int = 128, stride: int = 0,
                 truncation: bool = False, add_special_tokens: bool = True,
                 padding="max_length", return_tensors: str = "cp", logid_offset: int = 0,
                 mask_dtype="int32", chunk_bytes: int | None = None,
                 bucket_widths="auto", text_pair=None, return_overflowing_tokens=None,
                 return_token_type_ids=None, return_sequence_ids=None,
                 return_offsets_mapping=None, return_word_ids=None,
                 return_special_tokens_mask=None, offsets_unit=None):
    """``tok(texts, ...)`` on the GPU: the same :class:`~daskwp.core.ragged.BatchWindows` as
    the CPU path (parameters and validation of :func:`daskwp.core.windows.window_params`), with
    CuPy arrays (``return_tensors="cp"``, the default here), torch tensors sharing the
    device memory through DLPack (``"pt"``), or NumPy copies (``"np"``).
    ``doc_row_offsets`` stays a CuPy array. Sentence pairs (``text_pair``) and the
    ``token_type_ids`` / ``sequence_ids`` outputs are the array pass of
    :mod:`daskwp.core.pairs` on CuPy, the code the CPU runs on NumPy; so are the
    ``offset_mapping`` / ``word_ids`` / ``special_tokens_mask`` outputs, gathered from the
    kernel's offsets and word ids (docs/design.md §2.9).
    """
    from ..core.pairs import build_pair_windows, extras_options, finish_windows, \
        framed_single_windows, sequence_options
    from ..core.ragged import Encoding

    p = window_params(max_length, stride, truncation, add_special_tokens, padding,
                      return_tensors, logid_offset, mask_dtype, bucket_widths,
                      post=getattr(tok, "processor", None), vocab=kernel_model(tok).vocab)
    p, seq = sequence_options(p, text_pair is not None, return_overflowing_tokens,
                              return_token_type_ids, return_sequence_ids)
    extras = extras_options(return_offsets_mapping, return_word_ids,
                            return_special_tokens_mask, offsets_unit)
    unit = extras["offsets_unit"] if extras["offset_mapping"] else None
    want = unit is not None or extras["word_ids"]

    def encode(t):
        if want:
            return Encoding(*encode_cuda(tok, t, chunk_bytes=chunk_bytes, offsets_unit=unit,
                                         word_ids=extras["word_ids"]), unit)
        return Encoding(*encode_cuda(tok, t, chunk_bytes=chunk_bytes))

    enc = encode(texts)
    token_ids, offsets = enc.token_ids, enc.offsets
    vocab = kernel_model(tok).vocab
    convert = (lambda a: _convert_device(a, p.return_tensors))
    if text_pair is not None:
        cp = _cupy()
        return build_pair_windows(
            enc, encode(text_pair), vocab, p,
            strategy=seq["strategy"], overflow=seq["overflow"], windowed=seq["windowed"],
            return_token_type_ids=seq["return_token_type_ids"],
            return_sequence_ids=seq["return_sequence_ids"],
            convert=lambda a: convert(cp.ascontiguousarray(a)), xp=cp, extras=extras)
    if not p.native:            # a frame the native fill does not write
        return framed_single_windows(enc, vocab, p, seq, extras, convert, _cupy())
    padded, cls_id, sep_id, pad_id, width = fill_plan(vocab, p, offsets)
    check_output_size(p, width, offsets, seq=seq, extras=extras)
    out = build_windows_cuda(
        token_ids, offsets, p.max_length, p.stride, p.truncation, p.add_special_tokens,
        cls_id, sep_id, pad_id, p.logid_offset, padded, p.mask_int8, width)
    return finish_windows(out, enc, p, seq, extras, convert, _cupy(), vocab)
