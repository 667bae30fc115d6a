"""The host memory pool behind daskwp's NumPy outputs (CPU).

Output arrays of 4 MB and more (token ids, padded windows, masks, metadata) come from a
per-process pool: when such an array is freed its block is kept and handed out again to a
later call that needs about as much. Writing fresh memory costs page faults on first
touch; on some machines (virtual machines above all) that costs as much as tokenizing, and
Dask workers return freed memory to the system at once, so every partition paid it again.

The pool keeps at most ``limit`` bytes of freed blocks: ``DASKWP_HOST_POOL_MB`` (read at
import; 0 turns reuse off), else an eighth of the physical memory, between 256 MB and
16 GB (a Dask worker then reuses one partition's outputs; padded 128-wide windows of short
documents take ~14 bytes per input byte). Memory in use is never limited.
"""

from __future__ import annotations

from .. import _ext

__all__ = ["host_pool_info", "release_host_memory", "set_host_pool_limit"]


def host_pool_info() -> dict:
    """``{"limit", "cached", "live"}`` in bytes: the most kept for reuse, the freed blocks
    kept now, and the pooled blocks in use."""
    limit, cached, live = _ext.host_pool_info()
    return {"limit": int(limit), "cached": int(cached), "live": int(live)}


def set_host_pool_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` of freed output blocks for reuse (0: none); cached blocks
    above the new limit are freed now."""
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"the host pool limit must be >= 0 bytes, got {nbytes}")
    _ext.host_pool_set_limit(nbytes)


def release_host_memory() -> int:
    """Free every cached block (e.g. on Dask workers: ``client.run(release_host_memory)``);
    returns the bytes freed."""
    return int(_ext.host_pool_release())
