"""Batch jobs on the Dask layer: one graph with the accessor's tokenizer key, the one
global-offset pass (``PartitionCounts``) and the per-worker tokenizer.

The job's end-to-end behaviour (resume, errors, a killed worker) is in test_cli.py and
test_jobs_output.py; here: the shape of the job's graph, the offsets the pass gives, and the
worker plugin on the client a job uses.
"""

from __future__ import annotations

import json
import pickle
import threading
import time
from pathlib import Path

import cloudpickle
import dask.dataframe as dd
import pandas as pd
import pytest
from dask.local import get_sync
from distributed.diagnostics.plugin import SchedulerPlugin

import daskwp
from daskwp import jobs
from daskwp.distributed import state as worker_state
from daskwp.distributed.dask_compat import DataNode, Task
from daskwp.distributed.graph import PartitionCounts, tokenizer_graph_key
from daskwp.jobs import driver, parts
from conftest import corpus_files, read_documents, requires_data, vocab_path

SAMPLE = Path(__file__).resolve().parent.parent / "daskwp" / "data" / "sample.txt"
OPTIONS = {"max_length": 32, "stride": 4, "truncation": False, "add_special_tokens": True,
           "padding": "max_length", "compression": "zstd"}


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


def _lines(n: int) -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").split("\n")[:n]


def _plan(tmp_path, sizes: list[int]) -> list[jobs.PartitionSpec]:
    """One text file per entry of ``sizes`` (that many lines each), planned as one job."""
    lines = _lines(sum(sizes))
    inp = tmp_path / "in"
    inp.mkdir()
    at = 0
    for k, size in enumerate(sizes):
        (inp / f"f{k:02d}.txt").write_bytes("".join(l + "\n" for l in lines[at:at + size])
                                             .encode())
        at += size
    files = jobs.list_input_files(str(inp))
    return jobs.plan_partitions(files, "text", 1 << 30)


def _name(key) -> str:
    return key[0] if isinstance(key, tuple) else key


