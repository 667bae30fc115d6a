"""Task graphs in this process, without a cluster: dask's threaded or synchronous scheduler.

:class:`InProcess` runs the graphs that a batch job would send to a cluster (the job, the
token count, packing's two passes) on dask's threaded scheduler (a pool of threads, one
per core; the kernel and the part writer release the GIL) or its synchronous one. Its
:meth:`InProcess.get` takes ``distributed.Client.get``'s ``(dsk, keys, sync=True)``, so that
code written for a client runs on it unchanged, and calls ``on_result(key, value)`` for each
key of the graph as its task finishes (on the calling thread: progress needs no lock).

This module imports neither ``distributed`` nor anything else heavy: a small job that runs
in-process never pays for them (docs/batch-jobs.md "Clusters").
"""

from __future__ import annotations

import threading
from typing import Callable

from ..core.options import IN_PROCESS_SCHEDULERS

__all__ = ["InProcess", "in_process_share"]

#: The :class:`InProcess` whose task a pool thread runs (``runner``), per thread.
_THREAD = threading.local()


def in_process_share() -> int | None:
    """The kernel threads a task on an :class:`InProcess` thread may use now: the cores
    shared among the tasks running at this moment, so that a partition left alone at the
    end of a job (the others done) tokenizes its next pieces on every core. None on any
    other thread (a worker's, the caller's)."""
    runner = getattr(_THREAD, "runner", None)
    return None if runner is None else runner.share()


def _start_thread(runner: "InProcess") -> None:
    from ..backends.cpu import set_task_num_threads
    # every kernel call on this thread that sets no thread count (a Megatron slice's, a
    # count's, a tokenizer call's) takes the share of the moment, not one fixed at the start
    set_task_num_threads(runner.share)
    _THREAD.runner = runner


class InProcess:
    """dask's ``scheduler`` (``'threads'`` or ``'synchronous'``) in this process.

    ``num_workers``: threads of the threaded scheduler (default: dask's, one per core
    available to this process). ``tasks``: how many heavy tasks (partitions) a graph runs,
    when known: the cores are shared among the threads that have one (``kernel_threads``,
    the share a job records; a partition alone gets every core, as on dask's synchronous
    scheduler). While a graph runs, ``running`` counts its tasks in flight, and each
    kernel call on a task thread that sets no thread count (a Parquet piece's, a Megatron
    partition's slices, a count's calls) takes the cores shared among them at that moment
    (:func:`in_process_share`, through :func:`daskwp.backends.cpu.set_task_num_threads`):
    the last partition of a job, left alone, takes the cores the others freed.
    """

    def __init__(self, scheduler: str = "threads", num_workers: int | None = None,
                 tasks: int | None = None):
        if scheduler not in IN_PROCESS_SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(IN_PROCESS_SCHEDULERS)}; "
                             f"got {scheduler!r}")
        from dask.system import CPU_COUNT
        self.scheduler = scheduler
        if scheduler == "synchronous":
            num_workers = 1
        elif num_workers is None:
            num_workers = CPU_COUNT
        self.num_workers = int(num_workers)
        self.cores = int(CPU_COUNT)
        self.running = 0   # tasks submitted and not yet collected (the calling thread counts)
        self.tasks = tasks
        busy = min(self.num_workers, max(1, tasks if tasks is not None else self.num_workers))
        # one thread at a time (synchronous): the kernel's own default, every core
        self.kernel_threads = None if scheduler == "synchronous" else \
            max(1, CPU_COUNT // busy)

    def __repr__(self) -> str:
        return (f"InProcess({self.scheduler!r}, num_workers={self.num_workers}, "
                f"tasks={self.tasks})")

    def __reduce__(self):
        return InProcess, (self.scheduler, self.num_workers, self.tasks)

    def share(self) -> int:
        """The cores shared among the tasks running now (at least 1 each)."""
        return max(1, self.cores // max(1, self.running))

    def describe(self) -> dict:
        """What ran, as a job records it: ``{"mode": "threads", "threads": N,
        "kernel_threads": K}`` (K: each task's tokenizer threads), or
        ``{"mode": "synchronous", "threads": 1}``."""
        out = {"mode": self.scheduler, "threads": self.num_workers}
        if self.kernel_threads is not None:
            out["kernel_threads"] = self.kernel_threads
        return out

    def get(self, dsk: dict, keys: list, sync: bool = True,
            on_result: Callable[[object, object], None] | None = None) -> list:
        """The values of ``keys`` (a list) of graph ``dsk``; ``on_result(key, value)`` for
        every task of the graph as it finishes. ``sync`` must be true (there are no
        futures in a process without a cluster)."""
        if not sync:
            raise ValueError("InProcess.get computes in the calling thread: sync=False "
                             "(futures) needs a distributed.Client")
        if not keys:
            return []
        if self.scheduler == "synchronous":
            from dask.local import get_sync
            return self._get(get_sync, dsk, keys, on_result)
        from concurrent.futures import ThreadPoolExecutor

        from dask.threaded import get
        # A pool of the call's own: when a task fails or the call is interrupted, the tasks
        # running on other threads finish before it returns, so that nothing writes into
        # the output after the caller has cleaned up (a job's temporary files).
        pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="daskwp-task",
                                  initializer=_start_thread, initargs=(self,))
        self.running = 0

        def started(key):
            self.running += 1

        def finished(key):
            self.running -= 1
        try:
            return self._get(get, dsk, keys, on_result, pool=pool, started=started,
                             finished=finished)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self.running = 0

    @staticmethod
    def _get(get, dsk, keys, on_result, started=None, finished=None, **kwargs) -> list:
        if on_result is None and started is None:
            return list(get(dsk, keys, **kwargs))
        from dask.callbacks import Callback

        def pretask(key, dsk_, state):
            if started is not None:
                started(key)

        def posttask(key, result, dsk_, state, worker_id):
            if finished is not None:
                finished(key)
            if on_result is not None:
                on_result(key, result)

        with Callback(pretask=pretask, posttask=posttask):
            return list(get(dsk, keys, **kwargs))
