#!/usr/bin/env python
"""CPU throughput benchmark: daskwp vs HuggingFace tokenizers (vs TF Text when installed).

One command, same inputs for every tokenizer::

    python benchmarks/cpu_bench.py [--size-mb 20] [--repeats 5] \
        [--out benchmarks/results/cpu_bench.md] [--data DIR] [--hf-mb 2] [--no-dask]

Figures are MB/s of input UTF-8 bytes (MB = 10**6 bytes; lines without their newline), the
best (minimum time) of ``--repeats`` runs. See benchmarks/README.md for what each figure means.

Subprocesses: HuggingFace runs in a child process whose environment sets ``RAYON_NUM_THREADS``
before its thread pool starts (1 for the single-core figures, unset for all cores); the
peak-memory figure runs in a fresh child so that earlier peaks do not hide it. The script
re-invokes itself for both (``--_worker``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import math
import os
import pickle
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
MB = 1e6

MULTI = "bert-base-multilingual-cased"
UNCASED = "bert-base-uncased"

# name, files (relative to corpus/, globs allowed), vocabulary, lowercase
CORPORA = [
    ("English (UD EWT)", ["en_ewt.txt"], UNCASED, True),
    ("English books", ["en_book_moby_dick.txt", "en_book_pride_and_prejudice.txt"], UNCASED, True),
    ("Latin (de es fr tr vi)", [f"multi/{x}.txt" for x in ("de", "es", "fr", "tr", "vi")], MULTI,
     False),
    ("Cyrillic+Greek (ru el)", ["multi/ru.txt", "multi/el.txt"], MULTI, False),
    ("Arabic+Hebrew (ar he)", ["multi/ar.txt", "multi/he.txt"], MULTI, False),
    ("Devanagari+Thai (hi th)", ["multi/hi.txt", "multi/th.txt"], MULTI, False),
    ("CJK (zh ja ko)", ["multi/zh.txt", "multi/ja.txt", "multi/ko.txt"], MULTI, False),
    ("Logs (loghub *.log)", ["logs/*.log"], UNCASED, True),
]

WIN_MAX_LENGTH, WIN_STRIDE = 128, 32


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------

def default_data_dir() -> Path:
    env = os.environ.get("DASKWP_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def read_lines(data: Path, patterns) -> list[str]:
    """Non-empty lines (no newline, no trailing CR) of the files, in order."""
    lines: list[str] = []
    for pat in patterns:
        files = sorted((data / "corpus").glob(pat))
        if not files:
            raise FileNotFoundError(f"no file matches {data / 'corpus' / pat}")
        for f in files:
            for line in f.read_text(encoding="utf-8").split("\n"):
                line = line.rstrip("\r")
                if line:
                    lines.append(line)
    return lines


def utf8_len(lines) -> int:
    return sum(len(s.encode("utf-8")) for s in lines)


def repeat_to(base: list[str], target_bytes: int) -> tuple[list[str], int]:
    """``base`` repeated (then a prefix of it) until it holds at least ``target_bytes``."""
    sizes = [len(s.encode("utf-8")) for s in base]
    total = sum(sizes)
    k = target_bytes // total
    out, got = base * k, k * total
    for s, n in zip(base, sizes):
        if got >= target_bytes:
            break
        out.append(s)
        got += n
    return out, got


def arrow(lines) -> pa.Array:
    return pa.array(lines, type=pa.large_string())


def data_bytes(arr: pa.Array) -> np.ndarray:
    """The UTF-8 bytes of a large_string array (zero-copy view)."""
    off = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    return np.frombuffer(arr.buffers()[2], dtype=np.uint8)[off[0]:off[-1]]


# ---------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------

def measure(fn, repeats: int) -> dict:
    """``repeats`` calls of ``fn`` (each result dropped before the next call): the minimum
    wall time, the minimum CPU time of this process (all its threads), and the CPU share
    (CPU seconds per wall second) of the fastest call, which shows how much of the cores
    this process actually got on a shared machine."""
    wall, cpu, share = math.inf, math.inf, float("nan")
    for _ in range(max(1, repeats)):
        gc.collect()
        c = time.process_time()
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        dc = time.process_time() - c
        del out
        if dt < wall:
            wall, share = dt, dc / dt
        cpu = min(cpu, dc)
    return {"wall": wall, "cpu": cpu, "share": share}


def best_time(fn, repeats: int) -> float:
    """Minimum wall time of ``repeats`` calls."""
    return measure(fn, repeats)["wall"]


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / MB / seconds if seconds > 0 else float("nan")


def ceiling_fn():
    """The native one-pass-over-every-byte function, or a numpy stand-in; and its label."""
    from daskwp import _ext
    for name in ("ceiling_pass", "byte_pass"):
        fn = getattr(_ext, name, None)
        if fn is not None:
            try:
                fn(np.zeros(16, dtype=np.uint8))
                return fn, f"daskwp._ext.{name}"
            except Exception:  # unexpected signature: fall back
                pass

    def numpy_pass(data):
        buf = np.empty_like(data)
        np.bitwise_or(data, 0x20, out=buf)
        return int(buf[len(buf) // 2]) if len(buf) else 0
    return numpy_pass, "numpy bitwise_or (no native ceiling_pass)"


# ---------------------------------------------------------------------------------------
# child processes
# ---------------------------------------------------------------------------------------

def run_worker(kind: str, job: dict, tmp: Path, env_extra: dict | None = None,
               env_remove=(), timeout: float = 900) -> dict:
    jp, op = tmp / f"{kind}-{time.monotonic_ns()}.job", tmp / f"{kind}-{time.monotonic_ns()}.out"
    job = dict(job, out=str(op))
    jp.write_bytes(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
    env = {k: v for k, v in os.environ.items() if k not in env_remove}
    env.update(env_extra or {})
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_worker", kind, str(jp)],
                   env=env, check=True, timeout=timeout)
    return pickle.loads(op.read_bytes())


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def worker_hf(job: dict) -> dict:
    """HuggingFace BertWordPieceTokenizer.encode_batch timings (+ parity ids)."""
    from tokenizers import BertWordPieceTokenizer
    results = []
    threads0 = _thread_count()
    for item in job["items"]:
        hf = BertWordPieceTokenizer(item["vocab"], lowercase=item["lowercase"])
        lines = item["lines"]
        hf.encode_batch(lines[:2000], add_special_tokens=False)  # starts the rayon pool
        threads = _thread_count() - threads0  # threads the encode started (the rayon pool)
        m = measure(lambda: hf.encode_batch(lines, add_special_tokens=False), item["repeats"])
        res = {"seconds": m["wall"], "cpu": m["cpu"], "share": m["share"], "threads": threads}
        if item.get("parity_lines") is not None:
            encs = hf.encode_batch(item["parity_lines"], add_special_tokens=False)
            lens = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
            ids = np.fromiter((i for e in encs for i in e.ids), dtype=np.int32,
                              count=int(lens.sum()))
            res["ids"] = ids
            res["offsets"] = np.concatenate([[0], np.cumsum(lens)])
            del encs
        results.append(res)
    return {"results": results}


def worker_tf(job: dict) -> dict:
    """TF Text FastBertTokenizer / FastWordpieceTokenizer timings (one thread)."""
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    import tensorflow_text as tft
    results = []
    for item in job["items"]:
        vocab = Path(item["vocab"]).read_text(encoding="utf-8").split("\n")
        vocab = [v.rstrip("\r") for v in vocab]
        while vocab and not vocab[-1]:
            vocab.pop()
        data = tf.constant(item["lines"])
        fbt = tft.FastBertTokenizer(vocab=vocab, token_out_type=tf.int64,
                                    lower_case_nfd_strip_accents=item["lowercase"])
        fwp = tft.FastWordpieceTokenizer(vocab=vocab, token_out_type=tf.int64,
                                         no_pretokenization=False)
        fbt.tokenize(data[:100])
        fwp.tokenize(data[:100])
        results.append({"fbt": best_time(lambda: fbt.tokenize(data), item["repeats"]),
                        "fwp": best_time(lambda: fwp.tokenize(data), item["repeats"])})
    return {"results": results}


def _rss_now() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return -1


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


def worker_mem(job: dict) -> dict:
    """Peak RSS growth of one daskwp encode on an Arrow array loaded from an IPC file.

    ru_maxrss can carry a peak from before this process's own work (at exec Linux folds the
    old address space's high-water mark into it, and the tokenizer's construction has its own
    temporaries), so the kernel's high-water mark (VmHWM) is also reset to the current RSS
    just before encode (``echo 5 > /proc/self/clear_refs``) and read again after it.
    """
    import daskwp
    with pa.OSFile(job["arrow_path"], "rb") as f:
        table = pa.ipc.open_file(f).read_all()
    arr = table.column(0).combine_chunks()
    del table
    tok = daskwp.WordPieceTokenizer(job["vocab"], lowercase=job["lowercase"])
    tok.encode(["warm up the tokenizer"], num_threads=job["threads"])
    gc.collect()
    # Return freed heap to the OS so that encode's allocations show up as RSS growth instead
    # of reusing pages that earlier (now freed) temporaries left resident.
    pa.default_memory_pool().release_unused()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        hwm_reset = True
    except OSError:
        hwm_reset = False
    rss_before = _status_kb("VmRSS")
    hwm_before = _status_kb("VmHWM")
    max_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    enc = tok.encode(arr, num_threads=job["threads"])
    max_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hwm_after = _status_kb("VmHWM")
    return {"maxrss_before": max_before, "maxrss_after": max_after, "rss_before": rss_before,
            "hwm_before": hwm_before, "hwm_after": hwm_after, "hwm_reset": hwm_reset,
            "input_bytes": int(len(data_bytes(arr))), "docs": len(arr),
            "tokens": int(len(enc.token_ids))}


# ---------------------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------------------

def machine_info() -> dict:
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    import daskwp
    try:
        import tokenizers
        tk = tokenizers.__version__
    except ImportError:
        tk = "not installed"
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    return {"model": model, "cores": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "python": platform.python_version(), "tokenizers": tk, "daskwp": daskwp.__version__,
            "numpy": np.__version__, "pyarrow": pa.__version__, "commit": commit,
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "load_start": os.getloadavg()[0], "psi_start": _cpu_pressure()}


def _cpu_pressure() -> str | None:
    """``some avg60`` of /proc/pressure/cpu: % of time some runnable task waited for a CPU."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return dict(kv.split("=") for kv in line.split()[1:])["avg60"]
    except (OSError, KeyError, ValueError):
        pass
    return None


