"""daskwp across separate hosts: a scheduler host, two worker hosts and a client host, each a
Linux network namespace on a private bridge (``daskwp/testing/netns_hosts.py``: topology, route
checks, teardown). Every job is ``daskwp run conf/existing-scheduler.yaml`` run *in the client host*
against the scheduler host's address, the accessor's ``to_parquet`` runs there too, and every
output is compared with the single-machine tokenizer on the same documents, global logIDs
included.

Faults, each injected once some parts exist (the output folder is polled) and each followed
by the same complete-and-equal check, with no leftover temporary file and no duplicated
part:

* a worker host's switch port down, for less and for more than the TCP timeout, then up;
* a worker host's processes SIGKILLed;
* the scheduler host's processes SIGKILLed: the job fails, and the same command against a
  new scheduler (and new workers) resumes, keeping every complete part (same inode, same
  mtime);
* a worker host behind a 50 ms delay (``tc netem``, or a user-space delay line where the
  kernel has no netem).

Skips, with the reason, where namespaces cannot be made (not root, no iproute2, ``ip netns
add`` refused). The measured figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp

from conftest import DATA, DATA_IS_BUNDLED, corpus_files, read_documents
from daskwp.testing.netns_hosts import WORKER_PORT, slow_link_reason
from daskwp.testing.netns_hosts import cluster, hosts  # noqa: F401 - the fixtures

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf" / "existing-scheduler.yaml"
MAX_LENGTH, STRIDE = 128, 32          # conf/existing-scheduler.yaml's window
BUDGET = 2_500_000                    # input bytes: a few MB of the shared corpora
TARGET_PARTS = 80                     # partitions per job: enough to fault one mid-way
JOB_TIMEOUT = 240


# -- input and the single-machine reference ----------------------------------------------

def choose_corpus(budget: int = BUDGET) -> list[Path]:
    """Text corpus files (``corpus_files()``), folder by folder in turn (the first file of
    every folder, then the second, ...), as many as fit in ``budget`` bytes."""
    by_dir: dict = {}
    for p in corpus_files():
        if p.suffix in (".txt", ".log"):
            by_dir.setdefault(p.parent, []).append(p)
    order = [p for k in range(max(map(len, by_dir.values())))
             for d in sorted(by_dir) for p in by_dir[d][k:k + 1]]
    chosen, total = [], 0
    for p in order:
        if total + p.stat().st_size <= budget:
            chosen.append(p)
            total += p.stat().st_size
    return chosen


class Reference:
    """The documents of the chosen files in job order and their single-machine windows."""

    def __init__(self, files):
        self.files = files
        self.docs = [d for f in files for d in read_documents(f)]
        self.bytes = sum(f.stat().st_size for f in files)
        self.partition_size = max(1024, self.bytes // TARGET_PARTS)
        exp = daskwp.WordPieceTokenizer()(self.docs, max_length=MAX_LENGTH, stride=STRIDE)
        self.ids, self.mask = exp["input_ids"], exp["attention_mask"]
        self.meta = exp["metadata"]
        lid = self.meta[:, 0]
        idx = np.arange(len(lid))
        first = np.maximum.accumulate(np.where(np.r_[True, lid[1:] != lid[:-1]], idx, 0))
        self.window = idx - first

    def assert_equal(self, table: pa.Table, what: str) -> None:
        rows = self.ids.shape[0]
        assert table.num_rows == rows, f"{what}: {table.num_rows} rows, expected {rows}"
        meta = np.stack([table.column(c).to_numpy() for c in ("logID", "start", "stop")], 1)
        np.testing.assert_array_equal(meta, self.meta, err_msg=f"{what}: metadata")
        assert table.schema.field("input_ids").type == pa.list_(pa.int32())
        ids = table.column("input_ids").combine_chunks().flatten().to_numpy()
        np.testing.assert_array_equal(ids.reshape(self.ids.shape), self.ids,
                                      err_msg=f"{what}: input_ids")
        mask = table.column("attention_mask").combine_chunks().flatten().to_numpy()
        np.testing.assert_array_equal(mask.reshape(self.mask.shape), self.mask,
                                      err_msg=f"{what}: attention_mask")
        np.testing.assert_array_equal(table.column("window").to_numpy(), self.window,
                                      err_msg=f"{what}: window")


@pytest.fixture(scope="module")
def ref() -> Reference:
    files = choose_corpus()
    assert files, f"no text corpus under {DATA / 'corpus'}"
    return Reference(files)


# -- jobs on the client host ---------------------------------------------------------------

def part_files(out: Path) -> list[Path]:
    return sorted(out.glob("part-*.parquet"))


def snapshot(out: Path) -> dict:
    """``{part name: (inode, mtime_ns)}``: a rewritten part gets a new inode (atomic rename)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in part_files(out)}


