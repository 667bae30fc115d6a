"""Small jobs in this process, on threads (docs/batch-jobs.md "Clusters"): a job that asks for
no cluster and whose input is at most ``in_process_max_bytes`` runs its graph on dask's
threaded scheduler, and writes what a cluster writes.

Here: every job kind (Parquet windows, sentence pairs, Megatron, HF datasets, packing, the
token count) gives the same files on threads as on a cluster; a partial in-process run
resumes; the summary and ``_job.json`` say which ran; the option switches as documented
(and an explicit ``n_workers`` still starts a cluster); the in-process path imports neither
``distributed`` nor ``dask.dataframe``, and the ``.wordpiece`` accessors still register
whichever library is imported first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import daskwp
from daskwp import jobs
from daskwp.distributed.local import InProcess
from daskwp.jobs import driver, parts

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "daskwp" / "data" / "sample.txt"
#: Files a run records about itself, not the data (times, the run record).
RUN_FILES = ("_summary.json", "_job.json")


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def _lines(n: int = 600) -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").split("\n")[:n]


def _text_input(tmp_path: Path) -> str:
    p = tmp_path / "in.txt"
    p.write_text("\n".join(_lines()) + "\n", encoding="utf-8")
    return str(p)


def _pairs_input(tmp_path: Path) -> str:
    lines = _lines()
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps({"q": a[:40], "c": b}) + "\n"
                         for a, b in zip(lines, lines[1:])), encoding="utf-8")
    return str(p)


#: kind -> (input maker, job keys)
KINDS = {
    "tokenize": (_text_input, {"max_length": 32, "stride": 4}),
    "pairs": (_pairs_input, {"column": "q", "column_pair": "c", "max_length": 48,
                             "stride": 8, "truncation": "only_second",
                             "return_overflowing_tokens": True}),
    "megatron": (_text_input, {"output_format": "megatron", "append_eod": True}),
    "datasets": (_text_input, {"output_format": "datasets", "max_length": 32}),
    "packing": (_text_input, {"packing": 64}),
}


def _config(inp: str, out: Path, **keys):
    return jobs.make_config({"input": inp, "output": str(out), "partition_size": "8KB",
                             "quiet": True, "device": "cpu", **keys})


def _files(out: Path) -> dict[str, bytes]:
    """Every file of an output (the run's own records left out), by relative path; the
    output's own path (Megatron's data args name their prefixes) as ``OUT``."""
    return {str(p.relative_to(out)): p.read_bytes().replace(str(out).encode(), b"OUT")
            for p in sorted(out.rglob("*")) if p.is_file() and p.name not in RUN_FILES}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_in_process_output_is_byte_equal_to_the_clusters(tmp_path, client, kind):
    make_input, keys = KINDS[kind]
    inp = make_input(tmp_path)
    threads = jobs.run_job(_config(inp, tmp_path / "threads", **keys))
    cluster = jobs.run_job(_config(inp, tmp_path / "cluster", **keys), client=client)
    assert threads["run"]["mode"] == "threads" and cluster["run"]["mode"] == "cluster"
    assert threads["partitions"] >= 3   # several partitions on several threads
    mine, theirs = _files(tmp_path / "threads"), _files(tmp_path / "cluster")
    assert len(mine) >= threads["partitions"]
    if kind == "megatron":   # in-process: the merged pair written once, no part pairs
        assert not [n for n in mine if n.startswith("part-") and not n.endswith(".json")]
        for files, out in ((mine, "threads"), (theirs, "cluster")):
            job = json.loads((tmp_path / out / "_job.json").read_text())
            for name in [n for n in files if n.startswith("part-")]:
                data = files.pop(name)
                if name.endswith(".json"):   # the records but for what holds the bytes
                    rec = json.loads(data)
                    rec.pop("files")
                    rec.pop("merged", None)
                    if rec["logid_offset"] is None:
                        # a cluster's partition-local write: the offset is the job's record's
                        assert out == "cluster", name
                        rec["logid_offset"] = job["partitions"][rec["partition"]]["logid_offset"]
                    files[name] = rec
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert mine[name] == theirs[name], name
    for k in ("documents", "rows", "tokens", "unknown_tokens", "length_percentiles",
              "job_id"):
        assert threads[k] == cluster[k], k


def test_in_process_count_equals_the_clusters(tmp_path, client):
    from daskwp.jobs.count import run_count
    inp = _text_input(tmp_path)
    cfg = _config(inp, tmp_path / "unused")
    mine, theirs = run_count(cfg), run_count(cfg, client=client)
    assert mine["run"]["mode"] == "threads" and theirs["run"]["mode"] == "cluster"
    assert mine["partitions"] >= 3
    for k in ("files", "total", "rejects", "partitions"):
        assert mine[k] == theirs[k], k


class _Crash(RuntimeError):
    pass


def test_a_partial_in_process_run_resumes(tmp_path, monkeypatch):
    """The third partition's write fails on threads: the parts other threads finished are
    kept, no temporary file is left, and the rerun writes only the missing parts, the
    same bytes as one run."""
    inp = _text_input(tmp_path)
    out = tmp_path / "out"
    write = driver._WRITERS["parquet"]

    def failing(spec, *args):
        if spec.index == 2:
            raise _Crash("disk full")
        return write(spec, *args)

    monkeypatch.setitem(driver._WRITERS, "parquet", failing)
    with pytest.raises(jobs.JobError, match="disk full"):
        jobs.run_job(_config(inp, out, max_length=32))
    kept = sorted(p.name for p in out.glob("part-*.parquet"))
    assert kept and parts.part_name(2, 99)[:10] not in " ".join(kept)
    assert not [p for p in out.iterdir() if p.name.startswith(parts.TMP_PREFIX)]
    assert not (out / "_summary.json").exists()
    monkeypatch.setitem(driver._WRITERS, "parquet", write)
    s = jobs.run_job(_config(inp, out, max_length=32))
    assert s["run"]["mode"] == "threads"
    assert s["partitions_skipped"] == len(kept) and s["partitions_written"] == \
        s["partitions"] - len(kept)
    fresh = jobs.run_job(_config(inp, tmp_path / "fresh", max_length=32))
    assert _files(out) == _files(tmp_path / "fresh")
    assert s["documents"] == fresh["documents"] == 600


def test_summary_and_job_file_record_which_ran(tmp_path, capsys):
    from daskwp.cli import main
    inp = _text_input(tmp_path)
    out = tmp_path / "out"
    assert main(["tokenize", inp, str(out), "--partition-size", "8KB"]) == 0
    printed = capsys.readouterr().out
    run = json.loads((out / "_summary.json").read_text())["run"]
    assert run["mode"] == "threads" and run["threads"] == InProcess().num_workers >= 1
    assert "<= in_process_max_bytes" in run["why"]
    assert json.loads((out / "_job.json").read_text())["run"] == run
    line = next(l for l in printed.splitlines() if l.strip().startswith("ran on"))
    assert "in-process threads" in line and "in_process_max_bytes 16 GB" in line, line
    # nothing to do: nothing started, and the summary says so
    assert main(["tokenize", inp, str(out), "--partition-size", "8KB", "-q"]) == 0
    run = json.loads((out / "_summary.json").read_text())["run"]
    assert run == {"mode": "synchronous", "threads": 1, "why": "nothing to tokenize"}


def test_a_cluster_run_records_its_workers(tmp_path, client):
    s = jobs.run_job(_config(_text_input(tmp_path), tmp_path / "out"), client=client)
    assert s["run"] == {"mode": "cluster", "workers": 2, "threads": 2,
                        "address": client.scheduler.address, "why": "client given"}
    assert "2 workers (2 threads)" in driver.format_run_record(s["run"])


@pytest.mark.parametrize("keys, size, want", [
    ({}, 1000, "threads"),
    ({}, 16 * 10**9, "threads"),                         # the default limit: 16GB
    ({}, 16 * 10**9 + 1, None),
    ({"in_process_max_bytes": "10kB"}, 10_001, None),
    ({"in_process_max_bytes": "10kB"}, 10_000, "threads"),
    ({"in_process_max_bytes": 0}, 0, None),              # 0: always a cluster
    ({"n_workers": 2}, 1000, None),                      # asked for a cluster
    ({"threads_per_worker": 1}, 1000, None),
    ({"scheduler_address": "synchronous"}, 10**12, "synchronous"),
    ({"scheduler_address": "threads"}, 10**12, "threads"),
    ({"scheduler_address": "tcp://10.0.0.1:8786"}, 1000, "tcp://10.0.0.1:8786"),
])
def test_choose_scheduler(tmp_path, keys, size, want):
    cfg = _config(str(SAMPLE), tmp_path / "o", **keys)
    assert driver.choose_scheduler(cfg, size, "cpu")[0] == want


def test_gpu_jobs_and_dask_config_n_workers_start_a_cluster(tmp_path):
    import dask
    cfg = _config(str(SAMPLE), tmp_path / "o")
    where, why = driver.choose_scheduler(cfg, 1000, "gpu")
    assert where is None and "GPU" in why
    with dask.config.set({"daskwp.n_workers": 3}):
        cfg = _config(str(SAMPLE), tmp_path / "o")
    assert driver.choose_scheduler(cfg, 1000, "cpu") == (None, "n_workers set")
    with dask.config.set({"daskwp.in_process_max_bytes": "1kB"}):
        cfg = _config(str(SAMPLE), tmp_path / "o")
    assert cfg.in_process_max_bytes == 1000
    assert driver.choose_scheduler(cfg, 1001, "cpu")[0] is None


@pytest.mark.parametrize("bad", [-1, "lots", True, 1.5])
def test_in_process_max_bytes_refuses_what_is_not_a_size(tmp_path, bad):
    with pytest.raises(jobs.ConfigError, match="in_process_max_bytes must be a size"):
        _config(str(SAMPLE), tmp_path / "o", in_process_max_bytes=bad)


@pytest.mark.parametrize("flags, mode", [
    (["--n-workers", "2"], "local_cluster"),
    (["--in-process-max-bytes", "1kB"], "local_cluster"),
    ([], "threads"),
])
def test_explicit_n_workers_or_a_large_input_starts_a_cluster(tmp_path, client,
                                                                monkeypatch, flags, mode):
    """``--n-workers 2`` (or an input above the limit) goes to ``connect_cluster`` (here it
    returns the test's cluster: starting worker processes is test_cli's business)."""
    from daskwp.cli import main
    started = []

    def connect(cfg, device):
        started.append(cfg.n_workers)
        return client

    monkeypatch.setattr(driver, "connect_cluster", connect)
    monkeypatch.setattr(driver, "_close_own_client", lambda c: None)
    out = tmp_path / "out"
    assert main(["tokenize", _text_input(tmp_path), str(out), "-q", *flags]) == 0
    run = json.loads((out / "_summary.json").read_text())["run"]
    assert run["mode"] == mode
    assert started == ([2] if "--n-workers" in flags else [None] if flags else [])
    if flags:
        assert run["workers"] == 2 and run["address"] == client.scheduler.address


def _python(code: str) -> str:
    """The standard output of ``code`` run by a fresh interpreter (which must succeed)."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_in_process_path_imports_no_distributed(tmp_path):
    code = ("import sys\nfrom daskwp.cli import main\n"
            f"assert main(['tokenize', {_text_input(tmp_path)!r}, {str(tmp_path / 'o')!r}, "
            "'-q']) == 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('distributed', 'tornado', 'torch', 'transformers') or "
            "m.startswith('dask.dataframe')))")
    assert _python(code).strip() == "[]"
    assert json.loads((tmp_path / "o" / "_summary.json").read_text())["run"]["mode"] == \
        "threads"


