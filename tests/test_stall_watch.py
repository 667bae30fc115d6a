"""The driver's stall diagnostic (``jobs.driver.StallWatch``): after a while without a
result, run_graph logs which tasks are not done, where each runs or what it waits on;
nothing is logged while results come, and the results are the same."""

from __future__ import annotations

import time

import pytest

from daskwp.distributed.dask_compat import Task, TaskRef
from daskwp.jobs.driver import JobGraph, run_graph

distributed = pytest.importorskip("distributed")


def _value(x):
    return x


def _write(offset, seconds, *after):
    time.sleep(seconds)
    return {"offset": offset}


def _graph(seconds: float) -> JobGraph:
    dsk = {"tok": Task("tok", _value, 0),
           ("off", 0): Task(("off", 0), _value, 0),
           ("off", 1): Task(("off", 1), _value, 5),
           ("cnt", 0): Task(("cnt", 0), _value, 5),
           ("w", 0): Task(("w", 0), _write, TaskRef(("off", 0)), seconds),
           ("w", 1): Task(("w", 1), _write, TaskRef(("off", 0)), 0, TaskRef(("w", 0)))}
    return JobGraph(dsk, [("off", 0), ("off", 1)], [("cnt", 0)], {0: ("w", 0), 1: ("w", 1)},
                    "tok")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def test_a_stalled_job_reports_what_it_waits_for(client):
    logs, written = [], []
    values = run_graph(_graph(2.0), client, lambda i, st: written.append(i), logs.append,
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
    """A job whose results come less than ``stall_seconds`` apart, running long enough for
    the watch to wake several times (every ``stall_seconds / 4``): no report."""
    logs, written = [], []
    t = time.monotonic()
    run_graph(_graph(1.0), client, lambda i, st: written.append(i), logs.append,
              stall_seconds=1.5)
    assert time.monotonic() - t > 1.5 / 4 * 2    # the watch woke at least twice
    assert sorted(written) == [0, 1] and logs == []
