"""The whole pipeline against the bare kernel, in ONE run: batch jobs (``daskwp tokenize``),
the lazy accessor's ``to_parquet``, ``read_tokenized`` back to padded tensors, and a
nanotoken + pyarrow script, on the same input and the same cores; plus Dask's per-partition
overhead and the graph of a 10,000-partition job.

    python benchmarks/pipeline_bench.py                  # 500 MB input, ~10-15 min here
    python benchmarks/pipeline_bench.py --size-mb 100    # quick look

The input is the non-empty lines of the shared English (UD EWT), English books and loghub
logs corpora, repeated to ``--size-mb`` MB (MB = 10^6 bytes, newlines included), as one
text file (the CLI's input) and as 8 Parquet files of a ``text`` column (the accessor's
input: ``dd.read_parquet``). Every figure is MB/s of that text (input bytes / wall time).
The report (``--out``, default benchmarks/results/pipeline_bench.md) gives every command,
the ratios the pipeline issue asks for, the per-stage CPU breakdown of the job's parts, the
peak RSS of every worker, and (``--callgrind-mb``) instruction counts per stage. The
kernel, CLI and read-back rows (the CLI's ragged and padded parts read back as padded
tensors, against the fastest write of the run) are measured in each of ``--rounds``
interleaved rounds and the best kept; the read-back's first round is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import default_data_dir

ROOT = Path(__file__).resolve().parents[1]
MB = 1e6
MAX_LENGTH, STRIDE = 128, 32
FILES = ["en_ewt.txt", "en_book_moby_dick.txt", "en_book_pride_and_prejudice.txt", "logs/*.log"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- input ----------------------------------------------------------------------------------

def build_input(data: Path, size_mb: float, tmp: Path, n_parquet: int = 8) -> dict:
    lines = []
    for pat in FILES:
        for f in sorted((data / "corpus").glob(pat)):
            for line in f.read_bytes().split(b"\n"):
                line = line.rstrip(b"\r")
                if line:
                    lines.append(line)
    base = b"\n".join(lines) + b"\n"
    target = int(size_mb * MB)
    out = base * (target // len(base))
    rest = target - len(out)
    if rest > 0:
        out += base[:base.rfind(b"\n", 0, rest) + 1]
    text = tmp / "big.txt"
    text.write_bytes(out)
    from daskwp.jobs.inputs import lines_to_arrow
    arr = lines_to_arrow(out).cast(pa.large_string())
    pq_dir = tmp / "parquet"
    pq_dir.mkdir()
    n = len(arr)
    bounds = np.linspace(0, n, n_parquet + 1).astype(int)
    for i in range(n_parquet):
        pq.write_table(pa.table({"text": arr.slice(bounds[i], bounds[i + 1] - bounds[i])}),
                       pq_dir / f"part-{i}.parquet", compression="zstd")
    return {"text": text, "parquet": pq_dir, "bytes": len(out), "lines": n,
            "text_bytes": len(out) - n, "array": arr}


# -- helpers --------------------------------------------------------------------------------

class RssPoller:
    """Peak RSS of the worker processes under ``root_pid`` (Dask nannies' children), polled
    every 20 ms: {pid: (first RSS seen, peak RSS)}."""

    def __init__(self, root_pid: int):
        import psutil
        self.root = psutil.Process(root_pid)
        self.rss: dict = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil
        while not self._stop.is_set():
            try:
                procs = self.root.children(recursive=True)
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    cmd = " ".join(p.cmdline())
                    if "spawn_main" not in cmd:
                        continue
                    r = p.memory_info().rss
                except psutil.Error:
                    continue
                first, peak = self.rss.get(p.pid, (r, r))
                self.rss[p.pid] = (first, max(peak, r))
            self._stop.wait(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def workers(self) -> list:
        return sorted(self.rss.values(), key=lambda x: -x[1])


def fmt(x, nd=1):
    return "–" if x is None else f"{x:,.{nd}f}"


def machine_info() -> dict:
    info = {"python": platform.python_version(), "cores": os.cpu_count(),
            "pyarrow": pa.__version__}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import dask
    info["dask"] = dask.__version__
    info["load"] = os.getloadavg()
    return info


# -- the rows -------------------------------------------------------------------------------

def bench_kernel(inp: dict, partition_mb: float, repeats: int) -> dict:
    """The bare extension on the same cores (num_threads=0: all of them), over the input in
    partition-sized batches (as the jobs see it), best of ``repeats``."""
    import daskwp
    tok = daskwp.WordPieceTokenizer()
    arr = inp["array"]
    from daskwp.distributed.tasks import _pieces
    batches = [p for p, _ in _pieces(pa.chunked_array([arr]), int(partition_mb * MB))]
    calls = {
        "encode": lambda b: tok.encode(b, num_threads=0),
        "ragged": lambda b: tok(b, max_length=MAX_LENGTH, stride=STRIDE, padding=False),
        "padded": lambda b: tok(b, max_length=MAX_LENGTH, stride=STRIDE),
    }
    tok(batches[0][:1000], max_length=MAX_LENGTH, stride=STRIDE)
    out = {}
    for _ in range(repeats):  # in turn, so that the machine's noise hits them alike
        for name, fn in calls.items():
            t, c = time.perf_counter(), time.process_time()
            for b in batches:
                r = fn(b)
                del r
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            if name not in out or wall < out[name]["seconds"]:
                out[name] = {"seconds": wall, "cpu": cpu, "mbps": inp["bytes"] / MB / wall}
    # output bytes per input byte (what a partition's output arrays hold)
    for name in ("ragged", "padded"):
        r = calls[name](batches[0])
        nb = sum(_nbytes(v) for v in r.values()) + _nbytes(r.doc_row_offsets)
        out[name]["out_per_byte"] = nb / max(1, _batch_bytes(batches[0]))
    return out


def _nbytes(v) -> int:
    if hasattr(v, "offsets") and hasattr(v, "values"):
        return int(v.values.nbytes + v.offsets.nbytes)
    return int(getattr(v, "nbytes", 0))


def _batch_bytes(b) -> int:
    import pyarrow.compute as pc
    return int(pc.sum(pc.binary_length(b)).as_py() or 0) + len(b)


def run_cli(inp: dict, out: Path, padding: str, partition_mb: float, workers: int,
            scheduler: str | None = None) -> dict:
    """The CLI job as a user runs it: its own fresh cluster of ``workers`` processes, or
    ``--scheduler`` a running cluster (a batch job submitted to a cluster that is up)."""
    cmd = [sys.executable, "-m", "daskwp", "tokenize", str(inp["text"]), str(out),
           "--max-length", str(MAX_LENGTH), "--stride", str(STRIDE), "--padding", padding,
           "--partition-size", f"{int(partition_mb)}MB"]
    cmd += ["--scheduler", scheduler] if scheduler else \
        ["--n-workers", str(workers), "--threads-per-worker", "1"]
    cmd += ["--json"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with RssPoller(proc.pid if scheduler is None else os.getpid()) as poll:
        stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr[-3000:]}")
    s = json.loads(stdout)
    return {"command": " ".join(["daskwp"] + cmd[3:]), "wall": wall,
            "tokenize_seconds": s["tokenize_seconds"], "summary": s,
            "mbps_wall": inp["bytes"] / MB / wall,
            "mbps": inp["bytes"] / MB / s["tokenize_seconds"],
            "rss": poll.workers(), "out_bytes": _dir_bytes(out)}


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).glob("*.parquet"))


def warm_workers(client, tmp: Path) -> None:
    """Each worker imports daskwp and gets the tokenizer before anything is timed."""
    import dask.dataframe as dd
    import pandas as pd
    ddf = dd.from_pandas(pd.DataFrame({"text": ["warm up"] * 64}), npartitions=8)
    for pad in (False, "max_length"):
        ddf["text"].wordpiece.tokenize(max_length=MAX_LENGTH, stride=STRIDE, padding=pad) \
            .to_parquet(str(tmp / "warm"), overwrite=True)
    client.run(lambda: None)


def run_accessor(client, cluster, inp: dict, out: Path, padding) -> dict:
    import dask.dataframe as dd
    ddf = dd.read_parquet(str(inp["parquet"]))
    res = ddf["text"].wordpiece.tokenize(max_length=MAX_LENGTH, stride=STRIDE, padding=padding)
    t = time.perf_counter()
    with RssPoller(os.getpid()) as poll:
        stats = res.to_parquet(str(out), compute=False).compute()
    wall = time.perf_counter() - t
    return {"command": f'dd.read_parquet({len(list(inp["parquet"].glob("*.parquet")))} files)'
                       f'["text"].wordpiece.tokenize(max_length={MAX_LENGTH}, stride={STRIDE}, '
                       f'padding={padding!r}).to_parquet(out)',
            "wall": wall, "mbps": inp["bytes"] / MB / wall, "stats": stats,
            "rss": poll.workers(), "out_bytes": _dir_bytes(out)}


def run_read_back(path: Path, inp: dict) -> dict:
    import daskwp
    t = time.perf_counter()
    ds = daskwp.read_tokenized(path)
    rows = 0
    for b in ds.batches(max_length=MAX_LENGTH):
        rows += len(b["input_ids"])
    wall = time.perf_counter() - t
    return {"command": f"daskwp.read_tokenized(out).batches(max_length={MAX_LENGTH})",
            "wall": wall, "mbps": inp["bytes"] / MB / wall, "rows": rows,
            "rows_per_s": rows / wall, "pad_id": ds.pad_id}


NANOTOKEN_SCRIPT = """
import sys, time, numpy as np, pyarrow as pa, pyarrow.parquet as pq, nanotoken
vocab, src, out = sys.argv[1:4]
t = time.perf_counter()
tok = nanotoken.Tokenizer.from_vocab(vocab, lowercase=True)
ids = tok.encode_files(nanotoken.TextFileSource([src], separator="\\n"))
col = pa.LargeListArray.from_arrays(pa.array(ids.offsets), pa.array(ids.ids))
pq.write_table(pa.table({"input_ids": col}), out, compression="zstd")
print(time.perf_counter() - t, len(ids.offsets) - 1)
"""


def run_nanotoken(inp: dict, out: Path, vocab: Path) -> dict | None:
    try:
        import nanotoken  # noqa: F401
    except ImportError:
        return None
    script = out.parent / "nanotoken_script.py"
    script.write_text(NANOTOKEN_SCRIPT)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), str(vocab), str(inp["text"]), str(out)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
        log(f"nanotoken script failed: {proc.stderr[-500:]}")
        return None
    inner, docs = proc.stdout.split()
    return {"command": "nanotoken encode_files + pa.LargeListArray + pq.write_table(zstd) "
                       "(script in the report)", "wall": wall, "inner": float(inner),
            "mbps": inp["bytes"] / MB / float(inner), "documents": int(docs),
            "out_bytes": out.stat().st_size}


def bench_overhead(client, n: int, repeats: int) -> dict:
    """n partitions of 10 lines: dask alone (``map_partitions(len).max()``) against
    ``res.metadata.logID.max()``, from pandas and persisted; best of ``repeats``."""
    import dask.dataframe as dd
    import pandas as pd
    from distributed import wait
    lines = (ROOT / "daskwp" / "data" / "sample.txt").read_text().split("\n")[:-1]
    lines = (lines * (10 * n // len(lines) + 1))[:10 * n]
    df = pd.DataFrame({"text": pd.Series(lines, dtype="string[pyarrow]")})
    out = {}
    for mode in ("from_pandas", "persisted"):
        ddf = dd.from_pandas(df, npartitions=n, sort=False)
        if mode == "persisted":
            ddf = ddf.persist()
            wait(ddf)
        best_b = best_w = None
        for _ in range(repeats):
            t = time.perf_counter()
            ddf["text"].map_partitions(len).max().compute()
            b = time.perf_counter() - t
            t = time.perf_counter()
            v = ddf["text"].wordpiece.tokenize(max_length=MAX_LENGTH, stride=STRIDE) \
                .metadata.logID.max().compute()
            w = time.perf_counter() - t
            assert v == len(lines) - 1
            best_b = b if best_b is None else min(best_b, b)
            best_w = w if best_w is None else min(best_w, w)
        out[mode] = {"dask_ms": 1e3 * best_b / n, "daskwp_ms": 1e3 * best_w / n,
                     "overhead_ms": 1e3 * (best_w - best_b) / n}
        del ddf
        time.sleep(1.0)
    return out


def bench_graph(n: int, tmp: Path) -> dict:
    """Building the graph of an n-partition job (plan, resume checks, job_graph) and of an
    n-partition accessor result (optimize + materialize), without running them."""
    import daskwp
    from daskwp.jobs.driver import job_graph
    from daskwp.jobs.inputs import list_input_files, plan_partitions
    from daskwp.jobs.parts import check_part, part_name
    p = tmp / "graph.txt"
    line = "x" * 99 + "\n"
    p.write_text(line * n)
    tok = daskwp.WordPieceTokenizer()
    opts = dict(max_length=MAX_LENGTH, stride=STRIDE, truncation=False,
                add_special_tokens=True, padding="do_not_pad", bucket_widths="auto",
                compression="zstd")
    t = time.perf_counter()
    specs = plan_partitions(list_input_files(str(p), "auto"), "text", 100)
    for i in range(len(specs)):
        check_part(str(tmp / part_name(i, len(specs))), i, "x", None, None)
    g = job_graph(specs, [None] * len(specs), list(range(len(specs))), str(tmp / "g"), tok,
                  opts, "0" * 32, "cpu", "r")
    job_s = time.perf_counter() - t
    import dask.dataframe as dd
    import pandas as pd
    ddf = dd.from_pandas(pd.DataFrame({"text": ["a b c"] * n}), npartitions=n)
    t = time.perf_counter()
    res = ddf["text"].wordpiece.tokenize(tok, max_length=MAX_LENGTH, stride=STRIDE)
    dsk = dict(res.to_frame().optimize().__dask_graph__())
    acc_s = time.perf_counter() - t
    t = time.perf_counter()
    base = dict(ddf["text"].map_partitions(len).optimize().__dask_graph__())
    dask_s = time.perf_counter() - t
    return {"partitions": len(specs), "job_seconds": job_s, "job_tasks": len(g.dsk),
            "accessor_seconds": acc_s, "accessor_tasks": len(dsk), "dask_seconds": dask_s,
            "dask_tasks": len(base)}


CALLGRIND_SCRIPT = """
import sys, os, shutil
import daskwp
from daskwp.jobs.inputs import PartitionSpec
from daskwp.jobs.parts import write_partition
path, out, padding = sys.argv[1:4]
size = os.path.getsize(path)
from daskwp.core.options import DEFAULT_COMPRESSION
tok = daskwp.WordPieceTokenizer(num_threads=1)
opts = dict(max_length=128, stride=32, truncation=False, add_special_tokens=True,
            padding=padding, bucket_widths="auto", compression=DEFAULT_COMPRESSION)
os.makedirs(out, exist_ok=True)
spec = PartitionSpec(index=0, path=path, format="text", column="text", byte_start=0,
                     byte_end=size)
write_partition(spec, 0, out, tok, opts, "j" * 32, 1)
"""

#: (stage, callgrind symbols whose inclusive cost is the stage's); first match wins.
CALLGRIND_STAGES = [
    ("read: split lines and count invalid UTF-8 (native, one pass)", ["split_lines("]),
    ("tokenize: encode (kernel)", ["daskwp::encode_batch<"]),
    ("tokenize: window fill (kernel)", ["build_windows(nanobind", "fill_rows<"]),
    ("arrow: padded rows trimmed (NumPy boolean gather; docs/design.md §3.3)",
     ["array_boolean_subscript"]),
    ("write: Parquet pages (native: levels, BYTE_STREAM_SPLIT, delta)",
     ["namespace)::list_pages(", "parquet::arrow::FileWriterImpl::WriteTable"]),
    ("write: Parquet scalar pages (native delta)", ["namespace)::scalar_pages("]),
    ("write: compression (lz4, the default; zstd level 1 with compression='zstd')",
     ["LZ4_compress_default", "LZ4_compress_fast", "ZSTD_compress2"]),
    ("write: SHA-256 part checksum (as pages are written)", ["EVP_DigestUpdate"]),
]


def bench_callgrind(inp: dict, mb: float, tmp: Path) -> dict | None:
    """Instructions per stage of one partition written in this process (one thread), from
    callgrind's inclusive costs of the stages' native entry points."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        return None
    src = tmp / "cg.txt"
    data = inp["text"].read_bytes()[:int(mb * MB)]
    src.write_bytes(data[:data.rfind(b"\n") + 1])
    script = tmp / "cg_script.py"
    script.write_text(CALLGRIND_SCRIPT)
    out = {}
    for padding in ("do_not_pad", "max_length"):
        cg = tmp / f"callgrind.{padding}.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}",
                        sys.executable, str(script), str(src), str(tmp / f"cg-{padding}"),
                        padding], capture_output=True, check=True)
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                              str(cg)], capture_output=True, text=True).stdout.splitlines()
        costs = {}
        for stage, symbols in CALLGRIND_STAGES:
            for line in ann:
                if any(sym in line for sym in symbols):
                    costs[stage] = int(line.split()[0].replace(",", ""))
                    break
        out[padding] = {"mb": src.stat().st_size / MB, "costs": costs}
    return out


