"""Batch jobs: where the output may be, what an interrupted or empty job leaves, and how a
rerun checks the parts it keeps.

Each test pins one behaviour of docs/batch-jobs.md ("Output", "Resuming, and what a failure
leaves behind", "Exit status"): the output directory inside the input directory, overlaps
that are refused before anything is deleted, unusable output paths, SIGTERM, an empty input,
input errors that leave nothing behind, parts with corrupt data pages, and the summary's
timing line.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from daskwp import jobs
from daskwp.cli import main

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "daskwp" / "data" / "sample.txt"


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


def sample_lines() -> list[str]:
    return SAMPLE.read_text(encoding="utf-8")[:-1].split("\n")


def write_text(path: Path, lines: list[str]) -> Path:
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def part_files(out: Path) -> list[Path]:
    return sorted(out.glob("part-*.parquet"))


def read_output(out: Path) -> pa.Table:
    # padded rows are stored trimmed (docs/design.md §3.3): read back as written
    return daskwp.read_tokenized(out).to_table()


def mtimes(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in part_files(out)}


def assert_matches(out: Path, tok, docs: list) -> None:
    table = read_output(out)
    exp = tok(docs)
    np.testing.assert_array_equal(
        np.stack([table.column(c).to_numpy() for c in ("logID", "start", "stop")], axis=1),
        exp["metadata"])
    ids = table.column("input_ids").combine_chunks().flatten().to_numpy()
    np.testing.assert_array_equal(ids.reshape(exp["input_ids"].shape), exp["input_ids"])
    assert json.loads((out / "_summary.json").read_text())["documents"] == len(docs)


def cli(*args, capsys) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:  # argparse
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def sync(inp, out, *extra) -> list:
    return ["tokenize", inp, out, "--scheduler", "synchronous", *extra]


def daskwp_command() -> list[str]:
    """``python -m daskwp`` with this interpreter's flags (``-S`` when the suite runs so)."""
    return [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", "daskwp"]


# -- (a) the output directory and the input ----------------------------------------------

def test_output_inside_the_input_directory_is_not_an_input(tmp_path, tok, capsys):
    """OUTPUT inside INPUT: the output is left out of the input walk, so a rerun resumes
    (nothing rewritten) and --overwrite rewrites the same dataset instead of reading its own
    parts as input."""
    lines = sample_lines()[:300]
    src = tmp_path / "in"
    src.mkdir()
    write_text(src / "a.txt", lines[:120])
    write_text(src / "b.txt", lines[120:])
    out = src / "tokenized"
    args = sync(src, out, "--partition-size", "8KB", "--json")
    rc, stdout, err = cli(*args, capsys=capsys)
    assert rc == 0, err
    assert json.loads(stdout)["input_files"] == 2
    before = mtimes(out)
    rc, stdout, err = cli(*args, capsys=capsys)
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["partitions_written"] == 0 and summary["input_files"] == 2
    assert mtimes(out) == before
    rc, stdout, err = cli(*args, "--overwrite", capsys=capsys)
    assert rc == 0, err
    assert json.loads(stdout)["input_files"] == 2
    assert_matches(out, tok, lines)


def test_output_equal_to_the_input_is_refused(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    write_text(src / "a.txt", ["a b", "c"])
    rc, _, err = cli(*sync(src, src, "--overwrite"), capsys=capsys)
    assert rc == 2, err
    assert "is the output directory" in err and "its own output" in err
    assert sorted(os.listdir(src)) == ["a.txt"]  # nothing created, nothing deleted


@pytest.mark.parametrize("inside", ["part-00000.parquet", "*.parquet"])
def test_input_inside_the_output_is_refused_before_anything_is_deleted(tmp_path, capsys,
                                                                       inside):
    """An input inside OUTPUT cannot be left out: refused with exit 2 before --overwrite
    deletes the earlier, complete output (it used to delete it and then fail)."""
    inp = write_text(tmp_path / "in.txt", sample_lines()[:100])
    out = tmp_path / "out"
    assert cli(*sync(inp, out, "-q"), capsys=capsys)[0] == 0
    kept = sorted(os.listdir(out))
    rc, _, err = cli(*sync(out / inside, out, "--column", "input_ids", "--overwrite"),
                     capsys=capsys)
    assert rc == 2, err
    assert "inside the output directory" in err
    assert sorted(os.listdir(out)) == kept and (out / "_summary.json").exists()


# -- (b) an output path that cannot be used ------------------------------------------------

def test_unusable_output_path_is_an_error_with_exit_2(tmp_path, capsys):
    inp = write_text(tmp_path / "in.txt", ["a b"])
    (tmp_path / "file.txt").write_text("x")
    for out, needle in ((tmp_path / "file.txt" / "sub", "file.txt"),
                        ("/sys/daskwp-out", "/sys/daskwp-out"),
                        (tmp_path / "file.txt", "not a directory")):
        rc, _, err = cli(*sync(inp, out), capsys=capsys)
        assert rc == 2, err
        assert "daskwp: error:" in err and needle in err, err
        assert "Traceback" not in err
    cfg = jobs.make_config({"input": str(inp), "output": str(tmp_path / "file.txt" / "sub"),
                            "scheduler_address": "synchronous", "quiet": True})
    with pytest.raises(jobs.OutputConflictError, match="cannot use output directory"):
        jobs.run_job(cfg)
    assert (tmp_path / "file.txt").read_text() == "x"


# -- (c) SIGTERM -----------------------------------------------------------------------------

@pytest.mark.slow   # a subprocess per cluster, signalled mid-job
@pytest.mark.parametrize("cluster", [["--scheduler", "synchronous"],
                                     ["--scheduler", "threads"],
                                     pytest.param(["--n-workers", "1", "--threads-per-worker", "1",
                                      "--device", "cpu"], marks=pytest.mark.slow)],
                         ids=["synchronous", "threads", "local-cluster"])
def test_sigterm_is_handled_like_an_interrupt(tmp_path, tok, cluster):
    """SIGTERM mid-job: the message, exit status 130, no temporary part left; the rerun
    completes the dataset."""
    lines = sample_lines() * 3
    inp = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    cmd = daskwp_command() + ["tokenize", str(inp), str(out), "--partition-size", "2KB",
                              *cluster]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(part_files(out)) >= 2:
            break
        time.sleep(0.005)
    running = proc.poll() is None
    if running:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert running, "the job finished before it could be stopped"
    err = err.decode()
    assert proc.returncode == 130, err
    # the last line is daskwp's message, and no traceback of the interrupt (a local
    # cluster's workers may still log their lost connection as they are stopped)
    assert err.rstrip().splitlines()[-1] == \
        "daskwp: interrupted by SIGTERM; run the same command again to resume", err
    assert "KeyboardInterrupt" not in err and "/daskwp/" not in err, err
    assert not list(out.glob(".tmp*")), os.listdir(out)
    assert not (out / "_summary.json").exists()
    rerun = subprocess.run(cmd[:-len(cluster)] + ["--scheduler", "synchronous", "--json",
                                                   "-q"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["partitions_skipped"] >= 2
    assert_matches(out, tok, lines)


# -- (d) an empty input ------------------------------------------------------------------

def test_empty_input_writes_one_empty_part_with_the_schema(tmp_path, capsys):
    import dask.dataframe as dd
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_bytes(b"")
    (src / "b.jsonl").write_bytes(b"")
    out = tmp_path / "out"
    rc, stdout, err = cli(*sync(src, out, "--json"), capsys=capsys)
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["documents"] == summary["rows"] == 0 and summary["partitions"] == 1
    assert [p.name for p in part_files(out)] == ["part-00000.parquet"]
    schema = pq.read_schema(out / "part-00000.parquet")
    # padded rows stored trimmed: no mask column, the width in the footer (design §3.3)
    assert schema.names == ["logID", "start", "stop", "input_ids", "window"]
    assert schema.field("input_ids").type == pa.list_(pa.int32())
    assert schema.field("logID").type == pa.int64()
    frame = dd.read_parquet(str(out)).compute()
    assert len(frame) == 0 and list(frame.columns) == schema.names
    back = daskwp.read_tokenized(out).to_dask().compute()
    assert len(back) == 0 and list(back.columns) == ["logID", "start", "stop", "input_ids",
                                                    "attention_mask", "window"]
    rc, stdout, err = cli(*sync(src, out, "--json"), capsys=capsys)  # resumes: complete
    assert rc == 0, err
    assert json.loads(stdout)["partitions_skipped"] == 1


# -- (e) input errors leave no output directory -----------------------------------------------

def test_input_errors_leave_no_output_directory(tmp_path, capsys):
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "t.parquet")
    txt = write_text(tmp_path / "t.txt", ["plain text, not parquet"])
    for inp, extra, needle in ((tmp_path / "t.parquet", ["--column", "nope"], "no column"),
                               (txt, ["--input-format", "parquet"], "cannot read input"),
                               (txt, ["--input-format", "jsonl"], "cannot read input")):
        out = tmp_path / "out"
        rc, _, err = cli(*sync(inp, out, *extra), capsys=capsys)
        assert rc == 2 and needle in err, err
        assert not out.exists(), (extra, os.listdir(out))


# -- (f) resume checks the data pages of the parts it keeps ----------------------------------

def _footer_start(path: Path) -> int:
    data = path.read_bytes()
    assert data[-4:] == b"PAR1"
    return len(data) - 8 - struct.unpack("<i", data[-8:-4])[0]


def _job_of_small_parts(tmp_path, capsys, n_lines: int):
    """A synchronous job on ``n_lines`` sample lines in 10 KB partitions: the lines, the
    output folder, the command's arguments, the output's table and the part names."""
    lines = sample_lines()[:n_lines]
    inp = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    args = sync(inp, out, "--partition-size", "10KB", "--json")
    assert cli(*args, capsys=capsys)[0] == 0
    return lines, out, args, read_output(out), sorted(mtimes(out))


def _rerun_rewrites_only(out, args, names, victim, capsys) -> None:
    """Running the job again writes ``victim`` and keeps every other part."""
    before = mtimes(out)
    time.sleep(0.01)
    rc, stdout, err = cli(*args, capsys=capsys)
    assert rc == 0, err
    assert json.loads(stdout)["partitions_written"] == 1
    after = mtimes(out)
    assert {n for n in names if after[n] != before[n]} == {victim.name}


def test_resume_rewrites_a_part_whose_data_pages_are_corrupt(tmp_path, tok, capsys):
    lines, out, args, first, names = _job_of_small_parts(tmp_path, capsys, 600)
    assert len(names) >= 4
    victim = out / names[2]
    md = pq.read_metadata(victim)
    meta = json.loads(md.metadata[b"daskwp"])
    assert meta["rows"] == md.num_rows
    assert len(md.metadata[jobs.parts.CHECKSUM_KEY]) == 32
    # flip bytes inside the data pages of the input_ids column; the footer stays intact
    col = next(md.row_group(0).column(j) for j in range(md.num_columns)
               if md.row_group(0).column(j).path_in_schema.startswith("input_ids"))
    at = col.data_page_offset + col.total_compressed_size // 2
    assert at < _footer_start(victim)
    raw = bytearray(victim.read_bytes())
    raw[at:at + 16] = bytes(b ^ 0xFF for b in raw[at:at + 16])
    victim.write_bytes(bytes(raw))
    pq.read_metadata(victim)  # the footer still reads
    _rerun_rewrites_only(out, args, names, victim, capsys)
    assert read_output(out).equals(first)
    assert_matches(out, tok, lines)


def test_check_part_verifies_the_recorded_checksum(tmp_path, capsys):
    inp = write_text(tmp_path / "in.txt", sample_lines()[:50])
    out = tmp_path / "out"
    assert cli(*sync(inp, out, "-q"), capsys=capsys)[0] == 0
    part = part_files(out)[0]
    job_id = json.loads((out / "_job.json").read_text())["job_id"]
    st = jobs.check_part(str(part), 0, job_id, 50, 0)
    assert st is not None and st["documents"] == 50 and st["rows"] == 50
    assert jobs.check_part(str(part), 0, job_id, 49, 0) is None    # another count
    assert jobs.check_part(str(part), 0, "x" * 32, 50, 0) is None  # another job
    raw = bytearray(part.read_bytes())
    raw[8] ^= 0x01  # the first column chunk's bytes
    part.write_bytes(bytes(raw))
    assert jobs.check_part(str(part), 0, job_id, 50, 0) is None


def test_resume_keeps_parts_with_the_older_sha256_checksum(tmp_path, tok, capsys):
    """Parts written before the 128-bit part checksum record the first 128 bits of SHA-256
    under ``daskwp.data_sha256``: a rerun still verifies and keeps them, and rewrites one
    whose data pages changed."""
    import hashlib
    lines, out, args, first, names = _job_of_small_parts(tmp_path, capsys, 300)
    job_id = json.loads((out / "_job.json").read_text())["job_id"]
    for name in names:   # rewrite every footer as an older daskwp wrote it
        raw = (out / name).read_bytes()
        start = _footer_start(out / name)
        kv = pq.read_metadata(out / name).metadata
        footer = raw[start:-8].replace(b"\x13daskwp.data_hash128", b"\x12daskwp.data_sha256")
        footer = footer.replace(kv[b"daskwp.data_hash128"],
                                hashlib.sha256(raw[:start]).hexdigest()[:32].encode())
        (out / name).write_bytes(raw[:start] + footer + struct.pack("<i", len(footer))
                                 + b"PAR1")
        assert b"daskwp.data_hash128" not in pq.read_metadata(out / name).metadata
    meta = json.loads(pq.read_metadata(out / names[0]).metadata[b"daskwp"])
    assert jobs.check_part(str(out / names[0]), 0, job_id, meta["documents"], 0) is not None
    victim = out / names[1]
    raw = bytearray(victim.read_bytes())
    raw[8] ^= 0x01
    victim.write_bytes(bytes(raw))
    _rerun_rewrites_only(out, args, names, victim, capsys)
    assert read_output(out).equals(first)
    assert_matches(out, tok, lines)


# -- (g) the summary's timing line ---------------------------------------------------------

def test_summary_says_which_time_is_which(tmp_path, capsys):
    inp = write_text(tmp_path / "in.txt", sample_lines()[:200])
    out = tmp_path / "out"
    rc, stdout, err = cli(*sync(inp, out), capsys=capsys)
    assert rc == 0, err
    line = next(l for l in stdout.splitlines() if l.strip().startswith("time"))
    assert "wall " in line and "; tokenize+write " in line and " at " in line, line
    assert line.rstrip().endswith("MB/s")
    rc, stdout, err = cli(*sync(inp, out), capsys=capsys)
    line = next(l for l in stdout.splitlines() if l.strip().startswith("time"))
    assert "wall " in line and "nothing to write" in line, line
