"""The same batch job local -> local and S3 -> S3 (issue 44), in ONE run: ``daskwp tokenize``
of one input file into Parquet parts, once between local folders and once between two
prefixes of a bucket on a loopback S3 endpoint (moto's server, started by this script in its
own process, so that its CPU time is measured apart from daskwp's).

    python benchmarks/storage_bench.py                    # 300 MB, text and JSONL, 3 rounds
    python benchmarks/storage_bench.py --size-mb 20       # quick look

The input is the non-empty lines of the shared English (UD EWT), English books and loghub
logs corpora, repeated to ``--size-mb`` MB of text (MB = 10^6 bytes), as one text file and
as one JSON Lines file (``{"text": ...}`` per line). Both jobs run the same command with the
same cluster settings (a fresh ``--n-workers`` x 1-thread cluster per job); they alternate
within each of ``--rounds`` rounds (local first in even rounds, S3 first in odd ones) and the
best of each is kept. MB/s = input file bytes / seconds, for the whole command (interpreter,
cluster start, planning, checks) and for tokenize+write (``tokenize_seconds`` of the job's
summary: the parts read, tokenized, written and, on S3, uploaded). The moto server's CPU
seconds during each S3 job are read from /proc; the report states them beside the figures,
since the server shares the machine's cores with the workers, with the job's own CPU seconds
(the command and every process it started: driver, workers, their I/O threads) and moto's
CPU per request on the input object (a HEAD, and a ranged GET of 1 kB), measured once
before the rounds. The first round's outputs are
compared part by part (the Parquet tables without their metadata, which hold the job id):
the script fails if they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import ROOT, default_data_dir, machine_info, read_lines, repeat_to

MB = 1e6
MAX_LENGTH, STRIDE = 128, 32
FILES = ["en_ewt.txt", "en_book_moby_dick.txt", "en_book_pride_and_prejudice.txt", "logs/*.log"]
BUCKET = "daskwp-bench"
#: Dummy credentials (moto accepts any); the jobs find them in their environment.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- input ----------------------------------------------------------------------------------

def build_inputs(data: Path, size_mb: float, tmp: Path, formats) -> dict:
    """The corpus lines repeated to ``size_mb`` MB, written as ``big.txt`` and (if asked)
    ``big.jsonl``: ``{format: (path, bytes)}`` and the line count."""
    lines, _ = repeat_to(read_lines(data, FILES), int(size_mb * MB))
    out = {}
    if "text" in formats:
        path = tmp / "big.txt"
        path.write_text("".join(s + "\n" for s in lines), encoding="utf-8")
        out["text"] = path
    if "jsonl" in formats:
        path = tmp / "big.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for s in lines:
                f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
        out["jsonl"] = path
    return {"files": out, "lines": len(lines)}


# -- the loopback S3 endpoint ---------------------------------------------------------------

class MotoServer:
    """moto's S3 server (``python -m moto.server``) in its own process on 127.0.0.1."""

    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # the server logs a line per request ("GET /bucket/key HTTP/1.1" 206 -): counted
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.url, timeout=2).read()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto's server did not start on {self.url}")
                time.sleep(0.2)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server process so far (all its threads)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def requests(self) -> list[tuple[str, str]]:
        """``(method, path)`` of each request the server logged since the last call."""
        self._log.seek(getattr(self, "_seen", 0))
        text = self._log.read()
        self._seen = self._log.tell()
        return parse_request_log(text.decode("utf-8", "replace"))

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def s3_filesystem(endpoint: str):
    import s3fs
    return s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)


# -- one job --------------------------------------------------------------------------------

def job_command(inp: str, out: str, args, endpoint: str | None) -> list[str]:
    cmd = ["daskwp", "tokenize", inp, out, "--max-length", str(MAX_LENGTH),
           "--stride", str(STRIDE), "--padding", "do_not_pad",
           "--partition-size", f"{args.partition_size_mb:g}MB"]
    cmd += ["--scheduler", args.scheduler] if args.scheduler else \
        ["--n-workers", str(args.n_workers), "--threads-per-worker", "1"]
    if endpoint:
        cmd += ["--storage-option", f"endpoint_url={endpoint}"]
    return cmd + ["--json"]


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children and their own."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def parse_request_log(text: str) -> list[tuple[str, str]]:
    """``(method, path without the query)`` of each request line of moto's server log
    (werkzeug's: ``127.0.0.1 - - [date] "GET /bucket/key HTTP/1.1" 206 -``, in colours
    on a terminal)."""
    out = []
    for line in text.splitlines():
        parts = re.sub(r"\x1b\[[0-9;]*m", "", line).split('"')
        if len(parts) >= 3 and len(parts[1].split()) == 3:
            method, path, _ = parts[1].split()
            out.append((method, path.split("?")[0]))
    return out


