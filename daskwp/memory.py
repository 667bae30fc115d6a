"""The memory daskwp keeps in this process between calls, in one place.

Three kinds, each bounded and reported:

- the **host pool** of output arrays (NumPy arrays of 4 MB and more come from it and go back
  to it, so that a worker's next partition writes memory that is already faulted in;
  ``host_pool_mb`` / ``DASKWP_HOST_POOL_MB``);
- the **word cache** of the CPU loop (per-thread memos of chunks and words with their ids,
  kept so that batch after batch runs warm; ``word_cache_mb``, its ``dask.config`` key
  ``daskwp.word_cache_mb``, or ``DASKWP_WORD_CACHE_MB``);
- the **caches** of objects (vocabularies read from paths, tokenizers on a worker,
  normalization blobs, decode tables, the GPU launcher's modules and device vocabularies).

The functions follow CuPy's and RMM's memory pools: :func:`info` reports, :func:`release`
gives back what is kept for reuse but holds nothing, :func:`clear` empties the caches, and
:func:`set_limit` bounds the pools. On a Dask cluster, run them on every worker:
``client.run(daskwp.memory.release)``.

Examples
--------
>>> import daskwp
>>> sorted(daskwp.memory.info())
['caches', 'host_pool', 'word_cache']
>>> freed = daskwp.memory.release()      # on Dask workers: client.run(daskwp.memory.release)
>>> daskwp.memory.info()["host_pool"]["cached"]
0
"""

from __future__ import annotations

from .backends.cpu import set_word_cache_limit, word_cache_info, word_cache_release
from .backends.memory import host_pool_info, release_host_memory, set_host_pool_limit
from .core.cache import cache_info, clear_caches
from .core.options import check_size

__all__ = ["clear", "info", "release", "set_limit"]


def info() -> dict:
    """What daskwp keeps in this process's memory, by kind.

    Returns
    -------
    dict
        ``{"host_pool": {"limit", "cached", "live"}`` (bytes: the most kept for reuse, the
        freed blocks kept now, the pooled blocks in use), ``"word_cache": {...}`` (bytes and
        counts: ``limit``, ``bytes``, ``memos``, ``idle``, ``hits``, ``misses``,
        ``spare_bytes`` and the others of docs/design.md §3.5), ``"caches": {name:
        {"entries", "maxsize", "hits", "misses"}}}`` (every bounded cache, the word cache
        included).

    See Also
    --------
    release, clear, set_limit

    Examples
    --------
    >>> import daskwp
    >>> _ = daskwp.WordPieceTokenizer().encode(["Hello world"] * 100)
    >>> mem = daskwp.memory.info()
    >>> mem["word_cache"]["memos"] >= 1, mem["word_cache"]["bytes"] <= mem["word_cache"]["limit"]
    (True, True)
    >>> sorted(mem["host_pool"])
    ['cached', 'limit', 'live']
    >>> sorted(mem["caches"]["decode_tables"])
    ['entries', 'hits', 'maxsize', 'misses']
    """
    return {"host_pool": host_pool_info(), "word_cache": word_cache_info(),
            "caches": cache_info()}


def release() -> int:
    """Give back the memory kept for reuse that holds nothing: the host pool's freed blocks
    and the word cache's mappings of freed memos (``spare_bytes``). What is cached (memos,
    vocabularies, tokenizers) stays: :func:`clear` empties that.

    Returns
    -------
    int
        The bytes given back.

    Examples
    --------
    >>> import daskwp
    >>> freed = daskwp.memory.release()      # on Dask workers: client.run(daskwp.memory.release)
    >>> mem = daskwp.memory.info()
    >>> mem["host_pool"]["cached"], mem["word_cache"]["spare_bytes"]
    (0, 0)
    """
    return release_host_memory() + word_cache_release()


def clear(names=None) -> int:
    """Empty daskwp's caches in this process (the word cache's memos included).

    Parameters
    ----------
    names : iterable of str, optional
        Cache names as ``info()["caches"]`` gives them; default: every cache.

    Returns
    -------
    int
        The entries dropped.

    Notes
    -----
    **Memory.** The word cache's memos are dropped and their mappings kept for the next
    memos, within its limit (``info()["word_cache"]["spare_bytes"]``; :func:`release`
    gives them back). A Dask worker's daskwp state clears its caches when it closes.

    Examples
    --------
    >>> import daskwp
    >>> daskwp.WordPieceTokenizer().encode(["warm the word cache"]).to_list()
    [[4010, 1996, 2773, 17053]]
    >>> dropped = daskwp.memory.clear()      # every cache of this process
    >>> daskwp.memory.info()["word_cache"]["memos"]
    0
    """
    return clear_caches(names)


def set_limit(*, host_pool=None, word_cache=None) -> None:
    """Bound the pools of this process; a pool left at None keeps its limit.

    Parameters
    ----------
    host_pool : int or str, optional
        The most bytes of freed output arrays kept for reuse (a number of bytes >= 0 or a
        size such as ``"512MB"``; 0: no reuse). Freed blocks above it are freed now. The
        default limit is ``DASKWP_HOST_POOL_MB``, else an eighth of the physical memory
        between 256 MB and 16 GB.
    word_cache : int or str, optional
        The most bytes of word memos, idle and in use (0: none kept between calls). Idle
        memos above it are freed now. It holds until ``daskwp.word_cache_mb`` is set to
        another value (``dask.config``), which then applies.

    Raises
    ------
    OptionValueError, OptionTypeError
        A limit that is not a size >= 0 (both are ValueErrors); nothing is changed.

    Examples
    --------
    >>> import daskwp
    >>> before = daskwp.memory.info()["host_pool"]["limit"]
    >>> daskwp.memory.set_limit(host_pool="64MiB")   # keep at most 64 MiB of freed blocks
    >>> daskwp.memory.info()["host_pool"]["limit"]
    67108864
    >>> daskwp.memory.set_limit(host_pool=before)
    """
    limits = {name: check_size(name, value)
              for name, value in (("host_pool", host_pool), ("word_cache", word_cache))
              if value is not None}
    if "host_pool" in limits:
        set_host_pool_limit(limits["host_pool"])
    if "word_cache" in limits:
        set_word_cache_limit(limits["word_cache"])