def bench_corpora(args, tmp: Path) -> list[dict]:
    import daskwp
    ceil, ceil_label = ceiling_fn()
    target = int(args.size_mb * MB)
    rows = []
    hf_jobs = []
    for name, files, vocab_name, lowercase in CORPORA:
        vocab = str(args.data / "vocab" / vocab_name / "vocab.txt")
        base = read_lines(args.data, files)
        lines, nbytes = repeat_to(base, target)
        log(f"{name}: {nbytes / MB:.2f} MB, {len(lines)} lines (base {len(base)} lines, "
            f"{utf8_len(base) / MB:.2f} MB)")
        arr = arrow(lines)
        assert len(data_bytes(arr)) == nbytes
        tok = daskwp.WordPieceTokenizer(vocab, lowercase=lowercase)
        tok_w = daskwp.WordPieceTokenizer(vocab, lowercase=lowercase, num_threads=1)
        row = {"name": name, "vocab": vocab_name, "lowercase": lowercase, "bytes": nbytes,
               "docs": len(lines)}

        enc = tok.encode(arr, num_threads=1)
        row["tokens"] = int(len(enc.token_ids))
        row["unk"] = int(np.count_nonzero(enc.token_ids == tok.vocab.unk_id)) \
            if hasattr(tok.vocab, "unk_id") else None
        del enc
        data = data_bytes(arr)
        row["non_ascii"] = float(np.count_nonzero(data >= 0x80)) / max(1, len(data))

        m = measure(lambda: tok.encode(arr, num_threads=1), args.repeats)
        row["enc1"], row["enc1_cpu"], row["enc1_share"] = m["wall"], m["cpu"], m["share"]
        m = measure(lambda: tok.encode(arr, num_threads=0), max(1, args.repeats - 2))
        row["enc_all"], row["enc_all_cpu"], row["enc_all_share"] = m["wall"], m["cpu"], m["share"]
        row["enc1_list"] = best_time(lambda: tok.encode(lines, num_threads=1),
                                     max(1, args.repeats - 2))
        row["win1"] = best_time(lambda: tok_w(arr, max_length=WIN_MAX_LENGTH,
                                              stride=WIN_STRIDE), max(1, args.repeats - 2))
        row["ceiling"] = best_time(lambda: ceil(data), args.repeats)
        row["ceiling_label"] = ceil_label

        # the HF slice: the first --hf-mb MB of the same lines (all of them with --hf-mb 0)
        if args.hf_mb and args.hf_mb * MB < nbytes:
            hf_lines, _ = repeat_to(lines, int(args.hf_mb * MB))
        else:
            hf_lines = lines
        hf_arr = arrow(hf_lines)
        row["hf_bytes"] = len(data_bytes(hf_arr))
        m = measure(lambda: tok.encode(hf_arr, num_threads=1), max(1, args.repeats - 2))
        row["enc1_slice"], row["enc1_slice_cpu"] = m["wall"], m["cpu"]
        row["parity_lines"] = len(base)
        row["_base"] = base
        row["_tok"] = tok
        hf_jobs.append({"vocab": vocab, "lowercase": lowercase, "lines": hf_lines,
                        "repeats": args.hf_repeats, "parity_lines": base})
        rows.append(row)
        log(f"  daskwp encode {mbps(nbytes, row['enc1']):.1f} MB/s (1 core), "
            f"{mbps(nbytes, row['enc_all']):.1f} MB/s (all cores)")
        del arr, lines, data

    # HF, one core: RAYON_NUM_THREADS=1 is in the child's environment before rayon starts.
    log(f"HuggingFace, 1 core (RAYON_NUM_THREADS=1), {args.hf_repeats} runs per corpus ...")
    hf1 = run_worker("hf", {"items": hf_jobs}, tmp,
                     env_extra={"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "true"})
    # HF, all cores, English only.
    log("HuggingFace, all cores (English) ...")
    hf_all = run_worker("hf", {"items": [dict(hf_jobs[0], parity_lines=None)]}, tmp,
                        env_extra={"TOKENIZERS_PARALLELISM": "true"},
                        env_remove=("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS"))
    for row, res in zip(rows, hf1["results"]):
        row["hf1"], row["hf1_threads"] = res["seconds"], res["threads"]
        row["hf1_cpu"], row["hf1_share"] = res["cpu"], res["share"]
        enc = row["_tok"].encode(arrow(row["_base"]), num_threads=0)
        same_off = np.array_equal(enc.offsets, res["offsets"])
        if same_off and np.array_equal(enc.token_ids, res["ids"]):
            row["parity"] = f"ok ({len(row['_base'])}/{len(row['_base'])})"
        else:
            bad = sum(1 for i in range(len(enc))
                      if not np.array_equal(enc[i], res["ids"][res["offsets"][i]:
                                                                res["offsets"][i + 1]]))
            row["parity"] = f"MISMATCH {bad}/{len(row['_base'])} lines"
    rows[0]["hf_all"] = hf_all["results"][0]["seconds"]
    rows[0]["hf_all_share"] = hf_all["results"][0]["share"]
    rows[0]["hf_all_threads"] = hf_all["results"][0]["threads"]

    # TF Text only when it imports; it is never installed by this script.
    tf_ok = importlib.util.find_spec("tensorflow_text") is not None
    if tf_ok:
        log("TF Text ...")
        try:
            tf = run_worker("tf", {"items": [{"vocab": j["vocab"], "lowercase": j["lowercase"],
                                              "lines": j["lines"],
                                              "repeats": args.hf_repeats} for j in hf_jobs]},
                            tmp)
            for row, res in zip(rows, tf["results"]):
                row["tf"] = (f"{mbps(row['hf_bytes'], res['fbt']):.2f} / "
                             f"{mbps(row['hf_bytes'], res['fwp']):.2f}")
        except Exception as e:  # noqa: BLE001  report, do not fail the run
            for row in rows:
                row["tf"] = f"failed ({type(e).__name__})"
    else:
        for row in rows:
            row["tf"] = "not installed"
    for row in rows:
        for k in ("_base", "_tok"):
            row.pop(k)
    return rows


def bench_memory(args, tmp: Path) -> list[dict]:
    name, files, vocab_name, lowercase = CORPORA[0]
    lines, _ = repeat_to(read_lines(args.data, files), int(args.size_mb * MB))
    path = tmp / "english.arrow"
    table = pa.table({"text": arrow(lines)})
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    del table, lines
    out = []
    for threads in (1, 0):
        r = run_worker("mem", {"arrow_path": str(path), "threads": threads,
                               "vocab": str(args.data / "vocab" / vocab_name / "vocab.txt"),
                               "lowercase": lowercase}, tmp)
        r["threads"] = threads
        r["output_bytes"] = 4 * r["tokens"] + 8 * (r["docs"] + 1)
        out.append(r)
    return out


def _scheduler_tasks(client) -> int:
    return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))