def request_counts(requests: list, key: str) -> dict:
    """The requests of a job: GETs of the input object ``key``, other GETs, HEADs, PUTs and
    POSTs (uploads), and the rest."""
    out = {"get_input": 0, "get_other": 0, "head": 0, "put_post": 0, "other": 0}
    for method, path in requests:
        if method == "GET":
            out["get_input" if path.endswith("/" + key) else "get_other"] += 1
        elif method == "HEAD":
            out["head"] += 1
        elif method in ("PUT", "POST"):
            out["put_post"] += 1
        else:
            out["other"] += 1
    return out


def process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of the process ``pid`` so far (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (its children, theirs, ...), from
    ``/proc/PID/task/TID/children`` ([] where the kernel has no such file)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except OSError:
            continue
        for c in kids:
            out += [c] + descendants(c)
    return out


class ChildCPU(threading.Thread):
    """The CPU seconds of the processes a job starts (its workers, the resource tracker),
    read from /proc every ``interval`` seconds while the job runs: the last reading of
    each (a process's CPU after its last reading, at most one interval of it, is missed)."""

    def __init__(self, pid: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.interval, self.cpu = pid, interval, {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for q in descendants(self.pid):
                c = process_cpu(q)
                if c is not None:
                    self.cpu[q] = c
            self.done.wait(self.interval)

    def total(self) -> float:
        self.done.set()
        self.join()
        return sum(self.cpu.values())


def run_job(cmd: list[str], server: MotoServer | None, key: str = "") -> dict:
    if server:
        server.requests()    # (those before the job)
    cpu0 = server.cpu_seconds() if server else 0.0
    job0 = children_cpu()
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "daskwp"] + cmd[1:],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = ChildCPU(proc.pid)
    watch.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t
    workers_cpu = watch.total()
    job_cpu = children_cpu() - job0
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr[-3000:]}")
    s = json.loads(stdout)
    return {"wall": wall, "tokenize_seconds": s["tokenize_seconds"], "summary": s,
            "moto_cpu": (server.cpu_seconds() - cpu0) if server else None,
            "requests": request_counts(server.requests(), key) if server else None,
            "job_cpu": job_cpu, "workers_cpu": workers_cpu,
            "cpu_seconds": s.get("cpu_seconds") or {}}


def request_costs(server: MotoServer, fs, key: str, n: int = 5) -> dict:
    """moto's CPU milliseconds per HEAD and per ranged GET of 1 kB of ``key``."""
    out = {}
    for what, call in (("head", lambda: fs.info(key, refresh=True)),
                       ("get_1kb", lambda: fs.cat_file(key, start=0, end=1000))):
        call()
        c = server.cpu_seconds()
        for _ in range(n):
            fs.invalidate_cache()
            call()
        out[what] = 1000 * (server.cpu_seconds() - c) / n
    return out


def part_tables(folder: str, options: dict | None):
    """The parts of an output folder (local or URL) in order, as tables without metadata."""
    import pyarrow.parquet as pq

    from daskwp.frames import storage
    f = storage.Folder(folder, options)
    names = sorted(n for n in f.listdir() if n.startswith("part-") and n.endswith(".parquet"))
    for n in names:
        with f.open(n) as fh:
            yield n, pq.read_table(fh).replace_schema_metadata(None)


def same_parts(local: str, remote: str, options: dict) -> int:
    """The number of parts, after checking that both folders hold equal ones."""
    a = list(part_tables(local, None))
    b = list(part_tables(remote, options))
    if [n for n, _ in a] != [n for n, _ in b] or not a:
        raise AssertionError(f"the parts differ: {[n for n, _ in a]} vs {[n for n, _ in b]}")
    for (n, x), (_, y) in zip(a, b):
        if not x.equals(y):
            raise AssertionError(f"{n} differs between {local} and {remote}")
    return len(a)


# -- the report -----------------------------------------------------------------------------

def fmt(x: float) -> str:
    return f"{x:,.1f}"


def report(res: dict, args, info: dict, inputs: dict, server_info: dict, minutes: float) -> str:
    L = ["# Object storage benchmark: the same batch job local -> local and S3 -> S3", "",
         "Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).", ""]
    cmdline = "python benchmarks/storage_bench.py " + " ".join(sys.argv[1:])
    L.append(f"`{cmdline.strip()}` (each figure the best of {args.rounds} interleaved rounds) "
             f"({info['date']}, {minutes:.1f} min). Machine: {info['model']}, {info['cores']} "
             f"cores (load average at start {info['load_start']:.1f}, CPU pressure avg60 "
             f"{info['psi_start']}), Python {info['python']}, pyarrow {info['pyarrow']}, "
             f"dask {server_info['dask']}, s3fs {server_info['s3fs']}, moto "
             f"{server_info['moto']}, commit {info['commit']}; daskwp's modules "
             f"byte-compiled first (`python -m compileall daskwp`), as an installed wheel "
             f"has them.")
    L.append("")
    L.append(f"Input: {inputs['lines']:,} lines (English UD EWT, English books, loghub logs, "
             f"repeated) as one file per format, uploaded to `s3://{BUCKET}/in/` before the "
             "rounds (not timed). The S3 endpoint is moto's server "
             f"(`python -m moto.server`, moto {server_info['moto']}) on 127.0.0.1 in its own "
             "process, on the same cores as the jobs; its CPU seconds during each S3 job are "
             "in the table. Every job: a fresh cluster of "
             + (f"`--scheduler {args.scheduler}`" if args.scheduler else
                f"{args.n_workers} worker processes x 1 thread")
             + f", {args.partition_size_mb:g} MB partitions, max_length={MAX_LENGTH}, "
             f"stride={STRIDE}, no padding, zstd parts. MB/s = input file bytes / seconds.")
    L.append("")
    L.append("| format | job | command | MB/s whole command | MB/s tokenize+write | "
             "job CPU s (best round's) | moto CPU s (best round's) | parts |")
    L.append("|---|---|---|---|---|---|---|---|")
    goals = []
    for fmt_name, r in res.items():
        mb = r["bytes"] / MB
        for where in ("local", "s3"):
            x = r[where]
            L.append(f"| {fmt_name} ({mb:,.1f} MB) | {where} -> {where} | `{x['command']}` | "
                     f"{fmt(mb / x['best_wall'])} | {fmt(mb / x['best_tokenize'])} | "
                     f"{x['job_cpu']:.1f} | "
                     + (f"{x['moto_cpu']:.1f}" if where == "s3" else "") + f" | {r['parts']} |")
        for what, key in (("whole command", "best_wall"), ("tokenize+write", "best_tokenize")):
            ratio = r["local"][key] / r["s3"][key]
            goals.append(f"| {fmt_name}: S3 / local, {what} (goal 0.70x) | {ratio:.2f}x | "
                         f"{'yes' if ratio >= 0.7 else 'no'} |")
    L += ["", "## Against the goal (ratios within this run)", "",
          "| goal | figure | met |", "|---|---|---|"] + goals
    L += ["", "## Every round", "",
          "Seconds (whole command / tokenize+write; the job's CPU seconds, all its processes; "
          "moto's CPU seconds during the S3 job).", "",
          "| format | round | local | S3 | job CPU s local / S3 | moto CPU s |",
          "|---|---|---|---|---|---|"]
    for fmt_name, r in res.items():
        for i, (lo, s3) in enumerate(zip(r["local"]["rounds"], r["s3"]["rounds"])):
            L.append(f"| {fmt_name} | {i + 1} | {lo['wall']:.2f} / {lo['tokenize_seconds']:.2f} "
                     f"| {s3['wall']:.2f} / {s3['tokenize_seconds']:.2f} | "
                     f"{lo['job_cpu']:.1f} / {s3['job_cpu']:.1f} | {s3['moto_cpu']:.1f} |")
    L += ["", "## CPU seconds per process (best round)", "",
          "The job's CPU seconds split: the processes it started (the workers, the resource "
          "tracker; each read from /proc every 50 ms while the job runs, so up to 50 ms of "
          "each is missed) and the rest (the `daskwp` command itself: listing, planning, the "
          "scheduler, the final check); moto's server apart.", "",
          "| format | job | command process | its child processes | moto server |",
          "|---|---|---|---|---|"]
    for fmt_name, r in res.items():
        for where in ("local", "s3"):
            x = r[where]
            L.append(f"| {fmt_name} | {where} | {x['job_cpu'] - x['workers_cpu']:.1f} | "
                     f"{x['workers_cpu']:.1f} | "
                     + (f"{x['moto_cpu']:.1f} |" if where == "s3" else " |"))
    L += ["", "## CPU seconds of the job's parts per stage (best round)", "",
          "Summed over the workers' threads (`_summary.json` `cpu_seconds`); the upload of a "
          "part is not a stage of its own (it is in tokenize+write's wall time).", "",
          "| format | job | " + " | ".join(STAGES) + " | moto server |",
          "|---|---|" + "---|" * (len(STAGES) + 1)]
    for fmt_name, r in res.items():
        for where in ("local", "s3"):
            c = r[where]["best_cpu"]
            L.append(f"| {fmt_name} | {where} | "
                     + " | ".join(f"{c.get(k, 0.0):.2f}" for k in STAGES)
                     + (f" | {r[where]['moto_cpu']:.1f} |" if where == "s3" else " | |"))
    L += ["", "## Requests of the S3 job (best round)", "",
          "Counted from moto's request log: GETs of the input object, other GETs (the "
          "output's objects read back, listings), HEADs, PUTs and POSTs (uploads: a "
          "multipart upload is several), the rest (DELETEs).", "",
          "| format | GET input | GET other | HEAD | PUT/POST | other |",
          "|---|---|---|---|---|---|"]
    for fmt_name, r in res.items():
        q = r["s3"]["requests"]
        L.append(f"| {fmt_name} | {q['get_input']} | {q['get_other']} | {q['head']} | "
                 f"{q['put_post']} | {q['other']} |")
    L += ["", NOTE]
    for fmt_name, r in res.items():
        c = r["request_ms"]
        L.append(f"- moto's CPU per request on the {fmt_name} input object "
                 f"({r['bytes'] / MB:,.1f} MB), measured before the rounds: "
                 f"{c['head']:.1f} ms per HEAD, {c['get_1kb']:.1f} ms per ranged GET of 1 kB.")
    L += ["", f"Outputs: the first round's local and S3 parts are equal table by table "
          f"(checked by the script). moto's resident memory at the end: "
          f"{server_info['rss_end']:.0f} MiB.", ""]
    return "\n".join(L)


STAGES = ("read", "tokenize", "arrow", "write", "finish")
#: What the report says the S3 job does beyond the local one.
NOTE = ("What the S3 job does beyond the local one: listing (one LIST, which gives the "
        "input object's size and ETag: no HEAD) and planning read the input "
        "object's first MB (codec, format, JSON keys) from the GET that fetches the first "
        "partitions' ranges for their counts (below), and nothing at the partitions' cuts; "
        "the global-offset pass fetches each partition's byte range, from the byte before "
        "its first cut to 1 MB past its last (the line starts its cuts move to), once (its "
        "body written as it arrives, 1 MB at a time) into a spool file on the worker's "
        "host and counts it there: the `daskwp` command's GET of the object's head goes "
        "on, once planned, through partition 0 and the next partitions, each into a spool "
        "file of the same host, from while its cluster starts (at most half of "
        "spool_max_bytes), and the counts of those partitions wait for their files (out of "
        "the worker's thread pool: the writes of the partitions already counted run "
        "meanwhile); a partition past that is fetched by its count, one GET; the "
        "partition's write task reads that spool file, not the store (docs/batch-jobs.md, "
        "\"Each input byte is fetched once\"); each of these GETs asks for the ETag the "
        "listing saw (If-Match), so no partition sends a HEAD. Every part is uploaded once, "
        "by the `daskwp` command: a worker hands its finished part over (a rename into a "
        "folder of the command's) and goes on with its next partition, and a thread of the "
        "command uploads it (one PUT whose "
        "body is read from the staged part as it is sent, or a multipart upload for a part "
        "of 100 MiB or more, twice s3fs's chunk), so the workers, which fetch nothing "
        "either, build no S3 client; plus a few small requests per job and "
        "part (`_job.json` written twice, the second time while the output is listed "
        "for the check, `_summary.json` once; the logID check reads "
        "each part's footer from the part's last 64 KiB, kept by the command as it sent "
        "them, not from the store; the output folder listed twice, at the start and for "
        "the check; the first listing, of the names that start with the output's, also says "
        "that no object has its name: no HEAD). On this http:// endpoint botocore signs each PUT's "
        "body (SHA-256 of the whole part), which it leaves unsigned over "
        "https; daskwp then leaves botocore's CRC32 of the same body out (the store "
        "checks the signed SHA-256). moto's server spends CPU on the same cores as the "
        "workers, which a remote endpoint would not, and for every GET it reads the whole "
        "object, whatever the range asked for (moto/s3/responses.py: `key.value`, then the "
        "range sliced from it), so each GET of the input object costs it CPU in proportion "
        "to the object's size (figures below).")


# -- main -----------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=float, default=300.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--formats", default="text,jsonl", help="comma-separated: text, jsonl")
    p.add_argument("--partition-size-mb", type=float, default=64.0)
    p.add_argument("--n-workers", type=int, default=2)
    p.add_argument("--scheduler", default=None,
                   help="passed to the jobs instead of a fresh cluster (e.g. synchronous)")
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                   "storage_bench.md")
    args = p.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not formats or set(formats) - {"text", "jsonl"}:
        p.error(f"--formats: text and/or jsonl, got {args.formats!r}")
    if args.rounds < 1:
        p.error(f"--rounds: at least 1, got {args.rounds}")

    # the modules' bytecode, as an installed wheel has it (an editable install under
    # PYTHONDONTWRITEBYTECODE=1 would compile ~80 modules at every command's start)
    import compileall
    compileall.compile_dir(str(ROOT / "daskwp"), quiet=1)
    import dask
    import moto
    import s3fs
    os.environ.update(AWS_ENV)   # this process, the moto server and the jobs
    t_start = time.perf_counter()
    info = machine_info()
    tmp = Path(tempfile.mkdtemp(prefix="daskwp-storage-"))
    server = None
    try:
        inputs = build_inputs(args.data, args.size_mb, tmp, formats)
        log(f"input: {inputs['lines']:,} lines in {tmp}; starting moto")
        server = MotoServer()
        fs = s3_filesystem(server.url)
        fs.mkdir(BUCKET)
        options = {"endpoint_url": server.url}
        res = {}
        for name, path in inputs["files"].items():
            t = time.perf_counter()
            fs.put_file(str(path), f"{BUCKET}/in/{path.name}")
            log(f"uploaded {path.name} in {time.perf_counter() - t:.1f} s")
            res[name] = {"bytes": path.stat().st_size, "parts": None,
                         "local": {"rounds": []}, "s3": {"rounds": []},
                         "request_ms": request_costs(server, fs, f"{BUCKET}/in/{path.name}")}
        for rnd in range(args.rounds):
            for name, path in inputs["files"].items():
                r = res[name]
                jobs = {"local": (str(path), str(tmp / f"out-{name}-{rnd}")),
                        "s3": (f"s3://{BUCKET}/in/{path.name}",
                               f"s3://{BUCKET}/out-{name}-{rnd}")}
                order = ("local", "s3") if rnd % 2 == 0 else ("s3", "local")
                for where in order:
                    cmd = job_command(*jobs[where], args, server.url if where == "s3" else None)
                    x = run_job(cmd, server if where == "s3" else None, path.name)
                    r[where]["rounds"].append(x)
                    r[where]["command"] = " ".join(cmd)
                    log(f"round {rnd + 1} {name} {where}: wall {x['wall']:.2f} s, "
                        f"tokenize+write {x['tokenize_seconds']:.2f} s, job CPU "
                        f"{x['job_cpu']:.1f} s (child processes {x['workers_cpu']:.1f} s)"
                        + (f", moto CPU {x['moto_cpu']:.1f} s, requests {x['requests']}"
                           if x["moto_cpu"] is not None else ""))
                if rnd == 0:
                    r["parts"] = same_parts(jobs["local"][1], jobs["s3"][1], options)
                    log(f"{name}: {r['parts']} parts, equal local and S3")
                shutil.rmtree(jobs["local"][1])
                fs.rm(jobs["s3"][1].removeprefix("s3://"), recursive=True)
        for r in res.values():
            for where in ("local", "s3"):
                x = r[where]
                x["best_wall"] = min(y["wall"] for y in x["rounds"])
                best = min(x["rounds"], key=lambda y: y["tokenize_seconds"])
                x["best_tokenize"] = best["tokenize_seconds"]
                x["best_cpu"] = best["cpu_seconds"]
                x["moto_cpu"] = best["moto_cpu"]
                x["requests"] = best["requests"]
                x["job_cpu"] = best["job_cpu"]
                x["workers_cpu"] = best["workers_cpu"]
        server_info = {"dask": dask.__version__, "s3fs": s3fs.__version__,
                       "moto": moto.__version__, "rss_end": server.rss_mib()}
        text = report(res, args, info, inputs, server_info,
                      (time.perf_counter() - t_start) / 60)
    finally:
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
