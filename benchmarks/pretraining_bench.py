"""Pretraining outputs against the bare kernel and Megatron's way, in ONE run (issue 39's
speed and memory goals as ratios within the run):

* the bare kernel: ``tok.encode`` in this process on every core, in batches of the
  partition size, measured three ways, every job's ratio given to each: *burst*, short
  passes over the first ``--kernel-mb`` MB (a cold one, then a warm one right before every
  timed job; the best warm pass, the headline ratios' kernel); *adjacent*, the warm pass
  just before the job (each round's ratio: the machine as it was then); *sustained*, the
  whole input streamed from disk in the same batches (reading left out of its time), the
  text a job reads, so the kernel runs about as long as a job does: this VM runs the same
  work ~14% slower after ~10 s of load on both cores (results/kernel_drift.md), which a
  1-2 s burst pass never reaches and a 3 GB job spends most of its time in. Every job's
  MB/s is the best of its ``--rounds`` rounds;
* ``daskwp tokenize --output-format megatron`` (a local cluster, one 1-thread worker per
  core; tokenize, write the parts, merge);
* what ``tools/preprocess_data.py`` does: a ``multiprocessing.Pool`` of one worker per core
  running HF ``tokenizers`` one document at a time (``imap`` in chunks of 32), the main
  process feeding megatron-core's ``IndexedDatasetBuilder.add_document`` (on the first
  ``--hf-mb`` MB: it runs at a few MB/s; its MB/s is what it reaches there);
* ``daskwp count`` on the same cluster;
* ``--pack 512`` against the same job unpacked (Parquet, padding do_not_pad);
* the peak RSS of every worker of the Megatron job: its growth over the same worker
  warmed and idle against 2 x (its partition + the tokenizer's output arrays for it),
  the reading pipeline_bench gives its RSS goal, and the whole peak against 2x the
  partition (the strict reading); CPU seconds per stage of each job.

    python benchmarks/pretraining_bench.py --size-mb 3000          # the issue's 3 GB
    python benchmarks/pretraining_bench.py --size-mb 100 --hf-mb 20  # a quick look

The input is the non-empty lines of the shared English (UD EWT), English books and loghub
corpora repeated to ``--size-mb`` MB, as JSON Lines (``{"text": ...}``: what
preprocess_data.py reads). The report (``--out``, default
benchmarks/results/pretraining_bench.md) gives every command and figure. Needs the venv
with the megatron extra (``pip install -e '.[test,megatron]'``) and a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import kernel_stream, launch_env

ROOT = Path(__file__).resolve().parents[1]
FILES = ["en_ewt.txt", "en_book_moby_dick.txt", "en_book_pride_and_prejudice.txt", "logs/*.log"]
MB = 1e6


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def peak_rss_bytes() -> int:
    """This process's peak RSS (VmHWM). Not getrusage's ru_maxrss: Linux keeps that across
    fork + exec, so a spawned worker would report the peak of the process that started it."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    """Restart this process's VmHWM from its current RSS (Linux: ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def current_rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def kept_caches() -> tuple[int, int]:
    """Bytes the kernel keeps between calls in this process: the word memos and the host
    pool's cached blocks (both bounded by their limits; part of a worker's RSS growth)."""
    import daskwp
    info = daskwp.memory.info()
    return int(info["word_cache"]["bytes"]), int(info["host_pool"]["cached"])


def build_input(data: Path, size_mb: float, path: Path) -> tuple[int, int]:
    """JSON Lines of ``size_mb`` MB of text; returns (documents, text bytes)."""
    lines = []
    for pat in FILES:
        for f in sorted((data / "corpus").glob(pat)):
            lines += [x for x in f.read_text(encoding="utf-8").split("\n") if x.strip()]
    docs = nbytes = 0
    with open(path, "w", encoding="utf-8") as fh:
        while nbytes < size_mb * MB:
            for line in lines:
                fh.write(json.dumps({"text": line}) + "\n")
                docs += 1
                nbytes += len(line.encode())
                if nbytes >= size_mb * MB:
                    break
    return docs, nbytes