class Job:
    """``daskwp run conf/existing-scheduler.yaml`` in the client host (``--json``)."""

    def __init__(self, net, ref: Reference, out: Path, name: str = "job"):
        self.net, self.out = net, out
        self.stdout = net.workdir / f"{name}-{time.monotonic_ns()}.json"
        inputs = json.dumps([str(f) for f in ref.files])  # a YAML list: logIDs in list order
        argv = [sys.executable, "-m", "daskwp", "run", CONF,
                "--set", f"scheduler_address={net.scheduler_address}",
                "--set", f"input={inputs}", "--set", f"output={out}",
                "--set", f"partition_size={ref.partition_size}", "--set", "device=cpu",
                "--json"]
        self.t0 = time.monotonic()
        with open(self.stdout, "wb") as fh:
            self.proc = net.popen(net.client, argv, name=name, stdout=fh)
        self.t_end = None

    def parts(self) -> int:
        return len(part_files(self.out))

    def wait_for_parts(self, n: int, timeout: float = JOB_TIMEOUT) -> int:
        """Poll the output folder until ``n`` parts exist (or the job ends); returns how many."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            k = self.parts()
            if k >= n:
                return k
            time.sleep(0.005)
        return self.parts()

    def running(self) -> bool:
        return self.proc.poll() is None

    def watch(self, seconds: float) -> None:
        """Sleep ``seconds``, noting when the job ends meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.t_end is None and self.proc.poll() is not None:
                self.t_end = time.monotonic()
            time.sleep(0.01)

    def wait(self, timeout: float = JOB_TIMEOUT) -> int:
        rc = self.proc.wait(timeout=timeout)
        if self.t_end is None:
            self.t_end = time.monotonic()
        return rc

    @property
    def seconds(self) -> float:
        return self.t_end - self.t0

    @property
    def stderr(self) -> str:
        return self.proc.log.read_text(errors="replace")

    def summary(self) -> dict:
        text = self.stdout.read_text()
        assert text.strip(), f"the job printed no summary; stderr:\n{self.stderr[-3000:]}"
        return json.loads(text)


def read_job_output(out: Path) -> pa.Table:
    parts = part_files(out)
    assert parts, f"no part files in {out}"
    # padded rows are stored trimmed (docs/design.md §3.3): read back as written
    return daskwp.read_tokenized(out).to_table()


def assert_complete(job: Job, ref: Reference, what: str) -> dict:
    """The job ended well, wrote one part per partition and nothing else, and its output
    equals the single-machine tokenization."""
    assert job.proc.returncode == 0, f"{what}: exit {job.proc.returncode}\n{job.stderr[-4000:]}"
    s = job.summary()
    names = [p.name for p in part_files(job.out)]
    n = s["partitions"]
    assert len(names) == n == s["partitions_written"] + s["partitions_skipped"], (n, names[:3])
    assert names == [f"part-{i:05d}.parquet" for i in range(n)], "part names: " + str(names[:5])
    left = [p.name for p in job.out.iterdir() if p.name.startswith(".")]
    assert not left, f"{what}: temporary files left: {left}"
    assert s["documents"] == len(ref.docs)
    assert (job.out / "_summary.json").exists()
    ref.assert_equal(read_job_output(job.out), what)
    return s


def scheduler_log(net) -> str:
    logs = sorted(net.workdir.glob("*-scheduler.log"))
    return logs[-1].read_text(errors="replace")


