#!/usr/bin/env python
"""Length buckets: padding saved, and what bucketing costs, on each shared corpus family.

    python benchmarks/bucket_bench.py [--data DIR] [--repeats 5] [--out benchmarks/results/bucket_bench.md]

For every corpus family and max_length 128 and 512 (stride 32 / 128): the padding tokens per
real token (attention-mask zeros / ones) of plain padded windows (one width) and of
``padding="bucket"`` with ``bucket_widths="auto"`` and with (16, 32, 64, max_length); and the
time of ``tok(texts, padding="bucket")`` against ``tok(texts)`` (plain padded windows),
timed interleaved in one process on one thread, the best of ``--repeats``. Real tokens
include [CLS]/[SEP]. The padding figures are exact; the times depend on the machine.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import platform
import time
from pathlib import Path

import numpy as np

import daskwp

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = [
    ("English (EWT + books)", ["en_ewt.txt", "en_book_*.txt"], "bert-base-uncased", True),
    ("Logs (loghub)", ["logs/*.log"], "bert-base-uncased", True),
    ("Multilingual (14 languages)", ["multi/*.txt"], "bert-base-multilingual-cased", False),
]
GRID = [(128, 32), (512, 128)]


def _data_dir(arg):
    for c in ([arg] if arg else []) + [os.environ.get("DASKWP_SHARED_DATA"),
                                       str(ROOT.parent / "shared" / "data"),
                                       str(ROOT / "tests" / "data")]:
        if c and Path(c, "corpus").is_dir():
            return Path(c)
    raise SystemExit("no data: pass --data DIR (a folder with corpus/ and vocab/)")


def _lines(data: Path, patterns) -> list[str]:
    out = []
    for pat in patterns:
        for f in sorted(glob.glob(str(data / "corpus" / pat))):
            text = Path(f).read_text(encoding="utf-8").split("\n")
            out += [t for t in text if t]
    return out


def _padding(out) -> tuple[int, int]:
    """(padding cells, real cells) of a padded or bucketed result."""
    masks = [b["attention_mask"] for _, b in out.buckets] if hasattr(out, "buckets") \
        else [out["attention_mask"]]
    real = sum(int(np.asarray(m).sum()) for m in masks)
    cells = sum(int(np.asarray(m).size) for m in masks)
    return cells - real, real


def _best(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bucket_bench.md"))
    args = ap.parse_args(argv)
    data = _data_dir(args.data)
    rows = []
    for name, patterns, vocab, lower in FAMILIES:
        vpath = data / "vocab" / vocab / "vocab.txt"
        texts = _lines(data, patterns)
        if not vpath.exists() or not texts:
            print(f"skip {name}: not in {data}")
            continue
        tok = daskwp.WordPieceTokenizer(str(vpath), lowercase=lower, num_threads=1)
        mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        for max_length, stride in GRID:
            kw = dict(max_length=max_length, stride=stride)
            plain = tok(texts, **kw)
            auto = tok(texts, **kw, padding="bucket")
            fixed = tok(texts, **kw, padding="bucket",
                        bucket_widths=tuple(w for w in (16, 32, 64) if w < max_length))
            p_plain, real = _padding(plain)
            p_auto, _ = _padding(auto)
            p_fixed, _ = _padding(fixed)
            # interleaved timing: plain, bucket, plain, bucket, ...
            t_plain = t_bucket = float("inf")
            for _ in range(args.repeats):
                t_plain = min(t_plain, _best(lambda: tok(texts, **kw), 1))
                t_bucket = min(t_bucket, _best(lambda: tok(texts, **kw, padding="bucket"), 1))
            rows.append(dict(name=name, mb=mb, max_length=max_length, stride=stride,
                             rows=plain.num_rows, plain=p_plain / real, auto=p_auto / real,
                             auto_widths=auto.widths, fixed=p_fixed / real,
                             fixed_widths=fixed.widths, t_plain=t_plain, t_bucket=t_bucket))
            r = rows[-1]
            print(f"{name:30s} L={max_length:4d}: padding/real plain {r['plain']:.3f}, "
                  f"auto {r['auto']:.3f} {r['auto_widths']}, fixed {r['fixed']:.3f}; "
                  f"bucket/plain time {t_bucket / t_plain:.2f}x")
    lines = [
        "# Length buckets: padding per real token, and the cost of bucketing",
        "",
        f"Command: `python benchmarks/bucket_bench.py --repeats {args.repeats}`; "
        f"{datetime.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, one thread; data `{data}`.",
        "",
        "Padding per real token = attention-mask zeros / ones (real tokens include [CLS] and "
        "[SEP]); exact. Time ratio = `tok(texts, padding=\"bucket\")` / `tok(texts)` (plain "
        "padded windows), best of the interleaved repeats.",
        "",
        "| corpus | MB | max_length / stride | rows | padding/real: one width | buckets auto "
        "(widths) | buckets 16/32/64/max | bucket time / plain time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['mb']:.2f} | {r['max_length']} / {r['stride']} | "
                     f"{r['rows']:,} | {r['plain']:.3f} | {r['auto']:.3f} "
                     f"({', '.join(map(str, r['auto_widths']))}) | {r['fixed']:.3f} | "
                     f"{r['t_bucket'] / r['t_plain']:.2f}x |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
