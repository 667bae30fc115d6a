"""The CPU backend: the native extension (``daskwp._ext``, built from ``kernels/``).

Encoding reads the Arrow buffers of the input (offsets + UTF-8 bytes) directly, releases the
GIL and splits a batch over ``num_threads`` threads; the window fill runs natively over the
whole batch (count rows, scan, allocate exact-size outputs, fill). No per-document Python.

Word cache: each thread of an encode takes a word memo (whitespace chunks and words with
their token ids) from a process-wide pool in the extension and gives it back after the
call, so that later calls with the same model run warm. A memo is keyed by a hash of the
vocabulary blob, the normalization blob and ``max_input_chars_per_word`` (computed here
once per model), so tokenizers with other vocabularies or settings never share entries.
The pool's memory (idle and in use) is at most ``word_cache_mb`` MB: the ``dask.config``
value ``daskwp.word_cache_mb`` when set, else ``DASKWP_WORD_CACHE_MB`` (read here, through
the option table, when this module is imported), else 256; 0 keeps nothing between calls.
:func:`word_cache_info` reports it and :func:`daskwp.memory.clear` empties it.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import weakref

import numpy as np

from .. import _ext
from ..core import config
from ..core.buckets import fill_buckets
from ..core.cache import register_cache
from ..core.options import check_int, env_value
from ..core.pairs import build_pair_windows, finish_windows, framed_single_windows
from ..core.ragged import BatchWindows, Encoding
from ..core.strings import chunk_buffers, piece_ranges, text_chunks
from ..core.windows import WindowParams, check_output_size, convert_tensors, fill_plan, \
    window_params
from .protocol import KernelModel

__all__ = ["CPUBackend", "default_num_threads", "set_task_num_threads", "set_word_cache_limit",
           "set_own_threads", "set_worker_task_threads", "windows_from_encoding",
           "word_cache_info", "word_cache_release"]

#: The pool's limit unless ``daskwp.word_cache_mb`` says otherwise: DASKWP_WORD_CACHE_MB,
#: else 256 MB; the extension reads no environment variable.
_ENV_MB = env_value("word_cache_mb")
_INITIAL_LIMIT = (256 if _ENV_MB is None else _ENV_MB) << 20
_ext.word_cache_set_limit(_INITIAL_LIMIT)
_limit_lock = threading.Lock()
_applied_mb: "list" = [None]  # the word_cache_mb last applied (None: the initial limit)
_keys: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _cache_key(model: KernelModel) -> int:
    """A non-zero 64-bit hash of what a word memo's entries depend on: both blobs and the
    word limit (computed once per model)."""
    key = _keys.get(model)
    if key is None:
        h = hashlib.blake2b(digest_size=8, person=b"daskwp-memo")
        for blob in (model.vocab_blob, model.norm_blob):
            h.update(len(blob).to_bytes(8, "little"))
            h.update(memoryview(np.ascontiguousarray(blob)).cast("B"))
        h.update(int(model.max_input_chars_per_word).to_bytes(8, "little", signed=True))
        key = int.from_bytes(h.digest(), "little") | 1
        _keys[model] = key
    return key


def _apply_word_cache_limit() -> None:
    """Set the pool's limit from ``daskwp.word_cache_mb`` when it changed."""
    mb = config.get("word_cache_mb")
    if mb == _applied_mb[0]:
        return
    with _limit_lock:
        if mb is None:
            _ext.word_cache_set_limit(_INITIAL_LIMIT)
        else:
            mb = check_int("word_cache_mb", mb, lo=0, allowed="an integer >= 0 (MB) or None")
            _ext.word_cache_set_limit(mb << 20)
        _applied_mb[0] = mb