def removed_workers(net) -> list[str]:
    """Names of the workers the (current) scheduler removed."""
    return re.findall(r"Remove worker addr: \S+ name: (\S+)", scheduler_log(net))


def worker_counts(net) -> dict:
    """Tasks each worker has run so far (``WorkerState.executed_count``), by worker name."""
    code = (
        "import json, sys\n"
        "from distributed import Client\n"
        "with Client(sys.argv[1], timeout=30) as c:\n"
        "    n = c.run(lambda dask_worker: (dask_worker.name,"
        " dask_worker.state.executed_count))\n"
        "print(json.dumps(dict(n.values())))\n")
    out = net.python(net.client, code, net.scheduler_address)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def report(**figures) -> None:
    print("\nMEASURED " + json.dumps(figures, default=str))


ACCESSOR_SCRIPT = """
import json, sys
import dask.dataframe as dd
from distributed import Client
import daskwp

address, inp, out = sys.argv[1:4]
with Client(address, timeout=30) as client:
    workers = {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}
    ddf = dd.read_parquet(inp)
    res = ddf["text"].wordpiece.tokenize(max_length=%d, stride=%d)
    res.to_parquet(out)
    executed = client.run(lambda dask_worker: (dask_worker.name,
                                               dask_worker.state.executed_count))
print(json.dumps({"workers": workers, "partitions": ddf.npartitions,
                  "executed": dict(executed.values())}))
""" % (MAX_LENGTH, STRIDE)


# -- tests -----------------------------------------------------------------------------------

def test_topology_stays_on_the_bridge(hosts):
    """Every route between the test hosts (from the client first) is direct on the host's
    own eth0, a veth whose other end is a port of the bridge in the switch namespace."""
    routes = hosts.check_routes()
    assert all(" dev eth0 " in r for r in routes)
    # The cluster fixture's processes run in their own namespaces with their own addresses.
    assert len({h.addr for h in hosts.hosts.values()}) == len(hosts.hosts)
    report(test="topology", hosts={h.role: h.addr for h in hosts.hosts.values()},
           routes_from_client=[r for r in routes if r.startswith("client:")])


