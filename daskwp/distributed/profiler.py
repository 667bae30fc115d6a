"""Pausing distributed's statistical profiler on a running cluster's workers while a daskwp
job computes there (option ``pause_worker_profiler``; docs/batch-jobs.md "Clusters").

Every worker of distributed runs ``Worker.trigger_profile`` every 10 ms on its event loop
(``distributed.worker.profile.interval``): it walks the stack of every thread that runs a
task and merges it into the worker's profile. For a batch job that is CPU with no use: on a
running two-worker LocalCluster a perf profile of the workers put it at ~0.8 CPU s per GB of
input, 13% of their CPU. A cluster a job starts itself runs without it
(:func:`daskwp.jobs.driver.connect_cluster`); on a cluster it did not start,
:func:`worker_profiler_paused` stops the profiler's two periodic callbacks (``profile`` and
``profile-cycle``) on the workers for the job's length and starts them again after.

The pause is a lease, so that nothing a job does outlives it:

* each worker counts its holders (one per job: two jobs at once each hold their own, and the
  profiler runs again when the last releases);
* each holder has an expiry that the driver renews (a thread, every ``RENEW_SECONDS``); a
  cheap periodic callback on the worker (every ``CHECK_SECONDS``) drops the holders whose
  lease ran out (``LEASE_SECONDS`` without renewal: the driver died, lost its connection or
  was killed) and restores the profiler when none is left;
* the job's ``finally`` releases its hold (an error, an interrupt);
* only callbacks that were running are stopped, and only those are started again: a worker
  started with the profiler disabled (no ``profile`` callback) or whose profiler someone
  stopped stays so. A worker that joins the cluster during the job, or that its nanny
  restarts, runs as its configuration says: it is not paused.

The pause and its release run through ``Client.run`` (on the worker's event loop, so its
state needs no lock); the renewals go through the scheduler's broadcast to a handler the pause
registers on the worker (``RENEW_OP``), because every ``Client.run`` writes an INFO line to
the worker's log and a renewal every ``RENEW_SECONDS`` would fill it. A worker without the
callbacks (another distributed) is left alone, not an error.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid

from .lending import scheduler_workers

__all__ = ["CHECK_SECONDS", "LEASE_SECONDS", "PROFILER_CALLBACKS", "RENEW_OP", "RENEW_SECONDS",
           "compute_client", "computing_paused", "pause_profiler", "profiler_pause_state",
           "release_profiler", "renew_profiler", "worker_profiler_paused"]

logger = logging.getLogger(__name__)

#: The worker's periodic callbacks of the statistical profiler (distributed's names).
PROFILER_CALLBACKS = ("profile", "profile-cycle")
#: Seconds a hold lasts without renewal.
LEASE_SECONDS = 45.0
#: Seconds between the driver's renewals (well inside the lease).
RENEW_SECONDS = 10.0
#: Seconds between a worker's checks of its holders' leases.
CHECK_SECONDS = 2.0
#: The worker attribute that holds a pause, and the name of its lease check among the
#: worker's periodic callbacks (so that the worker's close stops it).
_STATE = "_daskwp_profiler_pause"
_CHECK = "daskwp-profiler-lease"
#: The worker handler (``Worker.handlers``) that renews a hold, registered by the first pause.
RENEW_OP = "daskwp_profiler_renew"


class _Pause:
    """One worker's pause: its holders (token -> expiry, ``time.monotonic``), the callbacks
    it stopped and its lease check."""

    def __init__(self, worker, stopped: dict, check_seconds: float):
        from tornado.ioloop import PeriodicCallback
        self.worker, self.stopped, self.holders = worker, stopped, {}
        self.check = PeriodicCallback(self.expire, check_seconds * 1000)

    def expire(self) -> None:
        now = time.monotonic()
        for token in [t for t, until in self.holders.items() if until <= now]:
            del self.holders[token]
            logger.warning("daskwp: the profiler pause %s was not renewed; dropped", token)
        if not self.holders:
            self.restore()

    def restore(self) -> None:
        """Start the callbacks this pause stopped again (those the worker still has), stop
        the lease check and forget the pause."""
        callbacks = self.worker.periodic_callbacks
        for name, pc in self.stopped.items():
            if callbacks.get(name) is pc and not pc.is_running():
                pc.start()
        self.check.stop()
        if callbacks.get(_CHECK) is self.check:
            del callbacks[_CHECK]
        if getattr(self.worker, _STATE, None) is self:
            delattr(self.worker, _STATE)


def pause_profiler(token: str, lease_seconds: float = LEASE_SECONDS,
                   check_seconds: float = CHECK_SECONDS, dask_worker=None) -> bool:
    """On a worker (``Client.run``): hold a pause of its profiler under ``token`` for
    ``lease_seconds``. True when the worker's profiler is paused (by this hold or an
    earlier one), False when it had none running (disabled, stopped by someone else, or a
    distributed without these callbacks)."""
    state = getattr(dask_worker, _STATE, None)
    if state is None:
        callbacks = getattr(dask_worker, "periodic_callbacks", None)
        if not isinstance(callbacks, dict):
            return False
        running = {name: callbacks[name] for name in PROFILER_CALLBACKS
                   if name in callbacks and callbacks[name].is_running()}
        if "profile" not in running:
            return False
        state = _Pause(dask_worker, running, check_seconds)
        for pc in running.values():
            pc.stop()
        callbacks[_CHECK] = state.check
        setattr(dask_worker, _STATE, state)
        state.check.start()
        handlers = getattr(dask_worker, "handlers", None)
        if isinstance(handlers, dict) and RENEW_OP not in handlers:
            handlers[RENEW_OP] = _renew_handler(dask_worker)
    state.holders[token] = time.monotonic() + lease_seconds
    return True


def renew_profiler(token: str, lease_seconds: float = LEASE_SECONDS,
                   dask_worker=None) -> bool:
    """On a worker: extend the hold ``token`` (False: it has none, e.g. it expired or the
    worker restarted; nothing is paused again)."""
    state = getattr(dask_worker, _STATE, None)
    if state is None or token not in state.holders:
        return False
    state.holders[token] = time.monotonic() + lease_seconds
    return True


def _renew_handler(dask_worker):
    """The worker's ``RENEW_OP`` handler (distributed calls it with the message's fields and
    logs its ``__name__``)."""
    def daskwp_profiler_renew(token: str, lease_seconds: float = LEASE_SECONDS) -> bool:
        return renew_profiler(token, lease_seconds, dask_worker=dask_worker)
    return daskwp_profiler_renew


def release_profiler(token: str, dask_worker=None) -> bool:
    """On a worker: drop the hold ``token``; the last hold restores the profiler."""
    state = getattr(dask_worker, _STATE, None)
    if state is None or state.holders.pop(token, None) is None:
        return False
    if not state.holders:
        state.restore()
    return True


def profiler_pause_state(dask_worker=None) -> dict:
    """On a worker: ``{"holders": n, "running": {callback: running?}}`` (tests, diagnosis)."""
    state = getattr(dask_worker, _STATE, None)
    callbacks = getattr(dask_worker, "periodic_callbacks", {}) or {}
    return {"holders": len(state.holders) if state is not None else 0,
            "running": {name: callbacks[name].is_running() for name in PROFILER_CALLBACKS
                        if name in callbacks}}


def _is_cluster_client(client) -> bool:
    try:
        from distributed import Client
    except ImportError:
        return False
    return isinstance(client, Client) and not client.asynchronous


def compute_client(collection):
    """The ``distributed.Client`` whose cluster ``collection.compute()`` runs on (dask's
    choice of scheduler: the default client, ``dask.config`` ``scheduler``), or None."""
    try:
        from dask.base import get_scheduler
        get = get_scheduler(collections=[collection])
    except Exception:   # noqa: BLE001  no scheduler found: nothing to pause
        return None
    client = getattr(get, "__self__", None)
    return client if _is_cluster_client(client) else None


def computing_paused(collection, enabled: bool = True):
    """:func:`worker_profiler_paused` around ``collection.compute()``: the workers of the
    cluster it computes on (a cluster the caller runs, never one daskwp started)."""
    return worker_profiler_paused(compute_client(collection) if enabled else None, enabled)


@contextlib.contextmanager
def worker_profiler_paused(client, enabled: bool = True, *,
                           lease_seconds: float = LEASE_SECONDS,
                           renew_seconds: float = RENEW_SECONDS,
                           check_seconds: float = CHECK_SECONDS):
    """Pause the statistical profiler of the workers of ``client`` (a synchronous
    ``distributed.Client``) while the block runs; anything else, or ``enabled`` false, runs
    the block as it is. Yields the addresses of the workers paused. The workers' replies
    that fail (a worker leaving) are skipped: a pause is never a reason for a job to fail."""
    if not enabled or not _is_cluster_client(client):
        yield []
        return
    token = f"daskwp-{uuid.uuid4().hex[:12]}"
    try:
        replies = client.run(pause_profiler, token, lease_seconds, check_seconds,
                             on_error="return")
    except Exception as e:   # noqa: BLE001  the job runs, with the profiler
        logger.warning("daskwp: the workers' profiler was not paused: %s", e)
        yield []
        return
    paused = sorted(w for w, r in replies.items() if r is True)
    stop = threading.Event()
    renewer = None
    if paused:
        renewer = threading.Thread(target=_renew, name="daskwp-profiler-lease", daemon=True,
                                   args=(client, token, paused, lease_seconds,
                                         renew_seconds, stop))
        renewer.start()
    try:
        yield paused
    finally:
        stop.set()
        if renewer is not None:
            renewer.join()
        alive = _in_cluster(client, paused)
        if alive:
            with contextlib.suppress(Exception):   # the lease ends it otherwise
                client.run(release_profiler, token, workers=alive, on_error="return")


def _in_cluster(client, workers: list) -> list:
    """The addresses of ``workers`` that the scheduler of ``client`` still has (all of
    them when it cannot say). A message to a worker that is gone (killed: its nanny starts
    another at a new address) waits for distributed's connect timeout, 30 s, and the job
    that paused the profiler with it: a worker killed half way through a job on a running
    cluster made the job end 30 s late."""
    if not workers:
        return []
    now = scheduler_workers(client)
    if now is None:   # (a closing client: its messages fail fast anyway)
        return list(workers)
    return [w for w in workers if w in now]


def _renew(client, token: str, workers: list, lease_seconds: float, renew_seconds: float,
           stop: threading.Event) -> None:
    msg = {"op": RENEW_OP, "token": token, "lease_seconds": lease_seconds}
    while workers and not stop.wait(renew_seconds):
        workers = _in_cluster(client, workers)
        if not workers:
            return
        try:
            replies = client.sync(client.scheduler.broadcast, msg=msg, workers=workers,
                                  on_error="return")
        except Exception:   # noqa: BLE001  the client closing; the lease runs out
            return
        # a worker that no longer holds the pause (restarted, left, its lease expired) is
        # not asked again: a restarted worker has no handler, and it runs its profiler
        workers = [w for w in workers if replies.get(w) is True]
