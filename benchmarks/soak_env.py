"""The soak's reference run (pipeline_bench: ``daskwp tokenize`` on its own 2-worker
cluster, a worker killed half way) in the environment the bench was started with against
the one a LocalCluster of the bench's own process leaves in ``os.environ`` (its nannies'
``distributed.nanny.pre-spawn-environ`` and the rest), interleaved ABAB: the driver's and
the workers' peak RSS and the throughput of each run. Before ``_common.launch_env``, every
command pipeline_bench started after its extras' cluster (the 10 GB rows, both soak runs)
and every default command of pretraining_bench ran in the second.

    python benchmarks/soak_env.py 1 --rounds 2    # GB (default 1: the soak's reference)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pipeline_bench as pb
from _common import default_data_dir, launch_env

#: What a LocalCluster with nannies (distributed 2026.8) writes into its process's
#: os.environ, checked by starting one and reading a child's environment
#: (tests/test_benchmarks_common.py); __DASK_PARENT_PID's value is the bench's pid.
CLUSTER_LEFTOVERS = {"MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1",
                     "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                     "PYTHONHASHSEED": "6640", "__DASK_PARENT_PID": "1"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gb", type=float, nargs="?", default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tmp", type=Path, default=None)
    args = ap.parse_args(argv)
    clean = launch_env()
    if any(k in clean for k in CLUSTER_LEFTOVERS if k != "PYTHONHASHSEED"):
        sys.exit("soak_env: start it from a shell without MALLOC_TRIM_THRESHOLD_ and the "
                 "thread variables")
    tmp = Path(tempfile.mkdtemp(prefix="daskwp-soak-env-", dir=args.tmp))
    try:
        inp = pb.write_text(pb.corpus_base(default_data_dir()), int(args.gb * pb.GB),
                            tmp / "in.txt")
        print("| environment | driver peak RSS | workers' peak RSS | MB/s tokenize+write |")
        print("|---|---|---|---|")
        for i in range(2 * args.rounds):
            name = ("the bench's start (launch_env)", "after its LocalCluster")[i % 2]
            env = clean if i % 2 == 0 else dict(clean, **CLUSTER_LEFTOVERS)
            pb.launch_env = lambda env=env: env   # what run_soak starts the command with
            out = tmp / f"out-{i}"
            r = pb.run_soak(inp, out, 64, 2, 0.5)
            shutil.rmtree(out, ignore_errors=True)
            speed = "failed" if r.get("failed") else f"{r['mbps']:.1f}"
            print(f"| {name} | {r['driver_rss'] / 2**20:,.0f} MiB | {pb._rss_text(r['rss'])} "
                  f"| {speed} |", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
