"""Instructions per input byte of daskwp's part writer for layout and option variants
(callgrind; stable on a shared machine, where wall time is noise).

    python benchmarks/writer_variants.py --mb 4 [--variants cur,trim,v2,...]

The first ``--mb`` MB of the pipeline benchmark's input (its corpora, repeated) are
tokenized once (max_length=128, stride=32; ragged and padded, the stored tables of
``frames.partition.table_from_output``), saved as Arrow IPC, and each variant writes one
table through ``frames.part_writer.PartWriter`` in its own ``valgrind --tool=callgrind``
process. Costs: callgrind's inclusive count of ``FileWriterImpl::WriteTable`` (encoding,
compression, the part checksum of the pages as they are written) per input byte, and its parts.
The report goes to benchmarks/results/writer_variants.md.

    python benchmarks/writer_variants.py --write-cpu PART.parquet [--rounds 8]

instead writes the rows of an existing part (a batch job's, e.g. of the pipeline benchmark's
input) again through ``PartWriter`` (lz4, the default), in tables of 97,000 rows (what an
8 MB piece of that text makes), ``--rounds`` times in this process, and prints the writing
thread's CPU seconds of each round and the part's bytes: the write stage alone, for
interleaved A/B runs of two checkouts (each with its own interpreter and build).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

VARIANTS = {
    # name: (table, what)
    "ragged": ("do_not_pad", "ragged rows, the stored layout (no mask)"),
    "padded": ("max_length", "padded rows + mask, the layout before trimming"),
    "padded+req": ("max_length", "padded, non-nullable list and item fields"),
    "padded+page8": ("max_length", "padded, 8 MB data pages (default 1 MB)"),
    "padded+v2": ("max_length", "padded, data page v2"),
    "padded+lz4": ("max_length", "padded, lz4 instead of zstd level 1"),
    "padded+nostats": ("max_length", "padded, no statistics at all"),
    "padded+plain": ("max_length", "padded, PLAIN ids (no BYTE_STREAM_SPLIT)"),
    "padded+fsl": ("max_length", "padded, fixed_size_list<int32, 128>"),
    "padded+lenonly": ("max_length", "padded ids, a per-row length column instead of the mask"),
    "padded+trim": ("max_length", "padded rows stored trimmed (the stored layout)"),
    "ragged+page8": ("do_not_pad", "ragged, 8 MB data pages"),
    "ragged+v2": ("do_not_pad", "ragged, data page v2"),
    "ragged+lz4": ("do_not_pad", "ragged, lz4"),
    "ragged+req": ("do_not_pad", "ragged, non-nullable fields"),
    "ragged+native": ("do_not_pad", "ragged, daskwp's own writer (frames/parquet_writer.py)"),
    "padded+trim+native": ("max_length", "trimmed, daskwp's own writer (the default)"),
    "padded+native": ("max_length", "padded rows + mask, daskwp's own writer"),
}
#: Table transformations of the variants (applied before the write, so counted in the
#: baseline): a variant's *write* is its process total less that of the same child with the
#: same table and transformations but no write (interpreter, imports, loading).
TRANSFORMS = ("req", "fsl", "trim", "lenonly")


def baseline_of(name: str) -> str:
    """The no-write child of ``name``: its layout's table, its transformations."""
    layout = VARIANTS[name][0]
    head = "ragged" if layout == "do_not_pad" else "padded"
    return "+".join([head] + [p for p in name.split("+")[1:] if p in TRANSFORMS] + ["noop"])