def test_job_graph_has_the_accessors_tokenizer_key_once(tmp_path, tok):
    specs = _plan(tmp_path, [10, 3, 2, 7, 12])
    graph = driver.job_graph(specs, [None] * len(specs), range(len(specs)), str(tmp_path),
                             tok, OPTIONS, "f" * 32, "cpu", run_id="r1")
    tok_keys = [k for k in graph.dsk if _name(k).startswith("daskwp-tokenizer-")]
    # the same key as the accessor's graph: one DataNode, content-addressed
    res = dd.from_pandas(pd.Series(["a b"] * 4), npartitions=2).wordpiece.tokenize(tok)
    assert tok_keys == [graph.tokenizer_key] == [res._tokenized.tokenizer_key]
    assert graph.tokenizer_key == tokenizer_graph_key(daskwp.WordPieceTokenizer())
    assert isinstance(graph.dsk[graph.tokenizer_key], DataNode)
    # no task but that key carries the vocabulary
    tok_bytes = len(pickle.dumps(tok))
    heavy = [k for k, v in graph.dsk.items() if len(cloudpickle.dumps(v)) > tok_bytes // 10]
    assert heavy == [graph.tokenizer_key]
    # every write depends on it, on its offset node and on its own count
    for i, key in graph.write_keys.items():
        deps = graph.dsk[key].dependencies
        assert graph.tokenizer_key in deps
        assert graph.offset_keys[i] in deps and graph.count_keys[i] in deps
    assert not hasattr(parts, "share")  # no second way of shipping the tokenizer


def test_job_offsets_come_from_the_prefix_count_tree(tmp_path, tok):
    """Known counts (the Parquet plan, _job.json, complete parts) are leaves of the pass as
    they are; unknown ones are counted by a task; the offsets are the tree's sums."""
    sizes = [10, 3, 2, 7, 12, 1, 5]
    specs = _plan(tmp_path, sizes)
    counts = [None, 3, None, 7, None, 1, None]
    graph = driver.job_graph(specs, counts, [], str(tmp_path), tok, OPTIONS, "e" * 32, "cpu")
    leaves = {k[2]: v for k, v in graph.dsk.items()
              if _name(k).startswith("daskwp-count-") and k[1] == 0}
    assert sorted(leaves) == list(range(len(sizes)))
    for q, node in leaves.items():
        if counts[q] is None:
            assert isinstance(node, Task) and node.func is parts.count_job_partition
        else:
            assert isinstance(node, DataNode) and node.value == counts[q]
    # tree nodes above the leaves: at most log2(p) + 1 refs per offset
    inner = [k for k in graph.dsk if _name(k).startswith("daskwp-count-") and k[1] > 0]
    assert len(inner) <= len(sizes)
    for p, key in enumerate(graph.offset_keys):
        assert len(graph.dsk[key].dependencies) <= max(1, p.bit_length())
    values = get_sync(graph.dsk, graph.offset_keys + graph.count_keys)
    n = len(sizes)
    offsets, got_counts = values[:n + 1], values[n + 1:]
    expected = [sum(sizes[:p]) for p in range(n + 1)]
    assert list(offsets) == expected and list(got_counts) == sizes


def test_partition_counts_is_the_accessors_pass():
    """The accessor's offsets use the same class: a culled partition 5 needs the leaves of
    partitions 0..4 and the tree nodes (2, 0) and (0, 4)."""
    ds = dd.from_pandas(pd.Series([f"doc {i}" for i in range(60)]), npartitions=6)
    counts = PartitionCounts.of_source(ds.expr)
    dsk: dict = {}
    refs = counts.prefix_refs(dsk, 5)
    assert [r.key[1:] for r in refs] == [(2, 0), (0, 4)]
    assert sorted(k[1:] for k in dsk if k[1] == 0) == [(0, j) for j in range(5)]


def test_job_offsets_recorded_in_job_json_are_the_passes(tmp_path):
    """A synchronous job over several files: _job.json's offsets equal the documents before
    each partition (known from Parquet metadata or counted), and every part starts there."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    lines = _lines(300)
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.txt").write_text("\n".join(lines[:120]) + "\n")
    pq.write_table(pa.table({"text": lines[120:250]}), inp / "b.parquet", row_group_size=30)
    (inp / "c.txt").write_text("\n".join(lines[250:]) + "\n")
    out = tmp_path / "out"
    cfg = jobs.make_config({"input": str(inp), "output": str(out), "partition_size": "3KB",
                            "scheduler_address": "synchronous", "quiet": True})
    summary = jobs.run_job(cfg)
    job = json.loads((out / "_job.json").read_text())
    docs = [p["documents"] for p in job["partitions"]]
    offs = [p["logid_offset"] for p in job["partitions"]]
    assert sum(docs) == job["documents"] == summary["documents"] == 300
    assert offs == [sum(docs[:i]) for i in range(len(docs))]
    for i, off in enumerate(offs):
        ids = pq.read_table(out / parts.part_name(i, len(offs))).column("logID").to_numpy()
        assert ids[0] == off and ids[-1] == off + docs[i] - 1


def _job_config(tmp_path, lines: int, partition_size: str):
    """The config of a CPU job over ``lines`` lines of text in ``tmp_path``/in.txt."""
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(_lines(lines)) + "\n")
    return jobs.make_config({"input": str(inp), "output": str(tmp_path / "out"),
                             "partition_size": partition_size, "quiet": True,
                             "device": "cpu"})


def test_run_job_registers_the_worker_plugin_and_one_tokenizer_per_worker(tmp_path, tok):
    from distributed import Client, LocalCluster
    cfg = _job_config(tmp_path, 400, "4KB")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        assert not any(client.run(_has_daskwp_plugin).values())
        summary = jobs.run_job(cfg, client=client)
        assert summary["partitions"] > 4
        assert all(client.run(_has_daskwp_plugin).values())
        key = worker_state.tokenizer_key(tok)
        cached = client.run(worker_state.cached_tokenizer_keys)
        assert sum(key in keys for keys in cached.values()) >= 1
        assert all(keys.count(key) <= 1 for keys in cached.values())


def _has_daskwp_plugin(dask_worker) -> bool:
    return worker_state.PLUGIN_NAME in dask_worker.plugins


class _Priorities(SchedulerPlugin):
    """A scheduler plugin that records the priority of every task it sees."""

    name = "daskwp-test-priorities"

    def __init__(self):
        self.seen: dict = {}

    def transition(self, key, start, finish, *args, **kwargs):
        ts = self.scheduler.tasks.get(key)
        if ts is not None and ts.priority is not None:
            self.seen.setdefault(key, ts.priority)

    async def start(self, scheduler):
        self.scheduler = scheduler


def _job_on_a_cluster_seen(tmp_path, partition_size: str):
    """A job of 800 lines run on a 2-worker in-process LocalCluster: ``(summary, {key:
    priority})`` of every task the scheduler saw (:class:`_Priorities`)."""
    from distributed import Client, LocalCluster
    cfg = _job_config(tmp_path, 800, partition_size)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        client.register_plugin(_Priorities())
        summary = jobs.run_job(cfg, client=client)
        seen = client.run_on_scheduler(lambda dask_scheduler: dict(
            dask_scheduler.plugins[_Priorities.name].seen))
    return summary, seen


def test_the_offset_pass_runs_before_any_write(tmp_path):
    """Every count, partial sum and offset task sorts before every write task: with equal
    priorities dask.order interleaves them, and a worker that finished a write waits
    for a sum queued behind a write on the other worker."""
    summary, seen = _job_on_a_cluster_seen(tmp_path, "4KB")
    assert summary["partitions"] >= 8
    writes = [p for k, p in seen.items() if _name(k).startswith("daskwp-write-")]
    passes = [p for k, p in seen.items()
              if _name(k).startswith(("daskwp-count-", "daskwp-offset-"))]
    assert len(writes) == summary["partitions"] and len(passes) > summary["partitions"]
    assert max(passes) < min(writes)
    # the writes in partition order: partition i's at user priority -i (whatever batch of
    # pass results let the driver submit it)
    by_part = {k[1]: p for k, p in seen.items() if _name(k).startswith("daskwp-write-")}
    assert [by_part[i][0] for i in range(len(by_part))] == list(range(len(by_part)))


class _RanOn(SchedulerPlugin):
    """A scheduler plugin that records where each task ran and where the tokenizer's key
    was held (``who_has``) when each write started."""

    name = "daskwp-test-ran-on"

    def __init__(self):
        self.ran: dict = {}
        self.tok_at_write: dict = {}

    def transition(self, key, start, finish, *args, **kwargs):
        ts = self.scheduler.tasks.get(key)
        if ts is None:
            return
        if finish == "processing" and _name(key).startswith("daskwp-write-"):
            tok = [d for d in ts.dependencies if _name(d.key).startswith("daskwp-tokenizer")]
            self.tok_at_write[key] = (ts.processing_on.address if ts.processing_on else None,
                                      {w.address for t in tok for w in t.who_has})
        if start == "processing" and finish == "memory":
            self.ran[key] = kwargs.get("worker")

    async def start(self, scheduler):
        self.scheduler = scheduler


def test_every_worker_fetches_the_tokenizer_before_its_first_write(tmp_path, tok):
    """One hold task per worker, above every write's priority, takes the tokenizer: each
    worker has it before its first write is sent (a worker fetched it only then, an idle
    core waiting between its last count and its first write)."""
    from distributed import Client, LocalCluster

    from daskwp.jobs.driver import prefetch_on_workers
    cfg = _job_config(tmp_path, 800, "2KB")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        client.register_plugin(_RanOn())
        summary = jobs.run_job(cfg, client=client)
        ran, tok_at = client.run_on_scheduler(lambda dask_scheduler: (
            dict(dask_scheduler.plugins[_RanOn.name].ran),
            dict(dask_scheduler.plugins[_RanOn.name].tok_at_write)))
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        # the helper itself: one hold per worker, each on its worker, none of them failing
        fut = client.submit(lambda: 7, key="daskwp-test-value")
        holds = prefetch_on_workers(client, fut, 10, "daskwp-test-hold")
        assert [h.key for h in holds] == [("daskwp-test-hold", 0), ("daskwp-test-hold", 1)]
        assert client.gather(holds) == [None, None]
        assert sorted(client.who_has([fut])["daskwp-test-value"]) == workers
    assert summary["partitions"] >= 16
    hold_workers = sorted(w for k, w in ran.items() if _name(k).startswith("daskwp-hold-"))
    assert hold_workers == workers
    # every worker that ran a write held the tokenizer by then, save the first write sent
    # to each worker before its hold's fetch could finish: at most one per worker
    late = [k for k, (w, has) in tok_at.items() if w not in has]
    assert len(tok_at) == summary["partitions"] and len(late) <= 2


def test_only_the_pass_leaves_run_on_the_cluster(tmp_path):
    """The scheduler gets one count task and one write task per partition (and the
    tokenizer, the first offset): the prefix-count tree's sums are added up in the driver.
    On the scheduler (a local cluster's runs in the driver's process) they were two more
    tasks per partition, and dask.order of the tree held a set of the leaves below every
    node: memory quadratic in the partitions."""
    summary, seen = _job_on_a_cluster_seen(tmp_path, "2KB")
    n = summary["partitions"]
    assert n >= 16
    names = [_name(k) for k in seen]
    assert sum(x.startswith("daskwp-write-") for x in names) == n
    holds = sum(x.startswith("daskwp-hold-") for x in names)
    assert holds == 2   # one per worker (prefetch_on_workers)
    counts = [k for k in seen if _name(k).startswith("daskwp-count-")]
    assert len(counts) == n and all(k[1] == 0 for k in counts)   # leaves only
    assert sum(x.startswith("daskwp-offset-") for x in names) <= 1
    assert len(seen) <= 2 * n + 2 + holds
    job = json.loads((tmp_path / "out" / "_job.json").read_text())
    docs = [p["documents"] for p in job["partitions"]]
    assert [p["logid_offset"] for p in job["partitions"]] == \
        [sum(docs[:i]) for i in range(n)]


def test_pass_sums_give_the_trees_offsets_in_any_arrival_order(tmp_path, tok):
    """PassSums (the driver's half of the pass): whatever order the counts come in, and
    with some counts known up front, every offset and count equals the tree's own result
    (the whole graph on dask's synchronous scheduler)."""
    import random
    specs = _plan(tmp_path, [3, 5, 2, 7, 1, 4, 6, 2, 3])
    counts = [None, 5, None, None, 1, None, 6, None, None]
    graph = driver.job_graph(specs, counts, [], str(tmp_path), tok, OPTIONS, "f" * 32, "cpu")
    want = dict(zip(graph.offset_keys + graph.count_keys,
                    get_sync(graph.dsk, graph.offset_keys + graph.count_keys)))
    for seed in range(5):
        sums = driver.PassSums(graph.dsk, keep={graph.tokenizer_key})
        assert graph.tokenizer_key in sums.remote
        leaves = {k: get_sync(graph.dsk, k) for k in sums.remote_keys}
        assert all(_name(k).startswith("daskwp-count-") or k == graph.offset_keys[0]
                   for k in leaves)
        got = dict(sums.add({}))
        order = list(leaves)
        random.Random(seed).shuffle(order)
        for k in order:
            got.update(sums.add({k: leaves[k]}))
        assert {k: got[k] for k in want} == want


def _callback_ms(server) -> dict:
    """The intervals (ms) of a distributed server's tick, system and memory monitors."""
    return {name: server.periodic_callbacks[name].callback_time
            for name in ("tick", "monitor", "memory_monitor")
            if name in server.periodic_callbacks}


def _worker_callback_ms(dask_worker) -> dict:
    return _callback_ms(dask_worker)


def test_the_jobs_own_cluster_wakes_less_often(tmp_path):
    """The scheduler, the nanny and the worker of a cluster the job starts run their tick,
    system monitor and memory monitor at OWN_CLUSTER_INTERVALS (the spawned worker
    process included); distributed's defaults are left as they were."""
    import dask

    defaults = {k: dask.config.get(k) for k in driver.OWN_CLUSTER_INTERVALS}
    cfg = jobs.make_config({"input": str(SAMPLE), "output": str(tmp_path / "out"),
                            "quiet": True, "device": "cpu", "n_workers": 1,
                            "threads_per_worker": 1})
    client = driver.connect_cluster(cfg, "cpu")
    try:
        want = {"tick": 1000, "monitor": 2000, "memory_monitor": 500}
        assert _callback_ms(client.cluster.scheduler) == {"tick": 1000, "monitor": 2000}
        nanny = next(iter(client.cluster.workers.values()))
        assert _callback_ms(nanny) == want
        assert list(client.run(_worker_callback_ms).values()) == [want]
    finally:
        client.close()
    assert {k: dask.config.get(k) for k in driver.OWN_CLUSTER_INTERVALS} == defaults


def test_the_jobs_own_cluster_runs_without_the_worker_profiler(tmp_path, monkeypatch):
    import dask

    from daskwp.distributed import cluster
    seen = {}

    def fake_connect(**kwargs):
        seen["profile"] = dask.config.get("distributed.worker.profile.enabled")
        seen["kwargs"] = kwargs
        return "client"

    monkeypatch.setattr(cluster, "connect", fake_connect)
    cfg = jobs.make_config({"input": str(SAMPLE), "output": str(tmp_path / "out"),
                            "quiet": True, "device": "cpu", "n_workers": 2})
    before = dask.config.get("distributed.worker.profile.enabled")
    assert driver.connect_cluster(cfg, "cpu") == "client"
    assert seen["profile"] is False and seen["kwargs"]["n_workers"] == 2
    assert dask.config.get("distributed.worker.profile.enabled") == before
    # a running scheduler is the user's: its workers' settings are left alone
    cfg = jobs.make_config({"input": str(SAMPLE), "output": str(tmp_path / "out"),
                            "quiet": True, "device": "cpu",
                            "scheduler_address": "tcp://127.0.0.1:1"})
    assert driver.connect_cluster(cfg, "cpu") == "client"
    assert seen["profile"] == before


@pytest.mark.slow   # a fresh interpreter
def test_turning_the_profiler_off_keeps_distributeds_config_in_a_fresh_process(tmp_path):
    # dask.config.set restores what it changed by deleting keys it created: done before
    # distributed is imported, it would delete distributed's whole config section.
    import subprocess
    import sys
    code = f"""
import sys
from daskwp.distributed import cluster
from daskwp.jobs import driver, make_config
assert "distributed" not in sys.modules
def connect(**kwargs):
    import distributed
    return "client"
cluster.connect = connect
cfg = make_config({{"input": {str(SAMPLE)!r}, "output": {str(tmp_path / "o")!r},
                   "quiet": True, "device": "cpu"}})
assert driver.connect_cluster(cfg, "cpu") == "client"
import dask
print(dask.config.get("distributed.dashboard.link"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "{port}" in out.stdout


def _threads_once_given(seconds: float = 60.0):
    """A task: polls the kernel threads its partition writer would take for its next piece
    until its driver gives it more than one (or ``seconds`` pass); returns them."""
    from daskwp.backends.cpu import default_num_threads
    end = time.monotonic() + seconds
    while True:
        n = default_num_threads()
        if n > 1 or time.monotonic() > end:
            return n
        time.sleep(0.01)


def _threads_once_set(event: str):
    """A task: the kernel threads its partition writer would take for its next piece once
    the distributed Event ``event`` is set (at most 120 s)."""
    from distributed import Event

    from daskwp.backends.cpu import default_num_threads
    Event(event).wait(120)
    return default_num_threads()


def _until_processing(client, *futures, timeout: float = 60.0):
    """Waits until the scheduler has every one of ``futures`` processing on a worker."""
    end = time.monotonic() + timeout
    while True:
        keys = {k for ks in client.processing().values() for k in ks}
        if all(f.key in keys for f in futures):
            return
        assert time.monotonic() < end, f"not processing after {timeout} s: {futures}"
        time.sleep(0.01)


def test_the_last_write_takes_the_threads_of_its_processs_idle_workers():
    """give_idle_threads: a write left running while the other worker of its process idles
    gets both workers' threads for its next pieces (the kernel's threads); a key it was not
    given keeps the worker's one thread."""
    from distributed import Client, LocalCluster

    from daskwp.distributed import state as _state
    from daskwp.distributed.lending import cluster_workers, give_idle_threads
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        workers = cluster_workers(client)
        assert len(workers) == 2 and all(t == 1 for _, t in workers.values())
        w0 = sorted(workers)[0]
        fut = client.submit(_threads_once_given, key=("daskwp-write-test", 0), workers=[w0])
        other = client.submit(_threads_once_given, 0.3, key=("daskwp-write-test", 1))
        assert other.result() == 1   # nothing given: a worker's task keeps one thread
        _until_processing(client, fut)
        sent = give_idle_threads(client, {fut.key, ("daskwp-write-test", 9)}, workers)
        assert sent == {w0: {fut.key: 2}}
        assert fut.result() == 2
    _state._TASK_THREADS.clear()


@requires_data
def test_another_worker_process_lends_its_thread_with_a_small_memo():
    """A write on a 1-thread worker process takes another worker process's idle thread
    too, and its process is told its own threads (one): the lent thread takes a small word
    memo of its own (backends.cpu.LENT_MEMO_MB), not a copy of the warm one (+30 MB of the
    process's peak at a job's end)."""
    from distributed import Client, LocalCluster

    from daskwp.distributed.lending import cluster_workers, give_idle_threads, worker_process
    assert worker_process("inproc://10.0.0.1/4242/3") == "inproc://10.0.0.1/4242"
    assert worker_process("tcp://10.0.0.1:4000") == "tcp://10.0.0.1:4000"

    def write(vocab, docs):   # (local: pickled by value for the worker processes)
        import daskwp
        from daskwp.backends.cpu import default_num_threads
        end = time.monotonic() + 120
        while default_num_threads() < 2 and time.monotonic() < end:
            time.sleep(0.01)
        tok = daskwp.WordPieceTokenizer(vocab, lowercase=True)
        tok.encode(docs, num_threads=1)   # the process's warm memo
        i1 = daskwp.memory.info()["word_cache"]
        tok.encode(docs)                  # on the threads given
        i2 = daskwp.memory.info()["word_cache"]
        return default_num_threads(), i2["copied"] - i1["copied"], i2["lent"] - i1["lent"]

    docs = [d for f in corpus_files() if f.name.startswith("en_") for d in read_documents(f)]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        workers = cluster_workers(client)
        assert len({p for p, _ in workers.values()}) == 2   # two processes, one host
        w0 = sorted(workers)[0]
        fut = client.submit(write, str(vocab_path("bert-base-uncased")), docs,
                            key=("daskwp-write-test", 0), workers=[w0])
        _until_processing(client, fut)
        assert give_idle_threads(client, {fut.key}, workers) == {w0: {fut.key: 2}}
        assert fut.result() == (2, 0, 1)


def test_a_worker_busy_with_another_task_lends_no_threads():
    """On a running cluster, a worker that runs a task that is not one of the job's writes
    (another client's) is not idle: the last write keeps its one thread."""
    from distributed import Client, Event, LocalCluster

    from daskwp.distributed.lending import cluster_workers, give_idle_threads
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        workers = cluster_workers(client)
        w0, w1 = sorted(workers)
        release, asked = Event("daskwp-test-release"), Event("daskwp-test-asked")
        busy = client.submit(release.wait, 120, key="another-clients-task", workers=[w1])
        # the write runs until the test has asked give_idle_threads
        fut = client.submit(_threads_once_set, "daskwp-test-asked",
                            key=("daskwp-write-test", 0), workers=[w0])
        _until_processing(client, fut, busy)
        assert give_idle_threads(client, {fut.key}, workers) == {}
        asked.set()
        assert fut.result() == 1
        release.set()
        assert busy.result() is True


def test_set_task_threads_rejects_a_bad_count_and_keeps_a_bounded_table():
    from daskwp.distributed import state as _state
    with pytest.raises(ValueError, match="must be an int >= 1"):
        _state.set_task_threads({("k", 0): 0})
    _state.set_task_threads({("k", i): 2 for i in range(_state.TASK_THREADS_KEPT)})
    _state.set_task_threads({("k", -1): 3})
    assert _state._TASK_THREADS == {("k", -1): 3}
    assert _state.task_threads() is None   # not on a worker's task thread
    _state._TASK_THREADS.clear()


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
def test_writes_after_total_before_wait_for_the_pass_and_start_in_order(tmp_path, tok,
                                                                        scheduler,
                                                                        monkeypatch):
    """job_graph's total_before: the pass is done before that partition's write starts,
    the writes from it on take the partitions in order (dask.order ranks them otherwise)
    with the right offsets and counts, run_graph reports each under its partition and
    hands on_total the total first; the counts after it do not keep their bytes."""
    from daskwp.distributed.local import InProcess
    sizes = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]
    specs = [jobs.PartitionSpec(index=i, path=f"/in/{i // 7}.txt", format="text",
                                column="text", byte_start=10 * i, byte_end=10 * i + 10,
                                documents=None) for i in range(len(sizes))]
    n, tb = len(sizes), 14
    counts = [sizes[q] if q % 4 == 1 else None for q in range(n)]   # some known
    events = []

    def count(spec, on_bad_row="error", keep=True):
        events.append(("count", spec.index, keep))
        return sizes[spec.index]

    # A last write's claim of its partition and its event are one step (on two task
    # threads, one could claim first and record second): the claim takes ``claimed``,
    # the write's event gives it back.
    claimed = threading.Lock()

    class Claims(driver._TailClaims):
        def next(self):
            claimed.acquire()
            try:
                return super().next()
            except BaseException:
                claimed.release()
                raise
    monkeypatch.setattr(driver, "_TailClaims", Claims)

    def write(spec, offset, out_dir, tok_, options, job_id, n_, device, documents,
              file_offset):
        events.append(("write", spec.index))
        if spec.index >= tb:
            claimed.release()
        return {"partition": spec.index, "offset": offset, "documents": documents,
                "file_offset": file_offset}
    import unittest.mock
    with unittest.mock.patch.object(driver, "count_job_partition", count):
        graph = driver.job_graph(specs, counts, list(range(n)), str(tmp_path), tok, {},
                                 "d" * 32, "cpu", write=write, total_before=tb)
    got = {}

    def on_write(i, st):
        got[i] = st

    def on_total(total):
        events.append(("total", total))
    driver.run_graph(graph, InProcess(scheduler, num_workers=2), on_write,
                     on_total=on_total)
    assert sorted(got) == list(range(n))
    for i, st in got.items():
        first = 7 * (i // 7)
        assert st == {"partition": i, "offset": sum(sizes[:i]), "documents": sizes[i],
                      "file_offset": sum(sizes[:first])}
    at = events.index(("total", sum(sizes)))
    assert ("write", tb) not in events[:at]
    assert [e[1] for e in events if e[0] == "write" and e[1] >= tb] == list(range(tb, n))
    assert {e[1]: e[2] for e in events if e[0] == "count"} == \
        {q: q <= tb for q in range(n) if counts[q] is None}
    # no total_before: the plain graph, every count keeps its bytes
    plain = driver.job_graph(specs, counts, list(range(n)), str(tmp_path), tok, {},
                             "d" * 32, "cpu", write=write)
    assert not [k for k in plain.dsk if "tail" in _name(k)]
    for q in range(n):
        node = plain.dsk[plain.count_keys[q]]
        assert isinstance(node, DataNode) or len(node.args) == 2
