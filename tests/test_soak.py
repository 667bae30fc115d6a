"""A batch job on its cluster while a worker process is killed (issue 42's soak, small):
what the driver does after the nanny has started another worker."""

from __future__ import annotations

import pytest

import daskwp
from daskwp import jobs
from daskwp.jobs import driver

from conftest import run_killing_a_worker
from test_cli import assert_matches, sample_lines, summary_parts, tok, write_text  # noqa: F401


@pytest.mark.slow
def test_last_writes_lent_by_the_workers_alive_after_a_kill(tmp_path, tok, monkeypatch):
    """The job's last write takes the idle threads of the workers alive at its end: a
    worker killed half way (its address gone) lends none, and the one its nanny started
    (a new address) is one of them. The driver took the workers of its first batch, the
    killed one included, the new one left out, so the last write was never lent a core."""
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
    # a cluster as the job starts its own (daskwp.connect: nannies, daskwp's plugins)
    with daskwp.connect(device="cpu", n_workers=2, threads_per_worker=1,
                        dashboard_address=":0") as client:
        first = set(client.scheduler_info(n_workers=-1)["workers"])
        summary, killed = run_killing_a_worker(
            client.cluster, lambda: jobs.run_job(cfg, client=client),
            lambda: len(list(out.glob("part-*.parquet"))) >= summary_parts(out) // 2 > 0)
        assert killed, "the job ended before a worker could be killed"
    assert summary["partitions"] >= 8
    gone = [sorted(w - live) for w, live in calls if not w <= live]
    assert not gone, f"threads asked of workers no longer in the cluster: {gone}"
    assert all(w == live for w, live in calls)
    for w, _ in calls:   # the survivor, and the worker started for the killed one if up
        assert len(w & first) == 1
    assert_matches(out, tok, lines)