CHILD = r'''
import sys, os, json
import numpy as np, pyarrow as pa
import daskwp.frames.part_writer as P
import daskwp.frames.partition as F
src, variant, out = sys.argv[1:4]
table = pa.ipc.open_file(pa.memory_map(src)).read_all()
parts = variant.split("+")[1:]
def req(t):
    f = [pa.field(x.name, pa.list_(pa.field("item", x.type.value_type, nullable=False))
                  if pa.types.is_list(x.type) else x.type, nullable=False) for x in t.schema]
    return t.cast(pa.schema(f))
def fsl(t):
    cols = {}
    for n in t.column_names:
        c = t.column(n).combine_chunks()
        if pa.types.is_list(c.type):
            c = pa.FixedSizeListArray.from_arrays(c.values, int(c.value_lengths()[0].as_py()))
        cols[n] = c
    return pa.table(cols)
def trim(t):
    return F.frame_to_table(t.to_pandas(types_mapper=pd.ArrowDtype), attention_mask=False)
def lenonly(t):
    m = t.column("attention_mask").combine_chunks()
    lens = m.values.to_numpy().reshape(len(m), -1).sum(1).astype(np.int32)
    return t.drop_columns(["attention_mask"]).append_column("length", pa.array(lens))
import pandas as pd
for p in parts:
    if p in ("req", "fsl", "trim", "lenonly"):
        table = globals()[p](table)
base = P.parquet_write_options
def opts(schema, compression="zstd", compat=False):
    o = base(schema, compression, compat)
    for p in parts:
        if p == "v2": o["data_page_version"] = "2.0"
        elif p == "plain": o["column_encoding"] = {k: v for k, v in (o["column_encoding"] or {}).items() if v != "BYTE_STREAM_SPLIT"} or None
        elif p == "lz4": o["compression"] = "lz4"; o.pop("compression_level", None)
        elif p == "nostats": o["write_statistics"] = False
        elif p == "page8": o["data_page_size"] = 8 << 20
    return o
P.parquet_write_options = opts
if "noop" in parts:
    print("BYTES 0")
    sys.exit(0)
w = P.PartWriter(os.path.join(out, "part.parquet"), os.path.join(out, ".tmp"),
                 native="native" in parts)
w.write(table)
w.close({})
print("BYTES", os.path.getsize(os.path.join(out, "part.parquet")))
'''

SYMBOLS = {"zstd": "ZSTD_compress2", "zstd_simple": "ZSTD_compressCCtx",
           "lz4": "LZ4_compress_fast", "lz4_daskwp": "namespace)::lz4_raw_compress(",
           "levels": "parquet::LevelEncoder::Encode",
           "pages": "namespace)::list_page(", "scalars": "namespace)::scalar_page(",
           "checksum": "PartHash::update"}


def make_tables(text: Path, tmp: Path) -> None:
    import pyarrow as pa
    import daskwp
    from daskwp.jobs.inputs import lines_to_arrow
    from daskwp.frames.partition import table_from_output
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    arr = lines_to_arrow(text.read_bytes())
    for padding in ("do_not_pad", "max_length"):
        out = tok(arr, max_length=128, stride=32, padding=padding, return_tensors="np")
        t = table_from_output(out, attention_mask=padding == "max_length")
        with pa.OSFile(str(tmp / f"{padding}.arrow"), "wb") as f, \
                pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)


def run_variant(name: str, tmp: Path) -> dict:
    layout = "do_not_pad" if name.startswith("ragged") else "max_length"
    table = tmp / f"{layout}.arrow"
    script = tmp / "child.py"
    script.write_text(CHILD)
    cg, out = tmp / f"cg.{name}.out", tmp / f"o.{name}"
    out.mkdir(exist_ok=True)
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}",
                        sys.executable, str(script), str(table), name, str(out)],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONHASHSEED="0"))
    size = int(next(l.split()[1] for l in r.stdout.splitlines() if l.startswith("BYTES")))
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(cg)],
                         capture_output=True, text=True).stdout.splitlines()
    ann = [l for l in ann if l.split() and l.split()[0].replace(",", "").isdigit()]
    costs = {}
    for k, sym in SYMBOLS.items():
        costs[k] = next((int(l.split()[0].replace(",", "")) for l in ann if sym in l), 0)
    costs["zstd"] = max(costs["zstd"], costs.pop("zstd_simple"))
    # lz4: Arrow's codec (Arrow's writer) or daskwp's compressor (daskwp's writer)
    costs["lz4"] = max(costs["lz4"], costs.pop("lz4_daskwp"))
    costs["levels"] += costs.pop("pages") + costs.pop("scalars")
    costs["total"] = next(int(l.split()[0].replace(",", "")) for l in ann
                          if "PROGRAM TOTALS" in l)
    return {"bytes": size, **costs}


