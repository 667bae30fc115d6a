"""The workers' statistical profiler paused while a daskwp job computes on a running cluster
(option ``pause_worker_profiler``; daskwp/distributed/profiler.py)."""

from __future__ import annotations

import logging
import time

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")
import dask  # noqa: E402
import dask.dataframe as dd  # noqa: E402

import daskwp  # noqa: E402,F401  the accessors
from daskwp.core.options import OPTIONS  # noqa: E402
from daskwp.distributed import profiler as prof  # noqa: E402
from daskwp.jobs import driver  # noqa: E402
from daskwp.jobs.config import make_config  # noqa: E402


def _cluster(**config):
    with dask.config.set({"distributed.worker.profile.enabled": True, **config}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                           processes=False, dashboard_address=":0")
    return cluster, distributed.Client(cluster)


@pytest.fixture(scope="module")
def client():
    cluster, c = _cluster()
    yield c
    c.close()
    cluster.close()


def _state(client) -> dict:
    """``{worker: (holders, profile running, profile-cycle running)}``."""
    got = client.run(prof.profiler_pause_state)
    return {w: (s["holders"], s["running"].get("profile"), s["running"].get("profile-cycle"))
            for w, s in got.items()}


def _running(client) -> set:
    return {w for w, (_, p, c) in _state(client).items() if p and c}


