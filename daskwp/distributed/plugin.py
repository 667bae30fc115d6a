"""daskwp's ``distributed`` WorkerPlugin: per-worker state with setup and teardown.

Registered by :func:`daskwp.connect` and by batch jobs on the clients they use
(``client.register_plugin(DaskwpWorkerPlugin())`` does it for any other client). Setup gives
the worker a fresh :class:`~daskwp.distributed.state.WorkerState`; teardown (worker close or
plugin removal) drops its tokenizers and the process's daskwp caches, device-resident
vocabularies included. Setup also installs the worker's :class:`NetworkWait` (a task that
waits on the network leaves the thread pool to other tasks meanwhile).
"""

from __future__ import annotations

import atexit
import gc
import threading

from distributed.diagnostics.plugin import WorkerPlugin

from ..frames.storage import clear_warm_filesystems, is_url, set_network_wait, warm_filesystems
from .state import PLUGIN_NAME, WorkerState

__all__ = ["DaskwpWorkerPlugin", "NETWORK_WAITS_PER_THREAD", "NetworkWait",
           "freeze_heap_at_exit",
           "STORAGE_WARMUP_NAME", "StorageWarmup",
           "register_worker_plugin"]

#: The name :class:`StorageWarmup` is registered under (a new job's replaces the last one's)
STORAGE_WARMUP_NAME = "daskwp-storage-warmup"


#: Tasks of a worker process that wait on the network outside its thread pool at once
#: (:class:`NetworkWait`), per thread of the worker; the next one waits in the pool.
NETWORK_WAITS_PER_THREAD = 4


class NetworkWait:
    """The worker's hook of :func:`~daskwp.frames.storage.waiting_on_network`: a task that
    is about to wait on the network for long (a partition's fetch from an object store, by
    the count pass) secedes from the worker's thread pool (``distributed.secede``), so the
    worker runs another task (a write: tokenizing, CPU) on the thread's core meanwhile,
    and the task finishes outside the pool (a count has little left to do after its fetch).

    ``transfers``: the waits that go on at once in the process (one per worker thread, as
    when each fetch held a thread); a task beyond them waits for one to end, in the order
    the tasks came (the scheduler sends the counts in partition order: the fetches go in
    that order, and the first partitions' writes start while the next ones are fetched).
    ``limit``: the tasks of the process out of the pool at once (a bound on the threads);
    a task beyond them waits in the pool, as every task did before.
    Only in a task's thread of a worker's pool (not in a thread that has seceded already,
    nor outside a worker)."""

    def __init__(self, limit: int, transfers: int = 1):
        self.limit = max(1, int(limit))
        self.waiting = 0
        self._lock = threading.Lock()
        self._transfers = threading.Semaphore(max(1, int(transfers)))   # (FIFO wake-ups)

    def __call__(self):
        from distributed.threadpoolexecutor import thread_state
        if getattr(thread_state, "executor", None) is None or \
                not getattr(thread_state, "proceed", False):
            return None
        with self._lock:
            left = self.waiting < self.limit
            self.waiting += left
        if left:
            try:
                from distributed import secede
                secede()
            except Exception:   # noqa: BLE001  (not a task of a worker): it stays
                self._back(True)
                left = False
        self._transfers.acquire()

        def done():
            self._transfers.release()
            self._back(left)
        return done

    def _back(self, left: bool) -> None:
        if left:
            with self._lock:
                self.waiting -= 1


_EXIT_FREEZE: list = []


def freeze_heap_at_exit() -> None:
    """At this process's exit, put every object out of the garbage collector's reach
    (``gc.freeze``, once per process) before the interpreter's shutdown: its collections
    then traverse nothing, where they traversed the whole heap of a worker (dask,
    distributed, pyarrow, an object store's client: 0.2-0.3 s of CPU, while its nanny, and
    the job's driver closing its cluster, waited for the process to end). The exit handlers
    all still run; only cyclic garbage left at exit is no longer collected (the system
    takes the memory back)."""
    if not _EXIT_FREEZE:
        _EXIT_FREEZE.append(True)
        atexit.register(gc.freeze)


class DaskwpWorkerPlugin(WorkerPlugin):
    """Holds a worker's :class:`WorkerState` from setup to teardown, and installs its
    :class:`NetworkWait`."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self):
        self.state = None
        self._wait = None

    def setup(self, worker) -> None:
        freeze_heap_at_exit()
        self.state = WorkerState(name=f"worker_tokenizers[{worker.address}]")
        threads = getattr(worker, "nthreads", None) or 1
        self._wait = NetworkWait(NETWORK_WAITS_PER_THREAD * threads, transfers=threads)
        set_network_wait(self._wait)

    def teardown(self, worker) -> None:
        previous = set_network_wait(None)
        if previous is not self._wait:    # (another worker's, in this process: kept)
            set_network_wait(previous)
        self._wait = None
        if self.state is not None:
            self.state.close()
            self.state = None


def register_worker_plugin(client) -> None:
    """Register daskwp's plugin on every worker of ``client`` (present and future)."""
    client.register_plugin(DaskwpWorkerPlugin(), name=PLUGIN_NAME)


class StorageWarmup(WorkerPlugin):
    """Builds a job's object-store filesystems on each worker ahead of its first task.

    ``urls``: the job's input and output URLs (local paths are left out); ``storage_options``:
    their filesystems' options. Setup starts :func:`~daskwp.frames.storage.warm_filesystems`
    (a background thread: the filesystem's module imported, its client built) and returns at
    once; a task that needs the filesystem waits for that thread. Teardown forgets them.
    Its ``repr`` shows neither the options nor the URLs."""

    name = STORAGE_WARMUP_NAME

    def __init__(self, urls, storage_options: dict | None = None):
        self.urls = [u for u in urls if is_url(u)]
        self.storage_options = dict(storage_options or {})

    def __repr__(self) -> str:
        return f"StorageWarmup({len(self.urls)} URLs)"

    def setup(self, worker) -> None:
        warm_filesystems(self.urls, self.storage_options)

    def teardown(self, worker) -> None:
        clear_warm_filesystems()