def _count_tokens(part, tok):
    return int(len(tok.encode(part, num_threads=1).token_ids))


def bench_dask(args) -> dict:
    import logging
    import warnings

    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster, wait

    import daskwp
    name, files, vocab_name, lowercase = CORPORA[0]
    vocab = str(args.data / "vocab" / vocab_name / "vocab.txt")
    tok = daskwp.WordPieceTokenizer(vocab, lowercase=lowercase, num_threads=1)
    lines, nbytes = repeat_to(read_lines(args.data, files), int(args.dask_mb * MB))
    arr = arrow(lines)
    del lines
    df = pd.DataFrame({"text": pd.Series(pd.arrays.ArrowExtensionArray(arr))})
    nparts = max(1, math.ceil(nbytes / (args.partition_mb * MB)))
    ddf = dd.from_pandas(df, npartitions=nparts, sort=True)
    nparts = ddf.npartitions
    parts = [ddf.get_partition(i).compute(scheduler="sync")["text"] for i in range(nparts)]
    res: dict = {"bytes": nbytes, "docs": len(arr), "partitions": nparts}
    log(f"Dask: {nbytes / MB:.1f} MB, {nparts} partitions")

    use_accessor = False
    try:
        probe = dd.from_pandas(df.iloc[:100], npartitions=1)["text"].wordpiece.tokenize(
            vocab=tok, max_length=WIN_MAX_LENGTH, stride=WIN_STRIDE)
        probe.to_frame().map_partitions(len).sum().compute(scheduler="sync")
        use_accessor = True
    except Exception as e:  # noqa: BLE001
        res["accessor_error"] = f"{type(e).__name__}: {e}"
    res["path"] = (f'ddf["text"].wordpiece.tokenize(max_length={WIN_MAX_LENGTH}, '
                   f'stride={WIN_STRIDE}).to_frame() rows counted' if use_accessor else
                   "ddf.map_partitions(tok.encode) token count")

    # bare extension, same partitions, one thread, in this process
    def bare():
        for p in parts:
            if use_accessor:
                out = tok(p, max_length=WIN_MAX_LENGTH, stride=WIN_STRIDE)
                del out
            else:
                _count_tokens(p, tok)
    res["bare"] = best_time(bare, args.dask_repeats)
    del parts
    log(f"  bare extension: {res['bare']:.1f} s")

    warnings.filterwarnings("ignore", message="Sending large graph")
    for k in (1, 2):
        with LocalCluster(n_workers=k, threads_per_worker=1, processes=True,
                          dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
                Client(cluster) as client:
            client.run(lambda: __import__("daskwp") and None)
            t = time.perf_counter()
            dp = ddf.persist()
            wait(dp)
            res[f"persist{k}"] = time.perf_counter() - t
            if use_accessor:
                r = dp["text"].wordpiece.tokenize(vocab=tok, max_length=WIN_MAX_LENGTH,
                                                  stride=WIN_STRIDE)
                job = r.to_frame().map_partitions(len).sum()
            else:
                job = dp["text"].map_partitions(_count_tokens, tok, meta=("n", "i8")).sum()
            baseline = _scheduler_tasks(client)
            best = math.inf
            for _ in range(max(1, args.dask_repeats)):
                t = time.perf_counter()
                res[f"count{k}"] = int(job.compute())
                best = min(best, time.perf_counter() - t)
                # The keys are deterministic: a repeat submitted before the scheduler has
                # released the previous results would just fetch them. Wait for the release.
                deadline = time.monotonic() + 30
                while _scheduler_tasks(client) > baseline and time.monotonic() < deadline:
                    time.sleep(0.05)
            res[f"dask{k}"] = best
            log(f"  {k} worker(s): {res[f'dask{k}']:.1f} s (persist {res[f'persist{k}']:.1f} s)")
            del dp, job
    return res


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------

def fmt(x: float, nd: int = 1) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def report(args, info: dict, rows, mem, dsk, elapsed: float) -> str:
    L = []
    L.append("# daskwp CPU benchmark")
    L.append("")
    L.append(f"- machine: {info['model']}, {info['cores']} cores "
             f"({info['affinity']} usable by this process); shared and noisy, so every figure is "
             f"the best (minimum time) of several runs")
    L.append(f"- python {info['python']}, tokenizers {info['tokenizers']}, daskwp "
             f"{info['daskwp']} (git {info['commit']}), numpy {info['numpy']}, pyarrow "
             f"{info['pyarrow']}; {info['date']}")
    L.append(f"- command: `python benchmarks/cpu_bench.py --size-mb {args.size_mb:g} --repeats "
             f"{args.repeats} --hf-mb {args.hf_mb:g}{'' if args.dask else ' --no-dask'}` "
             f"(total {elapsed / 60:.1f} min)")
    L.append(f"- load average (1 min) at start {info['load_start']:.1f}, at end "
             f"{info['load_end']:.1f}, on {info['affinity']} cores"
             + (f"; CPU pressure (some, avg60: % of time a runnable task waited for a core) "
                f"{info['psi_start']}% at start, {info['psi_end']}% at end"
                if info.get("psi_start") is not None else ""))
    L.append("- MB = 10^6 bytes of UTF-8 input (lines without newline); MB/s = input MB / "
             "wall time")
    L.append("")
    L.append("## Single core")
    L.append("")
    L.append("| corpus | MB | daskwp encode MB/s (1 core) | incl. list→Arrow | daskwp windows "
             "MB/s | HF MB/s (1 core) | ratio daskwp/HF | TF Text | ceiling MB/s | parity |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["hf1"] and (r["hf_bytes"] / r["enc1_slice"]) / (r["hf_bytes"] / r["hf1"])
        L.append(f"| {r['name']} | {r['bytes'] / MB:.2f} | {fmt(mbps(r['bytes'], r['enc1']))} | "
                 f"{fmt(mbps(r['bytes'], r['enc1_list']))} | "
                 f"{fmt(mbps(r['bytes'], r['win1']))} | {fmt(mbps(r['hf_bytes'], r['hf1']), 2)} "
                 f"| {fmt(ratio)}× | {r['tf']} | {fmt(mbps(r['bytes'], r['ceiling']), 0)} | "
                 f"{r['parity']} |")
    L.append("")
    hf_mb = rows[0]["hf_bytes"] / MB
    L.append(f"- daskwp encode: `tok.encode(arr, num_threads=1)` on a pyarrow large_string array "
             f"built before timing (best of {args.repeats}); incl. list→Arrow: "
             f"`tok.encode(list_of_str, num_threads=1)` (best of {max(1, args.repeats - 2)}).")
    L.append(f"- daskwp windows: `WordPieceTokenizer(..., num_threads=1)(arr, max_length="
             f"{WIN_MAX_LENGTH}, stride={WIN_STRIDE})` (padded int32 ids + int32 mask + metadata; "
             f"best of {max(1, args.repeats - 2)}).")
    L.append(f"- HF: `BertWordPieceTokenizer(vocab, lowercase=...).encode_batch(lines, "
             f"add_special_tokens=False)` in a child process with RAYON_NUM_THREADS=1 "
             f"(threads its encode_batch started: {rows[0]['hf1_threads']}), on the first "
             f"~{hf_mb:.1f} MB of the same lines (per corpus: "
             + ", ".join(f"{r['hf_bytes'] / MB:.2f}" for r in rows)
             + f" MB), best of {args.hf_repeats}. The ratio compares daskwp and HF on that same "
             "slice (daskwp slice MB/s: "
             + ", ".join(fmt(mbps(r['hf_bytes'], r['enc1_slice'])) for r in rows) + ").")
    L.append("- TF Text: FastBertTokenizer / FastWordpieceTokenizer MB/s when `import "
             "tensorflow_text` works (not installed by this script).")
    L.append(f"- ceiling: {rows[0]['ceiling_label']} over the same bytes (reads every byte, "
             f"writes it lowercased to a 64 KB scratch buffer), 1 core.")
    L.append("- parity: daskwp ids == HF ids (and equal lengths) on every line of the un-repeated "
             "corpus (lines checked/lines).")
    L.append("- vocabularies: English and logs bert-base-uncased (lowercase=True); "
             "multilingual bert-base-multilingual-cased (lowercase=False).")
    L.append("")
    L.append("## The same, per CPU second (shared machine)")
    L.append("")
    L.append("Wall-clock MB/s on a busy machine depends on how much of a core the process got. "
             "This table divides by the process's own CPU time instead (min over the runs; "
             "`time.process_time()`, all threads), and shows the CPU share (CPU s per wall s) "
             "of the fastest run: 1.0 means a whole core.")
    L.append("")
    L.append("| corpus | daskwp encode MB/CPU-s | CPU share | HF MB/CPU-s (slice) | CPU share | "
             "ratio daskwp/HF (CPU) |")
    L.append("|---|---|---|---|---|---|")
    for r in rows:
        L.append(f"| {r['name']} | {fmt(mbps(r['bytes'], r['enc1_cpu']))} | "
                 f"{r['enc1_share']:.2f} | {fmt(mbps(r['hf_bytes'], r['hf1_cpu']), 2)} | "
                 f"{r['hf1_share']:.2f} | {r['hf1_cpu'] / r['enc1_slice_cpu']:.1f}× |")
    L.append("")
    L.append("## Corpus shape")
    L.append("")
    L.append("| corpus | docs | bytes/doc | tokens | bytes/token | [UNK] % | non-ASCII bytes % |")
    L.append("|---|---|---|---|---|---|---|")
    for r in rows:
        unk = "n/a" if r["unk"] is None else f"{100 * r['unk'] / max(1, r['tokens']):.2f}"
        L.append(f"| {r['name']} | {r['docs']} | {r['bytes'] / r['docs']:.0f} | {r['tokens']} | "
                 f"{r['bytes'] / max(1, r['tokens']):.2f} | {unk} | "
                 f"{100 * r['non_ascii']:.1f} |")
    L.append("")
    L.append("## Multi-core")
    L.append("")
    L.append(f"| corpus | daskwp 1 core MB/s | CPU share | daskwp all cores "
             f"({info['affinity']}) MB/s | CPU share | speed-up |")
    L.append("|---|---|---|---|---|---|")
    for r in rows:
        L.append(f"| {r['name']} | {fmt(mbps(r['bytes'], r['enc1']))} | {r['enc1_share']:.2f} | "
                 f"{fmt(mbps(r['bytes'], r['enc_all']))} | {r['enc_all_share']:.2f} | "
                 f"{r['enc1'] / r['enc_all']:.2f}× |")
    L.append("")
    L.append(f"- `tok.encode(arr, num_threads=0)` (best of {max(1, args.repeats - 2)}) vs "
             f"`num_threads=1` (best of {args.repeats}). "
             f"A speed-up can only appear when the machine has a core to spare: compare the "
             f"CPU shares (ideal: 1.0 and {info['affinity']}.0).")
    L.append("")
    r0 = rows[0]
    L.append(f"- HF all cores (rayon default; its encode_batch started {r0['hf_all_threads']} "
             f"threads), "
             f"{r0['name']} slice: {fmt(mbps(r0['hf_bytes'], r0['hf_all']), 2)} MB/s vs "
             f"{fmt(mbps(r0['hf_bytes'], r0['hf1']), 2)} MB/s on 1 core "
             f"({r0['hf1'] / r0['hf_all']:.2f}×, CPU share {r0['hf_all_share']:.2f}); daskwp all "
             f"cores on the full corpus "
             f"{fmt(mbps(r0['bytes'], r0['enc_all']))} MB/s.")
    L.append("")
    L.append("## Peak memory (daskwp encode, English)")
    L.append("")
    for m in mem:
        denom = m["input_bytes"] + m["output_bytes"]
        delta = m["maxrss_after"] - m["maxrss_before"]
        hwm = m["hwm_after"] - m["hwm_before"]
        L.append(f"- num_threads={m['threads']}: input {m['input_bytes'] / MB:.1f} MB + output "
                 f"{m['output_bytes'] / MB:.1f} MB ({m['tokens']} tokens, {m['docs']} docs); "
                 f"peak growth during encode (VmHWM reset before it) {hwm / MB:.1f} MB → "
                 f"ratio **{hwm / denom:.2f}**; ru_maxrss {m['maxrss_before'] / MB:.1f} → "
                 f"{m['maxrss_after'] / MB:.1f} MB, delta {delta / MB:.1f} MB "
                 f"(ratio {delta / denom:.2f}); RSS before encode {m['rss_before'] / MB:.1f} MB")
    L.append("- a fresh child process reads the Arrow IPC file (no Python strings), builds and "
             "warms the tokenizer on one line, returns freed heap to the OS (`malloc_trim`, Arrow "
             "pool `release_unused`), then records ru_maxrss and VmHWM (reset to the "
             "current RSS with `echo 5 > /proc/self/clear_refs`) before and after "
             "`tok.encode(arr)`. Output bytes = 4 × tokens + 8 × (docs + 1); input bytes = "
             "UTF-8 bytes. The result arrays are part of the peak, so a ratio equal to "
             "output / (input + output) would mean no working memory beyond the result. "
             "ru_maxrss also holds peaks from before encode (construction temporaries, and the "
             "high-water mark Linux carries over at exec), so its delta can read low.")
    L.append("")
    L.append("## Dask")
    L.append("")
    if dsk is None:
        L.append("- not run (--no-dask)")
    elif "error" in dsk:
        L.append(f"- failed: {dsk['error']}")
    else:
        b = dsk["bytes"]
        L.append(f"- {b / MB:.1f} MB English (EWT repeated, {dsk['docs']} docs) in "
                 f"{dsk['partitions']} partitions (~{b / MB / dsk['partitions']:.0f} MB each: "
                 f"ceil(MB / {args.partition_mb:g})); "
                 f"`LocalCluster(n_workers=k, threads_per_worker=1, processes=True)`; data "
                 f"persisted on the workers before timing (persist: "
                 f"{dsk['persist1']:.1f} s / {dsk['persist2']:.1f} s); best of "
                 f"{max(1, args.dask_repeats)} runs each.")
        if "accessor_error" in dsk:
            L.append(f"- accessor unusable ({dsk['accessor_error']}); fell back to map_partitions")
        L.append(f"- timed: {dsk['path']}")
        L.append(f"- bare extension on the same partitions, 1 thread, in-process: "
                 f"{dsk['bare']:.1f} s ({fmt(mbps(b, dsk['bare']))} MB/s)")
        L.append(f"- 1 worker: {dsk['dask1']:.1f} s ({fmt(mbps(b, dsk['dask1']))} MB/s), overhead "
                 f"vs bare {100 * (dsk['dask1'] / dsk['bare'] - 1):+.0f}%")
        L.append(f"- 2 workers: {dsk['dask2']:.1f} s ({fmt(mbps(b, dsk['dask2']))} MB/s), "
                 f"speed-up 2 vs 1 workers **{dsk['dask1'] / dsk['dask2']:.2f}×**")
        if dsk["count1"] != dsk["count2"]:
            L.append(f"- WARNING: counts differ between runs ({dsk['count1']} vs {dsk['count2']})")
    L.append("")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=20, help="corpus size in MB (default 20)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per daskwp figure (best kept)")
    ap.add_argument("--hf-mb", type=float, default=2,
                    help="MB of each corpus that HF (and TF Text) encode; 0 = all (default 2)")
    ap.add_argument("--hf-repeats", type=int, default=3, help="runs per HF figure (default 3)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cpu_bench.md")
    ap.add_argument("--data", type=Path, default=default_data_dir(),
                    help="shared data folder holding corpus/ and vocab/")
    ap.add_argument("--dask", action=argparse.BooleanOptionalAction, default=True,
                    help="run the Dask LocalCluster part (default on, ~1-2 min)")
    ap.add_argument("--dask-mb", type=float, default=200, help="MB for the Dask part")
    ap.add_argument("--partition-mb", type=float, default=64, help="Dask partition size")
    ap.add_argument("--dask-repeats", type=int, default=2, help="runs per Dask figure")
    ap.add_argument("--_worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._worker:
        kind, path = args._worker
        job = pickle.loads(Path(path).read_bytes())
        res = {"hf": worker_hf, "tf": worker_tf, "mem": worker_mem}[kind](job)
        Path(job["out"]).write_bytes(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))
        return 0

    t0 = time.perf_counter()
    info = machine_info()
    log(f"{info['model']}, {info['cores']} cores; data {args.data}")
    with tempfile.TemporaryDirectory(prefix="cpu_bench-") as td:
        tmp = Path(td)
        log("peak memory ...")
        mem = bench_memory(args, tmp)  # first, while this process is still small
        rows = bench_corpora(args, tmp)
    dsk = None
    if args.dask:
        try:
            dsk = bench_dask(args)
        except Exception as e:  # noqa: BLE001  the rest of the report still stands
            dsk = {"error": f"{type(e).__name__}: {e}"}
    info["load_end"] = os.getloadavg()[0]
    info["psi_end"] = _cpu_pressure()
    text = report(args, info, rows, mem, dsk, time.perf_counter() - t0)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    log(f"wrote {args.out} ({(time.perf_counter() - t0) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
