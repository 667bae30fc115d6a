"""Per-partition overhead of a daskwp job across hosts, with and without one slow host.

Run as root from the repository root (needs iproute2; nothing outside the machine is
touched)::

    sudo .venv/bin/python benchmarks/hosts_bench.py                 # shared corpora, 50 ms
    sudo .venv/bin/python benchmarks/hosts_bench.py --delay-ms 20 --parts 16 128 --repeats 3

It builds the hosts of ``daskwp/testing/netns_hosts.py`` (a client, a scheduler and two 1-thread
workers, each a network namespace on a private bridge), then, first with every link at full
speed and then with worker host ``w2`` sending everything ``--delay-ms`` late (``tc netem``,
or the user-space delay line where the kernel has no netem):

1. **the global-offset pass alone**: the logID offsets of N partitions
   (``daskwp.distributed.graph.PartitionCounts``: N count leaves, a binary tree of partial
   sums of depth log2 N, one offset task per partition), computed on the cluster and
   gathered; median of ``--repeats`` after one warm-up run;
2. **the batch job**, ``daskwp run conf/existing-scheduler.yaml`` from the client host on
   the same input cut into two partition counts (``--parts``, default 24 and 192). The
   per-partition overhead is the slope ``(T(n2) - T(n1)) / (n2 - n1)`` of the job's time
   (``_summary.json`` ``seconds``: the whole command after start-up; and
   ``tokenize_seconds``: counting, tokenizing and writing) against the number of
   partitions: the same bytes are tokenized in both, so the slope is what one more
   partition costs.

3. **the driver's waits**: the larger job once more, run by ``daskwp.jobs.run_job`` in the
   client host's Python with ``distributed.Future.result`` timed: how many values the
   driver fetched, how long it waited in all, and how many waits took over half the delay.

For each it reports how many tasks each worker host ran (``executed_count``).

How to read it: the offset pass is a tree of tiny tasks, so a slow host lengthens it by
about one delay per tree level whose inputs it holds (at most log2 N + 2 levels), not per
partition. The job's driver, however, takes the value of every offset, count and write key
(3 N + 1 keys) one ``Future.result()`` at a time as they complete; each key held by the
slow host costs a round trip through it, so with one slow host the per-partition overhead
grows by about the delay (benchmarks/results/HISTORY.md, "hosts_bench.py", has the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from daskwp.testing import netns_hosts

REPO = Path(__file__).resolve().parent.parent

CONF = REPO / "conf" / "existing-scheduler.yaml"

OFFSET_PASS = r"""
import json, statistics, sys, time, uuid
from distributed import Client
from daskwp.distributed.graph import PartitionCounts

address, n, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def count(q, run):              # a partition's document count, computed on a worker
    return q % 7 + 1

def executed(c):
    return dict(c.run(lambda dask_worker: (dask_worker.name,
                                           dask_worker.state.executed_count)).values())

with Client(address, timeout=30) as c:
    before = executed(c)
    times = []
    for r in range(repeats + 1):                # the first run warms the workers up
        tag = uuid.uuid4().hex[:8]
        counts = PartitionCounts(f"bench-count-{tag}", lambda q: (count, q, tag))
        dsk, keys = {}, []
        for p in range(n + 1):
            key = (f"bench-offset-{tag}", p)
            dsk[key] = counts.offset_task(dsk, key, p)
            keys.append(key)
        t = time.perf_counter()
        offsets = c.get(dsk, keys)
        if r:
            times.append(time.perf_counter() - t)
        assert offsets[-1] == sum(q % 7 + 1 for q in range(n)), offsets[-1]
        tasks = len(dsk)
    after = executed(c)
print(json.dumps({"seconds": statistics.median(times), "all": times, "tasks": tasks,
                  "per_worker": {w: after[w] - before.get(w, 0) for w in after}}))
"""

DRIVER_WAITS = r"""
import json, shutil, sys, time
from distributed import Client, Future
from daskwp import jobs

calls = {"n": 0, "seconds": 0.0, "over_half_delay": 0}
result, half = Future.result, float(sys.argv[4]) / 2e3
def timed(self, *args, **kwargs):    # the driver's wait for each key's value
    t = time.perf_counter()
    try:
        return result(self, *args, **kwargs)
    finally:
        d = time.perf_counter() - t
        calls["n"] += 1
        calls["seconds"] += d
        calls["over_half_delay"] += d > half
