"""The whole pipeline against the bare kernel at several input sizes, in ONE run: batch jobs
(``daskwp tokenize``) at every size against the kernel measured four ways; at one size
the lazy accessor's ``to_parquet``, the CLI on a running cluster, ``read_tokenized`` back to
padded tensors, a nanotoken + pyarrow script, Dask's per-partition overhead and the graph of
a 10,000-partition job; then the soak: one large job with a worker process killed half way.

    python benchmarks/pipeline_bench.py --plan    # what a run does, disk and time needed
    python benchmarks/pipeline_bench.py           # 0.3, 3 and 10 GB + the 10 GB soak
    python benchmarks/pipeline_bench.py --sizes-gb 0.1 --extras-gb 0.1 --soak-gb 0   # a look

The input is the non-empty lines of the shared English (UD EWT), English books and loghub
logs corpora, repeated to each size (GB = 10^9 bytes, newlines included) and written to the
``--tmp`` folder streaming (the free disk is checked first), as one text file (the CLI's
input) and, at ``--extras-gb``, as Parquet files of a ``text`` column (the accessor's input:
``dd.read_parquet``). Every figure is MB/s of that text (input bytes / wall time).

The bare kernel (``tok(arr, max_length=128, stride=32)``, all cores, in ``--partition-mb``
batches as the jobs see them, read from disk between the calls, the reading timed apart) is
measured four ways, and every job row gives its ratio to each: *burst*, the best of the
short warm passes (this process, its word cache filled, on the first ``--kernel-mb`` MB of
the size), one right before every timed job; the *pass before* the job, each round;
*sustained*, the whole input at that size (the kernel runs as long as a job: this VM runs
the same work ~14% slower after ~10 s of load on both cores, results/kernel_drift.md);
*cold*, a fresh process on its first ``--cold-batches`` batches. The goals are met or not
on the burst kernel (the stricter figure) and show the others beside. The CLI, accessor
and read-back rows are measured in each of ``--rounds`` interleaved rounds and the best
kept. Every command runs in the environment this bench was started with (not the variables
its own LocalCluster's nannies write into ``os.environ``: ``_common.launch_env``).

The soak (``--soak-gb``): one ``daskwp tokenize`` of that size on its own 2-worker cluster,
one worker process (not its nanny) SIGKILLed when half the parts exist; then the checks:
it completes, every logID is present once (the parts' logID column read back), the output
equals ``tok(...)`` in this process on the first, a killed-time and the last partition, the
driver's and each worker's peak RSS (VmHWM) within 10% of a ``--soak-ref-gb`` job run the
same way, its throughput within 10% of the ``--extras-gb`` job's.

The report (``--out``, default benchmarks/results/pipeline_bench.md) gives every command,
the ratios and goals of issue 42, the per-stage CPU of the job's parts, the peak RSS of
every worker, and (``--callgrind-mb``) instruction counts per stage.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import default_data_dir, kernel_stream, launch_env, vm_hwm

ROOT = Path(__file__).resolve().parents[1]
MB = 1e6
GB = 1e9
MAX_LENGTH, STRIDE = 128, 32
FILES = ["en_ewt.txt", "en_book_moby_dick.txt", "en_book_pride_and_prejudice.txt", "logs/*.log"]
#: Output (Parquet parts) per input byte, an upper bound for the disk check (0.42 measured).
OUT_PER_INPUT = 0.5
#: Parquet (zstd) of the text per input byte, for the disk check.
PARQUET_PER_INPUT = 0.4
#: MB/s and seconds on the 2-core AMD EPYC VM of HISTORY.md (pipeline run 13), for the
#: time estimate only.
RATES = {"write_text": 400, "parquet": 150, "kernel": 350, "job": 180, "job_start": 5,
         "accessor": 170, "read_back": 250, "nanotoken": 55, "checks": 600, "fixed": 150}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- input ----------------------------------------------------------------------------------

def corpus_base(data: Path) -> tuple[bytes, int]:
    """The corpora's non-empty lines, each ending in a newline, and their count."""
    lines = []
    for pat in FILES:
        files = sorted((data / "corpus").glob(pat))
        if not files:
            raise FileNotFoundError(f"no file matches {data / 'corpus' / pat}")
        for f in files:
            for line in f.read_bytes().split(b"\n"):
                line = line.rstrip(b"\r")
                if line:
                    lines.append(line)
    return b"\n".join(lines) + b"\n", len(lines)


def write_text(base: tuple[bytes, int], size_bytes: int, path: Path) -> dict:
    """``base`` repeated into ``path`` up to ``size_bytes`` (the last copy cut after a
    newline), one copy at a time: never more than the base in memory. Written back to disk
    before it returns (``fsync``): a job that reads a file still being written back waits
    on its pages (the soak's input, written just before its run, was: a 3 GB job's worker
    threads sampled in the kernel's ``folio_wait_bit_common`` 20 times against once on the
    same file written back, 0.8 GB of it dirty at the start), where the sized runs' inputs
    had long been written back by their timed runs."""
    text, n_base = base
    k, rest = divmod(size_bytes, len(text))
    with open(path, "wb") as f:
        for _ in range(k):
            f.write(text)
        tail = text[:text.rfind(b"\n", 0, rest) + 1] if rest else b""
        f.write(tail)
        f.flush()
        os.fsync(f.fileno())
    size = k * len(text) + len(tail)
    lines = k * n_base + tail.count(b"\n")
    return {"text": path, "bytes": size, "lines": lines, "text_bytes": size - lines}


def text_batches(path: Path, batch_bytes: int, limit: int | None = None):
    """``(lines as an Arrow array, bytes)`` of the text file in batches of about
    ``batch_bytes`` cut after a newline, up to ``limit`` bytes; one batch in memory."""
    from daskwp.jobs.inputs import lines_to_arrow
    done = 0
    with open(path, "rb") as f:
        while limit is None or done < limit:
            chunk = f.read(batch_bytes if limit is None else min(batch_bytes, limit - done))
            if not chunk:
                break
            if not chunk.endswith(b"\n"):
                chunk += f.readline()
            done += len(chunk)
            yield lines_to_arrow(chunk), len(chunk)


def write_parquet(inp: dict, folder: Path, partition_bytes: int) -> int:
    """The text file as Parquet files of a ``text`` column, one per partition's worth of
    text (the accessor's partitions then match the CLI's); returns how many."""
    folder.mkdir()
    n = 0
    for arr, _ in text_batches(inp["text"], partition_bytes):
        pq.write_table(pa.table({"text": arr.cast(pa.large_string())}),
                       folder / f"part-{n:05d}.parquet", compression="zstd")
        n += 1
    return n


def ensure_disk(folder: Path, need: float, what: str) -> None:
    """Refuse (SystemExit) when ``folder``'s disk has less than ``need`` bytes free."""
    free = shutil.disk_usage(folder).free
    if free < need:
        raise SystemExit(f"pipeline_bench: {what} needs about {need / GB:,.1f} GB free in "
                         f"{folder}, which has {free / GB:,.1f} GB; pass --tmp on a larger "
                         f"disk or smaller --sizes-gb / --soak-gb")


def phase_disk(size_gb: float, parquet: bool) -> float:
    """Bytes a size's phase holds at most: its text, its Parquet copy, two outputs."""
    return size_gb * GB * (1 + (PARQUET_PER_INPUT if parquet else 0) + 2 * OUT_PER_INPUT) \
        + 0.2 * GB


# -- helpers --------------------------------------------------------------------------------