def test_in_process_pickles_and_refuses_futures():
    import pickle
    from dask.system import CPU_COUNT
    r = pickle.loads(pickle.dumps(InProcess("threads", 3, tasks=1)))
    assert r.describe() == {"mode": "threads", "threads": 3, "kernel_threads": CPU_COUNT}
    with pytest.raises(ValueError, match="sync=False"):
        r.get({"a": 1}, ["a"], sync=False)
    with pytest.raises(ValueError, match="scheduler must be one of"):
        InProcess("processes")
    assert r.get({"a": 1, "b": (sum, ["a", "a"])}, ["b"]) == [2]


_IMPORT_ORDERS = {
    # daskwp first: the accessors register as pandas and dask.dataframe are imported
    "daskwp-first": "import daskwp\nimport pandas as pd\nimport dask.dataframe as dd\n",
    "dask-first": "import pandas as pd\nimport dask.dataframe as dd\nimport daskwp\n",
    # dask.dataframe imported by daskwp's own graph module, midway through daskwp's imports
    "graph-first": "import daskwp.distributed.graph\nimport pandas as pd\n"
                   "import dask.dataframe as dd\n",
}


@pytest.mark.parametrize("order", sorted(_IMPORT_ORDERS))
def test_import_daskwp_leaves_dask_dataframe_out_and_the_accessors_still_register(order):
    """``import daskwp`` (and the command) imports neither ``dask.dataframe`` nor
    ``distributed``; ``.wordpiece`` is on pandas and Dask Series whichever comes first."""
    code = ("import sys\nimport daskwp.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith(('dask.dataframe', "
            "'dask.array', 'distributed'))))\n" if order == "daskwp-first" else "") + \
        _IMPORT_ORDERS[order] + (
            "from daskwp.accessors.eager import WordPieceAccessor\n"
            "from daskwp.accessors.lazy import DaskWordPieceAccessor\n"
            "s = pd.Series(['Hello world!', 'naive'])\n"
            "assert isinstance(s.wordpiece, WordPieceAccessor)\n"
            "d = dd.from_pandas(s, npartitions=2)\n"
            "assert isinstance(d.wordpiece, DaskWordPieceAccessor)\n"
            "ids = d.wordpiece.tokenize(max_length=8).input_ids.compute(scheduler='sync')\n"
            "assert (ids == s.wordpiece.tokenize(max_length=8).input_ids).all()\n"
            "print('ok')\n")
    lines = _python(code).splitlines()
    assert lines[-1] == "ok"
    if order == "daskwp-first":
        assert lines[0] == "[]"