def word_cache_info() -> dict:
    """Statistics of the CPU word cache (the extension's pool of word memos).

    Returns
    -------
    dict
        In bytes and counts: ``limit`` and ``bytes`` (memos idle and in use), ``memos``,
        ``idle``, ``keys`` (distinct models among the idle memos), ``hits`` and ``misses``
        (chunks and words served from a memo / walked and offered to it, counted when a memo
        is given back), ``long_resets``, ``created``, ``copied`` (of those, copies of a warm
        memo made for a call's other threads, docs/design.md §3.5), ``merged`` (memos merged
        with the others one call made with them, §3.5), ``reused``, ``evictions``,
        ``refused`` (threads that ran without a memo for lack of room), ``spare_bytes``
        (mappings of freed memos kept, within ``limit``, for the next memos;
        ``word_cache_mb=0`` gives them back), ``recycled`` (memos made in such a mapping)
        and ``lent`` (small memos made for threads beyond the process's own,
        :func:`set_own_threads`).
        Public as ``daskwp.memory.info()["word_cache"]``.
    """
    _apply_word_cache_limit()
    return {k: int(v) for k, v in _ext.word_cache_info().items()}


def set_word_cache_limit(nbytes: int) -> None:
    """Set the word-memo pool's limit to ``nbytes`` (>= 0) now; idle memos above it are
    freed. It holds until ``daskwp.word_cache_mb`` changes (the next call applies that)."""
    nbytes = check_int("word_cache", nbytes, lo=0, allowed="a number of bytes >= 0")
    with _limit_lock:
        _applied_mb[0] = config.get("word_cache_mb")
        _ext.word_cache_set_limit(nbytes)


def word_cache_release() -> int:
    """Give back the memory the word-memo pool keeps from freed memos (``spare_bytes`` of
    :func:`word_cache_info`: the next memos are made in it, docs/design.md §3.5); returns
    its bytes. :func:`daskwp.memory.clear` empties the memos but keeps this memory."""
    return int(_ext.word_cache_release())


def _word_cache_info_for_registry() -> dict:
    i = word_cache_info()
    return dict(i, entries=i["memos"], maxsize=i["limit"])


register_cache("word_cache", _ext.word_cache_clear, _word_cache_info_for_registry)


_TASK_THREADS = threading.local()


def set_task_num_threads(num_threads) -> None:
    """The kernel threads of the calls made on this thread that set none
    (:func:`default_num_threads`): a number, a function of no argument that gives it at
    each call, or None: the default's own choice. The threads of a job that runs in-process
    set a function (:class:`daskwp.distributed.local.InProcess`): each call gets the share
    of the cores of the tasks running at that moment, so that a partition left alone at the
    end of a job tokenizes its next slices on the cores the others freed."""
    _TASK_THREADS.num_threads = num_threads


#: On a Dask worker's task thread, a function of no argument: the kernel threads the job's
#: driver gave the running task, or None (:func:`set_worker_task_threads`).
_WORKER_TASK_THREADS: list = [None]


#: The most MB of the word memo of a kernel thread a process runs beyond its own threads
#: (:func:`set_own_threads`). One thread, cold, over a 64 MB partition of the benchmark's
#: corpus, in ns of CPU per byte: 30 MB 2.99 (warm 2.35), 16 MB 3.09, 8 MB 5.33, 4 MB 7.87,
#: 2 MB 9.87, no memo 9.29: 16 MB keeps the gain at half a full memo's 30 MB.
LENT_MEMO_MB = 16


def set_own_threads(threads: int, lent_memo_bytes: int = LENT_MEMO_MB << 20) -> None:
    """The kernel threads this process has of its own (its Dask workers' threads; 0: no
    bound, the default). A kernel call's threads beyond them (a job's last write given
    another worker process's idle core, :func:`set_worker_task_threads`) take a word memo
    of their own of at most ``lent_memo_bytes`` (0: none), kept for such threads, instead
    of a copy of the warm memo (docs/design.md §3.5)."""
    threads = check_int("threads", threads, lo=0, allowed="an integer >= 0")
    lent_memo_bytes = check_int("lent_memo_bytes", lent_memo_bytes, lo=0,
                                allowed="a number of bytes >= 0")
    _ext.word_cache_set_lent(threads, lent_memo_bytes)


def set_worker_task_threads(threads) -> None:
    """Where :func:`default_num_threads` asks, on a Dask worker's task thread, how many
    kernel threads the running task was given (a function of no argument giving a number
    or None; :func:`daskwp.distributed.state.task_threads` registers itself: a cluster
    job's last partitions take their host's idle workers' threads)."""
    _WORKER_TASK_THREADS[0] = threads


