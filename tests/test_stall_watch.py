"""The driver's stall diagnostic (``jobs.driver.StallWatch``): after a while without a
result, run_graph logs which tasks are not done, where each runs or what it waits on;
nothing is logged while results come, and the results are the same."""

from __future__ import annotations

import threading
import time

import pytest

from daskwp.distributed.dask_compat import Task, TaskRef
from daskwp.jobs.driver import JobGraph, run_graph

distributed = pytest.importorskip("distributed")


def _value(x):
    return x


#: Set once the stall report is logged: the stalled write waits for it (the cluster's
#: worker runs in this process).
_REPORTED = threading.Event()


def _write(offset, seconds, *after):
    time.sleep(seconds)
    return {"offset": offset}


def _write_until_reported(offset, *after):
    _REPORTED.wait(60)
    return {"offset": offset}


def _graph(seconds: float | None, n: int = 2) -> JobGraph:
    """Writes 0 .. n-1, each after the one before: write 0 takes ``seconds`` (None: until
    the stall is reported), the others ``seconds`` or none."""
    dsk = {"tok": Task("tok", _value, 0),
           ("off", 0): Task(("off", 0), _value, 0),
           ("off", 1): Task(("off", 1), _value, 5),
           ("cnt", 0): Task(("cnt", 0), _value, 5)}
    for i in range(n):
        after = (TaskRef(("w", i - 1)),) if i else ()
        if i == 0 and seconds is None:
            dsk[("w", 0)] = Task(("w", 0), _write_until_reported, TaskRef(("off", 0)))
        else:
            dsk[("w", i)] = Task(("w", i), _write, TaskRef(("off", 0)),
                                 seconds if seconds is not None else 0, *after)
    return JobGraph(dsk, [("off", 0), ("off", 1)], [("cnt", 0)],
                    {i: ("w", i) for i in range(n)}, "tok")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def test_a_stalled_job_reports_what_it_waits_for(client):
    logs, written = [], []
    _REPORTED.clear()

    def log(text):
        logs.append(text)
        _REPORTED.set()
    values = run_graph(_graph(None), client, lambda i, st: written.append(i), log,
                       stall_seconds=0.5)
    assert sorted(written) == [0, 1]
    assert values[("off", 1)] == 5
    assert logs, "no stall report"
    report = logs[0]
    assert report.startswith("daskwp: stall: no task finished for")
    assert "('w', 0): processing on" in report
    assert "('w', 1): " in report and "('w', 0)" in report.split("('w', 1): ")[1]
    assert "worker " in report


def test_a_moving_job_reports_nothing(client):
    """A job whose results come far less than ``stall_seconds`` apart (0.25 s, 4 s),
    running long enough for the watch to wake several times (every ``stall_seconds / 4``):
    no report."""
    logs, written = [], []
    t = time.monotonic()
    run_graph(_graph(0.25, n=12), client, lambda i, st: written.append(i), logs.append,
              stall_seconds=4.0)
    assert time.monotonic() - t > 4.0 / 4 * 2    # the watch woke at least twice
    assert sorted(written) == list(range(12)) and logs == []