# -- report ---------------------------------------------------------------------------------

def _rss_text(rss: list, idle: float) -> str:
    if not rss:
        return "–"
    return ", ".join(f"{peak / 2**20:,.0f} MiB (+{(peak - idle) / 2**20:,.0f})"
                     for first, peak in rss[:4])


def report(args, info, inp, kernel, cli, acc, back, nano, ovh, graph, cg, elapsed,
           cli_running=None) -> str:
    cli_running = cli_running or {}
    kr, kp = kernel["ragged"]["mbps"], kernel["padded"]["mbps"]
    L = []
    L.append("# Pipeline benchmark: batch jobs and Dask output against the bare kernel\n")
    L.append("Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).\n")
    L.append(f"`python benchmarks/pipeline_bench.py --size-mb {args.size_mb:g} --rounds "
             f"{args.rounds}` (each throughput the best of {args.rounds} interleaved rounds) "
             f"({time.strftime('%Y-%m-%d %H:%M')}, {elapsed / 60:.1f} min). Machine: "
             f"{info.get('cpu', '?')}, {info['cores']} cores (shared with other tenants' "
             f"builds; load average at start {info['load'][0]:.1f}), Python {info['python']}, "
             f"pyarrow {info['pyarrow']}, dask {info['dask']}.\n")
    L.append(f"Input: {inp['bytes'] / MB:,.1f} MB, {inp['lines']:,} lines (English UD EWT, "
             f"English books, loghub logs, repeated); the CLI reads it as one text file in "
             f"{args.partition_mb:g} MB partitions, the accessor as 8 Parquet files. "
             f"max_length={MAX_LENGTH}, stride={STRIDE}; {args.workers} worker processes x 1 "
             f"thread for the CLI and the accessor, `num_threads=0` (all cores) for the bare "
             f"kernel. MB/s = input bytes / wall seconds. Peak RSS growth: a worker's peak "
             f"RSS less an idle, warmed worker's "
             f"({info['idle_worker_rss'] / 2**20:,.0f} MiB: daskwp imported, tokenizer "
             f"loaded).\n")
    L.append("| row | what | MB/s | ratio to kernel (same padding) | output MB | peak RSS per "
             "worker (growth) |")
    L.append("|---|---|---|---|---|---|")
    for name, key in (("bare kernel: encode", "encode"), ("bare kernel: windows ragged",
                                                          "ragged"),
                      ("bare kernel: windows padded", "padded")):
        L.append(f"| {name} | `tok.encode(arr)` / `tok(arr, max_length={MAX_LENGTH}, "
                 f"stride={STRIDE}{', padding=False' if key == 'ragged' else ''})` in "
                 f"{args.partition_mb:g} MB batches | {fmt(kernel[key]['mbps'])} | | | |")
    for pad, r in cli.items():
        base = kr if pad == "do_not_pad" else kp
        L.append(f"| CLI {pad} (tokenize+write) | `{r['command']}`; `tokenize_seconds` of "
                 f"_summary.json (cluster up) | {fmt(r['mbps'])} | {r['mbps'] / base:.2f}x | "
                 f"{r['out_bytes'] / MB:,.0f} | {_rss_text(r['rss'], info['idle_worker_rss'])} |")
        L.append(f"| CLI {pad} (whole command) | the same, wall time of the command "
                 f"(interpreter, cluster start, checks) | {fmt(r['mbps_wall'])} | "
                 f"{r['mbps_wall'] / base:.2f}x | | |")
    for pad, r in cli_running.items():
        base = kr if pad == "do_not_pad" else kp
        L.append(f"| CLI {pad} on a running cluster (tokenize+write) | `{r['command']}` "
                 f"(the accessor rows' 2-worker LocalCluster, up and warm); "
                 f"`tokenize_seconds` | {fmt(r['mbps'])} | {r['mbps'] / base:.2f}x | "
                 f"{r['out_bytes'] / MB:,.0f} | |")
    for pad, r in acc.items():
        base = kr if pad is False else kp
        L.append(f"| accessor to_parquet {'ragged' if pad is False else 'padded'} | "
                 f"`{r['command']}` on a running 2-worker LocalCluster | {fmt(r['mbps'])} | "
                 f"{r['mbps'] / base:.2f}x | {r['out_bytes'] / MB:,.0f} | "
                 f"{_rss_text(r['rss'], info['idle_worker_rss'])} |")
    for pad, b in back.items():
        L.append(f"| read_tokenized, {'ragged' if pad == 'do_not_pad' else 'padded'} parts | "
                 f"`{b['command']}` on the CLI's --padding {pad} output (padded int32 "
                 f"tensors, pad_id {b['pad_id']} from the parts' metadata); first round "
                 f"{fmt(b['first'])} (the process's first batches fault in fresh memory) | "
                 f"{fmt(b['mbps'])} ({b['rows_per_s'] / 1e6:.2f} M rows/s) | | | |")
    if nano:
        L.append(f"| nanotoken + pyarrow | {nano['command']}; time inside the script | "
                 f"{fmt(nano['mbps'])} | (no windows) | {nano['out_bytes'] / MB:,.0f} | |")
    else:
        L.append("| nanotoken + pyarrow | not installed (`pip install nanotoken==0.1.0`) | – | "
                 "| | |")
    L.append("")
    # goals
    rag_cli = cli.get("do_not_pad", {}).get("mbps")
    pad_cli = cli.get("max_length", {}).get("mbps")
    rag_acc = acc.get(False, {}).get("mbps")
    pad_acc = acc.get("max_length", {}).get("mbps")
    L.append("## Against the goals (ratios within this run)\n")
    L.append("| goal | figure | met |")
    L.append("|---|---|---|")

    def goal(name, value, target, fmtv="{:.2f}x"):
        if value is None:
            L.append(f"| {name} | – | – |")
            return
        L.append(f"| {name} (target {fmtv.format(target)}) | {fmtv.format(value)} | "
                 f"{'yes' if value >= target else 'no'} |")

    goal("CLI ragged / kernel ragged", rag_cli and rag_cli / kr, 0.5)
    goal("CLI padded / kernel padded", pad_cli and pad_cli / kp, 0.35)
    rag_run = cli_running.get("do_not_pad", {}).get("mbps")
    pad_run = cli_running.get("max_length", {}).get("mbps")
    goal("CLI on a running cluster ragged / kernel ragged", rag_run and rag_run / kr, 0.5)
    goal("CLI on a running cluster padded / kernel padded", pad_run and pad_run / kp, 0.35)
    goal("to_parquet ragged / kernel ragged", rag_acc and rag_acc / kr, 0.5)
    goal("to_parquet padded / kernel padded", pad_acc and pad_acc / kp, 0.35)
    if nano:
        goal("CLI ragged / nanotoken script", rag_cli and rag_cli / nano["mbps"], 2.0)
        goal("to_parquet ragged / nanotoken script", rag_acc and rag_acc / nano["mbps"], 2.0)
        goal("CLI on a running cluster ragged / nanotoken script",
             rag_run and rag_run / nano["mbps"], 2.0)
    writes = [r["mbps"] for d in (cli, cli_running, acc) for r in d.values()]
    for pad, b in back.items():
        # "reading back at least as fast as writing": against the fastest write of the run
        goal(f"read_tokenized of {'ragged' if pad == 'do_not_pad' else 'padded'} parts / "
             f"the fastest write ({max(writes):.1f} MB/s)" if writes else "read_tokenized",
             writes and b["mbps"] / max(writes), 1.0)
    for mode, o in (ovh or {}).items():
        L.append(f"| Dask overhead per partition, {mode} (target <= 5 ms) | "
                 f"{o['overhead_ms']:.2f} ms over dask alone ({o['daskwp_ms']:.2f} ms in all, "
                 f"dask's own `map_partitions(len).max()` {o['dask_ms']:.2f} ms) | "
                 f"{'yes' if o['overhead_ms'] <= 5 else 'no'} |")
    if graph:
        L.append(f"| graph of a {graph['partitions']:,}-partition job built (target < 2 s) | "
                 f"{graph['job_seconds']:.2f} s ({graph['job_tasks']:,} tasks; the accessor's "
                 f"{graph['partitions']:,}-partition `to_frame()` graph from pandas "
                 f"{graph['accessor_seconds']:.2f} s, {graph['accessor_tasks']:,} tasks, of "
                 f"which dask's own `from_pandas(...).map_partitions(len)` graph takes "
                 f"{graph['dask_seconds']:.2f} s) | "
                 f"{'yes' if graph['job_seconds'] < 2 else 'no'} |")
    rows = [(f"CLI {p}", p, r, min(args.partition_mb * MB, inp["bytes"]))
            for p, r in cli.items()]
    rows += [(f"to_parquet {'ragged' if p is False else 'padded'}",
              "do_not_pad" if p is False else "max_length", r, inp["bytes"] / 8)
             for p, r in acc.items()]
    for name, pad, r, part in rows:
        if not r.get("rss"):
            continue
        outb = part * kernel["ragged" if pad == "do_not_pad" else "padded"]["out_per_byte"]
        limit = 2 * (part + outb)
        growth = max(p for _, p in r["rss"]) - info["idle_worker_rss"]
        L.append(f"| peak RSS growth per worker, {name} (target <= 2 x (partition input "
                 f"{part / 2**20:,.0f} MiB + its output arrays {outb / 2**20:,.0f} MiB) = "
                 f"{limit / 2**20:,.0f} MiB) | {growth / 2**20:,.0f} MiB (peak RSS "
                 f"{max(p for _, p in r['rss']) / 2**20:,.0f} MiB) | "
                 f"{'yes' if growth <= limit else 'no'} |")
    L.append("")
    # stages
    L.append("## Where the time goes: CPU seconds per stage of the job's parts\n")
    L.append("Summed over the workers' threads (`_summary.json` `cpu_seconds`; the writer "
             "thread's encode+compress overlaps the next piece's tokenization). The bare "
             "kernel's CPU seconds over the same input are the reference.\n")
    L.append("| stage | " + " | ".join(f"CLI {p}" for p in cli) + " |")
    L.append("|---|" + "---|" * len(cli))
    stages = ["read", "tokenize", "arrow", "write", "finish"]
    for st in stages:
        cells = []
        for p, r in cli.items():
            c = r["summary"].get("cpu_seconds", {})
            tot = sum(c.values()) or 1
            cells.append(f"{c.get(st, 0):.2f} s ({100 * c.get(st, 0) / tot:.0f}%)")
        L.append(f"| {st} | " + " | ".join(cells) + " |")
    cells = []
    for p, r in cli.items():
        c = r["summary"].get("cpu_seconds", {})
        k = kernel["ragged" if p == "do_not_pad" else "padded"]["cpu"]
        cells.append(f"{sum(c.values()):.2f} s = {sum(c.values()) / k:.2f}x the kernel's "
                     f"{k:.2f} s")
    L.append("| all | " + " | ".join(cells) + " |")
    L.append("")
    L.append("Stages: *read* = the partition's bytes read into a pooled buffer and split "
             "in place with the invalid UTF-8 counted (`_ext.split_lines`, one native pass); "
             "*tokenize* = the kernel's encode and window fill; *arrow* = the Arrow table "
             "from its buffers, statistics; *write* = Parquet pages (daskwp's own writer, "
             "`frames/parquet_writer.py`) and their compression (lz4, the default; writer "
             "thread); *finish* = footer, "
             "checksum, fsync, rename.\n")
    if cg:
        L.append("## Instructions per stage (callgrind, one partition, one thread)\n")
        L.append("`valgrind --tool=callgrind` of `jobs.parts.write_partition` on the first "
                 f"{args.callgrind_mb:g} MB of the input (inclusive instruction counts of each "
                 "stage's native entry point, per input byte; stable on a noisy machine).\n")
        L.append("| stage | " + " | ".join(cg) + " |")
        L.append("|---|" + "---|" * len(cg))
        names = [s for s, _ in CALLGRIND_STAGES]
        for s in names:
            L.append(f"| {s} | " + " | ".join(
                f"{v['costs'].get(s, 0) / (v['mb'] * MB):.1f}" for v in cg.values()) + " |")
        L.append("")
    if nano:
        L.append("nanotoken script (run as a subprocess; its time is measured inside, after "
                 "the imports):\n")
        L.append("```python" + NANOTOKEN_SCRIPT + "```\n")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=500)
    ap.add_argument("--partition-mb", type=float, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1,
                    help="bare kernel passes per round (best kept)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of kernel, CLI and accessor rows (best of each kept)")
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                    "pipeline_bench.md")
    ap.add_argument("--tmp", type=Path, default=None)
    ap.add_argument("--overhead-partitions", type=int, default=1000)
    ap.add_argument("--graph-partitions", type=int, default=10000)
    ap.add_argument("--callgrind-mb", type=float, default=0,
                    help="also count instructions per stage on this many MB (0: off)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    info = machine_info()
    tmp = Path(tempfile.mkdtemp(prefix="daskwp-pipeline-", dir=args.tmp))
    try:
        log(f"building {args.size_mb:g} MB of input in {tmp}")
        inp = build_input(args.data, args.size_mb, tmp)
        # Rounds of (kernel, CLI ragged, CLI padded), best of each: the machine's noise
        # then hits the kernel and the pipeline alike.
        kernel, cli, back = {}, {}, {}
        for rnd in range(args.rounds):
            log(f"round {rnd + 1}/{args.rounds}: bare kernel")
            k = bench_kernel(inp, args.partition_mb, args.repeats)
            for name, v in k.items():
                if name not in kernel or v["mbps"] > kernel[name]["mbps"]:
                    kernel[name] = v
            for pad in ("do_not_pad", "max_length"):
                log(f"round {rnd + 1}/{args.rounds}: CLI --padding {pad}")
                out = tmp / f"cli-{pad}"
                shutil.rmtree(out, ignore_errors=True)
                r = run_cli(inp, out, pad, args.partition_mb, args.workers)
                if pad not in cli or r["mbps"] > cli[pad]["mbps"]:
                    cli[pad] = r
            # read back both CLI outputs (ragged and padded parts) in every round: the
            # first round's read is the process's first use of that much memory, so its
            # figure is kept too (the report gives both)
            for pad in ("do_not_pad", "max_length"):
                log(f"round {rnd + 1}/{args.rounds}: read_tokenized of the CLI's {pad} parts")
                r = run_read_back(tmp / f"cli-{pad}", inp)
                r["first"] = back[pad]["first"] if pad in back else r["mbps"]
                if pad not in back or r["mbps"] > back[pad]["mbps"]:
                    back[pad] = r
        log("nanotoken")
        nano = run_nanotoken(inp, tmp / "nanotoken.parquet",
                             args.data / "vocab" / "bert-base-uncased" / "vocab.txt")
        from distributed import Client, LocalCluster
        import daskwp  # noqa: F401  (the accessor)
        acc, cli_running = {}, {}
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            warm_workers(client, tmp)
            import psutil
            idle = client.run(lambda: psutil.Process().memory_info().rss)
            baseline_rss = max(idle.values())
            for rnd in range(args.rounds):
                for pad in (False, "max_length"):
                    log(f"round {rnd + 1}/{args.rounds}: accessor to_parquet padding={pad!r}")
                    out = tmp / f"acc-{pad}"
                    shutil.rmtree(out, ignore_errors=True)
                    r = run_accessor(client, cluster, inp, out, pad)
                    if pad not in acc or r["mbps"] > acc[pad]["mbps"]:
                        acc[pad] = r
                for pad in ("do_not_pad", "max_length"):
                    log(f"round {rnd + 1}/{args.rounds}: CLI --scheduler --padding {pad}")
                    out = tmp / f"cli-running-{pad}"
                    shutil.rmtree(out, ignore_errors=True)
                    r = run_cli(inp, out, pad, args.partition_mb, args.workers,
                                scheduler=cluster.scheduler_address)
                    if pad not in cli_running or r["mbps"] > cli_running[pad]["mbps"]:
                        cli_running[pad] = r
            ovh = None
            if args.overhead_partitions:
                log(f"overhead: {args.overhead_partitions} partitions of 10 lines")
                ovh = bench_overhead(client, args.overhead_partitions, 2)
        graph = None
        if args.graph_partitions:
            log(f"graph of {args.graph_partitions} partitions")
            graph = bench_graph(args.graph_partitions, tmp)
        cg = None
        if args.callgrind_mb:
            log(f"callgrind on {args.callgrind_mb:g} MB")
            cg = bench_callgrind(inp, args.callgrind_mb, tmp)
        info["idle_worker_rss"] = baseline_rss
        text = report(args, info, inp, kernel, cli, acc, back, nano, ovh, graph, cg,
                      time.perf_counter() - t0, cli_running)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
