"""The stored parts' compression, written and read back: lz4 (the default) against zstd level 1.

    python benchmarks/codec_bench.py [--mb 128] [--rounds 3]

The first ``--mb`` MB of the pipeline benchmark's input (its corpora, repeated) are written
as a batch job's parts in this process (``jobs.parts.write_partition``, 64 MB partitions,
ragged rows, max_length=128, stride=32, one thread), once per compression and round,
interleaved; then read back whole, with ``pq.read_table`` (row groups on Arrow's threads,
what ``read_tokenized``'s batches use) and with ``pq.ParquetFile.read`` (one row group
after another). Each figure is the best of the rounds: process CPU seconds of the writes,
the parts' ``write`` stage (pages, compression, checksum), their bytes, and the read times.
Then the lz4 pages alone: every data page the lz4 writes compressed (recorded in the first
round) compressed again by daskwp's LZ4 block compressor (``_ext.lz4_raw_compress``, what
the writer uses) and by Arrow's ``pa.Codec("lz4_raw")`` (what it used before), interleaved,
best of the rounds: process CPU seconds and compressed bytes. ``--pages-only`` runs only
that part (for callgrind: ``--toggle-collect`` on ``*lz4_raw_compress*`` and
``LZ4_compress_fast*``).
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
    ap.add_argument("--pages-only", action="store_true",
                    help="only the lz4 pages through both compressors (no report written)")
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
        recorder = _PageRecorder()
        if args.pages_only:
            out = tmp / "pages"
            out.mkdir()
            _record_pages(recorder, specs, out, tok, len(specs))
            print("\n".join(_page_lines(recorder.pages, args.rounds)))
            return 0

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
                if codec == "lz4" and not recorder.pages:
                    shutil.rmtree(out)
                    out.mkdir()
                    _record_pages(recorder, specs, out, tok, len(specs))
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
        L += ["", "## The lz4 pages alone: daskwp's LZ4 block compressor against Arrow's\n",
              *_page_lines(recorder.pages, args.rounds)]
        args.out.write_text("\n".join(L) + "\n")
        print("\n".join(L))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


class _PageRecorder:
    """The writer's ``_ext``, keeping a copy of every page it compresses with lz4."""

    def __init__(self):
        from daskwp import _ext
        self._ext = _ext
        self.pages: list = []

    def __getattr__(self, name):
        return getattr(self._ext, name)

    def lz4_raw_compress(self, src, out):
        self.pages.append(src.copy())
        return self._ext.lz4_raw_compress(src, out)


def _record_pages(recorder, specs, out, tok, n) -> None:
    """The lz4 parts written once more with ``recorder`` as the writer's ``_ext``."""
    from daskwp.frames import parquet_writer
    from daskwp.jobs.parts import write_partition
    opts = dict(max_length=128, stride=32, truncation=False, add_special_tokens=True,
                padding="do_not_pad", bucket_widths="auto", compression="lz4")
    real = parquet_writer._ext
    parquet_writer._ext = recorder
    try:
        for s in specs:
            write_partition(s, 0, str(out), tok, opts, "j" * 32, n)
    finally:
        parquet_writer._ext = real


def _page_lines(pages: list, rounds: int) -> list:
    """Every recorded page through both compressors, interleaved, best of ``rounds``:
    the report's lines."""
    import numpy as np
    import pyarrow as pa

    from daskwp import _ext
    codec = pa.Codec("lz4_raw")
    out = np.empty(_ext.lz4_raw_bound(max(len(p) for p in pages)), dtype=np.uint8)
    best = {"daskwp": [float("inf"), 0], "arrow": [float("inf"), 0]}
    for _ in range(rounds):
        c0 = time.process_time()
        n = sum(_ext.lz4_raw_compress(p, out) for p in pages)
        best["daskwp"] = [min(best["daskwp"][0], time.process_time() - c0), n]
        c0 = time.process_time()
        n = sum(codec.compress(p).size for p in pages)
        best["arrow"] = [min(best["arrow"][0], time.process_time() - c0), n]
    # what a reader pays: each compressor's blocks decoded by Arrow's codec
    blocks = {"daskwp": [out[:_ext.lz4_raw_compress(p, out)].tobytes() for p in pages],
              "arrow": [codec.compress(p, asbytes=True) for p in pages]}
    decode = {k: float("inf") for k in blocks}
    for _ in range(rounds):
        for k, bs in blocks.items():
            c0 = time.process_time()
            for b, p in zip(bs, pages):
                codec.decompress(b, decompressed_size=len(p))
            decode[k] = min(decode[k], time.process_time() - c0)
    raw = sum(len(p) for p in pages)
    d, a = best["daskwp"], best["arrow"]
    L = [f"{len(pages):,} data pages of the lz4 parts ({raw:,} bytes uncompressed), each "
         f"compressed by both, interleaved, best of {rounds} rounds (process CPU s).\n",
         "| compressor | CPU s | MB/s | compressed bytes | ratio | decoded by Arrow, CPU s |",
         "|---|---|---|---|---|---|"]
    for name, label in (("daskwp", "daskwp `_ext.lz4_raw_compress`"),
                        ("arrow", "Arrow `pa.Codec('lz4_raw').compress`")):
        cpu, size = best[name]
        L.append(f"| {label} | {cpu:.3f} | {raw / 1e6 / cpu:.0f} | {size:,} | "
                 f"{raw / size:.2f} | {decode[name]:.3f} |")
    L.append(f"\ndaskwp's against Arrow's: {d[0] / a[0]:.2f}x the CPU, {d[1] / a[1]:.3f}x "
             f"the bytes.")
    return L


if __name__ == "__main__":
    sys.exit(main())