class RssPoller:
    """Peak RSS of the Dask worker processes under ``root_pid`` (the nannies' spawned
    children), polled every 20 ms: {pid: (first RSS seen, peak RSS)}. The peak is the
    process's VmHWM with ``hwm`` (workers started for the run measured), else the highest
    RSS polled (a running cluster's workers, whose VmHWM holds earlier runs' peaks); with
    ``driver``, ``driver_peak`` is the root process's own VmHWM.

    The process tree is scanned for new workers every :attr:`SCAN_SECONDS` only: psutil's
    ``children()`` reads the stat file of every process on the machine (2.2 ms a scan with
    ~120 processes), and a scan every 20 ms took 10.7% of a core, in this process, from
    the 2 cores of the job it measured; the workers found are polled every 20 ms."""

    #: Seconds between scans of the process tree (a new worker, e.g. the soak's
    #: replacement, is polled within this; with ``hwm`` its VmHWM still holds its peak).
    SCAN_SECONDS = 0.5

    def __init__(self, root_pid: int, driver: bool = False, hwm: bool = True):
        import psutil
        self.root = psutil.Process(root_pid)
        self.rss: dict = {}
        self.driver = driver
        self.hwm = hwm
        self.driver_peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _scan(self, workers: dict) -> None:
        """Adds the worker processes under the root not in ``workers`` (pid -> Process)."""
        import psutil
        try:
            procs = self.root.children(recursive=True)
        except psutil.Error:
            return
        for p in procs:
            if p.pid in workers:
                continue
            try:   # (a child between fork and exec has its parent's command line: asked
                # again at the next scan)
                if "spawn_main" in " ".join(p.cmdline()):
                    workers[p.pid] = p
            except psutil.Error:
                pass

    def _run(self):
        import psutil
        workers: dict = {}
        next_scan = 0.0
        while not self._stop.is_set():
            if self.driver:
                self.driver_peak = max(self.driver_peak, vm_hwm(self.root.pid) or 0)
            if time.monotonic() >= next_scan:
                self._scan(workers)
                next_scan = time.monotonic() + self.SCAN_SECONDS
            for pid, p in list(workers.items()):
                try:
                    r = p.memory_info().rss
                except psutil.Error:
                    del workers[pid]
                    continue
                peak = (vm_hwm(pid) or r) if self.hwm else r
                first, old = self.rss.get(pid, (r, peak))
                self.rss[pid] = (first, max(old, peak))
            self._stop.wait(0.02)

    def alive_workers(self) -> list[int]:
        import psutil
        return [pid for pid in self.rss if psutil.pid_exists(pid)]

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


# -- the kernel -----------------------------------------------------------------------------

KERNEL_CALLS = {
    "encode": lambda tok, b: tok.encode(b, num_threads=0),
    "ragged": lambda tok, b: tok(b, max_length=MAX_LENGTH, stride=STRIDE, padding=False),
    "padded": lambda tok, b: tok(b, max_length=MAX_LENGTH, stride=STRIDE),
}


def bench_kernel(tok, inp: dict, sample_bytes: int | None, partition_mb: float,
                 calls=("ragged", "padded")) -> dict:
    """The bare extension on the same cores (num_threads=0: all of them), warm, over the
    first ``sample_bytes`` of the input (None: all of it, the *sustained* pass) in
    partition-sized batches as the jobs see them, read from disk between the timed calls
    (the reading timed apart, ``read``); ``calls`` (of :data:`KERNEL_CALLS`) in turn on
    every batch. {call: {seconds, cpu, bytes, mbps, read}}."""
    figs, read = kernel_stream(
        text_batches(inp["text"], int(partition_mb * MB), sample_bytes),
        {name: (lambda b, f=KERNEL_CALLS[name]: f(tok, b)) for name in calls})
    return {name: dict(f, read=read) for name, f in figs.items()}


def kernel_out_per_byte(tok, inp: dict, partition_mb: float) -> dict:
    """Output bytes per input byte of the window calls on the first partition (what a
    partition's output arrays hold); the call before it warms the tokenizer."""
    first, nbytes = next(text_batches(inp["text"], int(partition_mb * MB)))
    out = {}
    for name in ("ragged", "padded"):
        r = KERNEL_CALLS[name](tok, first)
        out[name] = (sum(_nbytes(v) for v in r.values()) + _nbytes(r.doc_row_offsets)) / nbytes
    return out


def cold_kernel_main(path: str, mode: str, batches: int, partition_mb: float) -> None:
    """In a fresh process (``--cold-kernel``): the tokenizer built, then ``mode``'s call
    timed on the file's first ``batches`` batches; prints JSON."""
    t = time.perf_counter()
    import daskwp
    tok = daskwp.WordPieceTokenizer()
    start = time.perf_counter() - t
    data = list(itertools.islice(text_batches(Path(path), int(partition_mb * MB)), batches))
    secs = []
    for b, _ in data:
        t = time.perf_counter()
        KERNEL_CALLS[mode](tok, b)
        secs.append(time.perf_counter() - t)
    nbytes = sum(n for _, n in data)
    print(json.dumps({"seconds": sum(secs), "batch_seconds": secs, "bytes": nbytes,
                      "mbps": nbytes / MB / sum(secs), "start_seconds": start}))


def bench_kernel_cold(inp: dict, batches: int, partition_mb: float) -> dict:
    out = {}
    for mode in KERNEL_CALLS:
        proc = subprocess.run([sys.executable, __file__, "--cold-kernel", mode,
                               "--cold-input", str(inp["text"]), "--cold-batches", str(batches),
                               "--partition-mb", str(partition_mb)],
                              capture_output=True, text=True, env=launch_env())
        if proc.returncode:
            raise RuntimeError(f"cold kernel {mode} failed:\n{proc.stderr[-2000:]}")
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _nbytes(v) -> int:
    if hasattr(v, "offsets") and hasattr(v, "values"):
        return int(v.values.nbytes + v.offsets.nbytes)
    return int(getattr(v, "nbytes", 0))


# -- the jobs -------------------------------------------------------------------------------

def cli_command(inp: dict, out: Path, padding: str, partition_mb: float,
                workers: int | None, scheduler: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "daskwp", "tokenize", str(inp["text"]), str(out),
           "--max-length", str(MAX_LENGTH), "--stride", str(STRIDE), "--padding", padding,
           "--partition-size", f"{partition_mb:g}MB"]
    if scheduler:
        cmd += ["--scheduler", scheduler]
    elif workers:
        cmd += ["--n-workers", str(workers), "--threads-per-worker", "1"]
    return cmd + ["--json"]


def _finish_cli(cmd, proc, stdout, stderr, wall, inp, out, poll) -> dict:
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr[-3000:]}")
    s = json.loads(stdout)
    return {"command": " ".join(["daskwp"] + cmd[3:]), "wall": wall,
            "tokenize_seconds": s["tokenize_seconds"], "summary": s,
            "mbps_wall": inp["bytes"] / MB / wall, "bytes_in": inp["bytes"],
            "mbps": inp["bytes"] / MB / s["tokenize_seconds"],
            "rss": poll.workers(), "driver_rss": poll.driver_peak,
            "out_bytes": _dir_bytes(out)}


def run_cli(inp: dict, out: Path, padding: str, partition_mb: float, workers: int | None,
            scheduler: str | None = None) -> dict:
    """The CLI job as a user runs it: its own fresh cluster of ``workers`` processes, no
    cluster option at all (``workers=None``: what the job picks), or ``--scheduler`` a
    running cluster (a batch job submitted to a cluster that is up)."""
    cmd = cli_command(inp, out, padding, partition_mb, workers, scheduler)
    t = time.perf_counter()
    # the environment this bench was started with, as a user's shell gives it: not the
    # variables a LocalCluster of this process (the extras') wrote into os.environ
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=launch_env())
    own = scheduler in (None, "threads", "synchronous")   # the command's own processes
    with RssPoller(proc.pid if own else os.getpid(), driver=own, hwm=own) as poll:
        stdout, stderr = proc.communicate()
    return _finish_cli(cmd, proc, stdout, stderr, time.perf_counter() - t, inp, out, poll)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).glob("*.parquet"))


def warm_workers(client, tmp: Path) -> None:
    """Each worker imports daskwp, gets the tokenizer and runs the accessor's read of zstd
    Parquet files (the timed accessor rows' input: its modules and pools) before anything is
    timed."""
    import dask.dataframe as dd
    import pyarrow as pa
    import pyarrow.parquet as pq
    src = tmp / "warm-in"
    src.mkdir(exist_ok=True)
    for n in range(8):
        pq.write_table(pa.table({"text": pa.array(["warm up"] * 64, pa.large_string())}),
                       src / f"part-{n:05d}.parquet", compression="zstd")
    ddf = dd.read_parquet(str(src))
    for pad in (False, "max_length"):
        ddf["text"].wordpiece.tokenize(max_length=MAX_LENGTH, stride=STRIDE, padding=pad) \
            .to_parquet(str(tmp / "warm"), overwrite=True)
    client.run(lambda: None)


