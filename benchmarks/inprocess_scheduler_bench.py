"""What dask's threaded scheduler costs the default (in-process) command, in ONE run: is a
runner of daskwp's own for the job graph worth writing?

Three measurements, each beside its baseline:

* the graph alone: :func:`daskwp.jobs.driver.job_graph` of ``n`` partitions whose tasks do
  nothing (known counts, a write that returns at once), built and run by
  :class:`daskwp.distributed.local.InProcess` (dask's threaded scheduler) and by the
  floor any runner pays (the same graph built, its tasks called one after another in
  dependency order, no threads), interleaved (ABAB...), CPU and wall per graph;
* the imports: a fresh process that imports the command's modules (``daskwp.cli``,
  ``daskwp.jobs.driver``: no dask), the same plus dask's task classes
  (``daskwp.distributed.dask_compat``: ``import dask``, which the job graph needs with any
  runner), and plus the scheduler's own modules (``dask.threaded``, ``dask.local``,
  ``dask.callbacks``: what a runner of our own would leave out), interleaved, median CPU
  of ``--imports`` processes;
* the real command (``daskwp tokenize IN OUT --output-format megatron``, no cluster
  options: run mode threads) on ``--size-mb`` MB of JSON Lines under ``cProfile``: the
  CPU of the scheduler's code on the calling thread (dask's functions' own time, imports
  left out), against the whole process's CPU and wall.

    python benchmarks/inprocess_scheduler_bench.py --size-mb 600 --size-mb 3000

The report goes to ``--out`` (default benchmarks/results/inprocess_scheduler.md).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from _common import find_data
from pretraining_bench import build_input   # (its input, the same documents)

ROOT = Path(__file__).resolve().parents[1]
MB = 1e6


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# -- the graph alone -----------------------------------------------------------------------
def _noop_write(spec, offset, out_dir, tok, options, job_id, n, device, count, file_offset):
    return {"documents": count}


def _graph(n: int, tok, run_id: str, total_before):
    from daskwp.jobs.driver import job_graph
    specs = [SimpleNamespace(path="input.jsonl")] * n
    return job_graph(specs, [1000] * n, list(range(n)), "unused", tok, {}, "0123456789abcdef",
                     "cpu", run_id=run_id, write=_noop_write, total_before=total_before)


def _floor(graph) -> dict:
    """The graph's tasks called one after another in dependency order (no scheduler)."""
    dsk, done, values = graph.dsk, set(), {}
    left = list(dsk)
    while left:
        later = []
        for key in left:
            node = dsk[key]
            if node.dependencies <= done:
                values[key] = node({k: values[k] for k in node.dependencies})
                done.add(key)
            else:
                later.append(key)
        left = later
    return values