Future.result = timed
address, out, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.rmtree(out, ignore_errors=True)
cfg = jobs.make_config({"input": json.loads(sys.argv[5]), "output": out, "quiet": True,
                        "partition_size": size, "device": "cpu",
                        "scheduler_address": address})
with Client(address, timeout=30) as c:
    t = time.perf_counter()
    s = jobs.run_job(cfg, client=c)
    wall = time.perf_counter() - t
print(json.dumps({"partitions": s["partitions"], "seconds": wall, "result_calls": calls["n"],
                  "result_seconds": calls["seconds"],
                  "result_calls_over_half_delay": calls["over_half_delay"]}))
"""

EXECUTED = r"""
import json, sys
from distributed import Client
with Client(sys.argv[1], timeout=30) as c:
    print(json.dumps(dict(c.run(lambda dask_worker: (dask_worker.name,
                                dask_worker.state.executed_count)).values())))
"""


def default_inputs(budget: int) -> list[Path]:
    """Text corpus files of the shared data (DASKWP_SHARED_DATA, ../shared/data), else of
    the bundled tests/data, in sorted order, up to ``budget`` bytes."""
    env = os.environ.get("DASKWP_SHARED_DATA")
    roots = ([Path(env)] if env and env != "bundled" else []) + \
        [REPO.parent / "shared" / "data", REPO / "shared" / "data", REPO / "tests" / "data"]
    for root in roots:
        files = sorted(p for p in (root / "corpus").rglob("*")
                       if p.is_file() and p.suffix in (".txt", ".log"))
        if files:
            break
    chosen, total = [], 0
    for p in files:
        if total + p.stat().st_size <= budget:
            chosen.append(p)
            total += p.stat().st_size
    return chosen


def run_json(net, code: str, *args, timeout: float = 600) -> dict:
    r = net.python(net.client, code, *args, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_job(net, inputs: list[Path], out: Path, partition_size: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    before = run_json(net, EXECUTED, net.scheduler_address)
    argv = [sys.executable, "-m", "daskwp", "run", CONF,
            "--set", f"scheduler_address={net.scheduler_address}",
            "--set", f"input={json.dumps([str(p) for p in inputs])}",
            "--set", f"output={out}", "--set", f"partition_size={partition_size}",
            "--set", "device=cpu", "--json", "-q"]
    t = time.perf_counter()
    r = net.run(net.client, argv, timeout=900, name="bench-job")
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"the job failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    s = json.loads(r.stdout)
    after = run_json(net, EXECUTED, net.scheduler_address)
    return {"partitions": s["partitions"], "seconds": s["seconds"],
            "tokenize_seconds": s["tokenize_seconds"], "wall": wall,
            "per_worker": {w: after[w] - before.get(w, 0) for w in after}}


def measure(net, inputs, total_bytes, args, work: Path) -> dict:
    res = {"rtt_ms": {w.role: 1e3 * net.connect_seconds(net.client, w.addr,
                                                           netns_hosts.WORKER_PORT)
                      for w in net.workers}}
    try:
        res["offset_pass"] = run_json(net, OFFSET_PASS, net.scheduler_address,
                                      args.offset_partitions, args.repeats)
    except Exception as e:  # noqa: BLE001 - the API may move; the job figures still come
        res["offset_pass"] = {"error": str(e).strip().splitlines()[-1][:200]}
    jobs = {}
    for n in args.parts:
        size = max(1024, total_bytes // n)
        runs = [run_job(net, inputs, work / "out", size) for _ in range(args.repeats)]
        best = min(runs, key=lambda x: x["seconds"])
        jobs[n] = {**best, "partition_size": size,
                   "seconds_all": [round(x["seconds"], 3) for x in runs]}
    res["jobs"] = jobs
    try:  # the same job in the client host's Python, timing the driver's waits for values
        res["driver_waits"] = run_json(
            net, DRIVER_WAITS, net.scheduler_address, work / "out",
            max(1024, total_bytes // max(args.parts)), args.delay_ms,
            json.dumps([str(p) for p in inputs]))
    except Exception as e:  # noqa: BLE001 - the API may move; the job figures still come
        res["driver_waits"] = {"error": str(e).strip().splitlines()[-1][:200]}
    (_, j1), (_, j2) = sorted(jobs.items())[0], sorted(jobs.items())[-1]
    dn = j2["partitions"] - j1["partitions"]
    res["per_partition_ms"] = {
        "job": 1e3 * (j2["seconds"] - j1["seconds"]) / dn if dn else None,
        "tokenize_phase": 1e3 * (j2["tokenize_seconds"] - j1["tokenize_seconds"]) / dn
        if dn else None}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", nargs="*", type=Path,
                    help="text files (default: the shared corpora, up to --budget bytes)")
    ap.add_argument("--budget", type=int, default=4_000_000, help="input bytes by default")
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--parts", type=int, nargs=2, default=[24, 192],
                    help="the two partition counts of the job (default 24 192)")
    ap.add_argument("--offset-partitions", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--mechanism", choices=["auto", "netem", "delay-line"], default="auto")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    reason = netns_hosts.skip_reason()
    if reason:
        print(f"hosts_bench: cannot run here: {reason}", file=sys.stderr)
        return 2
    inputs = args.input or default_inputs(args.budget)
    total = sum(p.stat().st_size for p in inputs)
    work = Path(tempfile.mkdtemp(prefix="daskwp-hosts-bench-"))
    net = netns_hosts.Hosts(work / "hosts")
    results = {"input_files": [str(p) for p in inputs], "input_bytes": total}
    try:
        net.create()
        net.start_cluster()
        results["full speed"] = measure(net, inputs, total, args, work)
        slow = net.workers[-1]
        results["mechanism"] = net.slow_link(slow, args.delay_ms, args.mechanism)
        results[f"{slow.role} +{args.delay_ms:g} ms"] = measure(net, inputs, total, args,
                                                                work)
    finally:
        net.teardown()
        shutil.rmtree(work, ignore_errors=True)
    print_report(results, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def print_report(r: dict, args) -> None:
    print(f"input: {len(r['input_files'])} file(s), {r['input_bytes'] / 1e6:.2f} MB; "
          f"2 worker hosts x 1 thread; slow link: {r.get('mechanism')}")
    cases = [k for k in r if k == "full speed" or k.startswith("w")]
    print("\n| case | RTT w1 / w2 ms | offset pass (%d partitions, %s tasks) s | tasks w1/w2 |"
          % (args.offset_partitions, r[cases[0]]["offset_pass"].get("tasks", "?")))
    print("|---|---|---|---|")
    for c in cases:
        m, o = r[c], r[c]["offset_pass"]
        rtt = " / ".join(f"{m['rtt_ms'][w]:.2f}" for w in sorted(m["rtt_ms"]))
        if "error" in o:
            print(f"| {c} | {rtt} | not run: {o['error']} | |")
        else:
            pw = o["per_worker"]
            print(f"| {c} | {rtt} | {o['seconds']:.3f} | "
                  f"{pw.get('w1', 0)}/{pw.get('w2', 0)} |")
    print("\n| case | partitions | job s | tokenize phase s | tasks w1/w2 |")
    print("|---|---|---|---|---|")
    for c in cases:
        for n, j in sorted(r[c]["jobs"].items()):
            pw = j["per_worker"]
            print(f"| {c} | {j['partitions']} | {j['seconds']:.2f} | "
                  f"{j['tokenize_seconds']:.2f} | {pw.get('w1', 0)}/{pw.get('w2', 0)} |")
    print("\nthe driver's waits for values (Future.result), the job at %d partitions, "
          "in the client's Python:" % max(args.parts))
    for c in cases:
        d = r[c]["driver_waits"]
        if "error" in d:
            print(f"  {c}: not run: {d['error']}")
        else:
            print(f"  {c}: {d['result_calls']} calls, {d['result_seconds']:.2f} s of the "
                  f"job's {d['seconds']:.2f} s; {d['result_calls_over_half_delay']} took over "
                  f"{args.delay_ms / 2:g} ms")
    print("\nper-partition overhead (slope between the two partition counts):")
    for c in cases:
        pp = r[c]["per_partition_ms"]
        print(f"  {c}: {pp['job']:.1f} ms per partition (job), "
              f"{pp['tokenize_phase']:.1f} ms (tokenize phase)")


if __name__ == "__main__":
    sys.exit(main())
