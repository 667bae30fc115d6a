"""The stored parts' compression, written and read back: lz4 (the default) against zstd level 1.

    python benchmarks/codec_bench.py [--mb 128] [--rounds 3]

The first ``--mb`` MB of the pipeline benchmark's input (its corpora, repeated) are written
as a batch job's parts in this process (``jobs.parts.write_partition``, 64 MB partitions,
ragged rows, max_length=128, stride=32, one thread), once per compression and round,
interleaved; then read back whole, with ``pq.read_table`` (row groups on Arrow's threads,
what ``read_tokenized``'s batches use) and with ``pq.ParquetFile.read`` (one row group
after another). Each figure is the best of the rounds: process CPU seconds of the writes,
the parts' ``write`` stage (pages, compression, checksum), their bytes, and the read times.
The report goes to benchmarks/results/codec_bench.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

CODECS = ("lz4", "zstd")
COLUMNS = ["logID", "start", "stop", "input_ids", "window"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                    "codec_bench.md")
    args = ap.parse_args(argv)

    import pyarrow.parquet as pq

    import daskwp
    import pipeline_bench as pb
    from daskwp.jobs.inputs import list_input_files, plan_partitions
    from daskwp.jobs.parts import write_partition

    tmp = Path(tempfile.mkdtemp(prefix="daskwp-codec-"))
    try:
        inp = pb.write_text(pb.corpus_base(pb.default_data_dir()), int(args.mb * 1e6),
                            tmp / "in.txt")
        # the batch jobs' own plan: 64 MB partitions split at line ends
        specs = plan_partitions(list_input_files([str(inp["text"])], "text"), "text",
                                64_000_000)
        tok = daskwp.WordPieceTokenizer(num_threads=1)
        best: dict = {c: {} for c in CODECS}

        def keep(codec, name, value):
            best[codec][name] = min(best[codec].get(name, value), value)

        for _ in range(args.rounds):
            for codec in CODECS:
                out = tmp / f"out-{codec}"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                opts = dict(max_length=128, stride=32, truncation=False,
                            add_special_tokens=True, padding="do_not_pad",
                            bucket_widths="auto", compression=codec)
                c0 = time.process_time()
                stats = [write_partition(s, 0, str(out), tok, opts, "j" * 32, len(specs))
                         for s in specs]
                keep(codec, "cpu", time.process_time() - c0)
                keep(codec, "write", sum(s["cpu_seconds"]["write"] for s in stats))
                best[codec]["bytes"] = sum(f.stat().st_size for f in out.glob("*.parquet"))
                files = sorted(out.glob("part-*.parquet"))
                for how, read in (("read_table", lambda f: pq.read_table(f, columns=COLUMNS)),
                                  ("ParquetFile.read",
                                   lambda f: pq.ParquetFile(f).read(columns=COLUMNS))):
                    t = time.perf_counter()
                    for f in files:
                        read(f)
                    keep(codec, how, time.perf_counter() - t)
        L = ["# Parts' compression: lz4 (the default) against zstd level 1\n",
             "Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).\n",
             f"`python benchmarks/codec_bench.py --mb {args.mb:g} --rounds {args.rounds}` "
             f"({time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} cores, shared): "
             f"{inp['bytes'] / 1e6:.1f} MB of the pipeline benchmark's input as "
             f"{len(specs)} ragged parts (max_length=128, stride=32), one thread; best of "
             f"{args.rounds} interleaved rounds.\n",
             "| compression | process CPU s (writes) | write stage CPU s | part bytes | "
             "read back, pq.read_table s | read back, ParquetFile.read s |",
             "|---|---|---|---|---|---|"]
        for c in CODECS:
            r = best[c]
            L.append(f"| {c} | {r['cpu']:.2f} | {r['write']:.2f} | {r['bytes']:,} | "
                     f"{r['read_table']:.3f} | {r['ParquetFile.read']:.3f} |")
        z, l = best["zstd"], best["lz4"]
        L.append(f"\nlz4 against zstd: writes {l['cpu'] / z['cpu']:.2f}x the CPU "
                 f"(write stage {l['write'] / z['write']:.2f}x), parts "
                 f"{l['bytes'] / z['bytes']:.2f}x the bytes, read back "
                 f"{z['read_table'] / l['read_table']:.2f}x faster (pq.read_table). "
                 f"ParquetFile.read / pq.read_table on lz4 parts: "
                 f"{l['ParquetFile.read'] / l['read_table']:.2f}x.")
        args.out.write_text("\n".join(L) + "\n")
        print("\n".join(L))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