# -- Megatron's way: preprocess_data.py's Encoder and Partition, with HF tokenizers --------
_HF = None


def _init(vocab: str) -> None:
    global _HF
    from tokenizers import BertWordPieceTokenizer
    _HF = BertWordPieceTokenizer(vocab, lowercase=True)


def _encode(line: str):
    text = json.loads(line)["text"]
    ids = _HF.encode(text, add_special_tokens=False).ids
    return ids, ([len(ids)] if ids else []), len(line)


def preprocess_data_like(jsonl: Path, vocab: str, out: Path, workers: int, limit_mb: float):
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    lines = []
    nbytes = 0
    with open(jsonl, encoding="utf-8") as fh:
        for line in fh:
            lines.append(line)
            nbytes += len(json.loads(line)["text"].encode())
            if nbytes >= limit_mb * MB:
                break
    t0 = time.perf_counter()
    builder = IndexedDatasetBuilder(str(out) + ".bin", dtype=DType.optimal_dtype(30522))
    with multiprocessing.Pool(workers, initializer=_init, initargs=(vocab,)) as pool:
        for ids, lens, _ in pool.imap(_encode, lines, 32):
            builder.add_document(ids, lens)
    builder.finalize(str(out) + ".idx")
    return nbytes, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=3000)
    ap.add_argument("--hf-mb", type=float, default=50)
    ap.add_argument("--partition-size", default="64MB")
    ap.add_argument("--kernel-mb", type=float, default=1000,
                    help="the bare kernel's sample: the first MB of text, in partition-size "
                         "batches (default 1000)")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of every job, each after a warm kernel pass; every MB/s "
                         "is the best of its rounds (default 2)")
    ap.add_argument("--data", type=Path, default=Path(os.environ.get(
        "DASKWP_SHARED_DATA", ROOT.parent / "shared" / "data")))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                    "pretraining_bench.md")
    ap.add_argument("--tmp", type=Path, default=None)
    args = ap.parse_args()

    # the modules' bytecode, as an installed wheel has it (an editable install under
    # PYTHONDONTWRITEBYTECODE=1 would compile ~80 modules at every command's start)
    import compileall
    compileall.compile_dir(str(ROOT / "daskwp"), quiet=1)
    import daskwp
    from daskwp.jobs import make_config, run_job
    from daskwp.jobs.count import run_count
    from distributed import Client, LocalCluster

    vocab = str(args.data / "vocab" / "bert-base-uncased" / "vocab.txt")
    tmp = Path(tempfile.mkdtemp(dir=args.tmp))
    rows = []
    try:
        jsonl = tmp / "input.jsonl"
        docs, nbytes = build_input(args.data, args.size_mb, jsonl)
        mb = nbytes / MB
        log(f"input: {docs:,} documents, {mb:.1f} MB of text")

        from daskwp.distributed.tasks import text_bytes
        from daskwp.jobs import list_input_files, plan_partitions, read_partition
        tok = daskwp.WordPieceTokenizer(vocab, lowercase=True)
        # the kernel as a job's partitions meet it: batches of the partition size, on
        # every core, over the first --kernel-mb MB. The first pass is cold (this fresh
        # process); later passes are warm (its word cache filled) and run again before
        # each round of jobs, so the warm figure the ratios use (the best of them, as
        # pipeline_bench's) is measured beside the jobs and not once at the start of a
        # run on a machine whose speed drifts
        specs = plan_partitions(list_input_files(str(jsonl)), "text",
                                daskwp.core.options.check_bytes("p", args.partition_size))
        batches, sample = [], 0   # read once, kept for every short pass
        for spec in specs:
            if sample >= args.kernel_mb * MB:
                break
            batch = read_partition(spec)
            batches.append((batch, text_bytes(batch)))
            sample += batches[-1][1]

        def encode(batch):
            tok.encode(batch, num_threads=0)

        def kernel_pass():
            """A short (burst) pass: the in-memory sample; (MB/s, CPU seconds)."""
            f = kernel_stream(batches, {"encode": encode})[0]["encode"]
            return f["mbps"], f["cpu"]

        def sustained_pass(what):
            """The whole input in the jobs' partitions, each read from disk then encoded
            (the reading timed apart); {mbps, cpu, seconds, read, bytes, batches}."""
            def stream():
                for spec in specs:
                    batch = read_partition(spec)
                    yield batch, text_bytes(batch)
            f, read = kernel_stream(stream(), {"encode": encode})
            sustained.append(dict(f["encode"], read=read, batches=len(specs)))
            log(f"kernel {f['encode']['mbps']:.1f} MB/s sustained ({f['encode']['seconds']:.1f}"
                f" s over {f['encode']['bytes'] / MB:,.0f} MB, {read:.1f} s reading apart), "
                f"{what}")

        # the first pass, cold (this fresh process), also sizes the tokenizer's output
        # arrays (ids, offsets) per byte of input: a worker's share of them is part of the
        # RSS goal (as pipeline_bench's)
        out_bytes = []

        def encode_sized(batch):
            enc = tok.encode(batch, num_threads=0)
            out_bytes.append(np.asarray(enc.token_ids).nbytes + np.asarray(enc.offsets).nbytes)

        kernel_cold = kernel_stream(batches, {"encode": encode_sized})[0]["encode"]["mbps"]
        out_per_byte = sum(out_bytes) / (os.path.getsize(jsonl) * sample / nbytes)
        log(f"kernel {kernel_cold:.1f} MB/s cold")
        warm_passes: list = []   # (MB/s, CPU seconds) of every warm short pass
        sustained: list = []     # every sustained pass

        common = dict(input=str(jsonl), vocab=vocab, lowercase=True, quiet=True,
                      partition_size=args.partition_size, device="cpu")

        def megatron_stages(s):
            return dict(s["cpu_seconds"], merge=s["megatron"]["merge_cpu_seconds"],
                        merge_tail=s["megatron"]["merge_tail_cpu_seconds"])

        # the same jobs as the default command a user types (no cluster option: in-process
        # on threads up to in_process_max_bytes), each a fresh process timed whole
        cli_cmds = []

        def cli(name, *extra):
            cmd = [sys.executable, "-m", "daskwp", *extra[:1], str(jsonl)]
            if extra[0] == "tokenize":
                cmd.append(str(tmp / name))
            cmd += ["--vocab", vocab, "--lowercase", "--partition-size", args.partition_size,
                    "--device", "cpu", "--quiet", *extra[1:], "--json"]
            t0 = time.perf_counter()
            # the environment this bench was started with: the LocalCluster above wrote
            # its nannies' variables (MALLOC_TRIM_THRESHOLD_, OMP_NUM_THREADS, ...) into
            # os.environ, which a user's command does not have
            proc = subprocess.run(cmd, capture_output=True, text=True, env=launch_env())
            wall = time.perf_counter() - t0
            if proc.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
            shutil.rmtree(tmp / name, ignore_errors=True)
            shown = "daskwp " + " ".join(cmd[3:]).replace(str(tmp), "$TMP")
            if shown not in cli_cmds:
                cli_cmds.append(shown)
            return json.loads(proc.stdout), mb / wall

        # every job's MB/s is the best of --rounds rounds; a warm kernel pass runs right
        # before every timed job, so the kernel's best is taken over passes interleaved
        # with the jobs and every job has a pass beside it
        best: dict[str, float] = {}
        stages: dict[str, dict] = {}
        growth_rounds = []   # (peak RSS, kept caches) per worker, each round's Megatron job

        # each round's (job MB/s, the kernel pass just before it): the machine as it is
        # then (this VM's speed drifts by 20-30% over minutes, and the best pass is often
        # one a job never ran beside)
        beside: dict[str, list] = {}

        def kernel_now(what):
            warm_passes.append(kernel_pass())
            log(f"kernel {warm_passes[-1][0]:.1f} MB/s warm, before {what}")

        def keep(name, value):
            best[name] = max(best.get(name, 0.0), value)
            beside.setdefault(name, []).append((value, warm_passes[-1][0]))

        def ratios(name):
            """A job's ratio to each kernel: burst, sustained, then each round's to the
            pass before it (with the figures it divides)."""
            v = best[name]
            return (f"{v / kernel:.2f}x burst kernel; {v / kernel_sus:.2f}x sustained "
                    f"kernel; each round to the pass before it: "
                    + ", ".join(f"{j / k:.2f} ({j:.1f} / {k:.1f})" for j, k in beside[name]))

        def cost(packed_name, plain_name):
            return ", ".join(f"{100 * ((u / ku) / (p / kp) - 1):.1f}%"
                             for (p, kp), (u, ku) in zip(beside[packed_name],
                                                         beside[plain_name]))

        # the sustained kernel, before the cluster starts (no idle cluster beside it)
        sustained_pass("before the cluster jobs")

        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            def job(name, **kw):
                t0 = time.perf_counter()
                s = run_job(make_config(dict(common, output=str(tmp / name), **kw)),
                            client=client)
                rate = mb / (time.perf_counter() - t0)
                shutil.rmtree(tmp / name, ignore_errors=True)
                return s, rate

            warm = tmp / "warm.jsonl"   # workers start, import and get the tokenizer
            with open(jsonl, encoding="utf-8") as src, open(warm, "w") as dst:
                dst.writelines(line for _, line in zip(range(2000), src))
            run_job(make_config(dict(common, input=str(warm), output=str(tmp / "warm"),
                                     output_format="megatron")), client=client)
            idle = client.run(current_rss_bytes)   # warmed, idle workers
            for r in range(args.rounds):
                client.run(reset_peak_rss)
                kernel_now("the Megatron job")
                s, rate = job("megatron", output_format="megatron",
                              add_special_tokens=False, append_eod=True)
                keep("megatron", rate)
                growth_rounds.append((client.run(peak_rss_bytes), client.run(kept_caches)))
                stages["megatron"] = megatron_stages(s)
                kernel_now("count")
                t0 = time.perf_counter()
                run_count(make_config(dict(common, output=str(tmp))), client=client)
                keep("count", mb / (time.perf_counter() - t0))
                kernel_now("the Parquet job")
                s, rate = job("plain", padding="do_not_pad")
                keep("plain", rate)
                stages["tokenize (Parquet)"] = s["cpu_seconds"]
                kernel_now("the packed job")
                s, rate = job("packed", packing=512)
                keep("packed", rate)
                stages["--pack 512"] = s["cpu_seconds"]
                log(f"round {r + 1}: cluster jobs done")
        # the default commands after the cluster is closed: a user's command has no idle
        # cluster beside it (one at distributed's defaults takes ~8% of a core)
        sustained_pass("before the default commands")
        for r in range(args.rounds):
            kernel_now("the default Megatron command")
            s, rate = cli("d-megatron", "tokenize", "--output-format", "megatron",
                          "--no-add-special-tokens", "--append-eod")
            keep("d_meg", rate)
            stages["megatron, default command"] = megatron_stages(s)
            ran = (s.get("run") or {}).get("mode", "?")
            kernel_now("the default count")
            keep("d_count", cli("d-count", "count")[1])
            kernel_now("the default Parquet command")
            keep("d_plain", cli("d-plain", "tokenize", "--padding", "do_not_pad")[1])
            kernel_now("the default packed command")
            keep("d_packed", cli("d-packed", "tokenize", "--pack", "512")[1])
            log(f"round {r + 1}: default commands done")
        kernel, kernel_cpu_sample = max(warm_passes)
        # CPU seconds over the whole input at the best warm pass's rate
        kernel_cpu = kernel_cpu_sample * nbytes / sample
        sus = max(sustained, key=lambda f: f["mbps"])
        kernel_sus = sus["mbps"]
        megatron, count, plain, packed = (best[k] for k in ("megatron", "count", "plain",
                                                             "packed"))
        d_meg, d_count, d_plain, d_packed = (best[k] for k in ("d_meg", "d_count", "d_plain",
                                                               "d_packed"))
        rows.append((f"bare kernel, burst: tok.encode in {args.partition_size} batches, all "
                     f"cores, warm, the best of {len(warm_passes)} short passes over the "
                     f"first {sample / MB:,.0f} MB, one right before every timed job ("
                     + ", ".join(f"{v:.1f}" for v, _ in warm_passes)
                     + f"; its first, cold pass {kernel_cold:.1f})", kernel, ""))
        rows.append((f"bare kernel, sustained: the same call over the whole input "
                     f"({sus['bytes'] / MB:,.0f} MB in {sus['batches']} batches of "
                     f"{args.partition_size}, each read from disk first, the reading left out: "
                     + ", ".join(f"{f['read']:.1f}" for f in sustained)
                     + " s), the best of its passes, one before the cluster jobs and one "
                     "before the default commands ("
                     + ", ".join(f"{f['mbps']:.1f} MB/s in {f['seconds']:.1f} s"
                                 for f in sustained) + ")", kernel_sus, ""))
        rows += [
            ("cluster: daskwp --output-format megatron --append-eod", megatron,
             ratios("megatron")),
            ("cluster: daskwp count", count, ratios("count")),
            ("cluster: daskwp tokenize --padding do_not_pad (Parquet)", plain, ratios("plain")),
            ("cluster: daskwp tokenize --pack 512 (Parquet)", packed,
             f"packing costs {100 * (plain / packed - 1):.1f}% of the unpacked job's time "
             f"(each round, the jobs to the passes before them: {cost('packed', 'plain')}); "
             + ratios("packed")),
            (f"default command (ran: {ran}): daskwp tokenize --output-format megatron "
             f"--append-eod, whole command", d_meg, ratios("d_meg")),
            ("default command: daskwp count, whole command", d_count, ratios("d_count")),
            ("default command: daskwp tokenize --padding do_not_pad (Parquet), whole command",
             d_plain, ratios("d_plain")),
            ("default command: daskwp tokenize --pack 512 (Parquet), whole command", d_packed,
             f"packing costs {100 * (d_plain / d_packed - 1):.1f}% of the unpacked job's "
             f"time (each round, the jobs to the passes before them: "
             f"{cost('d_packed', 'd_plain')}); " + ratios("d_packed"))]
        hf_bytes, hf_s = preprocess_data_like(jsonl, vocab, tmp / "pdp", args.workers,
                                              args.hf_mb)
        pdp = hf_bytes / MB / hf_s
        rows.append((f"preprocess_data.py's way ({args.workers} workers, first "
                     f"{hf_bytes / MB:.1f} MB)", pdp, ""))
        rows[2] = rows[2][:2] + (rows[2][2] + f"; {megatron / pdp:.1f}x preprocess_data's "
                                 f"way",)
        part = min(os.path.getsize(jsonl),
                   daskwp.core.options.check_bytes("p", args.partition_size))
        limit = 2 * part * (1 + out_per_byte)
        # per worker: its peak less its own idle RSS, in the first round (the Megatron job
        # right after the warm-up that the idle RSS was taken after; later rounds' workers
        # also hold what the Parquet jobs between left in their pools)
        rss, caches = growth_rounds[0]
        grow_by = {w: rss[w] - idle.get(w, rss[w]) for w in rss}
        worst = max(grow_by, key=grow_by.get)
        base, growth = idle.get(worst, rss[worst]), grow_by[worst]
        lines = [
            "# Pretraining outputs: Megatron job, count, packing (one run)", "",
            "Earlier runs: [HISTORY.md](HISTORY.md).", "",
            f"Command: `python benchmarks/pretraining_bench.py --size-mb {args.size_mb:g} "
            f"--hf-mb {args.hf_mb:g} --partition-size {args.partition_size} --workers "
            f"{args.workers} --rounds {args.rounds}`", "",
            f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average at the end "
            f"{os.getloadavg()[0]:.2f}. Input: {docs:,} documents, {mb:.1f} MB of text "
            f"(JSON Lines), bert-base-uncased; daskwp's modules byte-compiled first "
            f"(`python -m compileall daskwp`), as an installed wheel has them.", "",
            "The cluster rows run on one LocalCluster (one 1-thread worker per core) that "
            "is up and warmed before they are timed (`run_job(..., client=client)`, from the "
            "job's start to its summary); the default-command rows run each command as a "
            "user types it, a fresh process timed whole (start-up included):", "",
            *[f"    {c}" for c in cli_cmds], "",
            "Every job's ratio is given to three measures of the bare kernel: the *burst* "
            "kernel (the best short warm pass: the headline, what issue 39's speed goals "
            "are read against, as before), the *sustained* kernel (the whole input, as long "
            "as a job runs: this VM slows the same work ~14% after ~10 s of load, "
            "results/kernel_drift.md) and, each round, the pass just before the job (job MB/s "
            "/ pass MB/s). The default commands get the environment this bench was started "
            "with (not the variables its LocalCluster's nannies put into os.environ, such "
            "as MALLOC_TRIM_THRESHOLD_).", "",
            "| what | MB/s of text | ratio |", "|---|---|---|"]
        lines += [f"| {w} | {v:.1f} | {r} |" for w, v, r in rows]
        lines += ["", "Memory goal (\"peak memory per worker within 2x its partition\"), "
                  "read as pipeline_bench reads its RSS goal: a worker's peak RSS during the "
                  "job less the RSS of the same worker warmed and idle (daskwp imported, "
                  "tokenizer loaded, a small job run) is within 2 x (the partition's input "
                  "bytes + the tokenizer's output arrays for it, ids int32 and offsets "
                  f"int64: {out_per_byte:.2f} bytes per input byte here). The strict reading "
                  "(the whole peak RSS within 2x the partition) is shown beside it.", "",
                  "| memory of the Megatron job's workers | value | goal | met |",
                  "|---|---|---|---|",
                  f"| peak RSS growth over the same worker warmed and idle ({base / 1e6:.0f} "
                  f"MB), the largest | "
                  f"{growth / 1e6:.0f} MB | <= 2 x ({part / 1e6:.0f} MB input + "
                  f"{part * out_per_byte / 1e6:.0f} MB output arrays) = {limit / 1e6:.0f} MB | "
                  f"{'yes' if growth <= limit else 'no'} |",
                  f"| peak RSS (strict reading) | "
                  + ", ".join(f"{v / 1e6:.0f} MB" for v in rss.values())
                  + f" ({max(rss.values()) / part:.1f}x the {part / 1e6:.0f} MB partition) | "
                  f"<= 2x | {'yes' if max(rss.values()) <= 2 * part else 'no'} |", "",
                  "Kept by the kernel between calls after the job (in the growth above; "
                  "bounded by word_cache_mb and the host pool's limit), per worker: "
                  + ", ".join(f"word memos {m / 1e6:.0f} MB + host pool {h / 1e6:.0f} MB"
                              for m, h in caches.values()) + ".", "",
                  "CPU seconds per stage (`_summary.json` `cpu_seconds`, summed over the "
                  "workers' task threads; the kernel's own threads included; "
                  "`merge`: the driver's, Megatron's `merge_cpu_seconds`, appending each part "
                  "as it completes; `merge_tail`: those of them after the last part was "
                  "written, `merge_tail_cpu_seconds`). The bare kernel took "
                  f"{kernel_cpu:.2f} CPU seconds (all its threads) over the same text at its "
                  f"best burst pass's rate, {sus['cpu']:.2f} in its best sustained pass.",
                  "", "| job | " + " | ".join(sorted({k for v in stages.values() for k in v}))
                  + " |", "|---" * (1 + len({k for v in stages.values() for k in v})) + "|"]
        keys = sorted({k for v in stages.values() for k in v})
        lines += [f"| {name} | " + " | ".join(f"{v[k]:.2f}" if k in v else "" for k in keys)
                  + " |" for name, v in stages.items()]
        lines += [""]
        report = "\n".join(lines)
        print(report)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
