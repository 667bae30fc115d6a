"""The host memory pool behind daskwp's NumPy outputs (CPU).

Output arrays of 4 MB and more (token ids, padded windows, masks, metadata) come from a
per-process pool: when such an array is freed its block is kept and handed out again to a
later call that needs about as much. Writing fresh memory costs page faults on first
touch; on some machines (virtual machines above all) that costs as much as tokenizing, and
Dask workers return freed memory to the system at once, so every partition paid it again.

The pool keeps at most ``limit`` bytes of freed blocks: ``DASKWP_HOST_POOL_MB`` (the option
``host_pool_mb``, read here through the option table when this module is imported and
passed to the extension; 0 turns reuse off), else an eighth of the physical memory, between 256 MB and
16 GB (a Dask worker then reuses one partition's outputs; padded 128-wide windows of short
documents take ~14 bytes per input byte). Memory in use is never limited.

Transparent huge pages: the pool's blocks never ask for them (the word memos do, unless the
option ``huge_pages``, ``DASKWP_HUGE_PAGES``, is false), and :func:`tune_numpy_huge_pages`
turns NumPy's request for them off in the processes daskwp owns (the ``daskwp`` command,
workers of clusters :func:`daskwp.connect` starts). Where THP is ``madvise`` (common on
VMs), a huge page is zeroed, and memory may be compacted for it, on first touch: growing a
process costs several times the system CPU (benchmarks/results/thp.md).
"""

from __future__ import annotations

from .. import _ext
from ..core.options import env_value

__all__ = ["host_pool_info", "host_pool_mark", "madvise_range", "release_freed_heap",
           "release_host_memory", "release_idle_host_memory", "set_host_pool_limit",
           "trim_host_memory",
           "tune_command_malloc", "tune_numpy_huge_pages",
           "tune_worker_arrow_pool", "tune_worker_malloc"]


def _limit_from_environment() -> None:
    """Pass ``DASKWP_HOST_POOL_MB`` (when set) to the extension, whose default is an eighth
    of the physical memory, between 256 MB and 16 GB, and ``DASKWP_HUGE_PAGES`` (the word
    memos' huge pages, default on)."""
    mb = env_value("host_pool_mb")
    if mb is not None:
        _ext.host_pool_set_limit(mb << 20)
    if env_value("huge_pages") is False:
        _ext.set_huge_pages(False)


_limit_from_environment()


def host_pool_info() -> dict:
    """The host memory pool that output arrays of 4 MB and more come from.

    Returns
    -------
    dict
        ``{"limit", "cached", "live"}`` in bytes: the most kept for reuse, the freed blocks
        kept now, and the pooled blocks in use.

    Public as ``daskwp.memory.info()["host_pool"]``.
    """
    limit, cached, live = _ext.host_pool_info()
    return {"limit": int(limit), "cached": int(cached), "live": int(live)}


