"""Bounded, keyed, per-process caches that report themselves and can be cleared.

Every cache daskwp keeps (vocabularies read from paths, tokenizers on a worker, decode tables,
the GPU launcher's compiled modules and device-resident vocabularies, normalization blobs) is
a :class:`BoundedCache`: least recently used entries go first once ``maxsize`` is reached,
keys hold everything that changes the cached answer (a file's path, size and modification
time; a vocabulary's content hash and the normalizer settings; a device id), and every cache
is listed by :func:`cache_info` and emptied by :func:`clear_caches` (which the per-worker
plugin's teardown calls); users reach both through :mod:`daskwp.memory`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

__all__ = ["BoundedCache", "NativeCache", "cache_info", "clear_caches", "register_cache"]

_REGISTRY: "dict[str, BoundedCache]" = {}
_REGISTRY_LOCK = threading.Lock()
#: ``get``'s default when a value may be None.
_MISSING = object()


class BoundedCache:
    """A thread-safe least-recently-used map of at most ``maxsize`` entries.

    Parameters
    ----------
    name : str
        Unique name, as :func:`cache_info` reports it.
    maxsize : int
        Entries kept; the least recently used is dropped beyond it.
    on_evict : callable, optional
        Called with each value that is dropped or cleared (to free device memory, say).
    """

    def __init__(self, name: str, maxsize: int,
                 on_evict: Callable[[Any], None] | None = None):
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.name = name
        self.maxsize = int(maxsize)
        self._on_evict = on_evict
        self._data: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._lock = threading.RLock()
        self.hits = 0
        self.misses = 0
        with _REGISTRY_LOCK:
            _REGISTRY[name] = self

    def get(self, key, default=None):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return default

    def put(self, key, value):
        """Store ``value`` (the first value stored under ``key`` wins: it is returned)."""
        dropped = []
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            self._data[key] = value
            while len(self._data) > self.maxsize:
                dropped.append(self._data.popitem(last=False)[1])
        for v in dropped:
            self._evicted(v)
        return value

    def get_or_create(self, key, factory: Callable[[], Any]):
        """The cached value of ``key``, made by ``factory()`` on a miss (outside the lock,
        so two threads may both build it; the first stored is kept)."""
        value = self.get(key, _MISSING)
        return self.put(key, factory()) if value is _MISSING else value

    def keys(self) -> list:
        with self._lock:
            return list(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data

    def clear(self) -> int:
        """Drop every entry; returns how many there were."""
        with self._lock:
            values = list(self._data.values())
            self._data.clear()
        for v in values:
            self._evicted(v)
        return len(values)

    def _evicted(self, value) -> None:
        if self._on_evict is not None:
            self._on_evict(value)

    def info(self) -> dict:
        return {"entries": len(self._data), "maxsize": self.maxsize, "hits": self.hits,
                "misses": self.misses}

    def __repr__(self) -> str:
        return f"BoundedCache({self.name!r}, entries={len(self)}, maxsize={self.maxsize})"


class NativeCache:
    """A cache kept outside Python (the CPU extension's word memos), listed by
    :func:`cache_info` and emptied by :func:`clear_caches` like the others: ``clear()``
    returns the entries dropped, ``info()`` a dict with at least ``entries``, ``maxsize``,
    ``hits`` and ``misses``."""

    def __init__(self, name: str, clear: Callable[[], int], info: Callable[[], dict]):
        self.name = name
        self._clear = clear
        self._info = info

    def clear(self) -> int:
        return int(self._clear())

    def info(self) -> dict:
        return dict(self._info())

    def __repr__(self) -> str:
        return f"NativeCache({self.name!r})"


def register_cache(name: str, clear: Callable[[], int], info: Callable[[], dict]) -> NativeCache:
    """Register a cache kept outside Python under ``name`` (see :class:`NativeCache`)."""
    cache = NativeCache(name, clear, info)
    with _REGISTRY_LOCK:
        _REGISTRY[name] = cache  # type: ignore[assignment]
    return cache


def cache_info() -> dict:
    """Statistics of every bounded cache of this process.

    Returns
    -------
    dict
        ``{name: {"entries", "maxsize", "hits", "misses"}}``: vocabularies read from paths,
        vocabularies unpickled by content digest, tokenizers on a worker, normalization blobs, decode tables, GPU device models and
        modules (docs/design.md §3.5). The CPU word cache has its own report,
        ``daskwp.memory.info()["word_cache"]``. Public as ``daskwp.memory.info()["caches"]``.
    """
    with _REGISTRY_LOCK:
        caches = list(_REGISTRY.values())
    return {c.name: c.info() for c in caches}


def clear_caches(names=None) -> int:
    """Empty the named caches of this process, and the CPU word cache.

    Parameters
    ----------
    names : iterable of str, optional
        Names as :func:`cache_info` gives them; default: every cache.

    Returns
    -------
    int
        The entries dropped. Public as :func:`daskwp.memory.clear`.
    """
    with _REGISTRY_LOCK:
        caches = [c for n, c in _REGISTRY.items() if names is None or n in names]
    return sum(c.clear() for c in caches)
