"""A batch job on a cluster while a worker process is killed (issue 42's soak, small): what
the driver asks of the workers after the nanny has started another one."""

from __future__ import annotations

import pytest

import daskwp
from daskwp import jobs
from daskwp.jobs import driver

from conftest import run_killing_a_worker
from test_cli import assert_matches, sample_lines, summary_parts, tok, write_text  # noqa: F401


@pytest.mark.slow
def test_a_worker_killed_half_way_is_asked_nothing_more(tmp_path, tok, monkeypatch):
    """A job given a running cluster's client, one of its 2 x 1-thread workers SIGKILLed
    once half the parts exist (its nanny starts another at a new address):

    - the job's last write is lent the idle threads of the workers alive at its end: the
      killed one lends none, the one started for it is one of them (the driver listed the
      workers of its first batch once: the last write never got a second core);
    - no message of the job goes to the killed worker: the profiler pause's release went
      to every worker it paused, and the scheduler's broadcast to a worker that is gone
      waits for distributed's connect timeout, so the job ended 30 s late."""
    calls = []
    lend = driver.give_idle_threads

    def spy(client, running, workers):
        calls.append((set(workers), set(client.scheduler_info(n_workers=-1)["workers"])))
        return lend(client, running, workers)

    monkeypatch.setattr(driver, "give_idle_threads", spy)
    lines = sample_lines() * 4
    out = tmp_path / "out"
    cfg = jobs.make_config({"input": str(write_text(tmp_path / "in.txt", lines)),
                            "output": str(out), "partition_size": "8KB", "quiet": True})
    # a cluster as the job starts its own (daskwp.connect: nannies, daskwp's plugins), its
    # workers' profiler running, as a cluster the user started has it
    with daskwp.connect(device="cpu", n_workers=2, threads_per_worker=1,
                        dashboard_address=":0") as client:
        scheduler = client.cluster.scheduler
        sent = []
        broadcast = scheduler.handlers["broadcast"]

        def broadcast_spy(*args, workers=None, **kwargs):
            if workers is not None:
                sent.append(sorted(set(workers) - set(scheduler.workers)))
            return broadcast(*args, workers=workers, **kwargs)

        monkeypatch.setitem(scheduler.handlers, "broadcast", broadcast_spy)
        first = set(client.scheduler_info(n_workers=-1)["workers"])
        summary, killed = run_killing_a_worker(
            client.cluster, lambda: jobs.run_job(cfg, client=client),
            lambda: len(list(out.glob("part-*.parquet"))) >= summary_parts(out) // 2 > 0)
        assert killed, "the job ended before a worker could be killed"
    assert summary["partitions"] >= 8
    assert sent, "the job sent no message to chosen workers (no profiler pause?)"
    assert [w for w in sent if w] == [], "messages to workers no longer in the cluster"
    gone = [sorted(w - live) for w, live in calls if not w <= live]
    assert not gone, f"threads asked of workers no longer in the cluster: {gone}"
    assert all(w == live for w, live in calls)
    for w, _ in calls:   # the survivor, and the worker started for the killed one if up
        assert len(w & first) == 1
    assert_matches(out, tok, lines)


def _worker_settings(dask_worker=None) -> tuple:
    import dask
    callback = dask_worker.periodic_callbacks.get("profile")
    return (dask.config.get("distributed.worker.profile.enabled"),
            dask.config.get("distributed.admin.tick.interval"),
            dask.config.get("distributed.admin.low-level-log-length"),
            callback is not None and callback.is_running())


@pytest.mark.slow
def test_a_restarted_worker_keeps_the_job_clusters_settings(tmp_path):
    """A worker of the cluster a job starts for itself, killed and started again by its
    nanny, runs with that cluster's settings (no statistical profiler, a 1 s tick, short
    logs), not distributed's defaults (profiler every 10 ms, a 20 ms tick): the nanny kept
    the job's dask.config only until the block it was started in ended."""
    import os
    import signal
    import time

    cfg = jobs.make_config({"input": str(write_text(tmp_path / "in.txt", ["a b"])),
                            "output": str(tmp_path / "out"), "n_workers": 2,
                            "threads_per_worker": 1, "quiet": True})
    client = driver.start_cluster(cfg, "cpu")
    try:
        want = (False, "1s", driver.OWN_CLUSTER_LOG_LENGTH, False)
        before = client.run(_worker_settings)
        assert set(before.values()) == {want}
        os.kill(next(iter(client.cluster.workers.values())).process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = client.run(_worker_settings, on_error="return")
            if len(now) == 2 and set(now) != set(before):
                break
            time.sleep(0.2)
        assert len(now) == 2 and set(now) != set(before), "no worker was started again"
        assert now == {w: want for w in now}
    finally:
        client.close()   # (and the cluster it started)
