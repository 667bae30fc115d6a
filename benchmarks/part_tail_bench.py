"""The end of a cluster's Megatron part, as its task thread meets it: the ``.idx`` of a
64 MB JSON Lines partition (800,000 one-sequence documents, ~17 MB) written with
``O_DIRECT`` against through the page cache, interleaved, and the fsyncs of a part. For each:
the calling thread's wall, CPU (run), run-queue wait and the rest, time blocked
(``/proc/self/task/TID/schedstat``: the blocked time stays readable on a loaded machine,
where wall time is mostly run-queue wait).

    python benchmarks/part_tail_bench.py [--reps 12] [--dir DIR]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import numpy as np

from daskwp.frames import megatron as fm
from daskwp.frames.part_writer import checksum_hash


def sched() -> tuple[float, float, float]:
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as fh:
        f = fh.read().split()
    return time.perf_counter(), int(f[0]) / 1e9, int(f[1]) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(dir=args.dir)
    rng = np.random.default_rng(0)
    lengths = [rng.integers(1, 60, 50_000).astype(np.int32) for _ in range(16)]
    docs, k = [np.zeros(1, np.int64)], 0
    for a in lengths:
        docs.append(np.arange(k + 1, k + len(a) + 1, dtype=np.int64))
        k += len(a)
    modes = {"direct .idx": True, "buffered .idx": False}
    tot = {m: np.zeros(3) for m in [*modes, "3 fsyncs (.bin 32 MB direct, .idx, record)"]}
    buf = np.frombuffer(os.urandom(8 << 20), np.uint8)
    for _ in range(args.reps):
        for m, direct in modes.items():
            p = os.path.join(folder, "x.idx")
            a = sched()
            fm._write_index_pieces(p, lengths, docs, np.uint16, digest=checksum_hash(),
                                   direct=direct)
            b = sched()
            tot[m] += np.subtract(b, a)
            os.unlink(p)
        # a part's three fsyncs: its direct .bin, a buffered .idx, the record
        fh = fm.create_file(os.path.join(folder, "x.bin"), True)
        for _ in range(4):
            fm._write_array(fh, buf)
        fm.complete_file(fh)
        paths = [os.path.join(folder, "x.idx"), os.path.join(folder, "x.json")]
        fm._write_index_pieces(paths[0], lengths, docs, np.uint16)
        with open(paths[1], "w") as rec:
            rec.write("x" * 3000)
        fds = [fh.fileno()] + [os.open(q, os.O_RDONLY) for q in paths]
        a = sched()
        for fd in fds:
            os.fsync(fd)
        b = sched()
        tot["3 fsyncs (.bin 32 MB direct, .idx, record)"] += np.subtract(b, a)
        for fd in fds[1:]:
            os.close(fd)
        fh.close()
        for q in (os.path.join(folder, "x.bin"), *paths):
            os.unlink(q)
    os.rmdir(folder)
    print("| what | wall ms | CPU ms | run-queue ms | blocked ms |")
    print("|---|---|---|---|---|")
    for m, (w, r, q) in tot.items():
        n = args.reps
        print(f"| {m} | {w / n * 1e3:.1f} | {r / n * 1e3:.1f} | {q / n * 1e3:.1f} | "
              f"{(w - r - q) / n * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
