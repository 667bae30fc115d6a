"""``benchmarks/storage_bench.py`` (issue 44's benchmark) at a tiny size, so that it cannot
rot: the whole script (input, moto's server in its own process, the local and S3 jobs, the
part-by-part comparison, the report), and its comparison failing on parts that differ."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "storage_bench.py"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import storage_bench
    return storage_bench


@pytest.mark.slow
def test_the_script_runs_both_jobs_and_writes_the_report(tmp_path):
    out = tmp_path / "storage_bench.md"
    r = subprocess.run([sys.executable, str(SCRIPT), "--size-mb", "0.4", "--rounds", "1",
                        "--partition-size-mb", "0.15", "--scheduler", "synchronous",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    text = out.read_text(encoding="utf-8")
    assert "[HISTORY.md](HISTORY.md)" in text
    for fmt in ("text", "jsonl"):
        assert re.search(rf"\| {fmt} \(0\.[45] MB\) \| local -> local \| `daskwp tokenize /",
                         text)
        assert re.search(rf"\| {fmt} \(0\.[45] MB\) \| s3 -> s3 \| `daskwp tokenize "
                         rf"s3://daskwp-bench/in/big\.{'txt' if fmt == 'text' else fmt} ", text)
        assert f"| {fmt}: S3 / local, tokenize+write (goal 0.70x) |" in text
    assert "--storage-option endpoint_url=http://127.0.0.1:" in text
    assert "parts are equal table by table" in text
    assert re.search(r"^\| text \| s3 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", text, re.M)
    assert "equal local and S3" in r.stderr
    rows = [line for line in text.splitlines() if "| s3 -> s3 |" in line]
    assert len(rows) == 2 and all(int(line.split("|")[-2]) >= 3 for line in rows), rows
    # the input object's GETs: one, in this process (the listing's, for its first MB, goes
    # on through every partition into the spool; the counts and writes read that)
    for fmt in ("text", "jsonl"):
        row = re.search(rf"^\| {fmt} \| (\d+) \| \d+ \| \d+ \| \d+ \| \d+ \|$", text, re.M)
        assert row and int(row.group(1)) == 1, (fmt, row)


def test_the_cpu_of_a_jobs_processes_is_read_while_it_runs(bench):
    """ChildCPU sums the CPU seconds of the processes below the job's (a grandchild too),
    not the job's own."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    # the grandchild idles 1 s after its burn: a watch thread that a loaded machine wakes
    # late still reads its final CPU time before it exits
    job = subprocess.Popen([sys.executable, "-c",
                            f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
                            f"{burn + chr(10) + 'time.sleep(1.0)'!r}]); {burn}"])
    watch = bench.ChildCPU(job.pid, 0.02)
    watch.start()
    job.wait()
    assert 0.4 <= watch.total() < 1.1


def test_the_request_log_is_counted(bench):
    log = ('127.0.0.1 - - [06/Dec/2026 17:29:59] "\x1b[33mGET /b/in/big.txt HTTP/1.1\x1b[0m" '
           '206 -\n127.0.0.1 - - [06/Dec/2026 17:29:59] "HEAD /b/in/big.txt HTTP/1.1" 200 -\n'
           '127.0.0.1 - - [x] "GET /b/out/_job.json?x=1 HTTP/1.1" 200 -\n'
           '127.0.0.1 - - [x] "PUT /b/out/part-00000.parquet HTTP/1.1" 200 -\n'
           'Starting a new Thread\n127.0.0.1 - - [x] "DELETE /b/out/x HTTP/1.1" 204 -\n')
    reqs = bench.parse_request_log(log)
    assert reqs[0] == ("GET", "/b/in/big.txt") and reqs[2] == ("GET", "/b/out/_job.json")
    assert bench.request_counts(reqs, "big.txt") == {
        "get_input": 1, "get_other": 1, "head": 1, "put_post": 1, "other": 1}


def _parts(folder: Path, tables) -> str:
    folder.mkdir()
    for i, t in enumerate(tables):
        pq.write_table(t, folder / f"part-{i:05d}.parquet")
    return str(folder)


def test_the_comparison_fails_on_parts_that_differ(tmp_path, bench):
    a = pa.table({"input_ids": [[1, 2], [3]]})
    b = pa.table({"input_ids": [[1, 2], [4]]})
    same = _parts(tmp_path / "x", [a, a])
    assert bench.same_parts(same, _parts(tmp_path / "y", [a, a]), None) == 2
    with pytest.raises(AssertionError, match="part-00001.parquet differs"):
        bench.same_parts(same, _parts(tmp_path / "z", [a, b]), None)
    with pytest.raises(AssertionError, match="the parts differ"):
        bench.same_parts(same, _parts(tmp_path / "w", [a]), None)
