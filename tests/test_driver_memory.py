"""The driver's memory as a job's partitions grow in number (issue 42's soak: the ``daskwp``
command's peak RSS at 10 GB within 10% of its peak at 1 GB).

The command hosts the scheduler of the cluster it starts: what that scheduler and the driver
keep per partition (developer logs, results, the graph) is paid once per partition, and the
job's last steps (the output check, the summary) run on top of what the closed cluster left.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daskwp import jobs
from daskwp.jobs import parts

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