@pytest.mark.parametrize("workers, tasks", [(2, 1), (2, 2), (2, 7), (4, 3), (1, 5)])
def test_each_task_thread_gets_its_share_of_the_cores(workers, tasks):
    """The kernel threads of a tokenizer call on a task thread: the cores shared among the
    threads that have a partition (all of them for one partition), as the job records
    them; this thread's default is left alone."""
    import threading
    import time

    from dask.system import CPU_COUNT

    from daskwp.backends.cpu import default_num_threads
    r = InProcess("threads", workers, tasks=tasks)
    want = max(1, CPU_COUNT // min(workers, tasks))
    assert r.kernel_threads == want
    busy = min(workers, tasks)   # as many tasks as run at once: each asks once all run
    done = threading.Barrier(busy, timeout=60)   # and none ends before all have asked

    def ask():
        end = time.monotonic() + 60
        while r.running < busy and time.monotonic() < end:
            time.sleep(0.002)
        n = default_num_threads()
        done.wait()
        return n
    dsk = {("t", i): (ask,) for i in range(busy)}
    assert r.get(dsk, list(dsk)) == [want] * busy
    dsk = {("t", i): (default_num_threads,) for i in range(tasks)}
    assert default_num_threads() == 0
    assert InProcess("synchronous").get(dsk, list(dsk)) == [0] * tasks