@pytest.mark.slow
def test_job_and_accessor_across_hosts(cluster, ref, tmp_path):
    """`daskwp run conf/existing-scheduler.yaml` in the client host, then the accessor's
    to_parquet from there on the same cluster: both equal the single-machine tokenizer, and
    both worker hosts did part of the work."""
    job = Job(cluster, ref, tmp_path / "out")
    job.wait()
    s = assert_complete(job, ref, "daskwp run")
    assert s["scheduler_address"] == cluster.scheduler_address
    counts_after_job = worker_counts(cluster)
    assert sorted(counts_after_job) == ["w1", "w2"]
    assert all(v > 0 for v in counts_after_job.values()), counts_after_job

    # The same documents as a Parquet dataset (one file per corpus file, several row
    # groups), tokenized by the accessor on the cluster.
    src = tmp_path / "in.parquet"
    src.mkdir()
    k = 0
    for i, f in enumerate(ref.files):
        docs = read_documents(f)
        pq.write_table(pa.table({"text": docs, "n": np.arange(k, k + len(docs))}),
                       src / f"{i:03d}.parquet", row_group_size=max(1, len(docs) // 3))
        k += len(docs)
    acc_out = tmp_path / "accessor"
    t0 = time.monotonic()
    r = cluster.python(cluster.client, ACCESSOR_SCRIPT, cluster.scheduler_address, src,
                       acc_out, timeout=JOB_TIMEOUT)
    acc_seconds = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-4000:]
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["workers"] == {w.role: cluster.worker_address(w) for w in cluster.workers}
    acc_tasks = {w: info["executed"][w] - counts_after_job[w] for w in counts_after_job}
    assert sum(acc_tasks.values()) > 0, acc_tasks
    table = daskwp.read_tokenized(acc_out).to_table()
    table = table.sort_by([("logID", "ascending"), ("window", "ascending")])
    ref.assert_equal(table, "accessor to_parquet")
    report(test="job and accessor", input_files=len(ref.files), input_bytes=ref.bytes,
           documents=len(ref.docs), rows=int(ref.ids.shape[0]),
           partitions=s["partitions"], partition_size=ref.partition_size,
           job_seconds=round(job.seconds, 2), job_tokenize_seconds=round(
               s["tokenize_seconds"], 2), tasks_per_worker_after_job=counts_after_job,
           accessor_seconds=round(acc_seconds, 2),
           accessor_files=len(sorted(acc_out.glob("*.parquet"))),
           accessor_partitions=info["partitions"], accessor_tasks_per_worker=acc_tasks,
           data_bundled=DATA_IS_BUNDLED)


@pytest.mark.parametrize("cut", [pytest.param(4.0, id="short-cut", marks=pytest.mark.slow),
                                 pytest.param(15.0, id="long-cut", marks=pytest.mark.slow)])
def test_worker_link_cut_mid_job(cluster, ref, tmp_path, cut):
    """A worker host's switch port goes down mid-job for ``cut`` seconds, then up. Shorter
    than the TCP timeout (12 s here), TCP retransmits and the job rides through with both
    workers; longer, the scheduler drops the host and its tasks rerun on the other one. The
    job completes without a rerun either way, with every part once and equal."""
    w1 = cluster.hosts["w1"]
    job = Job(cluster, ref, tmp_path / "out")
    at = job.wait_for_parts(10)
    assert job.running(), "the job ended before the link could be cut"
    t_cut = time.monotonic()
    cluster.link_down(w1)
    try:
        job.watch(2)
        during = snapshot(job.out)  # with what the cut-off worker wrote after the cut
        job.watch(cut - 2)
    finally:
        cluster.link_up(w1)
    t_up = time.monotonic()
    rc = job.wait()
    s = assert_complete(job, ref, f"link cut {cut} s")
    after = snapshot(job.out)
    rewritten = sorted(n for n in during if after[n] != during[n])
    time.sleep(2)  # a cut-off worker must not write anything once the job is done
    assert snapshot(job.out) == after, "a part changed after the job had finished"
    removed = removed_workers(cluster)
    if cut < 12:
        assert removed == [], f"a {cut} s cut dropped {removed}"
        assert cluster.pids(w1), "the cut worker exited after a short cut"
    else:
        assert removed == ["w1"], removed
    report(test=f"link cut {cut} s", rc=rc, parts_at_cut=at,
           parts_2s_into_cut=len(during), rewritten_later=rewritten,
           job_seconds=round(job.seconds, 2), ended_after_restore_s=round(
               job.t_end - t_up, 2), ended_after_cut_s=round(job.t_end - t_cut, 2),
           removed_workers=removed, w1_worker_alive_after=bool(cluster.pids(w1)),
           tokenize_seconds=round(s["tokenize_seconds"], 2))


@pytest.mark.slow
def test_worker_host_killed_mid_job(cluster, ref, tmp_path):
    """Every process of a worker host is SIGKILLed mid-job: the scheduler sees the
    connections close, reruns the host's tasks on the other one, and the job completes."""
    w1 = cluster.hosts["w1"]
    job = Job(cluster, ref, tmp_path / "out")
    at = job.wait_for_parts(10)
    assert job.running(), "the job ended before the host could be killed"
    t_kill = time.monotonic()
    killed = cluster.kill_host(w1)
    assert killed, "no process on the worker host"
    before = snapshot(job.out)
    job.wait()
    s = assert_complete(job, ref, "worker host killed")
    after = snapshot(job.out)
    assert removed_workers(cluster) == ["w1"]
    report(test="worker host killed", parts_at_kill=at, killed_pids=len(killed),
           rewritten_after_kill=sorted(n for n in before if after[n] != before[n]),
           job_seconds=round(job.seconds, 2), ended_after_kill_s=round(job.t_end - t_kill, 2),
           tokenize_seconds=round(s["tokenize_seconds"], 2))


@pytest.mark.slow
def test_scheduler_host_killed_then_rerun_resumes(cluster, ref, tmp_path):
    """The scheduler host dies mid-job: the job fails (exit 1) and the workers, left
    without a scheduler, exit. The same command against a new scheduler and new workers
    resumes: every part complete before is kept as it is (inode and mtime), only the others
    are written, and the dataset is complete and equal."""
    job = Job(cluster, ref, tmp_path / "out")
    at = job.wait_for_parts(10)
    assert job.running(), "the job ended before the scheduler could be killed"
    t_kill = time.monotonic()
    assert cluster.kill_host(cluster.sched)
    rc = job.wait()
    failed_after = time.monotonic() - t_kill
    assert rc != 0, "the job succeeded without its scheduler"
    assert not (job.out / "_summary.json").exists()
    # The workers lose the scheduler and close; wait until no process is left on them, so
    # that nothing writes while the snapshot is taken.
    deadline = time.monotonic() + 60
    while any(cluster.pids(w) for w in cluster.workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    workers_exited_after = time.monotonic() - t_kill
    still = {w.role: cluster.pids(w) for w in cluster.workers if cluster.pids(w)}
    assert not still, f"workers still running 60 s after their scheduler died: {still}"
    kept = snapshot(job.out)
    assert 0 < len(kept), "no complete part survived"
    # What the user sees: daskwp's error line, else the last line of a traceback.
    lines = [ln for ln in job.stderr.splitlines() if ln.strip() and not ln.startswith(" ")]
    message = ([ln for ln in lines if ln.startswith("daskwp: error")] or lines)[-1:]
    assert rc == 1 and message and message[0].startswith("daskwp: error"), \
        f"exit {rc}; the user saw {message} (want daskwp's error line, not a traceback)"

    cluster.start_cluster()  # a new scheduler process (same host and address), new workers
    rerun = Job(cluster, ref, job.out, name="rerun")
    rerun.wait()
    s = assert_complete(rerun, ref, "rerun against a new scheduler")
    after = snapshot(job.out)
    assert s["partitions_skipped"] == len(kept), (s["partitions_skipped"], len(kept))
    assert s["partitions_written"] == s["partitions"] - len(kept)
    assert {n: after[n] for n in kept} == kept, "a complete part was rewritten"
    assert f"resuming: {len(kept)} of {s['partitions']} partitions already complete" in \
        rerun.stderr
    report(test="scheduler host killed + rerun", parts_at_kill=at, rc=rc,
           job_failed_after_kill_s=round(failed_after, 2), message=message,
           workers_exited_after_kill_s=round(workers_exited_after, 2),
           parts_kept=len(kept), partitions=s["partitions"],
           written_by_rerun=s["partitions_written"], rerun_seconds=round(rerun.seconds, 2))


@pytest.mark.slow
def test_slow_worker_link_job_completes(cluster, ref, tmp_path):
    """One worker host behind a 50 ms delay on everything it sends: the round trip to it
    grows by 50 ms (measured), and the job completes, equal."""
    reason = slow_link_reason()
    if reason:
        pytest.skip(reason)
    w1, w2 = cluster.hosts["w1"], cluster.hosts["w2"]
    rtt_before = cluster.connect_seconds(cluster.client, w2.addr, WORKER_PORT)
    mechanism = cluster.slow_link(w2, 50)
    rtt_slow = cluster.connect_seconds(cluster.client, w2.addr, WORKER_PORT)
    rtt_fast = cluster.connect_seconds(cluster.client, w1.addr, WORKER_PORT)
    assert 0.045 < rtt_slow < 0.5, rtt_slow
    assert rtt_fast < 0.025, rtt_fast
    job = Job(cluster, ref, tmp_path / "out")
    job.wait()
    s = assert_complete(job, ref, "slow link")
    counts = worker_counts(cluster)
    report(test="slow link", mechanism=mechanism, rtt_ms_before=round(rtt_before * 1e3, 3),
           rtt_ms_slow=round(rtt_slow * 1e3, 2), rtt_ms_fast_host=round(rtt_fast * 1e3, 3),
           job_seconds=round(job.seconds, 2), tokenize_seconds=round(s["tokenize_seconds"], 2),
           partitions=s["partitions"], tasks_per_worker=counts)