class _Clock:
    """The profiler's ``time.monotonic`` (the leases' clock), moved only by the test: a
    lease expires when the test says so, not when a loaded machine is slow."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(prof, "time", c)   # the cluster's workers are in this process
    return c


def _expiries(client) -> dict:
    """``{worker: sorted expiries of its holds}``."""
    def get(dask_worker):
        state = getattr(dask_worker, prof._STATE, None)
        return sorted(state.holders.values()) if state is not None else []
    return client.run(get)


def _wait_for(cond, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_paused_in_the_block_and_restored_after(client):
    workers = set(client.nthreads())
    assert _running(client) == workers
    with prof.worker_profiler_paused(client) as paused:
        assert set(paused) == workers
        assert _state(client) == {w: (1, False, False) for w in workers}
    assert _state(client) == {w: (0, True, True) for w in workers}


def test_restored_when_the_block_raises(client):
    with pytest.raises(RuntimeError, match="boom"):
        with prof.worker_profiler_paused(client):
            assert not _running(client)
            raise RuntimeError("boom")
    assert _running(client) == set(client.nthreads())


def test_two_holders_the_last_restores(client):
    with prof.worker_profiler_paused(client):
        with prof.worker_profiler_paused(client):
            assert {h for h, _, _ in _state(client).values()} == {2}
        # the first job still runs: its hold keeps the profiler paused
        assert {v for v in _state(client).values()} == {(1, False, False)}
    assert _running(client) == set(client.nthreads())


def test_disabled_option_leaves_it_running(client):
    with prof.worker_profiler_paused(client, enabled=False) as paused:
        assert paused == []
        assert _running(client) == set(client.nthreads())


def test_a_lease_not_renewed_expires(client, clock):
    # a driver that paused and died: nothing renews or releases its hold
    replies = client.run(prof.pause_profiler, "dead-driver", 0.3, 0.05)
    assert set(replies.values()) == {True}
    assert not _running(client)
    clock.now += 0.3   # the lease's end: the next check (every 0.05 s) drops it
    assert _wait_for(lambda: _running(client) == set(client.nthreads()))
    assert {h for h, _, _ in _state(client).values()} == {0}
    # the lease check went with the pause
    assert not any(prof._CHECK in w.periodic_callbacks
                   for w in client.cluster.workers.values())


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_a_renewed_lease_holds(client, clock):
    # the renewals go through the scheduler's broadcast: no worker log line for each one
    # (Client.run writes "Run out-of-band function ..." at INFO for every call)
    worker_log = logging.getLogger("distributed.worker")
    records, level = _Records(), worker_log.level
    worker_log.addHandler(records)
    worker_log.setLevel(logging.INFO)
    try:
        t0 = clock.now
        with prof.worker_profiler_paused(client, lease_seconds=0.4, renew_seconds=0.1,
                                         check_seconds=0.05):
            assert set(map(tuple, _expiries(client).values())) == {(t0 + 0.4,)}
            for step in range(1, 4):   # three leases long, each renewed before its end
                clock.now = t0 + 0.3 * step
                assert _wait_for(lambda: set(map(tuple, _expiries(client).values())) ==
                                 {(clock.now + 0.4,)}), _expiries(client)
            clock.now += 0.2   # past the lease before the last renewal
            client.run(lambda dask_worker: getattr(dask_worker, prof._STATE).expire())
            assert {v for v in _state(client).values()} == {(1, False, False)}
    finally:
        worker_log.removeHandler(records)
        worker_log.setLevel(level)
    assert _running(client) == set(client.nthreads())
    runs = [m for m in records.messages if "out-of-band" in m]
    # the pause, the state check and the release: never a renewal
    assert runs and not [m for m in runs if "renew" in m], runs


def test_a_worker_started_without_the_profiler_stays_so():
    cluster, c = _cluster(**{"distributed.worker.profile.enabled": False})
    try:
        with prof.worker_profiler_paused(c) as paused:
            assert paused == []
        assert {s["running"].get("profile") for s in c.run(prof.profiler_pause_state)
                .values()} == {None}
    finally:
        c.close()
        cluster.close()


def test_a_profiler_stopped_by_someone_else_stays_stopped(client):
    def stop(dask_worker):
        dask_worker.periodic_callbacks["profile"].stop()

    def start(dask_worker):
        dask_worker.periodic_callbacks["profile"].start()

    client.run(stop)
    try:
        with prof.worker_profiler_paused(client) as paused:
            assert paused == []
        assert {p for _, p, _ in _state(client).values()} == {False}
    finally:
        client.run(start)


def test_no_cluster_client_is_left_alone():
    with prof.worker_profiler_paused(None) as paused:
        assert paused == []
    with prof.worker_profiler_paused(object()) as paused:
        assert paused == []


# -- batch jobs and the accessor ----------------------------------------------------------

def _job(tmp_path, **kw):
    (tmp_path / "in.txt").write_text("hello world\n" * 50 + "daskwp tokenizes text\n" * 50)
    return make_config({"input": str(tmp_path / "in.txt"), "output": str(tmp_path / "out"),
                        "partition_size": "400B", "quiet": True, **kw})


def _observing_run_graph(monkeypatch, client, seen, fail=False):
    real = driver.run_graph

    def run_graph(graph, runner, *args, **kwargs):
        seen.append(_state(client))
        if fail:
            raise RuntimeError("the job failed")
        return real(graph, runner, *args, **kwargs)
    monkeypatch.setattr(driver, "run_graph", run_graph)


def test_job_on_a_running_cluster_pauses_the_profiler(client, tmp_path, monkeypatch):
    seen: list = []
    _observing_run_graph(monkeypatch, client, seen)
    summary = driver.run_job(_job(tmp_path), client=client)
    assert summary["documents"] == 100
    assert seen == [{w: (1, False, False) for w in client.nthreads()}]
    assert _running(client) == set(client.nthreads())


def test_job_given_a_scheduler_address_pauses_the_profiler(client, tmp_path, monkeypatch):
    # `daskwp run/tokenize --scheduler ADDRESS`: the job connects its own client to the
    # running cluster (it owns the client, not the cluster)
    seen: list = []
    _observing_run_graph(monkeypatch, client, seen)
    cfg = _job(tmp_path, scheduler_address=client.scheduler.address)
    summary = driver.run_job(cfg)
    assert summary["run"]["mode"] == "cluster"
    assert seen == [{w: (1, False, False) for w in client.nthreads()}]
    assert _running(client) == set(client.nthreads())


def test_job_on_its_own_local_cluster_does_not_pause(tmp_path, monkeypatch):
    from daskwp.distributed import profiler
    calls = []
    real = profiler.worker_profiler_paused
    monkeypatch.setattr(profiler, "worker_profiler_paused",
                        lambda runner, enabled: calls.append(enabled) or real(runner, enabled))
    summary = driver.run_job(_job(tmp_path, n_workers=1, threads_per_worker=1))
    assert summary["run"]["mode"] == "local_cluster"
    assert calls == [False]


def test_count_on_a_running_cluster_pauses_the_profiler(client, tmp_path, monkeypatch):
    from daskwp.jobs import count
    seen: list = []
    real = count._run

    def run(*args, **kwargs):
        seen.append(_state(client))
        return real(*args, **kwargs)
    monkeypatch.setattr(count, "_run", run)
    report = count.run_count(_job(tmp_path, scheduler_address=client.scheduler.address))
    assert report["total"]["documents"] == 100 and report["run"]["mode"] == "cluster"
    assert seen == [{w: (1, False, False) for w in client.nthreads()}]
    assert _running(client) == set(client.nthreads())


def test_job_that_fails_restores_the_profiler(client, tmp_path, monkeypatch):
    seen: list = []
    _observing_run_graph(monkeypatch, client, seen, fail=True)
    with pytest.raises(RuntimeError, match="the job failed"):
        driver.run_job(_job(tmp_path), client=client)
    assert seen and not any(p for _, p, _ in seen[0].values())
    assert _running(client) == set(client.nthreads())


def test_job_option_false_leaves_the_profiler_running(client, tmp_path, monkeypatch):
    seen: list = []
    _observing_run_graph(monkeypatch, client, seen)
    driver.run_job(_job(tmp_path, pause_worker_profiler=False), client=client)
    assert seen == [{w: (0, True, True) for w in client.nthreads()}]


def test_job_option_is_checked(tmp_path):
    from daskwp.jobs.errors import ConfigError
    with pytest.raises(ConfigError, match="pause_worker_profiler must be True or False"):
        _job(tmp_path, pause_worker_profiler="yes")
    assert OPTIONS["pause_worker_profiler"].default is True


#: What the accessor's partition tasks saw: the profiler of the worker they ran on.
_SEEN: list = []


def _texts(i):
    w = distributed.get_worker()
    _SEEN.append(w.periodic_callbacks["profile"].is_running())
    return pd.Series([f"document {i} {j}" for j in range(20)], dtype="string",
                     name="text")


@pytest.mark.parametrize("pause", [None, False])
def test_accessor_to_parquet_pauses_the_profiler(client, tmp_path, pause):
    _SEEN.clear()
    s = dd.from_map(_texts, range(4), meta=pd.Series([], dtype="string", name="text"))
    res = s.wordpiece.tokenize(max_length=16)
    with dask.config.set(scheduler=client.get):
        res.to_parquet(tmp_path / "out", pause_worker_profiler=pause)
    assert len(_SEEN) == 4 and set(_SEEN) == {pause is False}   # is_running: not paused
    assert _running(client) == set(client.nthreads())
    assert len(pd.read_parquet(tmp_path / "out")) == 80


@pytest.mark.parametrize("pause", [None, False])
def test_accessor_lazy_to_parquet_compute_pauses_the_profiler(client, tmp_path, pause):
    # to_parquet(compute=False).compute(): the benchmark's call, paused as to_parquet()
    _SEEN.clear()
    s = dd.from_map(_texts, range(4), meta=pd.Series([], dtype="string", name="text"))
    res = s.wordpiece.tokenize(max_length=16)
    lazy = res.to_parquet(tmp_path / "out", compute=False, pause_worker_profiler=pause)
    assert isinstance(lazy, daskwp.accessors.lazy.PartsWrite)
    assert _SEEN == []   # nothing ran yet
    with dask.config.set(scheduler=client.get):
        stats = lazy.compute()
    assert stats["documents"] == 80 and stats["parts"] == 4
    assert len(_SEEN) == 4 and set(_SEEN) == {pause is False}
    assert _running(client) == set(client.nthreads())
    assert len(pd.read_parquet(tmp_path / "out")) == 80


def test_accessor_to_megatron_pauses_the_profiler(client, tmp_path):
    _SEEN.clear()
    s = dd.from_map(_texts, range(3), meta=pd.Series([], dtype="string", name="text"))
    with dask.config.set(scheduler=client.get):
        out = s.wordpiece.to_megatron(str(tmp_path / "meg" / "text"))
    assert out["documents"] == 60
    assert _SEEN == [False] * 3
    assert _running(client) == set(client.nthreads())
    with pytest.raises(ValueError, match="pause_worker_profiler must be True or False"):
        s.wordpiece.to_megatron(str(tmp_path / "m2" / "text"), pause_worker_profiler=1)


def test_option_from_yaml_cli_and_dask_config(tmp_path):
    from daskwp.cli import _job_values, build_parser
    from daskwp.jobs.config import load_config
    job = tmp_path / "job.yaml"
    job.write_text("input: in.txt\noutput: out\npause_worker_profiler: false\n")
    assert load_config(job).pause_worker_profiler is False
    ns = build_parser().parse_args(["tokenize", "in.txt", "out",
                                    "--no-pause-worker-profiler"])
    assert _job_values(ns)["pause_worker_profiler"] is False
    ns = build_parser().parse_args(["tokenize", "in.txt", "out"])
    values = dict(_job_values(ns), input="in.txt", output="out")
    assert make_config(values).pause_worker_profiler is True
    with dask.config.set({"daskwp.pause_worker_profiler": False}):
        assert make_config(values).pause_worker_profiler is False


_DYING_DRIVER = """
import os, sys
from distributed import Client
from daskwp.distributed.profiler import worker_profiler_paused
client = Client(sys.argv[1])
with worker_profiler_paused(client, lease_seconds=3.0, renew_seconds=0.5,
                            check_seconds=0.1) as paused:
    print(len(paused), flush=True)
    os._exit(0)   # dies inside the job: no finally, no release
