"""The driver's memory as a job's partitions grow in number (issue 42's soak: the ``daskwp``
command's peak RSS at 10 GB within 10% of its peak at 1 GB).

The command hosts the scheduler of the cluster it starts: what that scheduler and the driver
keep per partition (developer logs, results, the graph) is paid once per partition, and the
job's last steps (the output check, the summary) run on top of what the closed cluster left.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import dask
import distributed  # noqa: F401  (its config)
import pytest

from daskwp import jobs
from daskwp.backends import memory
from daskwp.distributed import cluster
from daskwp.jobs import driver, parts

SAMPLE = Path(__file__).resolve().parent.parent / "daskwp" / "data" / "sample.txt"


def _config(tmp_path, name: str, partition_size: str, **extra):
    """A CPU job over the sample text, on a cluster of its own (one worker, one thread)."""
    inp = tmp_path / "in.txt"
    if not inp.exists():
        inp.write_text(SAMPLE.read_text(encoding="utf-8"))
    return jobs.make_config({"input": str(inp), "output": str(tmp_path / name),
                             "partition_size": partition_size, "quiet": True,
                             "device": "cpu", "n_workers": 1, "threads_per_worker": 1,
                             "max_length": 32, "stride": 8, **extra})


@pytest.fixture
def in_process_own_cluster(monkeypatch):
    """The job's own cluster (:func:`driver.connect_cluster`, its config block included)
    with its worker in this process (no process start); yields what the job's scheduler
    held when the job closed it: ``seen["scheduler"]`` of each run, in a list."""
    real_connect = cluster.connect

    def connect(**kwargs):
        return real_connect(**kwargs, processes=False)

    runs: list = []
    real_close = driver.close_scheduler

    def close(runner, own):
        sch = runner.cluster.scheduler if own else None
        if sch is not None:
            gc.collect()
            runs.append({
                "transition_log": (len(sch.transition_log), sch.transition_log.maxlen),
                "topics": {k: (len(t.events), t.events.maxlen)
                           for k, t in sch._broker._topics.items()},
                "traced": tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing()
                else None})
        real_close(runner, own)

    monkeypatch.setattr(cluster, "connect", connect)
    monkeypatch.setattr(driver, "close_scheduler", close)
    return runs


def test_the_jobs_own_scheduler_keeps_short_developer_logs(tmp_path, in_process_own_cluster):
    before = dask.config.get("distributed.admin.low-level-log-length")
    summary = jobs.run_job(_config(tmp_path, "out", "1KB"))
    assert summary["partitions"] >= 20
    [seen] = in_process_own_cluster
    n = driver.OWN_CLUSTER_LOG_LENGTH
    assert n <= before // 10    # distributed's default: 1000
    # the job made more transitions than the log keeps: it is full, at the job's bound
    assert seen["transition_log"] == (n, n)
    assert all(maxlen == n and length <= n for length, maxlen in seen["topics"].values())
    # the setting is the job's cluster's only
    assert dask.config.get("distributed.admin.low-level-log-length") == before


@pytest.mark.slow   # two jobs traced by tracemalloc, ~10 s
def test_the_driver_keeps_little_per_partition(tmp_path, in_process_own_cluster):
    """Python memory the driver (and the scheduler and worker in it) still holds when the
    job's cluster closes, per partition more: ~29 KB with distributed's 1000-entry logs,
    none measurable with the job's 100."""
    tracemalloc.start()
    try:   # (a first job pays the one-time costs: imports, caches)
        for name in ("first", "few"):
            small = jobs.run_job(_config(tmp_path, name, "16KB"))
        large = jobs.run_job(_config(tmp_path, "many", "1KB"))
    finally:
        tracemalloc.stop()
    _, few, many = in_process_own_cluster
    added = large["partitions"] - small["partitions"]
    assert added >= 30
    per_partition = (many["traced"] - few["traced"]) / added
    assert per_partition < 12_000, f"{per_partition:.0f} bytes per partition"


def test_a_local_outputs_footers_are_read_one_part_at_a_time(tmp_path, monkeypatch):
    cfg = _config(tmp_path, "out", "1KB", scheduler_address="synchronous")
    summary = jobs.run_job(cfg)
    n = summary["partitions"]
    assert n > 2
    job = json.loads((tmp_path / "out" / "_job.json").read_text())
    plan = [{"index": i, "documents": p["documents"], "logid_offset": p["logid_offset"]}
            for i, p in enumerate(job["partitions"])]
    batches = []
    real = parts.storage.Folder.read_ranges

    def read_ranges(self, ranges):
        ranges = list(ranges)
        batches.append(len(ranges))
        return real(self, ranges)

    monkeypatch.setattr(parts.storage.Folder, "read_ranges", read_ranges)
    parts.verify_parquet_output(str(tmp_path / "out"), plan)
    # (an object store's ends are fetched FOOTER_BATCH at a time: test_object_storage.py)
    assert batches == [1] * n
    bad = [dict(p) for p in plan]
    bad[-1]["documents"] += 1
    with pytest.raises(jobs.JobError, match="does not hold exactly the logIDs"):
        parts.verify_parquet_output(str(tmp_path / "out"), bad)


def test_closing_the_jobs_own_cluster_gives_its_freed_memory_back(monkeypatch):
    calls = []
    monkeypatch.setattr(driver, "release_freed_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(driver, "_close_own_client", lambda client: calls.append(client))
    driver.close_scheduler("client", own=False)   # a client given, or in-process: nothing
    assert calls == []
    driver.close_scheduler("client", own=True)
    assert calls == ["client", 1]
    assert memory.release_freed_heap() in (True, False)


def _footer_part(folder: Path, columns: dict, documents: int) -> list[dict]:
    """One part (partition 0 of 1) with ``columns``; returns its plan."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    folder.mkdir()
    meta = {"partition": 0, "documents": documents, "logid_offset": 0,
            "rows": len(next(iter(columns.values())))}
    table = pa.table(columns).replace_schema_metadata(
        {parts.METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, folder / parts.part_name(0, 1))
    return [{"index": 0, "documents": documents, "logid_offset": 0}]


def test_the_footer_check_finds_logid_by_its_leaf_not_the_schema(tmp_path):
    # The check reads logID's statistics by its leaf column (row groups' paths), without
    # building the part's schema (~65 KB left in the driver's heap per part: 10 MiB of a
    # 10 GB job's peak RSS). After a struct of two leaves, logID is Arrow field 1 but
    # leaf 2: field 1 read the struct's second leaf (100..300) as the logIDs.
    plan = _footer_part(tmp_path / "out", {
        "s": [{"a": 7, "b": 100}, {"a": 8, "b": 200}, {"a": 9, "b": 300}],
        "logID": [0, 1, 2]}, documents=3)
    parts.verify_parquet_output(str(tmp_path / "out"), plan)
    bad = [dict(plan[0], documents=2)]
    with pytest.raises(jobs.JobError, match="documents"):
        parts.verify_parquet_output(str(tmp_path / "out"), bad)


def test_the_footer_check_names_a_part_without_logid(tmp_path):
    plan = _footer_part(tmp_path / "out", {"x": [0, 1, 2]}, documents=3)
    with pytest.raises(jobs.JobError, match="no logID column"):
        parts.verify_parquet_output(str(tmp_path / "out"), plan)