def run_accessor(client, cluster, inp: dict, out: Path, padding) -> dict:
    import dask.dataframe as dd
    ddf = dd.read_parquet(str(inp["parquet"]))
    res = ddf["text"].wordpiece.tokenize(max_length=MAX_LENGTH, stride=STRIDE, padding=padding)
    t = time.perf_counter()
    with RssPoller(os.getpid(), hwm=False) as poll:
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
                          capture_output=True, text=True, env=launch_env())
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
from daskwp.jobs import driver
from daskwp.jobs.config import make_config
tok = daskwp.WordPieceTokenizer(num_threads=1)
# the options a `daskwp tokenize` job passes its partitions
cfg = make_config({"input": path, "output": out, "max_length": 128, "stride": 32,
                   "padding": padding})
opts = {k: getattr(cfg, k) for k in driver._PARTITION_OPTIONS}
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
    ("write: compression (lz4, the default: daskwp's LZ4 block compressor; zstd level 1 "
     "with compression='zstd')",
     ["namespace)::lz4_raw_compress(", "LZ4_compress_default", "LZ4_compress_fast",
      "ZSTD_compress2"]),
    ("write: part checksum (as pages are written; 128-bit hash, SHA-256 before)",
     ["PartHash::update", "EVP_DigestUpdate"]),
]


def bench_callgrind(inp: dict, mb: float, tmp: Path) -> dict | None:
    """Instructions per stage of one partition written in this process (one thread), from
    callgrind's inclusive costs of the stages' native entry points."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        return None
    src = tmp / "cg.txt"
    with open(inp["text"], "rb") as f:
        data = f.read(int(mb * MB))
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


# -- the soak -------------------------------------------------------------------------------

def _parts(out: Path) -> list[str]:
    from daskwp.jobs.parts import PART_PREFIX, PART_SUFFIX
    try:
        names = os.listdir(out)
    except FileNotFoundError:
        return []
    return [n for n in names if n.startswith(PART_PREFIX) and n.endswith(PART_SUFFIX)]


def run_soak(inp: dict, out: Path, partition_mb: float, workers: int,
             kill_at: float = 0.5) -> dict:
    """``daskwp tokenize`` (ragged) on its own cluster of ``workers`` processes; when
    ``kill_at`` of the parts exist, one worker process (a nanny's spawned child, not the
    nanny) gets SIGKILL. The driver's and every worker's VmHWM are polled throughout."""
    cmd = cli_command(inp, out, "do_not_pad", partition_mb, workers)
    n_parts = math.ceil(inp["bytes"] / (partition_mb * MB))   # until _job.json says
    killed = None
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=launch_env())
        with RssPoller(proc.pid, driver=True) as poll:
            while proc.poll() is None:
                if killed is None:
                    try:
                        n_parts = json.loads((out / "_job.json").read_text())["n_partitions"]
                    except (OSError, ValueError, KeyError):
                        pass
                    done = _parts(out)
                    alive = poll.alive_workers()
                    if len(done) >= kill_at * n_parts and alive:
                        os.kill(alive[0], signal.SIGKILL)
                        killed = {"pid": alive[0], "seconds": time.perf_counter() - t,
                                  "parts_done": len(done), "n_parts": n_parts,
                                  "missing": sorted(set(range(n_parts)) - {
                                      int(n.split("-")[1].split(".")[0]) for n in done})}
                        log(f"soak: killed worker {alive[0]} at {killed['seconds']:.1f} s, "
                            f"{len(done)} of {n_parts} parts written")
                time.sleep(0.02)
        wall = time.perf_counter() - t
        fo.seek(0)
        fe.seek(0)
        stdout, stderr = fo.read(), fe.read()
    if proc.returncode:   # a finding, not the benchmark's failure: the report says it
        last = stderr.strip().splitlines()[-1:] or [""]
        log(f"soak: the job failed (exit {proc.returncode}):\n{stderr[-3000:]}")
        return {"failed": f"exit {proc.returncode}: {last[0][:300]}", "killed": killed,
                "command": " ".join(["daskwp"] + cmd[3:]), "wall": wall,
                "rss": poll.workers(), "driver_rss": poll.driver_peak,
                "bytes_in": inp["bytes"]}
    r = _finish_cli(cmd, proc, stdout, stderr, wall, inp, out, poll)
    r["killed"] = killed
    r["worker_pids"] = sorted(poll.rss)
    return r


def check_logids(out: Path, lines: int) -> tuple[bool, str]:
    """Every logID 0..lines-1 present once: the parts' logID column read back (each part
    its plan's documents, in order, no gap or overlap), and the documents summed equal to
    the input's lines."""
    from daskwp.jobs import JobError, verify_output
    job = json.loads((out / "_job.json").read_text())
    plan = [{"index": i, "logid_offset": p["logid_offset"], "documents": p["documents"]}
            for i, p in enumerate(job["partitions"])]
    try:
        verify_output(str(out), plan)
    except JobError as e:
        return False, str(e)
    docs = sum(p["documents"] for p in plan)
    if docs != lines:
        return False, f"the parts hold {docs:,} documents, the input {lines:,} lines"
    extra = sorted(set(_parts(out)) - {_part_name(i, len(plan)) for i in range(len(plan))})
    if extra:
        return False, f"parts outside the plan: {extra[:5]}"
    return True, f"logIDs 0..{lines - 1:,} once each over {len(plan)} parts"


def _part_name(i: int, n: int) -> str:
    from daskwp.jobs import part_name
    return part_name(i, n)


def _line_start(f, cut: int) -> int:
    """Where a partition cut at byte ``cut`` of a text file starts: ``cut`` for 0, else
    just after the first newline at or after ``cut - 1`` (the end of the file if none)."""
    if cut == 0:
        return 0
    f.seek(cut - 1)
    pos = cut - 1
    while chunk := f.read(1 << 20):
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(chunk)
    return pos


def check_sample(out: Path, indices, tok) -> tuple[bool, str]:
    """Parts ``indices`` equal to ``tok(lines, max_length, stride, padding=False)`` in this
    process on the same lines (the partition's byte range of the input, from _job.json, its
    cuts moved to line starts as the job moves them):
    input_ids and (logID - the part's first, start, stop) of every row."""
    from daskwp.jobs.inputs import lines_to_arrow
    job = json.loads((out / "_job.json").read_text())
    parts = job["partitions"]
    bad = []
    for i in indices:
        spec, offset = parts[i]["spec"], parts[i]["logid_offset"]
        start, end = spec["byte_start"], spec["byte_end"]
        with open(spec["path"], "rb") as f:
            if spec.get("cut_at_lines"):   # planned cuts move to the next line start
                start, end = (_line_start(f, start), _line_start(f, end))
            f.seek(start)
            data = f.read(max(end - start, 0))
        want = tok(lines_to_arrow(data), max_length=MAX_LENGTH, stride=STRIDE, padding=False)
        got = pq.read_table(out / _part_name(i, len(parts)),
                            columns=["logID", "start", "stop", "input_ids"])
        meta = np.stack([got.column(c).to_numpy() for c in ("logID", "start", "stop")], 1)
        meta[:, 0] -= offset
        ids = got.column("input_ids").combine_chunks()
        same = (np.array_equal(meta, np.asarray(want.metadata))
                and np.array_equal(ids.offsets.to_numpy() - ids.offsets[0].as_py(),
                                   np.asarray(want.input_ids.offsets))
                and np.array_equal(ids.flatten().to_numpy().astype(np.int64),
                                   np.asarray(want.input_ids.values).astype(np.int64)))
        if not same:
            bad.append(i)
    if bad:
        return False, f"partitions {bad} differ from tok(...) on their lines"
    return True, f"partitions {list(indices)} equal tok(...) on their lines"


