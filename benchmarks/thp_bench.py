"""The tokenizer's first and warm calls with and without transparent huge pages (the option
``huge_pages``: pooled output blocks and word memos madvised MADV_HUGEPAGE).

    python benchmarks/thp_bench.py INPUT.jsonl [--mb 70] [--calls 8] [--pairs 4]

The first ``--mb`` MB of the "text" fields of INPUT.jsonl become one Arrow string array;
each run is a fresh child process (NumPy's own huge pages off in both) that calls
``tok(array, max_length=128, stride=32, padding=False)`` once cold and ``--calls`` times warm,
and prints one JSON line: the first call's user and system CPU seconds and minor page faults,
the warm calls' median and best user CPU seconds, and the process's AnonHugePages. Runs
alternate off / on, ``--pairs`` times. The report: benchmarks/results/thp.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, resource, sys, time
import numpy as np
np._core.multiarray._set_madvise_hugepage(False)
import pyarrow as pa
import daskwp

path, limit, calls = sys.argv[1], int(float(sys.argv[2]) * 1e6), int(sys.argv[3])
texts, size = [], 0
with open(path, "rb") as f:
    for line in f:
        t = json.loads(line)["text"]
        texts.append(t)
        size += len(t)
        if size >= limit:
            break
arr = pa.array(texts, pa.string())
del texts
tok = daskwp.WordPieceTokenizer()


def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


u0, s0, f0 = usage()
del tok(arr, max_length=128, stride=32, padding=False)["input_ids"]
u1, s1, f1 = usage()
warm = []
for _ in range(calls):
    a = usage()
    out = tok(arr, max_length=128, stride=32, padding=False)
    del out
    warm.append(usage()[0] - a[0])
warm.sort()
huge = next(int(l.split()[1]) >> 10 for l in open("/proc/self/smaps_rollup")
            if l.startswith("AnonHugePages"))
print(json.dumps({"mb": round(arr.nbytes / 1e6, 1), "first_user": round(u1 - u0, 2),
                  "first_sys": round(s1 - s0, 2), "first_faults": f1 - f0,
                  "warm_user_median": round(warm[len(warm) // 2], 3),
                  "warm_user_best": round(warm[0], 3), "anon_huge_mb": huge}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("--mb", type=float, default=70)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=4)
    args = ap.parse_args()
    for _ in range(args.pairs):
        for on in ("0", "1"):
            env = dict(os.environ, DASKWP_HUGE_PAGES=on)
            out = subprocess.run([sys.executable, "-c", _CHILD, args.input, str(args.mb),
                                  str(args.calls)], env=env, check=True, capture_output=True,
                                 text=True).stdout.strip().splitlines()[-1]
            print(json.dumps({"huge_pages": on == "1", **json.loads(out)}), flush=True)


if __name__ == "__main__":
    main()
