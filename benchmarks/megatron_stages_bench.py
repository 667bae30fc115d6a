"""The Megatron job's stage CPU seconds in this process (threads) and on a cluster, side by
side in ONE run: where does the default command spend CPU that a cluster's job does not?

Three ways to run ``--output-format megatron --append-eod`` over the same JSON Lines,
interleaved round by round (ABCABC...):

* ``command (threads)``: the default command as a user types it (no cluster option: run
  mode threads), a fresh process;
* ``command (cluster)``: the same command with ``--n-workers 2 --threads-per-worker 1``
  (a fresh LocalCluster started by daskwp: its workers' malloc and NumPy settings);
* ``warm LocalCluster``: ``run_job(..., client=client)`` on one LocalCluster (one
  1-thread worker per core) made with distributed's defaults and warmed by a small job
  first, as ``benchmarks/pretraining_bench.py`` runs its cluster rows.

Each row: ``_summary.json``'s ``cpu_seconds`` per stage and Megatron's
``merge_cpu_seconds``. On a cluster a part's pair is written by its task (``write``) and
copied by the merge; in this process the merge thread writes the framed tokens from
memory, so ``write + merge`` is the comparable sum.

    python benchmarks/megatron_stages_bench.py --size-mb 600 --rounds 2

The report goes to ``--out`` (default benchmarks/results/megatron_stages.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import find_data, machine_info
from pretraining_bench import build_input

STAGES = ("read", "tokenize", "frame", "write", "merge")


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _stages(summary: dict) -> dict:
    out = {k: float(summary["cpu_seconds"].get(k, 0.0)) for k in STAGES if k != "merge"}
    out["merge"] = float(summary["megatron"]["merge_cpu_seconds"])
    return out


def command(jsonl: Path, out: Path, vocab: str, partition_size: str, cluster: bool) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "daskwp", "tokenize", str(jsonl), str(out), "--vocab", vocab,
           "--lowercase", "--partition-size", partition_size, "--device", "cpu", "--quiet",
           "--output-format", "megatron", "--no-add-special-tokens", "--append-eod", "--json"]
    if cluster:
        cmd += ["--n-workers", "2", "--threads-per-worker", "1"]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    return _stages(json.loads(p.stdout))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=600)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--partition-size", default="64MB")
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "megatron_stages.md"))
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    from daskwp.jobs import make_config, run_job

    data = find_data(args.data)
    vocab = str(data / "vocab" / "bert-base-uncased" / "vocab.txt")
    info = machine_info()
    rows: dict[str, list] = {"command (threads)": [], "command (cluster)": [],
                             "warm LocalCluster": []}
    with tempfile.TemporaryDirectory(prefix="megatron-stages-") as t:
        tmp = Path(t)
        jsonl = tmp / "input.jsonl"
        docs, nbytes = build_input(data, args.size_mb, jsonl)
        warm = tmp / "warm.jsonl"
        with open(jsonl, encoding="utf-8") as src, open(warm, "w") as dst:
            dst.writelines(line for _, line in zip(range(2000), src))
        common = dict(vocab=vocab, lowercase=True, quiet=True, device="cpu",
                      partition_size=args.partition_size)
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as lc, \
                Client(lc) as client:
            run_job(make_config(dict(common, input=str(warm), output=str(tmp / "w"),
                                     output_format="megatron")), client=client)
            for r in range(args.rounds):
                rows["command (threads)"].append(
                    command(jsonl, tmp / "a", vocab, args.partition_size, False))
                rows["command (cluster)"].append(
                    command(jsonl, tmp / "b", vocab, args.partition_size, True))
                s = run_job(make_config(dict(common, input=str(jsonl), output=str(tmp / "c"),
                                             output_format="megatron",
                                             add_special_tokens=False, append_eod=True)),
                            client=client)
                rows["warm LocalCluster"].append(_stages(s))
                shutil.rmtree(tmp / "c", ignore_errors=True)
                print(f"round {r + 1}: " + json.dumps({k: v[-1] for k, v in rows.items()}),
                      file=sys.stderr, flush=True)
    load_end = os.getloadavg()
    lines = [
        "# The Megatron job's stages: in this process and on a cluster (issue 39)", "",
        "Command: `python benchmarks/megatron_stages_bench.py "
        f"--size-mb {args.size_mb:g} --rounds {args.rounds} "
        f"--partition-size {args.partition_size}`", "",
        f"Machine: {info['model']}, {info['cores']} cores, commit {info['commit']}, "
        f"{info['date']}; load average at the start {info['load_start']:.2f}, at the end "
        f"{load_end[0]:.2f} (1 min), {load_end[2]:.2f} (15 min). Input: {docs:,} documents, "
        f"{nbytes / 1e6:.1f} MB of text (JSON Lines), bert-base-uncased.", "",
        "CPU seconds per stage (`_summary.json` `cpu_seconds`; `merge`: "
        "`merge_cpu_seconds`), median of the rounds (each round's values after it); the "
        "three ways interleaved round by round. `write + merge`: on a cluster each part's "
        "pair is written by its task and copied by the merge, in this process the merge "
        "thread writes the tokens from memory.", "",
        "| run | " + " | ".join(STAGES) + " | write + merge | frame / tokenize |",
        "|---" * (len(STAGES) + 3) + "|"]
    for name, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in STAGES}
        each = {k: ", ".join(f"{r[k]:.2f}" for r in rs) for k in STAGES}
        wm = [r["write"] + r["merge"] for r in rs]
        ft = [r["frame"] / r["tokenize"] for r in rs]
        lines.append(f"| {name} | " + " | ".join(
            f"{med[k]:.2f} ({each[k]})" for k in STAGES)
            + f" | {statistics.median(wm):.2f} | {statistics.median(ft):.3f} |")
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