def soak_checks(r: dict, inp: dict, out: Path, tok) -> dict:
    """The soak's checks on its output (see :func:`run_soak`)."""
    n = r["summary"]["partitions"]
    k = r["killed"]
    at_kill = k["missing"][0] if k and k["missing"] else n // 2
    sample = sorted({0, at_kill, n - 1})
    return {"logids": check_logids(out, inp["lines"]), "sample": check_sample(out, sample, tok),
            "leftover": [n for n in os.listdir(out) if not n.startswith(("part-", "_"))]}


# -- the plan -------------------------------------------------------------------------------

def plan(args) -> dict:
    """What a run does: the sizes, the free disk it needs, roughly how long it takes."""
    R = RATES
    sizes = args.sizes_gb
    secs = R["fixed"]
    for s in sizes:
        mb = s * GB / MB
        secs += mb / R["write_text"]
        secs += args.rounds * (2 * min(mb, args.kernel_mb) / R["kernel"]
                               + 2 * (mb / R["job"] + R["job_start"]))
        secs += min(mb, args.kernel_mb) / R["kernel"] + 2 * mb / R["kernel"]   # encode, sustained
        if s == args.extras_gb:
            secs += mb / R["parquet"] + mb / R["nanotoken"] + args.rounds * (
                2 * mb / R["accessor"] + 2 * (mb / R["job"] + 2) + 2 * mb / R["read_back"]
                + 4 * min(mb, args.kernel_mb) / R["kernel"])
    secs += len(KERNEL_CALLS) * (args.cold_batches * args.partition_mb / R["kernel"] + 3)
    for s in sizes:   # the default command
        secs += args.rounds * (s * GB / MB / R["job"] + 1
                               + min(s * GB / MB, args.kernel_mb) / R["kernel"])
    need = max([phase_disk(s, s == args.extras_gb) for s in sizes] or [0])
    if args.soak_gb:
        for s in (args.soak_ref_gb, args.soak_gb):
            mb = s * GB / MB
            secs += mb / R["write_text"] + mb / R["job"] + R["job_start"] + 5 \
                + mb * OUT_PER_INPUT / R["checks"]
        need = max(need, args.soak_gb * GB * (1 + OUT_PER_INPUT) + 0.2 * GB)
    return {"seconds": secs, "disk": need}


def plan_text(args, tmp_root: Path) -> str:
    p = plan(args)
    free = shutil.disk_usage(tmp_root).free
    return (f"pipeline_bench: sizes {', '.join(f'{s:g}' for s in args.sizes_gb)} GB "
            f"({args.rounds} round(s) each), extras at {args.extras_gb:g} GB, "
            + (f"soak {args.soak_gb:g} GB (reference {args.soak_ref_gb:g} GB)"
               if args.soak_gb else "no soak")
            + f"; needs ~{p['disk'] / GB:,.1f} GB free in {tmp_root} (has {free / GB:,.1f}); "
            f"takes roughly {p['seconds'] / 60:,.0f} min on a quiet 2-core machine like "
            f"the AMD EPYC VM of HISTORY.md")


# -- report ---------------------------------------------------------------------------------

def _rss_text(rss: list, idle: float | None = None) -> str:
    if not rss:
        return "–"
    return ", ".join(f"{peak / 2**20:,.0f} MiB" + (f" (+{(peak - idle) / 2**20:,.0f})"
                                                     if idle else "")
                     for first, peak in rss[:4])


def _pad_name(pad) -> str:
    return "ragged" if pad in (False, "do_not_pad") else "padded"


def _cpu_ratio(r: dict) -> float | None:
    """Write over tokenize CPU seconds of a job's parts (its summary) or of the accessor's
    (``to_parquet``'s statistics)."""
    c = (r.get("summary") or r.get("stats") or {}).get("cpu_seconds") or {}
    return c["write"] / c["tokenize"] if c.get("tokenize") and "write" in c else None


def _gb(s: float) -> str:
    return f"{s:g} GB"


def _kernel_ratios(sized, cold, s, key, mbps, r, wall=False) -> list[str]:
    """A job's ratios (its MB/s ``mbps``; each round's whole-command MB/s with ``wall``) to
    the kernel's ``key`` call at size ``s``: [burst, sustained, each round's to the short
    pass before it (with the figures it divides), cold]."""
    z = sized.get(s, {})
    burst = z.get("kernel", {}).get(key, {}).get("mbps")
    sus = z.get("sustained", {}).get(key, {}).get("mbps")
    c = cold[key]["mbps"] if cold else None
    rounds = ", ".join(f"{j / k:.2f} ({j:.1f} / {k:.1f})" for j, k in
                       ((x["mbps_wall"] if wall else x["mbps"], x["kernel"])
                        for x in r.get("rounds", []))) or "–"
    return [f"{fmt(burst and mbps / burst, 2)}x", f"{fmt(sus and mbps / sus, 2)}x", rounds,
            f"{fmt(c and mbps / c, 2)}x"]


