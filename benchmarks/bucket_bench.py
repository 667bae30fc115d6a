#!/usr/bin/env python
"""Length buckets: padding saved, and what bucketing costs, on each shared corpus family.

    python benchmarks/bucket_bench.py [--data DIR] [--repeats 5] [--out benchmarks/results/bucket_bench.md]

For every corpus family and max_length 128 and 512 (stride 32 / 128): the padding tokens per
real token (attention-mask zeros / ones) of plain padded windows (one width) and of
``padding="bucket"`` with ``bucket_widths="auto"`` and with (16, 32, 64, max_length); and the
time of ``tok(texts, padding="bucket")`` against ``tok(texts)`` (plain padded windows),
timed interleaved in one process on one thread, the best of ``--repeats``. Real tokens
include [CLS]/[SEP]. The padding figures are exact; the times depend on the machine.

    python benchmarks/bucket_bench.py --callgrind [--data DIR] [--out-cg FILE]

counts instructions instead (callgrind; stable on a shared machine, where wall time is
noise): for each family, one ``valgrind --tool=callgrind --instr-atstart=no`` process that
warms each call once uninstrumented, then instruments exactly one ``tok(texts, ...)`` plain
and one bucketed (``bucket_widths="auto"``), and the window step alone from one encoding
(``windows_from_encoding``), one thread. The report (default
benchmarks/results/bucket_callgrind.md) gives each count and the ratios bucket / plain.
"""

from __future__ import annotations

import argparse
import datetime
import os
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import best, find_data, read_lines

import daskwp

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = [
    ("English (EWT + books)", ["en_ewt.txt", "en_book_*.txt"], "bert-base-uncased", True),
    ("Logs (loghub)", ["logs/*.log"], "bert-base-uncased", True),
    ("Multilingual (14 languages)", ["multi/*.txt"], "bert-base-multilingual-cased", False),
]
GRID = [(128, 32), (512, 128)]


def _padding(out) -> tuple[int, int]:
    """(padding cells, real cells) of a padded or bucketed result."""
    masks = [b["attention_mask"] for _, b in out.buckets] if hasattr(out, "buckets") \
        else [out["attention_mask"]]
    real = sum(int(np.asarray(m).sum()) for m in masks)
    cells = sum(int(np.asarray(m).size) for m in masks)
    return cells - real, real


# The callgrind child: client requests through a tiny C helper (callgrind.h macros).
_CG_HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(const char* label) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label); }
"""

_CG_CHILD = r"""
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
import bucket_bench as B
import daskwp
from daskwp.backends.cpu import windows_from_encoding
lib = ctypes.CDLL(sys.argv[2])
data, fam = B.Path(sys.argv[3]), int(sys.argv[4])
name, patterns, vocab, lower = B.FAMILIES[fam]
texts = B.read_lines(data, patterns, missing_ok=True)
tok = daskwp.WordPieceTokenizer(str(data / "vocab" / vocab / "vocab.txt"), lowercase=lower,
                                num_threads=1)
enc = tok.encode(texts)
for max_length, stride in B.GRID:
    kw = dict(max_length=max_length, stride=stride)
    calls = [("tok plain", lambda: tok(texts, **kw)),
             ("tok bucket", lambda: tok(texts, **kw, padding="bucket")),
             ("windows plain", lambda: windows_from_encoding(enc, tok.vocab, **kw,
                                                             num_threads=1)),
             ("windows bucket", lambda: windows_from_encoding(enc, tok.vocab, **kw,
                                                              padding="bucket",
                                                              num_threads=1))]
    for label, fn in calls:
        daskwp.memory.clear()                 # each measured call: one warm call after
        fn()                                  # an empty word memo, then itself
        lib.cg_start()
        fn()
        lib.cg_stop(f"{fam}|{max_length}|{label}".encode())
"""


def _callgrind(data: Path, out: Path) -> int:
    work = Path(tempfile.mkdtemp(prefix="bucket_cg_"))
    so = work / "cg_helper.so"
    (work / "cg_helper.c").write_text(_CG_HELPER)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", str(work / "cg_helper.c"), "-o", str(so)],
                   check=True)
    (work / "child.py").write_text(_CG_CHILD)
    counts = {}
    for fam, (name, patterns, vocab, _) in enumerate(FAMILIES):
        if not (data / "vocab" / vocab / "vocab.txt").exists() or \
                not read_lines(data, patterns, missing_ok=True):
            print(f"skip {name}: not in {data}")
            continue
        cg_out = work / f"cg.{fam}"
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        f"--callgrind-out-file={cg_out}.%p", sys.executable,
                        str(work / "child.py"), str(ROOT / "benchmarks"), str(so), str(data),
                        str(fam)], check=True, stderr=subprocess.DEVNULL)
        for f in sorted(work.glob(f"cg.{fam}.*")):
            label = total = None
            for line in f.read_text(errors="replace").splitlines():
                if line.startswith("desc: Trigger: Client Request: "):
                    label = line.split("Client Request: ", 1)[1].strip()
                elif line.startswith("totals:") or line.startswith("summary:"):
                    total = int(line.split()[1])
            if label and "|" in label and total is not None:
                counts[label] = total
        print(name, {k: v for k, v in counts.items() if k.startswith(f"{fam}|")})
    lines = [
        "# Length buckets: callgrind instructions, bucketed against plain padded windows",
        "",
        "Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).", "",
        f"Command: `python benchmarks/bucket_bench.py --callgrind`; {datetime.date.today()}, "
        f"one thread, `bucket_widths=auto`; data `{data}`. Each count is one call, "
        "after one uninstrumented warm-up call; `tok` = `tok(texts, ...)` (encode + windows), "
        "`windows` = `windows_from_encoding` of one encoding (the window step alone).",
        "",
        "| corpus | max_length / stride | tok plain | tok bucket | tok bucket / plain | "
        "windows plain | windows bucket | windows bucket / plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fam, (name, *_rest) in enumerate(FAMILIES):
        for max_length, stride in GRID:
            c = {k.split("|")[2]: v for k, v in counts.items()
                 if k.startswith(f"{fam}|{max_length}|")}
            if len(c) < 4:
                continue
            lines.append(
                f"| {name} | {max_length} / {stride} | {c['tok plain']:,} | "
                f"{c['tok bucket']:,} | {c['tok bucket'] / c['tok plain']:.3f} | "
                f"{c['windows plain']:,} | {c['windows bucket']:,} | "
                f"{c['windows bucket'] / c['windows plain']:.3f} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out.with_suffix(".json")).write_text(json.dumps(counts, indent=1) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bucket_bench.md"))
    ap.add_argument("--callgrind", action="store_true",
                    help="count instructions under callgrind instead of timing")
    ap.add_argument("--out-cg", default=str(ROOT / "benchmarks" / "results"
                                            / "bucket_callgrind.md"))
    args = ap.parse_args(argv)
    data = find_data(args.data, ("corpus",))
    if args.callgrind:
        return _callgrind(data, Path(args.out_cg))
    rows = []
    for name, patterns, vocab, lower in FAMILIES:
        vpath = data / "vocab" / vocab / "vocab.txt"
        texts = read_lines(data, patterns, missing_ok=True)
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
                t_plain = min(t_plain, best(lambda: tok(texts, **kw), 1))
                t_bucket = min(t_bucket, best(lambda: tok(texts, **kw, padding="bucket"), 1))
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
        "Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).", "",
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
