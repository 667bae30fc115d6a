"""Lending a job's idle cores to its last writes (docs/batch-jobs.md "Clusters"): once fewer
writes are left than the cluster has threads, each write still running takes the threads of
its host's idle workers for its next pieces. Used by the batch jobs' driver
(:mod:`daskwp.jobs.driver`) and the accessor's ``to_parquet``
(:mod:`daskwp.accessors.lazy`)."""

from __future__ import annotations

from .state import set_task_threads

__all__ = ["cluster_workers", "give_idle_threads", "scheduler_workers", "worker_process"]


def worker_process(address: str) -> str:
    """The process a worker runs in, as far as its address tells: the workers of one
    process (``LocalCluster(processes=False)``: ``inproc://host/pid/n``) share
    ``inproc://host/pid``; any other address is a process of its own."""
    if address.startswith("inproc://"):
        return address.rsplit("/", 1)[0]
    return address


def scheduler_workers(client, on_error: str = "unknown") -> dict | None:
    """``{address: info}`` of every worker the scheduler of ``client`` has now (its
    ``scheduler_info(n_workers=-1)["workers"]``: all of them, not the first five), or None
    when that is unknown: the client cannot ask (closing or closed: its call raises) or
    its reply lists no workers (distributed's cached identity before the first reply has
    no ``"workers"``). What unknown means is the caller's: nothing to lend
    (:func:`cluster_workers`), every worker still there (the profiler's pause), an error
    (``on_error="raise"``: what the client raised, or the KeyError or TypeError of a reply
    without a worker dict)."""
    if on_error not in ("unknown", "raise"):
        raise ValueError(f"scheduler_workers: on_error must be 'unknown' or 'raise', "
                         f"got {on_error!r}")
    try:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        if not isinstance(workers, dict):
            raise TypeError(f"the scheduler's workers are a {type(workers).__name__}, "
                            f"not a dict")
    except Exception:   # noqa: BLE001  (a client closing fails in many ways)
        if on_error == "raise":
            raise
        return None
    return workers


def cluster_workers(client) -> dict:
    """``{address: (process, threads)}`` of the workers of ``client`` now
    (:func:`worker_process`; {} when they cannot be listed)."""
    info = scheduler_workers(client)
    if info is None:
        return {}
    try:
        return {w: (worker_process(w), int(v["nthreads"])) for w, v in info.items()}
    except (KeyError, TypeError, ValueError):
        return {}


def give_idle_threads(client, running: set, workers: dict) -> dict:
    """Give the writes still running (keys ``running``) the threads of their host's idle
    workers: each gets ``threads // writes running on the host`` kernel threads from its
    next piece on (:func:`~daskwp.distributed.state.set_task_threads`; the job's last
    partitions, with fewer of them left than threads), ``threads`` counting only the
    workers that run nothing else (on a running cluster, a worker busy with another
    client's task lends none). ``workers``: :func:`cluster_workers`. Returns ``{worker:
    {key: threads}}`` as sent (only shares above one).

    Each kernel thread of a process takes a word memo of its own (docs/design.md §3.5).
    The write's process is told its own threads (its workers' threads, :func:`worker_process`):
    a thread beyond them, another worker process's core, takes a small memo of its own
    (:data:`~daskwp.backends.cpu.LENT_MEMO_MB`), not a copy of the warm one (+30 MB of the
    process's peak at the job's end: a 2 x 1-thread cluster's worker that wrote a 5 GB
    job's last partition on two threads peaked 342 MiB against 281-309 over its other
    partitions)."""
    if sum(t for _, t in workers.values()) < 2:   # nothing to give
        return {}
    try:
        processing = client.processing()
    except (OSError, KeyError, TypeError):
        return {}
    info = scheduler_workers(client)
    if info is None:
        return {}
    hosts = {w: str(v.get("host", w)) for w, v in info.items()}
    mine = {w: [k for k in keys if k in running] for w, keys in processing.items()
            if w in workers}
    own: dict = {}            # threads of each process
    host_threads: dict = {}   # idle threads of each host
    host_writes: dict = {}
    for w, (process, threads) in workers.items():
        own[process] = own.get(process, 0) + threads
        host = hosts.get(w, w)
        if all(k in running for k in processing.get(w, ())):   # idle, or these writes
            host_threads[host] = host_threads.get(host, 0) + threads
    for w, keys in mine.items():
        host = hosts.get(w, w)
        host_writes[host] = host_writes.get(host, 0) + len(keys)
    sent = {}
    for w, keys in mine.items():
        host, process = hosts.get(w, w), workers[w][0]
        share = host_threads.get(host, 0) // host_writes[host] if keys else 1
        if share > 1:
            sent[w] = {k: share for k in keys}
            try:
                # (its own threads only when the share exceeds them: the process of an
                # in-process cluster keeps full memos for its own threads)
                client.run(set_task_threads, sent[w],
                           own[process] if share > own[process] else None, workers=[w])
            except (OSError, KeyError, ValueError):   # the worker left meanwhile
                del sent[w]
    return sent