def report(args, info, cold, sized, extras, soak, cg, elapsed) -> str:
    L = []
    L.append("# Pipeline benchmark: batch jobs and Dask output against the bare kernel\n")
    L.append("Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).\n")
    L.append(f"`python benchmarks/pipeline_bench.py --sizes-gb "
             f"{','.join(f'{s:g}' for s in args.sizes_gb)} --extras-gb {args.extras_gb:g} "
             f"--soak-gb {args.soak_gb:g} --rounds {args.rounds}` (each throughput the best "
             f"of {args.rounds} interleaved rounds) ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"{elapsed / 60:.1f} min). Machine: {info.get('cpu', '?')}, {info['cores']} "
             f"cores (load average at start {info['load'][0]:.1f}), Python "
             f"{info['python']}, pyarrow {info['pyarrow']}, dask {info['dask']}; daskwp's "
             f"modules byte-compiled first (`python -m compileall daskwp`), as an installed "
             f"wheel has them.\n")
    L.append(f"Input: English UD EWT, English books and loghub logs lines, repeated to each "
             f"size; the CLI reads it as one text file in {args.partition_mb:g} MB partitions"
             f", the accessor as Parquet files of one partition each. "
             f"max_length={MAX_LENGTH}, stride={STRIDE}; {args.workers} worker processes x 1 "
             f"thread for the CLI and the accessor, `num_threads=0` (all cores) for the bare "
             f"kernel. MB/s = input bytes / wall seconds.\n")
    # the kernel
    L.append("## The bare kernel: cold, burst and sustained\n")
    L.append(f"Cold: a fresh process (`daskwp` imported, the tokenizer built, then timed) on "
             f"the input's first {args.cold_batches} x {args.partition_mb:g} MB batches, as a "
             f"fresh worker meets its first partitions. Burst: this process, its word cache "
             f"filled, short passes on the first {args.kernel_mb:g} MB of each size, one "
             f"right before every timed job (of that job's call; encode once per size), the "
             f"best kept. Sustained: one pass over the size's whole input, ragged and padded "
             f"in turn on each batch, between the CLI rounds and the default command's (no "
             f"cluster up). Batches are read from disk between the calls; the reading is "
             f"timed apart. Calls: encode `tok.encode(arr, num_threads=0)`, ragged `tok(arr, "
             f"max_length={MAX_LENGTH}, stride={STRIDE}, padding=False)`, padded `tok(arr, "
             f"max_length={MAX_LENGTH}, stride={STRIDE})`.\n")
    L.append("| kernel | encode MB/s | windows ragged MB/s | windows padded MB/s |")
    L.append("|---|---|---|---|")
    if cold:
        L.append(f"| cold ({cold['ragged']['bytes'] / MB:,.0f} MB; first batch ragged "
                 f"{cold['ragged']['batch_seconds'][0]:.2f} s) | "
                 + " | ".join(fmt(cold[m]["mbps"]) for m in KERNEL_CALLS) + " |")
    for s, z in sized.items():
        k, sus = z["kernel"], z["sustained"]
        L.append(f"| burst, at {_gb(s)} (best of {len(z['passes']['ragged'])} ragged and "
                 f"{len(z['passes']['padded'])} padded short passes over "
                 f"{k['ragged']['bytes'] / MB:,.0f} MB) | "
                 + " | ".join(fmt(k[m]["mbps"]) if m in k else "–" for m in KERNEL_CALLS)
                 + " |")
        L.append(f"| sustained, at {_gb(s)} (the whole input, {sus['ragged']['bytes'] / MB:,.0f}"
                 f" MB, in {sus['ragged']['seconds'] + sus['padded']['seconds']:.1f} s; "
                 f"reading {sus['ragged']['read']:.1f} s apart) | "
                 + " | ".join(fmt(sus[m]["mbps"]) if m in sus else "–" for m in KERNEL_CALLS)
                 + " |")
    L.append("")
    for s, z in sized.items():
        L.append(f"Short passes at {_gb(s)}, MB/s in order: " + "; ".join(
            f"{m} " + ", ".join(f"{v:.1f}" for v in z["passes"][m])
            for m in KERNEL_CALLS if m in z["passes"]) + ".")
    L.append("")
    # the jobs by size
    L.append("## Batch jobs by size\n")
    L.append("`daskwp tokenize IN OUT --max-length 128 --stride 32 --padding P "
             f"--partition-size {args.partition_mb:g}MB --n-workers {args.workers} "
             "--threads-per-worker 1 --json` (its own fresh cluster). *tokenize+write*: "
             "`tokenize_seconds` of _summary.json (cluster up); *whole command*: the "
             "command's wall time (interpreter, cluster start, checks). Ratios, same "
             "padding: to the burst and the sustained kernel at the same size, to the short "
             "pass right before the job in each round (job MB/s / pass MB/s) and to the cold "
             "kernel. CPU: the "
             "parts' `cpu_seconds` (_summary.json) of the write stage over the tokenize "
             "stage. The *default* rows pass no cluster option (the job decides where it "
             "runs: in-process on threads up to `in_process_max_bytes`; *ran on* says "
             "which), the command a user types.\n")
    L.append("| size | row | MB/s | / burst kernel | / sustained kernel | / the pass before "
             "it, each round | / cold kernel | write / tokenize CPU | output MB | peak RSS: "
             "driver; workers |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")

    def job_row(s, name, r, key, wall=False, with_cpu=True):
        mbps = r["mbps_wall"] if wall else r["mbps"]
        cpu = _cpu_ratio(r) if with_cpu else None
        L.append(f"| {_gb(s)} | {name} | {fmt(mbps)} | "
                 + " | ".join(_kernel_ratios(sized, cold, s, key, mbps, r, wall)) + " | "
                 f"{fmt(cpu, 2)} | {r.get('out_bytes', 0) / MB:,.0f} | "
                 f"{fmt(r.get('driver_rss', 0) / 2**20, 0)} MiB; {_rss_text(r.get('rss'))} |")

    for s, z in sized.items():
        for pad, r in z["cli"].items():
            key = _pad_name(pad)
            job_row(s, f"CLI {key}, tokenize+write", r, key)
            job_row(s, f"CLI {key}, whole command", r, key, True, False)
        if z.get("default"):
            r = z["default"]
            ran = (r["summary"].get("run") or {}).get("mode", "?")   # threads: in-process
            job_row(s, f"CLI ragged, default (no cluster option; ran on: {ran}), "
                       f"tokenize+write", r, "ragged")
            job_row(s, f"CLI ragged, default (no cluster option; ran on: {ran}), whole "
                       f"command ({r['wall']:.2f} s)", r, "ragged", True, False)
    L.append("")
    if extras:
        _report_extras(L, args, extras, sized, cold)
    if soak:
        _report_soak(L, args, soak)
    _report_goals(L, args, cold, sized, extras, soak)
    _report_stages(L, sized)
    if cg:
        L.append("## Instructions per stage (callgrind, one partition, one thread)\n")
        L.append("`valgrind --tool=callgrind` of `jobs.parts.write_partition` on the first "
                 f"{args.callgrind_mb:g} MB of the input (inclusive instruction counts of each "
                 "stage's native entry point, per input byte; stable on a noisy machine).\n")
        L.append("| stage | " + " | ".join(cg) + " |")
        L.append("|---|" + "---|" * len(cg))
        for s, _ in CALLGRIND_STAGES:
            L.append(f"| {s} | " + " | ".join(
                f"{v['costs'].get(s, 0) / (v['mb'] * MB):.1f}" for v in cg.values()) + " |")
        L.append("")
    if extras and extras.get("nano"):
        L.append("nanotoken script (run as a subprocess; its time is measured inside, after "
                 "the imports):\n")
        L.append("```python" + NANOTOKEN_SCRIPT + "```\n")
    return "\n".join(L)


def _report_extras(L, args, ex, sized, cold):
    s = ex["size"]
    L.append(f"## At {_gb(s)}: the accessor, a running cluster, reading back, nanotoken\n")
    L.append(f"On a running {args.workers}-worker LocalCluster (up and warm: daskwp imported, "
             f"tokenizer loaded; an idle worker's RSS {ex['idle_rss'] / 2**20:,.0f} MiB, the "
             f"growth in brackets). The accessor reads {ex['n_parquet']} Parquet files.\n")
    L.append("| row | what | MB/s | / burst kernel | / sustained kernel | / the pass before "
             "it, each round | / cold kernel | write / tokenize CPU | output MB | peak RSS per "
             "worker (growth) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    rows = [(f"CLI {_pad_name(p)} on a running cluster (tokenize+write)",
             f"`{r['command']}`; `tokenize_seconds`", p, r, fmt(_cpu_ratio(r), 2), "")
            for p, r in ex["cli_running"].items()]
    rows += [(f"accessor to_parquet {_pad_name(p)}", f"`{r['command']}`", p, r,
              fmt(_cpu_ratio(r), 2),
              _rss_text(r["rss"], ex["idle_rss"])) for p, r in ex["acc"].items()]
    for name, what, pad, r, cpu, rss in rows:
        L.append(f"| {name} | {what} | {fmt(r['mbps'])} | "
                 + " | ".join(_kernel_ratios(sized, cold, s, _pad_name(pad), r["mbps"], r))
                 + f" | {cpu} | {r['out_bytes'] / MB:,.0f} | {rss} |")
    for pad, b in ex["back"].items():
        L.append(f"| read_tokenized, {_pad_name(pad)} parts | `{b['command']}` on the CLI's "
                 f"--padding {pad} output (padded int32 tensors, pad_id {b['pad_id']}); first "
                 f"round {fmt(b['first'])} | {fmt(b['mbps'])} ({b['rows_per_s'] / 1e6:.2f} M "
                 f"rows/s) | | | | | | | |")
    nano = ex.get("nano")
    if nano:
        L.append(f"| nanotoken + pyarrow | {nano['command']}; time inside the script | "
                 f"{fmt(nano['mbps'])} | (no windows) | | | | | {nano['out_bytes'] / MB:,.0f} "
                 f"| |")
    else:
        L.append("| nanotoken + pyarrow | not installed (`pip install nanotoken==0.1.0`) | – | "
                 "| | | | | | |")
    L.append("")


def _report_soak(L, args, soak):
    L.append("## The soak: a worker killed half way\n")
    L.append(f"`daskwp tokenize` ragged on its own {args.workers}-worker cluster; when "
             f"{args.soak_kill_at:.0%} of the parts exist, one worker process (the nanny's "
             "spawned child, not the nanny) gets SIGKILL; the nanny starts another. Peak RSS "
             "is each process's VmHWM (/proc/PID/status), polled every 20 ms.\n")
    L.append("| run | MB/s tokenize+write (whole command) | parts | killed | peak RSS driver "
             "| peak RSS workers |")
    L.append("|---|---|---|---|---|---|")
    for name, r in (("reference", soak["ref"]), ("soak", soak["main"])):
        k = r["killed"]
        kill = (f"pid {k['pid']} at {k['seconds']:.1f} s, {k['parts_done']} of "
                f"{k['n_parts']} parts written" if k else "no (the job ended first)")
        speed = f"failed ({r['failed']})" if r.get("failed") else \
            f"{fmt(r['mbps'])} ({fmt(r['mbps_wall'])})"
        parts = "–" if r.get("failed") else r["summary"]["partitions"]
        L.append(f"| {name}, {_gb(r['size_gb'])} | {speed} | {parts} | {kill} | "
                 f"{r['driver_rss'] / 2**20:,.0f} MiB | {_rss_text(r['rss'])} |")
    L.append("")