def default_num_threads() -> int:
    """All cores (0), except inside a Dask worker thread (1, where the worker owns the
    parallelism, or the threads the job's driver gave the running task:
    :func:`set_worker_task_threads`), and on a thread given its share
    (:func:`set_task_num_threads`). Asked again by every kernel call that sets none."""
    share = getattr(_TASK_THREADS, "num_threads", None)
    if callable(share):
        share = share()
    if share is not None:
        return share
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker
            get_worker()
        except (ValueError, ImportError):
            return 0
        given = _WORKER_TASK_THREADS[0]
        return (given() if given is not None else None) or 1
    return 0


#: :meth:`CPUBackend.count` counts this much text per kernel call (at least a document).
COUNT_PIECE_BYTES = 8 << 20


class CPUBackend:
    """The extension's encode and window fill."""

    name = "cpu"

    def encode(self, model: KernelModel, texts, num_threads: int, offsets_unit=None,
               word_ids: bool = False) -> Encoding:
        """Ragged ids of ``texts``; ``offsets_unit`` ("chars" / "bytes", None: none) and
        ``word_ids`` add the offsets and word ids (docs/design.md §2.9)."""
        chunks = text_chunks(texts)
        _apply_word_cache_limit()
        key = _cache_key(model)
        unit = {None: 0, "bytes": 1, "chars": 2}[offsets_unit]

        def run(chunk):   # (ids, offsets from 0, [spans, word ids,] [UNK]) of one chunk
            b = chunk_buffers(chunk)
            fn = _ext.encode64 if b.offsets.dtype == np.int64 else _ext.encode32
            return fn(model.vocab_blob, model.norm_blob, model.max_input_chars_per_word,
                      b.offsets, b.data, b.validity, b.validity_offset, int(num_threads), key,
                      unit, bool(word_ids))

        if len(chunks) == 1:
            # One chunk (most calls): the kernel's arrays as they are. A short call's cost is
            # mostly this layer's code and numpy's, which a caller's other work evicts from
            # the CPU caches between calls (docs/design.md §3.5).
            out = run(chunks[0])
            return Encoding(out[0], out[1], out[2] if unit else None,
                            out[3] if word_ids else None, offsets_unit,
                            (model.vocab.unk_id, out[-1]))
        # None or several chunks: their arrays joined, each chunk's offsets after the last
        outs = [run(c) for c in chunks]
        off_parts, base = [np.zeros(1, dtype=np.int64)], 0
        for out in outs:
            off_parts.append(out[1][1:] + base)
            base += len(out[0])
        token_ids = np.concatenate([o[0] for o in outs] or [np.zeros(0, dtype=np.int32)])
        spans = np.concatenate([o[2] for o in outs] or [np.zeros((0, 2), dtype=np.int64)]) \
            if unit else None
        words = np.concatenate([o[3] for o in outs] or [np.zeros(0, dtype=np.int32)]) \
            if word_ids else None
        return Encoding(token_ids.astype(np.int32, copy=False), np.concatenate(off_parts),
                        spans, words, offsets_unit,
                        (model.vocab.unk_id, sum(int(o[-1]) for o in outs)))

    def count(self, model: KernelModel, texts, num_threads) -> tuple:
        """``(lengths, tokens, unknown)`` of ``texts``: the tokens of each document (int64),
        their total and the ``[UNK]`` among them, as :meth:`encode`'s ids and offsets give
        them, counted by the extension's count loop without making the ids (same core, same
        word memos). A call per :data:`COUNT_PIECE_BYTES` of text, each on ``num_threads``
        kernel threads: a number, or a function of no argument asked before each piece (an
        in-process job's share of the cores at that moment: a partition counted alone at
        the end of a job takes the cores the others freed)."""
        _apply_word_cache_limit()
        key = _cache_key(model)
        lengths, tokens, unknown = [], 0, 0
        for chunk in text_chunks(texts):
            b = chunk_buffers(chunk)
            fn = _ext.count64 if b.offsets.dtype == np.int64 else _ext.count32
            for start, stop in piece_ranges(b.offsets, COUNT_PIECE_BYTES):
                threads = num_threads() if callable(num_threads) else num_threads
                n, t, u = fn(model.vocab_blob, model.norm_blob, model.max_input_chars_per_word,
                             b.offsets[start:stop + 1], b.data, b.validity,
                             b.validity_offset + start, int(threads), key)
                lengths.append(n)
                tokens += t
                unknown += u
        if len(lengths) != 1:
            lengths = [np.concatenate(lengths or [np.zeros(0, dtype=np.int64)])]
        return lengths[0], int(tokens), int(unknown)

    def build_windows(self, encoding: Encoding, vocab, p: WindowParams,
                      num_threads: int, seq: dict | None = None,
                      extras: dict | None = None) -> BatchWindows:
        """The windows of ``encoding``; ``seq`` (:func:`daskwp.core.pairs.sequence_options`)
        adds ``token_type_ids`` / ``sequence_ids``, ``extras``
        (:func:`daskwp.core.pairs.extras_options`) ``offset_mapping``, ``word_ids`` and
        ``special_tokens_mask`` (docs/design.md §2.9)."""
        convert = (lambda a: convert_tensors(a, p.return_tensors))
        if not p.native:            # a frame the native fill does not write
            return framed_single_windows(encoding, vocab, p, seq, extras, convert, np)
        if p.padding == "bucket":   # straight into the buckets, no ragged rows first
            return fill_buckets(encoding, vocab, p, seq, extras, convert, num_threads)
        token_ids = np.ascontiguousarray(encoding.token_ids, dtype=np.int32)
        offsets = np.ascontiguousarray(encoding.offsets, dtype=np.int64)
        padded, cls_id, sep_id, pad_id, width = fill_plan(vocab, p, offsets)
        check_output_size(p, width, offsets, seq=seq, extras=extras)
        out = _ext.build_windows(
            token_ids, offsets, p.max_length, p.stride, bool(p.truncation),
            p.add_special_tokens, cls_id, sep_id, pad_id, p.logid_offset, padded, p.mask_int8,
            width, num_threads)
        return finish_windows(out, encoding, p, seq, extras, convert, np, vocab, num_threads)

    def build_pair_windows(self, enc_a: Encoding, enc_b: Encoding, vocab, p: WindowParams,
                           seq: dict, extras: dict | None = None) -> BatchWindows:
        """The rows of the pairs ``(enc_a[i], enc_b[i])`` (docs/design.md §2.5): the array
        pass of :func:`daskwp.core.pairs.build_pair_windows`, on NumPy."""
        return build_pair_windows(
            enc_a, enc_b, vocab, p, strategy=seq["strategy"], overflow=seq["overflow"],
            windowed=seq["windowed"], return_token_type_ids=seq["return_token_type_ids"],
            return_sequence_ids=seq["return_sequence_ids"],
            convert=lambda a: convert_tensors(np.ascontiguousarray(a), p.return_tensors),
            xp=np, extras=extras)


