"""``benchmarks/pipeline_bench.py`` cannot rot: its whole flow (sizes, the kernel cold,
burst and sustained, the extras, the soak with a worker killed) at a tiny size, every
kernel ratio recomputed from the figures the report prints, and its checks (the streaming
input, the disk refusal, the soak's logID and sample checks) each shown to fail on a bad
case."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from conftest import DATA, REPO_ROOT, requires_full_data
from daskwp.cli import main as cli_main
from test_benchmarks_common import assert_ratio

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import pipeline_bench as pb  # noqa: E402

pytestmark = requires_full_data


@pytest.fixture(scope="module")
def base():
    return pb.corpus_base(DATA)


def test_input_is_written_streaming_to_the_size_asked(base, tmp_path):
    text, n = base
    target = len(text) + len(text) // 3          # one copy and a cut one
    inp = pb.write_text(base, target, tmp_path / "in.txt")
    data = (tmp_path / "in.txt").read_bytes()
    assert inp["bytes"] == len(data) <= target
    assert target - len(data) < 10_000          # cut after the last whole line
    assert data.endswith(b"\n") and data.startswith(text)
    assert inp["lines"] == data.count(b"\n") > n
    got = list(pb.text_batches(tmp_path / "in.txt", 1 << 20))
    assert sum(b for _, b in got) == len(data)
    assert sum(len(a) for a, _ in got) == inp["lines"]
    assert len(got) > 1 and all(b >= 1 << 20 for _, b in got[:-1])
    first = got[0][0]
    assert first[0].as_py() == text[:text.index(b"\n")]
    limited = list(pb.text_batches(tmp_path / "in.txt", 1 << 20, 3 << 20))
    assert len(limited) == 3 and sum(b for _, b in limited) >= 3 << 20


def test_short_disk_is_refused_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"the 10 GB soak needs about .* GB free in .*, "
                                         r"which has .* GB; pass --tmp"):
        pb.ensure_disk(tmp_path, 1e18, "the 10 GB soak")
    pb.ensure_disk(tmp_path, 1, "a byte")
    assert pb.main(["--plan", "--tmp", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "sizes 0.3, 3, 10 GB" in err and "soak 10 GB (reference 1 GB)" in err
    assert "takes roughly" in err and "needs ~" in err
    p = pb.plan(pb.argparse.Namespace(sizes_gb=[0.3, 3, 10], extras_gb=3, soak_gb=10,
                                      soak_ref_gb=1, rounds=2, kernel_mb=1000,
                                      cold_batches=2, partition_mb=64))
    assert 15e9 < p["disk"] < 30e9 and 5 * 60 < p["seconds"] < 60 * 60
    with pytest.raises(SystemExit):
        pb.main(["--sizes-gb", "0.3,3", "--extras-gb", "10", "--plan"])


def _job(base, tmp_path):
    inp = pb.write_text(base, 3 << 20, tmp_path / "in.txt")
    out = tmp_path / "out"
    rc = cli_main(["tokenize", str(inp["text"]), str(out), "--scheduler",
                          "synchronous", "--partition-size", "1MB", "--max-length", "128",
                          "--stride", "32", "--padding", "do_not_pad", "-q"])
    assert rc == 0
    return inp, out


def test_the_rss_poller_polls_its_workers_but_scans_the_process_tree_rarely(monkeypatch):
    """The poller runs in the process whose job it measures: it finds a worker (a spawned
    child) and polls it every 20 ms, but scans the process tree (psutil's children(), which
    reads every process's stat file) every SCAN_SECONDS only, not at every poll."""
    import os
    import time
    child = subprocess.Popen([sys.executable, "-c",
                              "import time; time.sleep(300)  # spawn_main"])
    try:
        poll = pb.RssPoller(os.getpid(), hwm=False)
        scans = []
        children = poll.root.children
        monkeypatch.setattr(poll.root, "children",
                            lambda **kw: scans.append(1) or children(**kw))
        t = time.monotonic()
        with poll:
            while child.pid not in poll.rss and time.monotonic() - t < 60:
                time.sleep(0.02)
            time.sleep(1.0)
        wall = time.monotonic() - t
        assert child.pid in poll.rss and poll.rss[child.pid][1] > 0
        assert 1 <= len(scans) <= wall / pb.RssPoller.SCAN_SECONDS + 1, len(scans)
    finally:
        child.kill()
        child.wait()


def test_soak_checks_pass_on_a_good_output_and_fail_on_a_bad_one(base, tmp_path):
    inp, out = _job(base, tmp_path)
    tok = daskwp.WordPieceTokenizer()
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) >= 3
    assert pb.check_logids(out, inp["lines"])[0]
    assert pb.check_sample(out, [0, 1, len(parts) - 1], tok)[0]
    # a document more or less than the input's lines
    ok, why = pb.check_logids(out, inp["lines"] + 1)
    assert not ok and "documents" in why
    # one token id changed in part 1: the sample check names it
    t = pq.read_table(parts[1])
    ids = t.column("input_ids").combine_chunks()
    vals = ids.values.to_numpy().copy()
    vals[5] += 1
    bad = pa.ListArray.from_arrays(ids.offsets, pa.array(vals, ids.type.value_type)) \
        if isinstance(ids, pa.ListArray) else \
        pa.LargeListArray.from_arrays(ids.offsets, pa.array(vals, ids.type.value_type))
    pq.write_table(t.set_column(t.schema.get_field_index("input_ids"), "input_ids", bad),
                   parts[1])
    assert pb.check_sample(out, [0], tok)[0]
    ok, why = pb.check_sample(out, [0, 1], tok)
    assert not ok and "[1]" in why
    # the last document's rows gone from the last part: its logID is missing
    t = pq.read_table(parts[-1])
    logid = t.column("logID").to_numpy()
    pq.write_table(t.slice(0, int(np.searchsorted(logid, logid[-1]))), parts[-1])
    ok, why = pb.check_logids(out, inp["lines"])
    assert not ok and parts[-1].name in why


