"""Per-worker state: what one worker process keeps across tasks (docs/design.md §8).

A :class:`WorkerState` holds the tokenizers a worker has received, one instance per identity
(vocabulary hash and settings), so that whatever an instance holds — the GPU launcher's
device-resident vocabulary, for one — is built once per worker and reused by later tasks and
later computations. On a ``distributed`` worker the state belongs to daskwp's
:class:`~daskwp.distributed.plugin.DaskwpWorkerPlugin` (set up when the plugin is registered,
closed at its teardown, as dask-cuda holds per-worker setup); elsewhere (threads, the
synchronous scheduler, a cluster without the plugin) one state serves the process.

This module imports no Dask: partition tasks call :func:`current_state` wherever they run.
"""

from __future__ import annotations

import sys
import threading

from ..backends.cpu import set_own_threads, set_worker_task_threads, word_cache_release
from ..backends.memory import tune_worker_arrow_pool, tune_worker_malloc
from ..core.cache import BoundedCache, clear_caches

__all__ = ["WorkerState", "cached_tokenizer", "cached_tokenizer_keys", "current_state",
           "set_task_threads", "task_threads", "tokenizer_key"]

PLUGIN_NAME = "daskwp"
TOKENIZERS_PER_WORKER = 4


def tokenizer_key(tok) -> tuple:
    """Identity of a tokenizer: its vocabulary's content hash, its settings and its device
    (a worker that has seen a GPU tokenizer must not hand it out for an equal CPU one)."""
    return (tok.vocab.hash, tuple(sorted(tok.settings.items())), tok.device)


class WorkerState:
    """The tokenizers of one worker process (at most ``TOKENIZERS_PER_WORKER``)."""

    def __init__(self, name: str = "worker_tokenizers"):
        self.tokenizers = BoundedCache(name, TOKENIZERS_PER_WORKER)
        # Every partition task reaches its tokenizer through a state: under a nanny's
        # MALLOC_TRIM_THRESHOLD_ the process's malloc and Arrow's pool are tuned first
        # (docs/design.md §3.5).
        tune_worker_malloc()
        tune_worker_arrow_pool()

    def tokenizer(self, tok):
        """The first instance of a tokenizer equal to ``tok`` this state has seen."""
        return self.tokenizers.put(tokenizer_key(tok), tok)

    def close(self) -> None:
        """Drop the tokenizers and every daskwp cache of the process (device blobs
        included), and give back the memory the word memos kept."""
        self.tokenizers.clear()
        clear_caches()
        word_cache_release()


_PROCESS_STATE: WorkerState | None = None
_PROCESS_LOCK = threading.Lock()


def _process_state() -> WorkerState:
    global _PROCESS_STATE
    with _PROCESS_LOCK:
        if _PROCESS_STATE is None:
            _PROCESS_STATE = WorkerState()
        return _PROCESS_STATE


def current_state() -> WorkerState:
    """The plugin's state on a worker that has daskwp's plugin, else the process's."""
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker
            worker = get_worker()
        except (ValueError, ImportError):
            worker = None
        plugin = getattr(worker, "plugins", {}).get(PLUGIN_NAME) if worker is not None \
            else None
        state = getattr(plugin, "state", None)
        if isinstance(state, WorkerState):
            return state
    return _process_state()


def cached_tokenizer(tok):
    """``current_state().tokenizer(tok)``: the worker's one instance of ``tok``."""
    return current_state().tokenizer(tok)


def cached_tokenizer_keys() -> list[tuple]:
    """Keys (vocabulary hash, settings) of the tokenizers cached by the current state."""
    return current_state().tokenizers.keys()


#: Kernel threads for the tasks of given keys in this process (``{key: threads}``), set by a
#: job's driver for its last writes (:func:`set_task_threads`); a task key is never reused
#: (keys carry the run's id), so entries of a finished or abandoned run match nothing.
_TASK_THREADS: dict = {}
TASK_THREADS_KEPT = 256


def set_task_threads(threads: dict, own_threads: int | None = None) -> None:
    """On a worker (``client.run``): the tasks of the keys in ``threads`` take that many
    kernel threads from their next piece on (:func:`task_threads`). Entries of earlier
    calls stay, up to :data:`TASK_THREADS_KEPT` (then they are dropped). ``own_threads``
    (when given): this process's own threads (its workers'); the threads beyond them take
    a small word memo each (:func:`daskwp.backends.cpu.set_own_threads`)."""
    for key, n in threads.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"threads of {key!r} must be an int >= 1; got {n!r}")
    if own_threads is not None:
        set_own_threads(max(own_threads, _process_worker_threads()))
    with _PROCESS_LOCK:
        if len(_TASK_THREADS) + len(threads) > TASK_THREADS_KEPT:
            _TASK_THREADS.clear()
        _TASK_THREADS.update(threads)


def _process_worker_threads() -> int:
    """The threads of the running ``distributed`` workers of this process: the driver groups
    workers into processes by their addresses, which a ``LocalCluster(processes=False)`` on
    tcp does not tell apart, so the process counts its own before it takes a lent share for
    another worker's core."""
    worker_mod = sys.modules.get("distributed.worker")
    workers = getattr(getattr(worker_mod, "Worker", None), "_instances", None) or ()
    total = 0
    for w in list(workers):
        try:
            if w.status.name in ("running", "paused"):
                total += int(w.state.nthreads)
        except AttributeError:   # another distributed: the driver's count stands
            continue
    return total


def task_threads() -> int | None:
    """The kernel threads set (:func:`set_task_threads`) for the task this thread runs on a
    ``distributed`` worker; None when none is set or not on a worker's task thread."""
    if not _TASK_THREADS or "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_worker
        key = get_worker().get_current_task()
    except (ValueError, ImportError, AttributeError, KeyError):
        return None
    return _TASK_THREADS.get(key)


# every kernel call on a worker's task thread that sets no thread count asks it
# (backends.cpu.default_num_threads): a Parquet piece's, a Megatron slice's, a count's
set_worker_task_threads(task_threads)