def set_host_pool_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` of freed output blocks for reuse.

    Parameters
    ----------
    nbytes : int
        Bytes, >= 0 (0: no reuse). Cached blocks above the new limit are freed now. The
        default limit is ``DASKWP_HOST_POOL_MB``, else an eighth of physical memory.

    Raises
    ------
    ValueError
        ``nbytes`` is negative.

    Public as ``daskwp.memory.set_limit(host_pool=nbytes)``.
    """
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"the host pool limit must be >= 0 bytes, got {nbytes}")
    _ext.host_pool_set_limit(nbytes)


def release_host_memory() -> int:
    """Free every cached block of the host memory pool.

    Returns
    -------
    int
        The bytes freed.

    Public, with the word cache's spare mappings, as :func:`daskwp.memory.release`.
    """
    return int(_ext.host_pool_release())


def trim_host_memory(nbytes: int) -> int:
    """Free the oldest cached blocks of the host memory pool until at most ``nbytes`` stay
    (its limit unchanged: the limit lowered to ``nbytes`` and set back).

    Returns
    -------
    int
        The bytes freed.
    """
    limit, cached, _ = _ext.host_pool_info()
    keep = max(int(nbytes), 0)
    if cached <= keep:
        return 0
    _ext.host_pool_set_limit(min(keep, int(limit)))
    _ext.host_pool_set_limit(int(limit))
    return int(cached) - int(_ext.host_pool_info()[1])


def host_pool_mark() -> int:
    """A mark of now in the host memory pool, for :func:`release_idle_host_memory`."""
    return int(_ext.host_pool_mark())


def release_idle_host_memory(mark: int) -> int:
    """Free the host memory pool's cached blocks that no call has taken since ``mark``
    (:func:`host_pool_mark`): those freed before it and still cached. Blocks taken since
    (in use, or freed again) stay. Returns the bytes freed.

    For a process that writes one partition after another (a batch job's worker): the pool
    hands a block out again only for a request of about its size, so a partition whose
    outputs come out larger or smaller than the last one's maps new blocks, and the old
    ones stayed cached, unused, up to the pool's limit (an eighth of physical memory): a
    worker's RSS grew with the partitions it had written. Marked at a partition's start and
    released at its end, the cache holds what the last partition used."""
    return int(_ext.host_pool_trim_idle(int(mark)))


def tune_numpy_huge_pages() -> bool:
    """Stop NumPy from asking for transparent huge pages for its arrays of 4 MB and more
    (its default on Linux). Returns whether it changed the setting.

    Only for processes daskwp owns: the ``daskwp`` command and the workers of clusters
    :func:`daskwp.connect` starts (a user's own process keeps NumPy's choice). Why: with THP
    on ``madvise``, every first touch of such an array zeroes 2 MB at once, and growing a
    process by 1 GB cost several times the system CPU of 4 KB pages; jobs spent more system
    CPU than they tokenized (benchmarks/results/thp.md). NumPy reads its own variable,
    ``NUMPY_MADVISE_HUGEPAGE``, only when imported, which in a worker is before the
    nanny's environment applies.
    """
    import numpy as np
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None) or np.core.multiarray
    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    return bool(setter(False)) if setter is not None else False


def release_freed_heap() -> bool:
    """Give the memory that this process's malloc holds freed back to the system (glibc's
    ``malloc_trim(0)``: the heap's free top, and the free pages inside it), after a
    garbage collection. Returns whether it ran (False where libc is not glibc).

    For the ``daskwp`` command once the cluster it started (whose scheduler ran in this
    process) is closed: the scheduler's freed state otherwise stayed in the heap, more
    the more partitions the job had, under the job's last steps (the output check, the
    summary), which then set the driver's peak RSS.
    """
    import gc
    gc.collect()
    trim = _glibc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


_madvise = False   # glibc's madvise, looked up once (find_library runs ldconfig)


def madvise_range(view, advice: int) -> bool:
    """``madvise(advice)`` over the whole pages inside the memory of ``view`` (a NumPy
    array over a memory map); False where there is no glibc or the call failed (advice is
    only advice: the caller goes on either way)."""
    import ctypes
    import mmap

    global _madvise
    if _madvise is False:
        _madvise = _glibc("madvise")
    call = _madvise
    if call is None or not len(view):
        return False
    page = mmap.PAGESIZE
    lo = view.ctypes.data
    start = -(-lo // page) * page
    stop = (lo + view.nbytes) // page * page
    if stop <= start:
        return True
    return call(ctypes.c_void_p(start), ctypes.c_size_t(stop - start),
                ctypes.c_int(advice)) == 0


def _glibc(name: str):
    """glibc's function ``name`` in this process (ctypes), or None where libc is not glibc."""
    try:
        import ctypes
        import ctypes.util
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


#: glibc's mallopt parameters (malloc.h) and the values :func:`tune_worker_malloc` sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
WORKER_MMAP_THRESHOLD = 32 << 20
WORKER_TRIM_THRESHOLD = 128 << 20
_tuned = None
#: glibc's variables that fix its thresholds (read when the process starts).
_MALLOC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                     "MALLOC_MMAP_MAX_")


def malloc_keeps_freed_blocks() -> bool:
    """Whether glibc's malloc in this process keeps freed blocks of up to a few MB for
    reuse instead of unmapping them: its dynamic mmap threshold (none of the ``MALLOC_*_``
    variables that fix it set), or :func:`tune_worker_malloc` raised the thresholds. The
    part writer then takes its compressed pages from the system allocator instead of mimalloc
    (:mod:`daskwp.frames.parquet_writer`); a nanny's worker with ``DASKWP_WORKER_MALLOC=0``
    maps each one afresh, and keeps Arrow's default pool."""
    import os
    if _tuned:
        return True
    return not any(k in os.environ for k in _MALLOC_VARIABLES)


def _raise_malloc_thresholds() -> bool:
    """glibc's mmap and trim thresholds set to :data:`WORKER_MMAP_THRESHOLD` and
    :data:`WORKER_TRIM_THRESHOLD`; whether both were taken (False where libc is not glibc)."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, WORKER_MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, WORKER_TRIM_THRESHOLD))


def tune_worker_malloc() -> bool:
    """In a Dask worker process whose nanny set ``MALLOC_TRIM_THRESHOLD_`` below 128 MB (its
    default is 64 KB, so that freed memory goes back to the system at once), raise glibc's
    mmap threshold to 32 MB and its trim threshold to 128 MB, once per process.

    Why: setting ``MALLOC_TRIM_THRESHOLD_`` also fixes glibc's mmap threshold at 128 KB, so
    every NumPy and Arrow temporary of a partition of 128 KB and more is mapped, faulted in
    and unmapped again, which multiplies the CPU of a partition's tables and writer (the
    figures: benchmarks/results/worker_malloc.md; docs/design.md §3.5). With the
    thresholds raised, such temporaries are reused from the heap, and up to 128 MB of freed
    heap stays with the process.
    ``DASKWP_WORKER_MALLOC=0`` leaves malloc alone. Returns whether it tuned (glibc only).
    """
    global _tuned
    if _tuned is not None:
        return _tuned
    import os
    _tuned = False
    env = os.environ.get("MALLOC_TRIM_THRESHOLD_")   # the nanny's, not an option of daskwp
    if env_value("worker_malloc") is False or env is None:
        return False
    try:
        if int(env) >= WORKER_TRIM_THRESHOLD:
            return False
    except ValueError:
        pass
    _tuned = _raise_malloc_thresholds()
    return _tuned


def tune_command_malloc() -> bool:
    """In the ``daskwp`` command's process (a process daskwp owns, as
    :func:`tune_numpy_huge_pages`), raise glibc's mmap and trim thresholds to a worker's
    (32 and 128 MB, :func:`tune_worker_malloc`), once, unless a ``MALLOC_*_`` variable sets
    them or ``worker_malloc`` is off. Returns whether it tuned (glibc only).

    Why: a job in this process (threads) frees a partition's NumPy and Arrow temporaries
    of a few MB each (index entries, lengths, document lengths) and the heap's top went
    back to the system each time, so the next partition's faulted in and zeroed again: the
    in-process Megatron job on 1.5 GB of JSON Lines spent 1.3-1.6 s of system CPU, 1.0-1.1
    s with the thresholds raised (7.2-7.6 -> 6.8-7.0 CPU s in all; peak RSS +40-60 MB).
    """
    global _tuned
    if _tuned is not None:
        return _tuned
    import os
    _tuned = False
    if env_value("worker_malloc") is False or any(k in os.environ for k in _MALLOC_VARIABLES):
        return False
    _tuned = _raise_malloc_thresholds()
    return _tuned


_arrow_pool_tuned = None


def tune_worker_arrow_pool() -> bool:
    """In a Dask worker process started by a nanny (``MALLOC_TRIM_THRESHOLD_`` set), make
    Arrow's default memory pool its jemalloc pool, once per process, unless
    ``ARROW_DEFAULT_MEMORY_POOL`` chooses one or ``worker_malloc`` is off. Returns whether
    it switched (False also where pyarrow has no jemalloc).

    Why: the default mimalloc pool keeps what a partition's Parquet read freed (its pages,
    builders grown twice over) out of reach of the glibc heap the tokenizer's outputs use,
    and a partition's read then maps about as much again: a worker writing ``to_parquet``
    from ``dd.read_parquet`` partitions peaked 60-70 MiB higher than with jemalloc, which
    hands freed pages back (docs/design.md §3.5 "Worker malloc"). Buffers already
    allocated keep their pool.
    """
    global _arrow_pool_tuned
    if _arrow_pool_tuned is not None:
        return _arrow_pool_tuned
    import os
    _arrow_pool_tuned = False
    if os.environ.get("MALLOC_TRIM_THRESHOLD_") is None or \
            os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or env_value("worker_malloc") is False:
        return False
    import pyarrow as pa
    try:
        pool = pa.jemalloc_memory_pool()
    except (NotImplementedError, pa.ArrowException):   # a pyarrow built without it
        return False
    pa.set_memory_pool(pool)
    _arrow_pool_tuned = True
    return True