def _report_goals(L, args, cold, sized, ex, soak):
    L.append("## Against the goals (ratios within this run)\n")
    L.append("Kernel goals are met or not on the burst kernel at the same size (the best "
             "short warm pass: the stricter figure, the headline as before); beside it, the "
             "ratio to the sustained kernel (as long as the job runs), to the short pass "
             "right before the job in each round, and to the cold kernel.\n")
    L.append("| goal | figure | met |")
    L.append("|---|---|---|")

    def goal(name, value, ok, figure=None):
        if value is None:
            L.append(f"| {name} | – | – |")
        else:
            L.append(f"| {name} | {figure or f'{value:.2f}x'} | {'yes' if ok else 'no'} |")

    def vs_kernel(name, s, r, key, target):
        if r is None or s not in sized:
            return goal(f"{name} (target >= {target:.2f}x the burst kernel)", None, False)
        mbps = r["mbps"]
        w = mbps / sized[s]["kernel"][key]["mbps"]
        _, sus, rounds, c = _kernel_ratios(sized, cold, s, key, mbps, r)
        goal(f"{name} (target >= {target:.2f}x the burst kernel)", w, w >= target,
             f"{w:.2f}x the burst kernel ({mbps:.1f} MB/s); {sus} the sustained kernel; "
             f"each round to the pass before it: {rounds}"
             + (f"; {c} the cold kernel" if cold else ""))

    g = ex["size"] if ex else max(sized)
    z = sized.get(g, {})
    d = z.get("default")
    if d:
        ran = (d["summary"].get("run") or {}).get("mode", "?")
        vs_kernel(f"{_gb(g)} job ragged, default command (no cluster option; ran on: {ran}),"
                  f" tokenize+write", g, d, "ragged", 0.6)
    for pad, target in (("do_not_pad", 0.6), ("max_length", 0.45)):
        r = z.get("cli", {}).get(pad)
        vs_kernel(f"{_gb(g)} job {_pad_name(pad)} on its own {args.workers}-worker cluster, "
                  f"tokenize+write", g, r, _pad_name(pad), target)
    if ex:
        for pad, target in ((False, 0.6), ("max_length", 0.45)):
            r = ex["acc"].get(pad)
            vs_kernel(f"{_gb(g)} to_parquet {_pad_name(pad)}", g, r, _pad_name(pad), target)
        for pad, target in (("do_not_pad", 0.6), ("max_length", 0.45)):
            r = ex["cli_running"].get(pad)
            vs_kernel(f"{_gb(g)} job on a running cluster {_pad_name(pad)}", g, r,
                      _pad_name(pad), target)
    for s in sized:
        rows = [(f"job {_pad_name(pad)}", r) for pad, r in sized[s]["cli"].items()]
        if sized[s].get("default"):
            rows.append(("job ragged, default command", sized[s]["default"]))
        for name, r in rows:
            v = _cpu_ratio(r)
            goal(f"{_gb(s)} {name}: write CPU / tokenize CPU (target <= 0.50)",
                 v, v is not None and v <= 0.5, v is not None and f"{v:.2f}")
    if ex:
        for name, d in (("job on a running cluster", ex["cli_running"]),
                        ("to_parquet", ex["acc"])):
            for pad, r in d.items():
                v = _cpu_ratio(r)
                goal(f"{_gb(g)} {name} {_pad_name(pad)}: write CPU / tokenize CPU (target "
                     f"<= 0.50)", v, v is not None and v <= 0.5, v is not None and f"{v:.2f}")
    small = min(sized) if sized else None
    d = sized[small].get("default") if small is not None else None
    if d:
        kw = sized[small]["kernel"]["ragged"]
        limit = d["bytes_in"] / MB / kw["mbps"] + 1.5
        sus_t = (f"; sustained kernel's "
                 f"{d['bytes_in'] / MB / sized[small]['sustained']['ragged']['mbps']:.2f} s")
        cold_t = f"; cold kernel's {d['bytes_in'] / MB / cold['ragged']['mbps']:.2f} s" \
            if cold else ""
        goal(f"{_gb(small)} job's whole command, default (no cluster option), ragged "
             f"(target <= the burst kernel's time + 1.5 s)", d["wall"], d["wall"] <= limit,
             f"{d['wall']:.2f} s against {limit:.2f} s (burst kernel "
             f"{limit - 1.5:.2f} s{sus_t}{cold_t})")
    if ex:
        nano = ex.get("nano")
        rag = [d.get(p) for d, p in ((z.get("cli", {}), "do_not_pad"),
                                      (ex["acc"], False), (ex["cli_running"], "do_not_pad"))]
        if nano:
            for name, r in zip(("job", "to_parquet", "job on a running cluster"), rag):
                v = r and r["mbps"] / nano["mbps"]
                goal(f"{_gb(g)} {name} ragged / nanotoken script (target >= 2.00x)", v,
                     v is not None and v >= 2)
        writes = [r["mbps"] for r in rag if r]
        for pad, b in ex["back"].items():
            v = writes and b["mbps"] / max(writes)
            goal(f"read_tokenized of {_pad_name(pad)} parts / the fastest write "
                 f"(target >= 1.00x)", v or None, bool(v) and v >= 1)
        for mode, o in (ex.get("ovh") or {}).items():
            L.append(f"| Dask overhead per partition, {mode} (target <= 5 ms) | "
                     f"{o['overhead_ms']:.2f} ms over dask alone ({o['daskwp_ms']:.2f} ms in "
                     f"all, dask's own `map_partitions(len).max()` {o['dask_ms']:.2f} ms) | "
                     f"{'yes' if o['overhead_ms'] <= 5 else 'no'} |")
        graph = ex.get("graph")
        if graph:
            L.append(f"| graph of a {graph['partitions']:,}-partition job built (target < 2 s)"
                     f" | {graph['job_seconds']:.2f} s ({graph['job_tasks']:,} tasks; the "
                     f"accessor's `to_frame()` graph from pandas "
                     f"{graph['accessor_seconds']:.2f} s, {graph['accessor_tasks']:,} tasks, "
                     f"dask's own `from_pandas(...).map_partitions(len)` "
                     f"{graph['dask_seconds']:.2f} s) | "
                     f"{'yes' if graph['job_seconds'] < 2 else 'no'} |")
        part = min(args.partition_mb * MB, ex["bytes"])
        rows = [(f"{_gb(g)} job {_pad_name(p)} on a running cluster", p, r)
                for p, r in ex["cli_running"].items()]
        rows += [(f"{_gb(g)} to_parquet {_pad_name(p)}", p, r) for p, r in ex["acc"].items()]
        for name, pad, r in rows:
            if not r.get("rss"):
                continue
            outb = part * sized[g]["out_per_byte"][_pad_name(pad)]
            limit = 2 * (part + outb)
            peak = max(p for _, p in r["rss"])
            growth = peak - ex["idle_rss"]
            goal(f"peak RSS growth per worker, {name} (target <= 2 x (partition input "
                 f"{part / 2**20:,.0f} MiB + its output arrays {outb / 2**20:,.0f} MiB) = "
                 f"{limit / 2**20:,.0f} MiB)", growth, growth <= limit,
                 f"{growth / 2**20:,.0f} MiB (peak RSS {peak / 2**20:,.0f} MiB)")
    if soak:
        _soak_goals(goal, sized, g, soak)
    L.append("")


