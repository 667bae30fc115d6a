"""The scheduler's worker list, asked in one place (daskwp/distributed/lending.py
``scheduler_workers``), and what each caller makes of an unknown one: the lending of idle
threads lends nothing, the profiler's pause keeps every worker it paused, the packing
job's placement raises what the client raised. One case per way of not knowing: the
client's call raises (a closed connection, a closed event loop), or its reply lists no
workers (no ``"workers"``, or not a dict)."""

from __future__ import annotations

import pytest

from daskwp.distributed import lending, profiler
from daskwp.jobs import packing

WORKERS = {"tcp://10.0.0.1:4000": {"nthreads": 2, "host": "10.0.0.1"},
           "tcp://10.0.0.1:4001": {"nthreads": 1, "host": "10.0.0.1"}}


class _Client:
    """A client whose ``scheduler_info`` returns ``reply`` or raises ``error``."""

    def __init__(self, reply=None, error=None):
        self.reply, self.error, self.asked = reply, error, []

    def scheduler_info(self, n_workers=0):
        self.asked.append(n_workers)
        if self.error is not None:
            raise self.error
        return self.reply

    def processing(self):
        return {w: [] for w in WORKERS}

    def get(self, dsk, keys, sync=False):   # (never reached when the list is unknown)
        raise AssertionError("get without the worker list")


#: ``(client, the exception on_error="raise" raises)`` of each way of not knowing.
UNKNOWN = {
    "connection closed": (lambda: _Client(error=OSError("connection closed")), OSError),
    "loop closed": (lambda: _Client(error=RuntimeError("IOLoop is closed")), RuntimeError),
    "no workers key": (lambda: _Client(reply={"type": "Scheduler"}), KeyError),
    "workers not a dict": (lambda: _Client(reply={"workers": None}), TypeError),
}


def test_the_scheduler_lists_every_worker():
    client = _Client(reply={"workers": WORKERS})
    assert lending.scheduler_workers(client) == WORKERS
    assert lending.scheduler_workers(client, on_error="raise") == WORKERS
    assert client.asked == [-1, -1]   # every worker, not distributed's first few
    assert lending.cluster_workers(client) == {w: (w, v["nthreads"]) for w, v in WORKERS.items()}
    gone = "tcp://10.0.0.2:4000"
    assert profiler._in_cluster(client, [gone, *WORKERS]) == list(WORKERS)


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_an_unknown_worker_list_is_none(case):
    make, _ = UNKNOWN[case]
    assert lending.scheduler_workers(make()) is None


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_an_unknown_worker_list_raises_when_asked_to(case):
    make, error = UNKNOWN[case]
    client = make()
    with pytest.raises(error) as e:
        lending.scheduler_workers(client, on_error="raise")
    if client.error is not None:
        assert e.value is client.error   # what the client raised, as it raised it


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_lending_lends_nothing_when_the_workers_are_unknown(case):
    make, _ = UNKNOWN[case]
    assert lending.cluster_workers(make()) == {}
    workers = {w: (w, v["nthreads"]) for w, v in WORKERS.items()}
    assert lending.give_idle_threads(make(), {("write", 0)}, workers) == {}


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_the_profilers_pause_keeps_every_worker_when_they_are_unknown(case):
    make, _ = UNKNOWN[case]
    paused = ["tcp://10.0.0.2:4000", *WORKERS]
    assert profiler._in_cluster(make(), paused) == paused
    assert profiler._in_cluster(make(), []) == []


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_packing_placement_raises_when_the_workers_are_unknown(case):
    make, error = UNKNOWN[case]
    with pytest.raises(error):
        packing._run_tasks(make(), {("count", 0): 1}, [("count", 0)], first=[("count", 0)])


def test_a_bad_on_error_is_refused():
    with pytest.raises(ValueError, match="on_error must be 'unknown' or 'raise', got 'return'"):
        lending.scheduler_workers(_Client(reply={"workers": WORKERS}), on_error="return")
