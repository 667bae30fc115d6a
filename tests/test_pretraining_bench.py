"""``benchmarks/pretraining_bench.py`` at a tiny size: every job row gives its ratio to the
burst kernel, the sustained kernel and, each round, the kernel pass just before it, and
each ratio is recomputed here from the figures the report prints beside it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import DATA, REPO_ROOT, requires_full_data
from test_benchmarks_common import assert_ratio

pytestmark = [requires_full_data, pytest.mark.slow]

NUM = r"[0-9][0-9,]*\.[0-9]+"
JOBS = ("cluster: daskwp --output-format megatron", "cluster: daskwp count",
        "cluster: daskwp tokenize --padding do_not_pad", "cluster: daskwp tokenize --pack 512",
        "daskwp tokenize --output-format megatron --append-eod, whole command",
        "default command: daskwp count", "default command: daskwp tokenize --padding",
        "default command: daskwp tokenize --pack 512")


def _interval(text: str) -> tuple[float, float]:
    half = 0.5 * 10 ** -len(text.split(".")[1])
    v = float(text.replace(",", ""))
    return v - half, v + half


def test_every_job_has_its_burst_sustained_and_adjacent_ratio(tmp_path):
    pytest.importorskip("megatron.core", reason="megatron tier: pip install "
                                                "'daskwp[megatron]'")
    rounds = 2
    report = tmp_path / "report.md"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "pretraining_bench.py"),
         "--size-mb", "12", "--hf-mb", "0.5", "--kernel-mb", "4", "--partition-size", "4MB",
         "--rounds", str(rounds), "--data", str(DATA), "--tmp", str(tmp_path),
         "--out", str(report)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = report.read_text()
    assert re.search(r"sustained: the same call over the whole input \(12 MB in [0-9]+ "
                     r"batches of 4MB", text)
    check_report(text, rounds)


def check_report(text: str, rounds: int) -> None:
    """The kernel rows and every job row's ratios of a pretraining_bench report of
    ``rounds`` rounds, recomputed from the figures it prints."""
    rows = {}
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) == 3 and re.fullmatch(NUM, cells[1]):
            rows[cells[0][2:]] = (cells[1], cells[2].rstrip(" |"))

    (burst_row, (burst, _)), = [(k, v) for k, v in rows.items()
                                if k.startswith("bare kernel, burst")]
    passes = re.search(r"short passes over the first .* MB, one right before every timed "
                       r"job \(([^;]*);", burst_row).group(1).split(", ")
    assert len(passes) == 8 * rounds                 # one before every timed job
    assert float(burst) == max(map(float, passes))
    (sus_row, (sustained, _)), = [(k, v) for k, v in rows.items()
                                  if k.startswith("bare kernel, sustained")]
    sus_passes = re.findall(rf"({NUM}) MB/s in {NUM} s", sus_row)
    assert len(sus_passes) == 2 and float(sustained) == max(map(float, sus_passes))

    for job in JOBS:
        (name, (mbps, ratio)), = [(k, v) for k, v in rows.items() if job in k]
        m = re.search(rf"({NUM})x burst kernel; ({NUM})x sustained kernel; each round to "
                      rf"the pass before it: (.*?)(;|$)", ratio)
        assert m, (name, ratio)
        assert_ratio(m.group(1), mbps, burst, f"{name} / burst")
        assert_ratio(m.group(2), mbps, sustained, f"{name} / sustained")
        each = re.findall(rf"({NUM}) \(({NUM}) / ({NUM})\)", m.group(3))
        assert len(each) == rounds, (name, m.group(3))
        for r, job_mbps, pass_mbps in each:
            assert_ratio(r, job_mbps, pass_mbps, f"{name}, a round")
            assert pass_mbps in passes, (name, pass_mbps)
        assert mbps == max(each, key=lambda x: float(x[1]))[1], (name, each)   # the best
        if "--pack 512" in job:   # its cost against the unpacked job, each round too
            plain = [v for k, v in rows.items()
                     if k.startswith(name.split(": ")[0]) and "do_not_pad" in k][0]
            cost = re.search(rf"packing costs (-?{NUM})% of the unpacked job's time \(each "
                             rf"round, the jobs to the passes before them: ([^)]*)\)", ratio)
            p_lo, p_hi = _interval(mbps)
            u_lo, u_hi = _interval(plain[0])
            c_lo, c_hi = _interval(cost.group(1))
            assert c_lo <= 100 * (u_hi / p_lo - 1) and 100 * (u_lo / p_hi - 1) <= c_hi, cost
            plain_each = re.findall(rf"({NUM}) \(({NUM}) / ({NUM})\)", plain[1].split(
                "each round to the pass before it: ")[1])
            for c, (_, pj, pk), (_, uj, uk) in zip(cost.group(2).split("%, "), each,
                                                   plain_each):
                want = 100 * ((float(uj) / float(uk)) / (float(pj) / float(pk)) - 1)
                assert abs(float(c.rstrip("%")) - want) < 0.05 + 2 * abs(want + 100) * sum(
                    0.05 / float(x) for x in (pj, pk, uj, uk)), (c, want)