def test_a_failed_soak_is_reported_as_not_met():
    rows = []
    killed = {"pid": 1, "seconds": 3.0, "parts_done": 5, "n_parts": 10, "missing": [5]}
    soak = {"ref": {"failed": "exit 1: boom", "killed": killed, "size_gb": 1},
            "main": {"failed": "exit 1: JobError: partition 5 lost", "killed": killed,
                     "size_gb": 10}}
    pb._soak_goals(lambda name, value, ok, figure=None: rows.append((name, ok, figure)),
                   {}, 3, soak)
    assert rows == [("soak 10 GB: a worker killed half way", True, "pid 1 at 5 of 10 parts"),
                    ("soak 10 GB: completes", False,
                     "failed: exit 1: JobError: partition 5 lost")]
    lines = []
    pb._report_soak(lines, pb.argparse.Namespace(workers=2, soak_kill_at=0.5), dict(
        soak, ref=dict(soak["ref"], rss=[], driver_rss=0),
        main=dict(soak["main"], rss=[], driver_rss=0)))
    assert any("| soak, 10 GB | failed (exit 1: JobError: partition 5 lost) |" in x
               for x in lines), lines


@pytest.mark.slow
def test_the_whole_flow_runs_at_a_tiny_size_with_a_worker_killed(tmp_path):
    report = tmp_path / "report.md"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "pipeline_bench.py"),
         "--sizes-gb", "0.006", "--extras-gb", "0.006", "--soak-gb", "0.02",
         "--soak-ref-gb", "0.01", "--partition-mb", "1", "--rounds", "2",
         "--kernel-mb", "2", "--cold-batches", "2", "--overhead-partitions", "20",
         "--graph-partitions", "100", "--data", str(DATA), "--tmp", str(tmp_path),
         "--out", str(report)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "takes roughly" in proc.stderr
    text = report.read_text()
    for heading in ("## The bare kernel: cold, burst and sustained", "## Batch jobs by size",
                    "## At 0.006 GB", "## The soak", "## Against the goals",
                    "## Where the time goes"):
        assert heading in text, heading
    assert "[HISTORY.md](HISTORY.md)" in text
    for row in ("| cold (", "| burst, at 0.006 GB", "| sustained, at 0.006 GB",
                "| 0.006 GB | CLI ragged, tokenize+write", "| 0.006 GB | CLI padded, whole",
                "default (no cluster option", "accessor to_parquet ragged",
                "CLI padded on a running cluster", "read_tokenized, ragged parts",
                "| reference, 0.01 GB |", "| soak, 0.02 GB |"):
        assert row in text, row
    goals = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()
             if line.startswith("| ") and line.endswith(("| yes |", "| no |"))}
    for name in ("soak 0.02 GB: a worker killed half way", "soak 0.02 GB: completes",
                 "soak 0.02 GB: every logID present exactly once",
                 "soak 0.02 GB: output equals single-machine tokenization on a sample"):
        assert goals[name].endswith("| yes |"), goals[name]
    for name in ("0.006 GB job ragged on its own 2-worker cluster, tokenize+write (target "
                 ">= 0.60x the burst kernel)",
                 "0.006 GB job padded on its own 2-worker cluster, tokenize+write (target "
                 ">= 0.45x the burst kernel)",
                 "0.006 GB job ragged, default command: write CPU / tokenize CPU (target "
                 "<= 0.50)",
                 "0.006 GB to_parquet ragged (target >= 0.60x the burst kernel)",
                 "0.006 GB job on a running cluster ragged (target >= 0.60x the burst kernel)",
                 "0.006 GB job ragged: write CPU / tokenize CPU (target <= 0.50)",
                 "0.006 GB to_parquet ragged: write CPU / tokenize CPU (target <= 0.50)"):
        assert name in goals, (name, list(goals))
    assert any(n.startswith("soak 0.02 GB: the driver's peak RSS") for n in goals)
    assert any(n.startswith("soak 0.02 GB: each worker's peak RSS") for n in goals)
    assert any(n.startswith("soak 0.02 GB: throughput within 10%") for n in goals)
    assert any(n.startswith("0.006 GB job's whole command, default") for n in goals)
    assert any(n.startswith("0.006 GB job ragged, default command (no cluster option; ran on: "
                            "threads), tokenize+write") for n in goals), list(goals)
    assert list(tmp_path.glob("daskwp-pipeline-*")) == []     # cleaned up
    check_kernel_ratios(text, "0.006 GB", rounds=2)