def write_cpu(part: str, rounds: int, piece_rows: int = 97_000) -> list:
    """Thread CPU seconds of writing the rows of ``part`` again, once per round."""
    import time

    import pyarrow.parquet as pq

    from daskwp.frames.part_writer import PartWriter
    table = pq.read_table(part).combine_chunks()
    pieces = [table.slice(i, piece_rows) for i in range(0, table.num_rows, piece_rows)]
    out = []
    with tempfile.TemporaryDirectory(prefix="daskwp-writecpu-") as d:
        for r in range(rounds):
            path = os.path.join(d, f"p{r}.parquet")
            c = time.thread_time()
            w = PartWriter(path, path + ".tmp")
            for p in pieces:
                w.write(p)
            w.close({"partition": 0})
            out.append(time.thread_time() - c)
            size = os.path.getsize(path)
            os.unlink(path)
    print(f"write CPU s per round: {[round(x, 3) for x in out]}; median "
          f"{sorted(out)[len(out) // 2]:.3f}; part bytes {size:,}")
    return out


def main(argv=None) -> int:
    from _common import default_data_dir
    from pipeline_bench import corpus_base, write_text
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-cpu", metavar="PART", help="time PartWriter on PART's rows")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "writer_variants.md"))
    args = ap.parse_args(argv)
    if args.write_cpu:
        write_cpu(args.write_cpu, args.rounds)
        return 0
    with tempfile.TemporaryDirectory(prefix="daskwp-writer-") as d:
        tmp = Path(d)
        inp = write_text(corpus_base(default_data_dir()), int(args.mb * 1e6), tmp / "in.txt")
        nbytes = inp["bytes"]
        make_tables(inp["text"], tmp)
        rows = []
        names = args.variants.split(",")
        base = {b: run_variant(b, tmp)["total"] for b in sorted({baseline_of(n) for n in names})}
        for name in names:
            c = run_variant(name, tmp)
            c["write"] = c.pop("total") - base[baseline_of(name)]
            rows.append((name, c))
            print(name, {k: round(v / nbytes, 1) if k != "bytes" else v for k, v in c.items()},
                  flush=True)
    L = ["# Part writer: instructions per input byte by layout and option\n",
         "Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).\n",
         f"`python benchmarks/writer_variants.py --mb {args.mb:g}`: the first {nbytes:,} bytes "
         "of the pipeline benchmark's input, max_length=128, stride=32, one table through "
         "`PartWriter` (zstd level 1, BYTE_STREAM_SPLIT ids, delta-encoded scalars, no "
         "dictionaries, statistics for logID only, unless the variant says otherwise). "
         "Callgrind instructions per input byte: *write* is the whole process less the same "
         "process without the write (Python included); *levels / pages* is Arrow's level "
         "encoder, or daskwp's native page encoder (levels and values) for the `native` "
         "variants; *checksum* the part checksum (daskwp's 128-bit hash; SHA-256 in "
         "runs before 2026-12-06).\n",
         "| variant | what | write (all) | zstd / lz4 | levels / pages | checksum | part bytes |",
         "|---|---|---|---|---|---|---|"]
    for name, c in rows:
        L.append(f"| {name} | {VARIANTS[name][1]} | {c['write'] / nbytes:.1f} | "
                 f"{(c['zstd'] or c['lz4']) / nbytes:.1f} | {c['levels'] / nbytes:.1f} | "
                 f"{c['checksum'] / nbytes:.1f} | {c['bytes']:,} |")
    Path(args.out).write_text("\n".join(L) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