CPU = CPUBackend()


def windows_from_encoding(encoding, vocab, *, max_length: int = 128, stride: int = 0,
                          truncation: bool = False, add_special_tokens: bool = True,
                          padding="max_length", return_tensors: str = "np",
                          logid_offset: int = 0, mask_dtype="int32",
                          num_threads: int = 0, bucket_widths="auto") -> BatchWindows:
    """Strided windows of already tokenized documents (on the CPU).

    Parameters
    ----------
    encoding : daskwp.Encoding
        Ragged token ids (``token_ids`` int32, ``offsets`` int64, ``n + 1`` entries), without
        special tokens — what :meth:`WordPieceTokenizer.encode` returns.
    vocab : daskwp.Vocabulary
        Source of the [CLS], [SEP] and [PAD] ids (never constants). [CLS]/[SEP] are only
        looked up with ``add_special_tokens=True``, [PAD] only when padding.
    Other parameters
        As :meth:`WordPieceTokenizer.__call__`.

    Returns
    -------
    BatchWindows

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> enc = tok.encode(["a longer text than one row holds"])
    >>> out = daskwp.windows_from_encoding(enc, tok.vocab, max_length=6, stride=1)
    >>> out.metadata
    array([[0, 1, 3],
           [0, 1, 4]], dtype=int64)
    """
    p = window_params(max_length, stride, truncation, add_special_tokens, padding,
                      return_tensors, logid_offset, mask_dtype, bucket_widths)
    threads = check_int("num_threads", num_threads, lo=0, allowed="a non-negative integer")
    return CPU.build_windows(encoding, vocab, p, threads)