def _soak_goals(goal, sized, g, soak):
    m, ref = soak["main"], soak["ref"]
    sg = _gb(m["size_gb"])
    k = m["killed"]
    goal(f"soak {sg}: a worker killed half way", 1, bool(k),
         f"pid {k['pid']} at {k['parts_done']} of {k['n_parts']} parts" if k
         else "the job ended before half the parts existed")
    if m.get("failed"):
        goal(f"soak {sg}: completes", 1, False, f"failed: {m['failed']}")
        return
    goal(f"soak {sg}: completes", 1, m["summary"]["partitions_written"] ==
         m["summary"]["partitions"], f"{m['summary']['partitions_written']} of "
         f"{m['summary']['partitions']} parts written, rejected rows "
         f"{m['summary'].get('rejected_rows', 0)}")
    c = soak["checks"]
    goal(f"soak {sg}: every logID present exactly once", 1, c["logids"][0], c["logids"][1])
    goal(f"soak {sg}: output equals single-machine tokenization on a sample", 1,
         c["sample"][0], c["sample"][1])
    if ref.get("failed"):
        goal(f"soak {sg}: peak RSS against the {_gb(ref['size_gb'])} reference", 1, False,
             f"the reference failed: {ref['failed']}")
    else:
        d = m["driver_rss"] / max(1, ref["driver_rss"])
        goal(f"soak {sg}: the driver's peak RSS within 10% of its peak at "
             f"{_gb(ref['size_gb'])}", d, d <= 1.1,
             f"{m['driver_rss'] / 2**20:,.0f} MiB against {ref['driver_rss'] / 2**20:,.0f} "
             f"MiB ({d:.2f}x)")
        if m["rss"] and ref["rss"]:
            pm, pr = m["rss"][0][1], ref["rss"][0][1]
            goal(f"soak {sg}: each worker's peak RSS within 10% of the workers' peak at "
                 f"{_gb(ref['size_gb'])}", pm / pr, pm <= 1.1 * pr,
                 f"highest {pm / 2**20:,.0f} MiB against {pr / 2**20:,.0f} MiB "
                 f"({pm / pr:.2f}x; all: {_rss_text(m['rss'])})")
    base = sized.get(g, {}).get("cli", {}).get("do_not_pad")
    v = base and m["mbps"] / base["mbps"]
    goal(f"soak {sg}: throughput within 10% of the {_gb(g)} job's (tokenize+write, its best "
         f"round)", v, v is not None and v >= 0.9, v and f"{m['mbps']:.1f} against "
         f"{base['mbps']:.1f} MB/s ({v:.2f}x)")


def _report_stages(L, sized):
    L.append("## Where the time goes: CPU seconds per stage of the job's parts\n")
    L.append("Summed over the workers' threads (`_summary.json` `cpu_seconds`; the writer "
             "thread's encode+compress overlaps the next piece's tokenization). The kernel's "
             "CPU seconds over the same input are the reference: its sustained pass's (the "
             "same input, measured), and its best burst pass's scaled to the input.\n")
    cols = [(s, p, r) for s, z in sized.items() for p, r in z["cli"].items()]
    L.append("| stage | " + " | ".join(f"{_gb(s)} {_pad_name(p)}" for s, p, _ in cols) + " |")
    L.append("|---|" + "---|" * len(cols))
    for st in ("read", "tokenize", "arrow", "write", "finish"):
        cells = []
        for _, _, r in cols:
            c = r["summary"].get("cpu_seconds", {})
            tot = sum(c.values()) or 1
            cells.append(f"{c.get(st, 0):.2f} s ({100 * c.get(st, 0) / tot:.0f}%)")
        L.append(f"| {st} | " + " | ".join(cells) + " |")
    cells = []
    for s, p, r in cols:
        c = r["summary"].get("cpu_seconds", {})
        k = sized[s]["kernel"][_pad_name(p)]
        kc = k["cpu"] * r["bytes_in"] / k["bytes"]
        ks = sized[s]["sustained"][_pad_name(p)]["cpu"]
        cells.append(f"{sum(c.values()):.2f} s = {sum(c.values()) / ks:.2f}x the sustained "
                     f"kernel's {ks:.2f} s ({sum(c.values()) / kc:.2f}x the burst kernel's "
                     f"{kc:.2f} s)")
    L.append("| all | " + " | ".join(cells) + " |")
    L.append("")
    L.append("Stages: *read* = the partition's bytes read and split in place with the invalid "
             "UTF-8 counted (one native pass); *tokenize* = the kernel's encode and window "
             "fill; *arrow* = the Arrow table from its buffers, statistics; *write* = Parquet "
             "pages (daskwp's own writer, `frames/parquet_writer.py`) and their compression "
             "(writer thread); *finish* = footer, checksum, fsync, rename.\n")


# -- main -----------------------------------------------------------------------------------

def _sizes(text: str) -> list[float]:
    try:
        sizes = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes-gb takes GB figures separated by commas, "
                                         f"got {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"--sizes-gb needs sizes above 0, got {text!r}")
    return sorted(set(sizes))


def _keep(d: dict, key, r: dict, kernel_mbps: float, faster) -> None:
    """``d[key]``: the fastest of a row's rounds (``faster(new, old)``), with every round's
    (MB/s, whole-command MB/s, the short kernel pass just before it) under ``rounds``."""
    rounds = d[key]["rounds"] if key in d else []
    rounds.append({"mbps": r["mbps"], "mbps_wall": r.get("mbps_wall"), "kernel": kernel_mbps})
    if key not in d or faster(r, d[key]):
        d[key] = r
    d[key]["rounds"] = rounds


def _higher_mbps(new: dict, old: dict) -> bool:
    return new["mbps"] > old["mbps"]


def run_size(args, base, tmp: Path, s: float, tok, cold_needed: bool) -> tuple:
    """The rows of one size: input; rounds of (a short kernel pass, CLI ragged, a short
    pass, CLI padded[, read back]); the sustained kernel pass; rounds of (a short pass, the
    default command); the extras at ``--extras-gb``. Every short pass's figure joins the
    size's burst kernel (the best of them) and is the pass before the job after it."""
    ensure_disk(tmp, phase_disk(s, s == args.extras_gb), f"the {s:g} GB rows")
    log(f"{s:g} GB: writing the input")
    inp = write_text(base, int(s * GB), tmp / f"in-{s:g}.txt")
    extra = s == args.extras_gb
    z = {"bytes": inp["bytes"], "lines": inp["lines"], "kernel": {}, "passes": {}, "cli": {}}
    back = {}
    cold = None
    if cold_needed and (inp["bytes"] >= args.cold_batches * args.partition_mb * MB
                        or s == max(args.sizes_gb)):
        log(f"{s:g} GB: the cold kernel ({args.cold_batches} batches, fresh processes)")
        cold = bench_kernel_cold(inp, args.cold_batches, args.partition_mb)
    z["out_per_byte"] = kernel_out_per_byte(tok, inp, args.partition_mb)   # warms it too
    sample = int(min(s * GB, args.kernel_mb * MB))

    def short_pass(key: str, what: str, also=()) -> float:
        """A short (burst) pass of ``key``'s call (and ``also``'s) on the first
        --kernel-mb MB, right before ``what``; its MB/s."""
        k = bench_kernel(tok, inp, sample, args.partition_mb, (*also, key))
        for name, v in k.items():
            z["passes"].setdefault(name, []).append(v["mbps"])
            if name not in z["kernel"] or v["mbps"] > z["kernel"][name]["mbps"]:
                z["kernel"][name] = v
        log(f"{s:g} GB: kernel {key} {k[key]['mbps']:.1f} MB/s, before {what}")
        return k[key]["mbps"]

    for rnd in range(args.rounds):
        for pad in ("do_not_pad", "max_length"):
            key = _pad_name(pad)
            # encode (no job uses it; its figure for the table) once per size
            k = short_pass(key, f"CLI --padding {pad}",
                           ("encode",) if rnd == 0 and key == "ragged" else ())
            log(f"{s:g} GB, round {rnd + 1}/{args.rounds}: CLI --padding {pad}")
            out = tmp / f"cli-{pad}"
            shutil.rmtree(out, ignore_errors=True)
            r = run_cli(inp, out, pad, args.partition_mb, args.workers)
            _keep(z["cli"], pad, r, k, _higher_mbps)
        for pad in ("do_not_pad", "max_length"):
            if extra:
                # the first round's read is the process's first use of that much memory:
                # its figure is kept too
                log(f"{s:g} GB, round {rnd + 1}/{args.rounds}: read_tokenized of {pad} parts")
                r = run_read_back(tmp / f"cli-{pad}", inp)
                r["first"] = back[pad]["first"] if pad in back else r["mbps"]
                if pad not in back or r["mbps"] > back[pad]["mbps"]:
                    back[pad] = r
            shutil.rmtree(tmp / f"cli-{pad}", ignore_errors=True)
    # the kernel as long as a job runs: the whole input, both window calls in turn on each
    # batch, no cluster up (this VM runs the same work ~14% slower after ~10 s of load)
    log(f"{s:g} GB: the sustained kernel (the whole input)")
    z["sustained"] = bench_kernel(tok, inp, None, args.partition_mb)
    log(f"{s:g} GB: sustained kernel " + ", ".join(
        f"{n} {v['mbps']:.1f} MB/s" for n, v in z["sustained"].items()))
    for rnd in range(args.rounds):   # what a user runs: the job decides where it runs
        k = short_pass("ragged", "the CLI without cluster options")
        log(f"{s:g} GB, round {rnd + 1}/{args.rounds}: CLI without cluster options")
        out = tmp / "cli-default"
        shutil.rmtree(out, ignore_errors=True)
        r = run_cli(inp, out, "do_not_pad", args.partition_mb, None)
        _keep(z, "default", r, k, lambda new, old: new["wall"] < old["wall"])
        shutil.rmtree(out, ignore_errors=True)
    ex = run_extras(args, inp, tmp, s, back, short_pass) if extra else None
    inp["text"].unlink()
    return z, ex, cold