def graph_costs(n: int, rounds: int, tok) -> dict:
    from daskwp.distributed.local import InProcess
    from daskwp.jobs.driver import run_graph
    tb = max(0, n - max(1, n // 8))   # as InlineMerge.total_before plans it (AHEAD_SHARE 8)
    out = {"dask": [], "floor": []}
    for r in range(rounds):
        for how in ("dask", "floor"):
            c0, w0 = cpu_self(), time.perf_counter()
            g = _graph(n, tok, f"{how}{r}", tb)
            if how == "dask":
                run_graph(g, InProcess("threads", tasks=n), lambda i, s: None)
            else:
                _floor(g)
            out[how].append((cpu_self() - c0, time.perf_counter() - w0))
    return {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
            for k, v in out.items()}


# -- the imports ---------------------------------------------------------------------------
IMPORTS = {
    "command": "import daskwp.cli, daskwp.jobs.driver",
    "command + dask": "import daskwp.cli, daskwp.jobs.driver, daskwp.distributed.dask_compat",
    "command + dask + scheduler": "import daskwp.cli, daskwp.jobs.driver, "
                                  "daskwp.distributed.dask_compat, dask.threaded, "
                                  "dask.local, dask.callbacks",
}


def import_costs(times: int) -> dict:
    out = {k: [] for k in IMPORTS}
    for _ in range(times):
        for name, code in IMPORTS.items():
            c0 = cpu_children()
            subprocess.run([sys.executable, "-c", code], check=False, capture_output=True)
            out[name].append(cpu_children() - c0)
    return {k: statistics.median(v) for k, v in out.items()}


# -- the real command ----------------------------------------------------------------------
def real_command(jsonl: Path, vocab: str, tmp: Path, partition_size: str) -> dict:
    prof, out = tmp / "cmd.prof", tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "daskwp", "tokenize",
           str(jsonl), str(out), "--vocab", vocab, "--lowercase", "--partition-size",
           partition_size, "--device", "cpu", "--quiet", "--output-format", "megatron",
           "--no-add-special-tokens", "--append-eod", "--json"]
    c0, w0 = cpu_children(), time.perf_counter()
    p = subprocess.run(cmd, check=True, capture_output=True, text=True)
    cpu, wall = cpu_children() - c0, time.perf_counter() - w0
    summary = json.loads(p.stdout)
    stats = pstats.Stats(str(prof))
    sched = sum(tt for (f, _, name), (_, _, tt, _, _) in stats.stats.items()
                if f"{os.sep}dask{os.sep}" in f and name != "<module>")
    shutil.rmtree(out, ignore_errors=True)
    return {"cpu": cpu, "wall": wall, "scheduler_cpu": sched,
            "partitions": summary["partitions"], "run": summary["run"]["mode"],
            "stages": summary["cpu_seconds"],
            "merge": summary["megatron"].get("merge_cpu_seconds")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, action="append",
                    help="input sizes for the real command (repeat; default 600)")
    ap.add_argument("--partition-size", default="64MB")
    ap.add_argument("--rounds", type=int, default=10, help="graph runs of each kind")
    ap.add_argument("--imports", type=int, default=7, help="processes of each import kind")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--tmp", type=Path, default=None)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "inprocess_scheduler.md")
    args = ap.parse_args()
    sizes = args.size_mb or [600.0]
    data = find_data(args.data)
    vocab = str(data / "vocab" / "bert-base-uncased" / "vocab.txt")
    import daskwp
    from daskwp.core.options import check_bytes
    tok = daskwp.WordPieceTokenizer(vocab, lowercase=True)
    psize = check_bytes("partition_size", args.partition_size)
    lines = [f"# The in-process scheduler's cost (dask's threaded scheduler)\n",
             "Earlier runs: [HISTORY.md](HISTORY.md).\n",
             f"Command: `python benchmarks/inprocess_scheduler_bench.py "
             f"{' '.join(f'--size-mb {s:g}' for s in sizes)} --partition-size "
             f"{args.partition_size} --rounds {args.rounds} --imports {args.imports}`\n"]
    graph_rows = []
    for size in sizes:
        n = max(1, -(-int(size * MB * 1.165) // psize))   # JSON Lines bytes per text byte
        log(f"graph of {n} partitions, {args.rounds} rounds of each")
        g = graph_costs(n, args.rounds, tok)
        graph_rows.append((n, g))
    log(f"imports, {args.imports} processes of each")
    imports = import_costs(args.imports)
    real = []
    tmp = Path(tempfile.mkdtemp(dir=args.tmp))
    try:
        for size in sizes:
            jsonl = tmp / "input.jsonl"
            docs, nbytes = build_input(data, size, jsonl)
            log(f"the command on {nbytes / MB:.0f} MB ({docs:,} documents)")
            real.append((nbytes, real_command(jsonl, vocab, tmp, args.partition_size)))
            jsonl.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    lines.append(f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load "
                 f"average at the end {load[0]:.2f} (1 min), {load[2]:.2f} (15 min). "
                 f"CPU: user + system seconds (getrusage).\n")
    lines += ["## The job graph alone (tasks that do nothing)\n",
              "The same graph built and run by the threaded scheduler "
              "(`InProcess('threads')`, through `run_graph`) and by the floor of any "
              "runner: built, then its tasks called in dependency order on one thread. "
              "Median of the rounds, interleaved.\n",
              "| partitions | tasks | dask: CPU ms | dask: wall ms | floor: CPU ms | "
              "floor: wall ms | the scheduler's CPU ms |",
              "|---|---|---|---|---|---|---|"]
    for n, g in graph_rows:
        tasks = len(_graph(n, tok, "count", max(0, n - max(1, n // 8))).dsk)
        (dc, dw), (fc, fw) = g["dask"], g["floor"]
        lines.append(f"| {n} | {tasks} | {dc * 1e3:.1f} | {dw * 1e3:.1f} | {fc * 1e3:.1f} | "
                     f"{fw * 1e3:.1f} | {(dc - fc) * 1e3:.1f} |")
    lines += ["", "## Imports (a fresh process each, median CPU)\n",
              "| imports | CPU s |", "|---|---|"]
    for k, v in imports.items():
        lines.append(f"| `{IMPORTS[k]}` | {v:.3f} |")
    lines += ["", "## The command (`daskwp tokenize IN OUT --output-format megatron "
              "--append-eod`, no cluster options) under cProfile\n",
              "The scheduler's CPU: the own time of dask's functions on the calling "
              "thread, an upper bound (its loop over the finished tasks, and dask.config "
              "and tokenize calls; imports left out; the task threads' share of it is in "
              "the graph table above).\n",
              "| text MB | partitions | run mode | process CPU s | wall s | the scheduler's "
              "CPU s (calling thread) | its share of the CPU | stages (CPU s) |",
              "|---|---|---|---|---|---|---|---|"]
    for nbytes, r in real:
        st = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["stages"].items()))
        lines.append(f"| {nbytes / MB:.0f} | {r['partitions']} | {r['run']} | {r['cpu']:.2f} | "
                     f"{r['wall']:.2f} | {r['scheduler_cpu']:.3f} | "
                     f"{100 * r['scheduler_cpu'] / r['cpu']:.2f}% | {st}, merge "
                     f"{r['merge']:.2f} |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