"""


def test_a_driver_that_dies_leaves_no_lasting_pause(clock):
    import subprocess
    import sys
    with dask.config.set({"distributed.worker.profile.enabled": True}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                           processes=False, protocol="tcp://",
                                           dashboard_address=":0")
    c = distributed.Client(cluster)
    try:
        out = subprocess.run([sys.executable, "-c", _DYING_DRIVER, cluster.scheduler_address],
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "2", out.stderr[-2000:]
        assert not _running(c)   # the dead driver's hold is still there ...
        # ... until its lease runs out
        clock.now += 3.0
        assert _wait_for(lambda: _running(c) == set(c.nthreads()))
        assert {h for h, _, _ in _state(c).values()} == {0}
    finally:
        c.close()
        cluster.close()


def test_renewals_stop_for_a_worker_that_no_longer_holds():
    # a restarted worker has no renewal handler and no hold: it is not asked again
    import threading

    class FakeClient:
        scheduler = type("S", (), {"broadcast": staticmethod(lambda **kw: None)})()

        def __init__(self):
            self.asked = []

        def sync(self, fn, msg, workers, on_error):
            self.asked.append(list(workers))
            if len(self.asked) == 3:
                stop.set()
            return {w: (w == "a") for w in workers}

    stop, fake = threading.Event(), FakeClient()
    prof._renew(fake, "t", ["a", "b"], 1.0, 0.01, stop)
    assert fake.asked == [["a", "b"], ["a"], ["a"]]
