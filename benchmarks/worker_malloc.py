"""One text partition through the batch jobs' ``write_partition`` under a Dask nanny's
malloc setting, with and without daskwp's tuning (docs/design.md §3.5 "Worker malloc").

    python benchmarks/worker_malloc.py [--mb 64] [--rounds 4]

The pipeline benchmark's input (its corpora, repeated to ``--mb`` MB) is written once as a
text file; each environment runs in its own child process, which writes the partition
``--rounds`` times (ragged rows, zstd) and reports the stage CPU seconds of every round
(``_summary``'s ``cpu_seconds``) and its wall time. The first round of a process pays its
cold word memo and first touch of the output pool; the table gives the best of the others.

- ``unset``: no ``MALLOC_TRIM_THRESHOLD_`` (glibc's dynamic mmap threshold);
- ``nanny``: ``MALLOC_TRIM_THRESHOLD_=65536`` (distributed's default for its workers) with
  ``DASKWP_WORKER_MALLOC=0``: what a worker did before the tuning;
- ``nanny, tuned``: the same variable, daskwp's tuning on (its default).

The report goes to benchmarks/results/worker_malloc.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

CHILD = r"""
import json, os, shutil, sys, time
import daskwp
from daskwp.backends import memory
from daskwp.jobs.inputs import PartitionSpec
from daskwp.jobs.parts import write_partition
path, out_root, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = daskwp.WordPieceTokenizer(num_threads=1)
opts = dict(max_length=128, stride=32, truncation=False, add_special_tokens=True,
            padding="do_not_pad", bucket_widths="auto", compression="zstd")
size = os.path.getsize(path)
runs = []
for r in range(rounds):
    out = os.path.join(out_root, f"r{r}")
    os.makedirs(out)
    spec = PartitionSpec(index=0, path=path, format="text", column="text", byte_start=0,
                         byte_end=size)
    t = time.perf_counter()
    stats = write_partition(spec, 0, out, tok, opts, "j" * 32, 1)
    runs.append({"wall": time.perf_counter() - t, **stats["cpu_seconds"]})
    shutil.rmtree(out)
print(json.dumps({"tuned": memory._tuned, "runs": runs}))
"""

ENVS = {
    "unset": {"MALLOC_TRIM_THRESHOLD_": None, "DASKWP_WORKER_MALLOC": None},
    "nanny": {"MALLOC_TRIM_THRESHOLD_": "65536", "DASKWP_WORKER_MALLOC": "0"},
    "nanny, tuned": {"MALLOC_TRIM_THRESHOLD_": "65536", "DASKWP_WORKER_MALLOC": None},
}
STAGES = ["read", "tokenize", "arrow", "write", "finish"]


def main(argv=None) -> int:
    from pipeline_bench import corpus_base, default_data_dir, write_text
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=64, help="partition size in MB (default 64)")
    ap.add_argument("--rounds", type=int, default=4, help="partitions per process (default 4)")
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/worker_malloc.md")
    args = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="worker_malloc-") as td:
        tmp = Path(td)
        inp = write_text(corpus_base(args.data), int(args.mb * 1e6), tmp / "big.txt")
        for name, extra in ENVS.items():
            env = dict(os.environ)
            for k, v in extra.items():
                env.pop(k, None)
                if v is not None:
                    env[k] = v
            out_root = tmp / name.replace(", ", "-")
            out_root.mkdir()
            proc = subprocess.run([sys.executable, "-c", CHILD, str(inp["text"]), str(out_root),
                                   str(args.rounds)], env=env, check=True, capture_output=True,
                                  text=True, timeout=1800)
            results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(name, results[name], file=sys.stderr)
    L = ["# One partition under a Dask nanny's malloc setting", "",
         "Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).", "",
         f"`python benchmarks/worker_malloc.py --mb {args.mb:g} --rounds {args.rounds}` "
         f"({time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}): "
         f"{inp['bytes'] / 1e6:.1f} MB of text ({inp['lines']:,} lines of the pipeline "
         "benchmark's corpora) through `jobs.parts.write_partition`, ragged rows, zstd, one "
         "thread, in one child process per environment. CPU seconds per stage "
         "(`cpu_seconds`) and wall seconds, the best of rounds 2 to "
         f"{args.rounds} (the first pays the cold word memo and the output pool's first "
         "touch; its wall time is in the last column).", "",
         "| environment | tuned | " + " | ".join(STAGES) + " | wall | first round wall |",
         "|---|---|" + "---|" * (len(STAGES) + 2)]
    for name, res in results.items():
        later = res["runs"][1:] or res["runs"]
        best = {k: min(r[k] for r in later) for k in STAGES + ["wall"]}
        L.append(f"| {name} | {res['tuned']} | " +
                 " | ".join(f"{best[k]:.3f}" for k in STAGES) +
                 f" | {best['wall']:.2f} | {res['runs'][0]['wall']:.2f} |")
    L += ["", "`nanny`: `MALLOC_TRIM_THRESHOLD_=65536`, as distributed's nanny starts its "
          "workers (`distributed.nanny.pre-spawn-environ`), which also fixes glibc's mmap "
          "threshold at 128 KB; `tuned`: whether `tune_worker_malloc()` raised the mmap and "
          "trim thresholds (32 MB, 128 MB) in that process."]
    text = "\n".join(L) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