def run_extras(args, inp: dict, tmp: Path, s: float, back: dict, short_pass) -> dict:
    log(f"{s:g} GB: Parquet input for the accessor")
    n_parquet = write_parquet(inp, tmp / "parquet", int(args.partition_mb * MB))
    inp = dict(inp, parquet=tmp / "parquet")
    log(f"{s:g} GB: nanotoken")
    nano = run_nanotoken(inp, tmp / "nanotoken.parquet",
                         args.data / "vocab" / "bert-base-uncased" / "vocab.txt")
    (tmp / "nanotoken.parquet").unlink(missing_ok=True)
    from distributed import Client, LocalCluster
    import daskwp  # noqa: F401  (the accessor)
    import psutil
    acc, cli_running = {}, {}
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        warm_workers(client, tmp)
        idle = max(client.run(lambda: psutil.Process().memory_info().rss).values())
        for rnd in range(args.rounds):
            for pad in (False, "max_length"):
                k = short_pass(_pad_name(pad), f"accessor to_parquet padding={pad!r}")
                log(f"{s:g} GB, round {rnd + 1}/{args.rounds}: accessor to_parquet "
                    f"padding={pad!r}")
                out = tmp / "acc"
                shutil.rmtree(out, ignore_errors=True)
                r = run_accessor(client, cluster, inp, out, pad)
                _keep(acc, pad, r, k, _higher_mbps)
                shutil.rmtree(out, ignore_errors=True)
            for pad in ("do_not_pad", "max_length"):
                k = short_pass(_pad_name(pad), f"CLI --scheduler --padding {pad}")
                log(f"{s:g} GB, round {rnd + 1}/{args.rounds}: CLI --scheduler --padding {pad}")
                out = tmp / "cli-running"
                shutil.rmtree(out, ignore_errors=True)
                r = run_cli(inp, out, pad, args.partition_mb, args.workers,
                            scheduler=cluster.scheduler_address)
                _keep(cli_running, pad, r, k, _higher_mbps)
                shutil.rmtree(out, ignore_errors=True)
        ovh = None
        if args.overhead_partitions:
            log(f"overhead: {args.overhead_partitions} partitions of 10 lines")
            ovh = bench_overhead(client, args.overhead_partitions, 2)
    shutil.rmtree(tmp / "parquet", ignore_errors=True)
    graph = None
    if args.graph_partitions:
        log(f"graph of {args.graph_partitions} partitions")
        graph = bench_graph(args.graph_partitions, tmp)
    cg = None
    if args.callgrind_mb:
        log(f"callgrind on {args.callgrind_mb:g} MB")
        cg = bench_callgrind(inp, args.callgrind_mb, tmp)
    return {"size": s, "bytes": inp["bytes"], "acc": acc, "cli_running": cli_running,
            "back": back, "nano": nano, "ovh": ovh, "graph": graph, "cg": cg,
            "idle_rss": idle, "n_parquet": n_parquet}


def run_soaks(args, base, tmp: Path, tok) -> dict:
    runs = {}
    for name, s in (("ref", args.soak_ref_gb), ("main", args.soak_gb)):
        ensure_disk(tmp, s * GB * (1 + OUT_PER_INPUT) + 0.2 * GB, f"the {s:g} GB soak")
        log(f"soak {s:g} GB: writing the input")
        inp = write_text(base, int(s * GB), tmp / f"soak-{s:g}.txt")
        out = tmp / f"soak-{name}"
        log(f"soak {s:g} GB: daskwp tokenize, a worker killed at "
            f"{args.soak_kill_at:.0%} of the parts")
        r = run_soak(inp, out, args.partition_mb, args.workers, args.soak_kill_at)
        r["size_gb"] = s
        if name == "main" and not r.get("failed"):
            log(f"soak {s:g} GB: checks")
            runs["checks"] = soak_checks(r, inp, out, tok)
        runs[name] = r
        shutil.rmtree(out, ignore_errors=True)
        inp["text"].unlink()
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-gb", type=_sizes, default=[0.3, 3.0, 10.0],
                    help="input sizes of the job rows, GB, comma-separated (default 0.3,3,10)")
    ap.add_argument("--extras-gb", type=float, default=3.0,
                    help="the size (one of --sizes-gb) of the accessor, running-cluster, "
                         "read-back, nanotoken, overhead and graph rows and of the goals; "
                         "0: none")
    ap.add_argument("--soak-gb", type=float, default=10.0,
                    help="the soak's size, GB (a worker killed half way); 0: no soak")
    ap.add_argument("--soak-ref-gb", type=float, default=1.0,
                    help="the size of the soak's reference run (peak RSS), GB")
    ap.add_argument("--soak-kill-at", type=float, default=0.5,
                    help="kill a worker when this fraction of the parts exists")
    ap.add_argument("--partition-mb", type=float, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kernel-mb", type=float, default=1000,
                    help="the short (burst) kernel passes' sample of each size, MB (the "
                         "sustained pass takes the whole input)")
    ap.add_argument("--cold-batches", type=int, default=2,
                    help="batches the cold kernel (a fresh process) tokenizes")
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
    ap.add_argument("--plan", action="store_true",
                    help="print what a run does, the disk it needs and roughly how long it "
                         "takes, then stop")
    ap.add_argument("--cold-kernel", choices=list(KERNEL_CALLS), help=argparse.SUPPRESS)
    ap.add_argument("--cold-input", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cold_kernel:
        cold_kernel_main(args.cold_input, args.cold_kernel, args.cold_batches,
                         args.partition_mb)
        return 0
    if args.extras_gb and args.extras_gb not in args.sizes_gb:
        ap.error(f"--extras-gb {args.extras_gb:g} is not one of --sizes-gb "
                 f"{','.join(f'{s:g}' for s in args.sizes_gb)}")
    if not 0 < args.soak_kill_at < 1:
        ap.error(f"--soak-kill-at is a fraction of the parts, in (0, 1); got "
                 f"{args.soak_kill_at:g}")
    tmp_root = args.tmp or Path(tempfile.gettempdir())
    text = plan_text(args, tmp_root)
    print(text, file=sys.stderr, flush=True)
    if args.plan:
        return 0
    ensure_disk(tmp_root, plan(args)["disk"], "this run")
    t0 = time.perf_counter()
    info = machine_info()
    # the modules' bytecode, as an installed wheel has it (an editable install under
    # PYTHONDONTWRITEBYTECODE=1 would compile ~80 modules at every command's start)
    import compileall
    info["compiled"] = compileall.compile_dir(str(ROOT / "daskwp"), quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="daskwp-pipeline-", dir=args.tmp))
    try:
        import daskwp
        tok = daskwp.WordPieceTokenizer()
        base = corpus_base(args.data)
        sized, extras, cold = {}, None, None
        for s in args.sizes_gb:
            z, ex, c = run_size(args, base, tmp, s, tok, cold is None)
            sized[s] = z
            extras = ex or extras
            cold = c or cold
        soak = run_soaks(args, base, tmp, tok) if args.soak_gb else None
        text = report(args, info, cold, sized, extras, soak, extras and extras["cg"],
                      time.perf_counter() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
