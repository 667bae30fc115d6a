"""Does the machine run the bare kernel slower after some seconds of sustained load? One
64 MB batch of the shared English corpora encoded again and again for ``SECONDS`` (all
cores, warm), the throughput of every call against the time since the first; then the
median, minimum and maximum per 5-second window. A benchmark whose kernel passes last a
second or two and whose jobs last ten compares them on different machines when the answer
is yes: pretraining_bench therefore runs a kernel pass right before every timed job.

    python benchmarks/kernel_drift.py 40        # seconds of sustained load (default 40)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

import daskwp

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FILES = ("en_book_moby_dick.txt", "en_ewt.txt", "en_book_pride_and_prejudice.txt")


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
    lines = [ln for f in FILES
             for ln in (DATA / "corpus" / f).read_text(encoding="utf-8").splitlines()
             if ln.strip()]
    one = sum(len(ln.encode()) for ln in lines)
    times = max(1, int(64e6 // one))
    batch, mb = pa.array(lines * times), one * times / 1e6
    tok = daskwp.WordPieceTokenizer(str(DATA / "vocab" / "bert-base-uncased" / "vocab.txt"),
                                    lowercase=True)
    tok.encode(batch, num_threads=0)   # warm: the word cache filled
    calls, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        tok.encode(batch, num_threads=0)
        t1 = time.perf_counter()
        calls.append((t1 - start, mb / (t1 - t0)))
    print(f"{mb:.1f} MB a call, {len(calls)} calls over {seconds:g} s\n")
    print("| seconds since the first call | calls | median MB/s | min | max |")
    print("|---|---|---|---|---|")
    for lo in range(0, int(seconds), 5):
        window = [v for t, v in calls if lo <= t < lo + 5]
        if window:
            print(f"| {lo}-{lo + 5} | {len(window)} | {statistics.median(window):.0f} | "
                  f"{min(window):.0f} | {max(window):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