NUM = r"[0-9][0-9,]*\.[0-9]+"


def check_kernel_ratios(text: str, size: str, rounds: int) -> None:
    """Every job row's and kernel goal's ratio to the burst kernel, the sustained kernel and,
    each round, the short pass before it, recomputed from the kernel table and the passes
    the report lists; a ratio missing or wrong fails."""
    lines = text.splitlines()
    kernel = {}
    for kind in ("burst", "sustained"):
        (row,) = [x for x in lines if x.startswith(f"| {kind}, at {size} (")]
        kernel[kind] = dict(zip(("encode", "ragged", "padded"),
                                (c.strip(" |") for c in row.split(" | ")[1:4])))
    (listed,) = [x for x in lines if x.startswith(f"Short passes at {size}, MB/s in order: ")]
    passes = dict(part.split(" ", 1) for part in listed.split(": ", 1)[1].rstrip(".")
                  .split("; "))
    passes = {m: v.split(", ") for m, v in passes.items()}
    for key in ("ragged", "padded"):
        assert kernel["burst"][key] == max(passes[key], key=float), (key, passes[key])
    assert kernel["sustained"]["encode"] == "–" and len(passes["encode"]) == 1

    def check(name, key, mbps, cells, best_of_rounds):
        burst, sus, each = cells[:3]
        assert_ratio(burst, mbps, kernel["burst"][key], f"{name} / burst")
        assert_ratio(sus, mbps, kernel["sustained"][key], f"{name} / sustained")
        found = re.findall(rf"({NUM}) \(({NUM}) / ({NUM})\)", each)
        assert len(found) == rounds, (name, each)
        for r, job, k in found:
            assert_ratio(r, job, k, f"{name}, a round")
            assert k in passes[key], (name, k, passes[key])
        if best_of_rounds == "whole":   # the default command's round with the best wall
            assert mbps == found[best_whole][1], (name, found, best_whole)
        elif best_of_rounds:
            assert mbps == max((j for _, j, _ in found), key=float), (name, found)

    # The default command's rows are one round's, the one whose whole command was fastest
    # (its tokenize+write figure need not be its rounds' best).
    (whole_row,) = [x for x in lines if x.startswith(f"| {size} | CLI ragged, default")
                    and "whole command" in x]
    walls = [float(j) for _, j, _ in
             re.findall(rf"({NUM}) \(({NUM}) / ({NUM})\)", whole_row.split(" | ")[5])]
    best_whole = walls.index(max(walls))

    checked = 0
    for line in lines:
        cells = line.split(" | ")
        if line.startswith(f"| {size} | CLI") and len(cells) == 10:
            key = "padded" if "padded" in cells[1] else "ragged"
            whole = "whole command" in cells[1]
            check(cells[1], key, cells[2], cells[3:6],
                  "whole" if "default" in cells[1] and not whole else not whole or
                  "default" in cells[1])
            checked += 1
        elif line.startswith(("| CLI ragged on a running", "| CLI padded on a running",
                              "| accessor to_parquet")):
            key = "padded" if "padded" in cells[0] else "ragged"
            check(cells[0], key, cells[2], cells[3:6], True)
            checked += 1
        elif "x the burst kernel (" in line:   # a kernel goal
            key = "padded" if " padded " in cells[0] else "ragged"
            m = re.search(rf"({NUM}x) the burst kernel \(({NUM}) MB/s\); ({NUM}x) the "
                          rf"sustained kernel; each round to the pass before it: (.*); {NUM}x "
                          rf"the cold kernel", cells[1])
            assert m, line
            check(cells[0], key, m.group(2), [m.group(1), m.group(3), m.group(4)],
                  "whole" if "default command" in cells[0] else True)
            checked += 1
    assert checked == 6 + 4 + 7, checked     # job rows, extras rows, kernel goals
