"""Batch jobs: the ``daskwp`` command, conf/*.yaml, resumable Parquet output, clear errors.

The reference for every output is the single-machine tokenizer on the same documents, with
logIDs numbered globally (files in sorted order, rows in file order). Cluster tests share one
in-process LocalCluster listening on TCP (so a ``daskwp`` subprocess can join it); the
quick start and the killed-worker test start real worker processes.
"""

from __future__ import annotations

import json
import os
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

from conftest import run_killing_a_worker, run_killing_the_job

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
SAMPLE = REPO / "daskwp" / "data" / "sample.txt"
#: conf files and how this module runs them; a new conf file needs an entry (and a test).
CONF_FILES = {"quickstart.yaml", "cpu-cluster.yaml", "multi-gpu.yaml",
              "existing-scheduler.yaml",
              "qa-pairs.yaml"}   # run by tests/test_pairs_dask.py


# -- helpers ------------------------------------------------------------------------------

def sample_lines() -> list[str]:
    text = SAMPLE.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")  # "\n" only: never str.splitlines


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


@pytest.fixture(scope="module")
def cluster_address():
    """A LocalCluster of two worker threads in this process, reachable over TCP."""
    from distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=":0") as cluster:
        yield cluster.scheduler_address


def write_text(path: Path, lines: list[str]) -> Path:
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def read_output(out: Path) -> pa.Table:
    parts = sorted(out.glob("part-*.parquet"))
    assert parts, f"no part files in {out}"
    # padded rows are stored trimmed (docs/design.md §3.3): read back as written
    return daskwp.read_tokenized(out).to_table()


def assert_matches(out: Path, tok, docs: list, **kw) -> pa.Table:
    """The dataset at ``out`` equals the single-machine windows of ``docs`` (global logIDs:
    the position in ``docs``), and its summary counts them."""
    table = read_output(out)
    exp = tok(docs, **kw)
    rows, width = exp["input_ids"].shape
    assert table.num_rows == rows
    meta = np.stack([table.column(c).to_numpy() for c in ("logID", "start", "stop")], axis=1)
    np.testing.assert_array_equal(meta, exp["metadata"])
    ids = table.column("input_ids").combine_chunks().flatten().to_numpy()
    np.testing.assert_array_equal(ids.reshape(rows, width), exp["input_ids"])
    mask = table.column("attention_mask").combine_chunks().flatten().to_numpy()
    np.testing.assert_array_equal(mask.reshape(rows, width), exp["attention_mask"])
    assert table.schema.field("input_ids").type == pa.list_(pa.int32())
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["documents"] == len(docs)
    assert summary["rows"] == rows
    logids = meta[:, 0]
    assert np.array_equal(np.unique(logids), np.arange(len(docs)))
    return table


def run_cli(*args, capsys=None) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr() if capsys is not None else ("", "")
    return rc, out, err


def sync_job(inp, out, *extra) -> list[str]:
    return ["tokenize", str(inp), str(out), "--scheduler", "synchronous", *map(str, extra)]


def mtimes(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(out.glob("part-*.parquet"))}


# -- end to end ---------------------------------------------------------------------------

def test_tokenize_subprocess_mixed_inputs_global_logids(tmp_path, tok, cluster_address):
    """`daskwp tokenize DIR OUT` in a subprocess on a cluster: text, JSON Lines, CSV and
    Parquet files (read in sorted order) give one dataset equal to single-machine
    tokenization, with logIDs numbered across files and partitions."""
    lines = sample_lines()
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    docs: list = []
    # a.txt: text, with an empty and a whitespace-only line, no final newline
    a = lines[:150] + ["", "   "] + lines[150:200]
    (src / "a.txt").write_bytes("\n".join(a).encode())
    docs += a
    # b.jsonl: an object without the column and a null are empty documents; a blank line
    # is not a document
    b = [{"text": t, "id": i} for i, t in enumerate(lines[200:260])]
    b[5] = {"id": 5}
    b[7] = {"text": None}
    (src / "b.jsonl").write_text("\n".join(json.dumps(x) for x in b[:30]) + "\n\n" +
                                 "\n".join(json.dumps(x) for x in b[30:]) + "\n")
    docs += [x.get("text") or "" for x in b]
    # c.csv: quoted newlines and commas stay inside one document
    c = [f'"{t.replace(chr(34), chr(34) * 2)}"' for t in lines[260:320]]
    c[3] = '"two lines,\nin one document"'
    (src / "c.csv").write_text("text\n" + "\n".join(c) + "\n")
    docs += [t[1:-1].replace('""', '"') for t in c]
    # d.parquet: several row groups, another column
    d = lines[320:500]
    pq.write_table(pa.table({"id": np.arange(len(d)), "text": d}), src / "d.parquet",
                   row_group_size=40)
    docs += d
    # sub/e.txt: directories are walked; names sort by relative path ("d.parquet" < "sub/")
    e = lines[500:560]
    write_text(src / "sub" / "e.txt", e)
    docs += e
    (src / "_SUCCESS").write_text("")  # metadata files are skipped
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "daskwp", "tokenize", src, out, "--scheduler", cluster_address,
         "--partition-size", "4KB", "--max-length", "32", "--stride", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(docs):,} documents" in proc.stdout
    assert_matches(out, tok, docs, max_length=32, stride=8)
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["partitions"] == len(list(out.glob("part-*.parquet"))) > 5
    assert summary["input_files"] == 5
    assert summary["vocabulary_hash"] == tok.vocab.hash
    assert summary["parameters"]["stride"] == 8
    assert 0 <= summary["unknown_token_rate"] < 0.01


@pytest.mark.slow
def test_quickstart_runs_from_the_readme(tmp_path, tok, capsys):
    """README's first command, on a real LocalCluster of worker processes."""
    out = tmp_path / "quickstart"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "daskwp", "run", "conf/quickstart.yaml", "--set",
         f"output={out}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert time.perf_counter() - t0 < 120
    assert "2,000 documents" in proc.stdout and "unknown" in proc.stdout
    assert "tokenizing" in proc.stderr  # the progress
    assert_matches(out, tok, sample_lines(), max_length=128, stride=32)
    # Run again: the job is complete, so nothing is rewritten.
    before = mtimes(out)
    rc, _, err = run_cli("run", CONF / "quickstart.yaml", "--set", f"output={out}", "--set",
                         "scheduler_address=synchronous", "-q", capsys=capsys)
    assert rc == 0, err
    assert mtimes(out) == before


def test_console_script_and_version():
    proc = subprocess.run([sys.executable, "-m", "daskwp", "--version"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and daskwp.__version__ in proc.stdout
    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="console_scripts") if e.name == "daskwp"]
    assert not eps or eps[0].value == "daskwp.cli:console_main"


def test_command_runs_with_the_imports_frozen_then_gives_them_back(tmp_path, monkeypatch):
    """A command runs with what was there before it out of the collector's reach
    (gc.freeze: no full collection traverses the imports again), and main leaves the
    collector as it found it (a process that goes on, this one, frees what it drops)."""
    import gc

    from daskwp import cli
    seen = []

    def run_job(cfg):
        seen.append(gc.get_freeze_count())
        raise jobs.JobError("stop here")

    monkeypatch.setattr(cli, "run_job", run_job)
    (tmp_path / "in.txt").write_text("a b\n")
    before = gc.get_freeze_count()
    rc = main(sync_job(tmp_path / "in.txt", tmp_path / "out"))
    assert rc == 1 and seen and seen[0] > before
    assert gc.get_freeze_count() == before


def test_ragged_truncated_glob_input(tmp_path, tok, capsys):
    lines = sample_lines()
    write_text(tmp_path / "x1.txt", lines[:40])
    write_text(tmp_path / "x2.txt", lines[40:90])
    write_text(tmp_path / "y.txt", ["not matched"])
    out = tmp_path / "out"
    rc, stdout, err = run_cli(*sync_job(tmp_path / "x*.txt", out, "--padding", "do_not_pad",
                                        "--truncation", "--max-length", "16",
                                        "--no-special-tokens", "--json"), capsys=capsys)
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["documents"] == 90
    table = read_output(out)
    exp = tok(lines[:90], max_length=16, truncation=True, add_special_tokens=False,
              padding=False)
    assert table.column("input_ids").to_pylist() == exp["input_ids"].to_list()
    np.testing.assert_array_equal(table.column("logID").to_numpy(), np.arange(90))
    assert summary["tokens"] == sum(len(r) for r in exp["input_ids"].to_list())


def test_vocab_file_and_model_folder(data_dir, tmp_path, capsys):
    from conftest import read_lines
    docs = read_lines(data_dir / "corpus" / "multi" / "de.txt")[:200]
    inp = write_text(tmp_path / "de.txt", docs)
    cased = data_dir / "vocab" / "bert-base-cased" / "vocab.txt"
    out = tmp_path / "cased"
    rc, _, err = run_cli(*sync_job(inp, out, "--vocab", cased, "--no-lowercase", "-q"),
                         capsys=capsys)
    assert rc == 0, err
    ref = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_file(cased), lowercase=False)
    assert_matches(out, ref, docs)
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["parameters"]["lowercase"] is False
    assert summary["vocabulary_hash"] == ref.vocab.hash
    folder = data_dir / "vocab" / "bert-base-uncased"
    out = tmp_path / "folder"
    rc, _, err = run_cli(*sync_job(inp, out, "--vocab", folder, "-q"), capsys=capsys)
    assert rc == 0, err
    assert_matches(out, daskwp.WordPieceTokenizer.from_pretrained(folder), docs)


def test_text_input_splits_on_newline_only():
    data = "a\u2028b\x0bc\x0cd\re\x85f\n\n  \nlast".encode()
    arr = jobs.lines_to_arrow(data)
    assert [x.decode() for x in arr.to_pylist()] == data.decode().split("\n")
    assert jobs.lines_to_arrow(b"").to_pylist() == []
    assert jobs.lines_to_arrow(b"\n").to_pylist() == [b""]
    assert jobs.lines_to_arrow(b"x\xff\n").to_pylist() == [b"x\xff"]  # bytes kept as is


def test_bench_prints_throughput_and_parity(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    f = write_text(tmp_path / "b.txt", sample_lines()[:300])
    rc, out, err = run_cli("bench", f, "--repeat", "1", capsys=capsys)
    assert rc == 0, err
    assert "MB/s" in out and "ratio" in out
    assert "identical for 300 of 300 documents" in out


# -- conf/*.yaml ------------------------------------------------------------------------

def test_every_conf_file_is_known_and_loads():
    found = {p.name for p in CONF.glob("*.yaml")}
    assert CONF_FILES <= found, f"missing conf files: {CONF_FILES - found}"
    assert found <= CONF_FILES, f"conf files without a test here: {found - CONF_FILES}"
    for name in found:
        cfg = jobs.load_config(CONF / name)
        assert os.path.isabs(cfg.output)


def test_quickstart_refers_to_the_bundled_sample():
    cfg = jobs.load_config(CONF / "quickstart.yaml")
    assert cfg.input == str(SAMPLE)
    assert cfg.output == str(REPO / "daskwp-output" / "quickstart")
    assert (SAMPLE.parent / "SAMPLE-LICENSE.md").exists()
    assert 1000 <= len(sample_lines()) <= 2000


@pytest.mark.parametrize("name", ["cpu-cluster.yaml", "existing-scheduler.yaml"])
def test_cluster_conf_runs_on_a_local_cluster(name, tmp_path, tok, cluster_address, capsys):
    lines = sample_lines()[:400]
    inp = write_text(tmp_path / "in.txt", lines)
    cfg = jobs.load_config(CONF / name)
    out = tmp_path / "out"
    rc, stdout, err = run_cli("run", CONF / name, "--set", f"input={inp}",
                              "--set", f"output={out}",
                              "--set", f"scheduler_address={cluster_address}",
                              "--set", "partition_size=8KB", "--set", "device=cpu",
                              capsys=capsys)
    assert rc == 0, err
    assert "400 documents" in stdout
    assert_matches(out, tok, lines, max_length=cfg.max_length, stride=cfg.stride,
                   truncation=cfg.truncation)


def test_multi_gpu_conf_validates(tmp_path, tok):
    cfg = jobs.load_config(CONF / "multi-gpu.yaml")
    assert cfg.device == "gpu" and cfg.n_workers is None
    jobs.validate_job(cfg, "multi-gpu.yaml")
    try:
        jobs.resolve_device("gpu")
    except jobs.ConfigError as e:
        assert "gpu" in str(e).lower()
        pytest.skip(f"no GPU stack here: {e}")
    lines = sample_lines()[:300]
    inp = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    rc = main(["run", str(CONF / "multi-gpu.yaml"), "--set", f"input={inp}", "--set",
               f"output={out}", "--set", "partition_size=8KB", "-q"])
    assert rc == 0
    assert_matches(out, tok, lines, max_length=cfg.max_length, stride=cfg.stride)


def test_config_paths_resolve_against_the_yaml_folder(tmp_path):
    (tmp_path / "jobs").mkdir()
    y = tmp_path / "jobs" / "j.yaml"
    y.write_text("input: data/x.txt\noutput: ../out\nvocab: package:sample.txt\n")
    cfg = jobs.load_config(y)
    assert cfg.input == str(tmp_path / "jobs" / "data" / "x.txt")
    assert cfg.output == str(tmp_path / "out")
    assert cfg.vocab == str(SAMPLE)
    cfg = jobs.load_config(y, ["output=rel/o", "max_length=64", "truncation=true"],
                           cwd=tmp_path / "elsewhere")
    assert cfg.output == str(tmp_path / "elsewhere" / "rel" / "o")
    assert cfg.max_length == 64 and cfg.truncation is True
    with pytest.raises(jobs.ConfigError, match="bundles no file 'nope.txt'.*sample.txt"):
        jobs.load_config(y, ["input=package:nope.txt"])


# -- resume ---------------------------------------------------------------------------------

def test_resume_rewrites_only_missing_or_broken_parts(tmp_path, tok, capsys):
    lines = sample_lines()[:800]
    inp = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    args = sync_job(inp, out, "--partition-size", "10KB", "--stride", "16")
    assert run_cli(*args, capsys=capsys)[0] == 0
    first = read_output(out)
    before = mtimes(out)
    names = sorted(before)
    assert len(names) >= 5
    (out / names[1]).unlink()                                     # lost
    (out / names[3]).write_bytes((out / names[3]).read_bytes()[:100])  # torn
    (out / f"{jobs.TMP_PREFIX}2-dead.parquet").write_bytes(b"junk")    # a killed write
    time.sleep(0.01)
    rc, stdout, err = run_cli(*args, "--json", capsys=capsys)
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["partitions_written"] == 2
    assert summary["partitions_skipped"] == len(names) - 2
    assert f"resuming: {len(names) - 2} of {len(names)} partitions already complete" in err
    after = mtimes(out)
    assert sorted(after) == names
    assert {n for n in names if after[n] != before[n]} == {names[1], names[3]}
    assert not list(out.glob(".tmp*"))
    assert read_output(out).equals(first)
    assert_matches(out, tok, lines, stride=16)


@pytest.mark.slow
def test_killed_job_resumes_without_redoing_work(tmp_path, tok):
    """SIGKILL the whole job once a few parts exist; the rerun keeps them and completes."""
    lines = sample_lines()
    inp = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "daskwp", "tokenize", inp, out, "--scheduler",
           "synchronous", "--partition-size", "4KB", "-q"]
    run_killing_the_job(cmd, lambda: len(list(out.glob("part-*.parquet"))) >= 3, REPO)
    kept = mtimes(out)
    rerun = subprocess.run(cmd + ["--json"], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["partitions_skipped"] >= len(kept)
    assert summary["partitions_written"] > 0
    after = mtimes(out)
    assert all(after[n] == kept[n] for n in kept)  # nothing complete was redone
    assert summary["partitions_written"] + summary["partitions_skipped"] == \
        summary["partitions"] == len(after)
    assert_matches(out, tok, lines)


@pytest.mark.slow
def test_worker_killed_mid_job_still_completes(tmp_path, tok):
    """Kill a worker process while the job runs: Dask reruns its tasks elsewhere, the atomic
    part writes leave no torn or duplicated file, and the final accounting holds."""
    from distributed import Client, LocalCluster
    lines = sample_lines() * 2
    inp = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    cfg = jobs.make_config({"input": str(inp), "output": str(out), "partition_size": "8KB",
                            "quiet": True, "device": "cpu"})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        summary, killed = run_killing_a_worker(
            cluster, lambda: jobs.run_job(cfg, client=client),
            lambda: len(list(out.glob("part-*.parquet"))) >= 2)
        assert killed, "the job ended before a worker could be killed"
    assert summary["documents"] == len(lines)
    assert not list(out.glob(".tmp*"))
    assert_matches(out, tok, lines)


@pytest.mark.slow
def test_worker_killed_after_the_pass_recounts_nothing(tmp_path, tok):
    """A worker killed once half the parts exist (the global-offset pass long done): only
    its running writes are redone, no count or offset task of the pass runs again (the
    writes take the pass's values as literals, the driver releases each pass result)."""
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Runs(SchedulerPlugin):
        def __init__(self):
            self.runs: dict = {}

        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "processing":
                self.runs[key] = self.runs.get(key, 0) + 1

    lines = sample_lines() * 4
    inp = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    cfg = jobs.make_config({"input": str(inp), "output": str(out), "partition_size": "8KB",
                            "quiet": True, "device": "cpu"})
    runs = Runs()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        cluster.scheduler.add_plugin(runs, name="runs")
        summary, killed = run_killing_a_worker(
            cluster, lambda: jobs.run_job(cfg, client=client),
            lambda: len(list(out.glob("part-*.parquet"))) >= summary_parts(out) // 2 > 0)
        assert killed, "the job ended before a worker could be killed"
    pass_runs = {k: n for k, n in runs.runs.items()
                 if str(k[0] if isinstance(k, tuple) else k).startswith(
                     ("daskwp-count-", "daskwp-offset-"))}
    assert summary["partitions"] >= 8 and len(pass_runs) > summary["partitions"]
    assert {k: n for k, n in pass_runs.items() if n > 1} == {}
    assert assert_matches(out, tok, lines).num_rows == summary["rows"]


def summary_parts(out: Path) -> int:
    """The partitions of the job in ``out`` (its _job.json; 0 before it exists)."""
    try:
        return int(json.loads((out / "_job.json").read_text())["n_partitions"])
    except (OSError, ValueError, KeyError):
        return 0


def test_partition_statistics_counts_only_owned_unknown_tokens():
    # row 0 owns columns 1..2 ([UNK], 5); row 1 owns 2..3 ([UNK], 7): its [UNK] in column 1
    # is the overlap with row 0 and must not count again
    table = pa.table({"input_ids": pa.array([[101, 100, 5, 100, 102], [101, 100, 100, 7, 102]],
                                            type=pa.list_(pa.int32())),
                      "start": [1, 2], "stop": [2, 3]})
    assert jobs.partition_statistics(table, unk_id=100) == \
        {"rows": 2, "tokens": 4, "unknown_tokens": 2}


def test_parquet_dictionary_and_null_text_columns(tmp_path, tok):
    """Parquet text stored as a dictionary (pandas Categorical) or as an all-null column is
    read as plain strings: one row per document, ids as the single-machine tokenizer."""
    texts = ["hello world", "hello", None, "world hello"]
    table = pa.table({"text": pa.array(texts).dictionary_encode(),
                      "empty": pa.nulls(len(texts))})
    pq.write_table(table, tmp_path / "in.parquet")
    for column, docs in (("text", texts), ("empty", [None] * len(texts))):
        out = tmp_path / f"out-{column}"
        cfg = jobs.make_config({"input": str(tmp_path / "in.parquet"), "output": str(out),
                                "column": column, "quiet": True, "device": "cpu",
                                "scheduler_address": "synchronous"})
        summary = jobs.run_job(cfg, client=None)
        assert summary["documents"] == len(texts)
        assert_matches(out, tok, docs)


# -- errors -------------------------------------------------------------------------------

def test_error_unknown_config_key(tmp_path, capsys):
    y = tmp_path / "j.yaml"
    y.write_text("input: a.txt\noutput: out\nmax_len: 64\n")
    rc, out, err = run_cli("run", y, capsys=capsys)
    assert rc == 2
    assert "unknown config key 'max_len'" in err and "did you mean 'max_length'" in err
    assert "allowed keys:" in err and "stride" in err
    rc, out, err = run_cli("run", y, "--set", "max_len=1", capsys=capsys)
    assert rc == 2 and "'max_len'" in err
    y.write_text("input: a.txt\noutput: out\n")
    rc, out, err = run_cli("run", y, "--set", "colum=x", capsys=capsys)
    assert rc == 2 and "unknown config key 'colum'" in err and "'column'" in err


def test_error_bad_values(tmp_path, capsys):
    inp = write_text(tmp_path / "in.txt", ["a b c"])
    rc, _, err = run_cli(*sync_job(inp, tmp_path / "o1", "--max-length", "16", "--stride",
                                   "14"), capsys=capsys)
    assert rc == 2 and "stride" in err and "14" in err
    rc, _, err = run_cli(*sync_job(inp, tmp_path / "o2", "--set", "max_length=abc"),
                         capsys=capsys)
    assert rc == 2 and "max_length must be an integer" in err and "'abc'" in err
    rc, _, err = run_cli(*sync_job(inp, tmp_path / "o3", "--partition-size", "lots"),
                         capsys=capsys)
    assert rc == 2 and "partition_size" in err and "'lots'" in err
    assert not (tmp_path / "o1").exists()  # nothing written for a refused job


def test_error_missing_column_names_the_columns_found(tmp_path, capsys):
    pq.write_table(pa.table({"body": ["a"], "id": [1]}), tmp_path / "t.parquet")
    rc, _, err = run_cli(*sync_job(tmp_path / "t.parquet", tmp_path / "o"), capsys=capsys)
    assert rc == 2
    assert "no column 'text'" in err and "'body'" in err and "'id'" in err
    (tmp_path / "t.csv").write_text("body,id\nx,1\n")
    rc, _, err = run_cli(*sync_job(tmp_path / "t.csv", tmp_path / "o"), capsys=capsys)
    assert rc == 2 and "no column 'text'" in err and "'body'" in err
    (tmp_path / "t.jsonl").write_text('{"body": "x"}\n')
    rc, _, err = run_cli(*sync_job(tmp_path / "t.jsonl", tmp_path / "o"), capsys=capsys)
    assert rc == 2 and "no column 'text'" in err and "'body'" in err
    rc, _, err = run_cli(*sync_job(tmp_path / "t.parquet", tmp_path / "o", "--column", "id"),
                         capsys=capsys)
    assert rc == 2 and "column 'id'" in err and "int64" in err and "not text" in err


def test_error_unreadable_input(tmp_path, capsys):
    rc, _, err = run_cli(*sync_job(tmp_path / "missing.txt", tmp_path / "o"), capsys=capsys)
    assert rc == 2 and "input not found" in err and "missing.txt" in err
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    rc, _, err = run_cli(*sync_job(tmp_path / "bad.parquet", tmp_path / "o"), capsys=capsys)
    assert rc == 2 and "cannot read input" in err and "bad.parquet" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = run_cli(*sync_job(tmp_path / "empty", tmp_path / "o"), capsys=capsys)
    assert rc == 2 and "holds no files" in err
    rc, _, err = run_cli(*sync_job(tmp_path / "nomatch*.txt", tmp_path / "o"), capsys=capsys)
    assert rc == 2 and "no input file matches" in err
    rc, _, err = run_cli("run", tmp_path / "nojob.yaml", capsys=capsys)
    assert rc == 2 and "cannot read job file" in err


def test_error_output_holds_another_jobs_data(tmp_path, capsys):
    inp = write_text(tmp_path / "in.txt", sample_lines()[:50])
    out = tmp_path / "out"
    assert run_cli(*sync_job(inp, out, "-q"), capsys=capsys)[0] == 0
    rc, _, err = run_cli(*sync_job(inp, out, "--max-length", "64"), capsys=capsys)
    assert rc == 2
    assert "holds another job's data" in err and "max_length: 128 there, 64 now" in err
    assert "--overwrite" in err
    write_text(inp, sample_lines()[:60])  # the input changed
    rc, _, err = run_cli(*sync_job(inp, out), capsys=capsys)
    assert rc == 2 and "holds another job's data" in err and "input differs" in err
    rc, _, err = run_cli(*sync_job(inp, out, "--max-length", "64", "--overwrite", "--json"),
                         capsys=capsys)
    assert rc == 0, err
    other = tmp_path / "notmine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    rc, _, err = run_cli(*sync_job(inp, other, "--overwrite"), capsys=capsys)
    assert rc == 2 and "holds another job's data" in err and "notes.txt" in err
    assert (other / "notes.txt").read_text() == "keep me"


# -- sentence pairs: --truncation takes a strategy, --column-pair (tests/test_pairs_dask.py) --

@pytest.mark.parametrize("argv,expected", [
    (["in", "out", "--truncation"], True),
    (["--truncation", "in", "out"], True),              # never takes a positional argument
    (["in", "out", "--truncation", "--max-length", "16"], True),
    (["in", "out", "--truncation", "only_second"], "only_second"),
    (["in", "out", "--truncation=only_first"], "only_first"),
    (["in", "out", "--truncation", "longest_first"], True),  # HF's name of True
    (["in", "out", "--truncation", "false"], False),
    (["in", "out", "--no-truncation"], False),
])
def test_truncation_flag_takes_a_strategy(argv, expected):
    from daskwp.cli import build_parser
    ns = build_parser().parse_args(["tokenize", *argv])
    assert (ns.input, ns.output, ns.truncation) == ("in", "out", expected)


def test_truncation_flag_refuses_other_words(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["tokenize", "in", "out", "--truncation=first"])
    assert e.value.code == 2
    assert "truncation must be True, False, 'longest_first', 'only_first', 'only_second'" \
        in capsys.readouterr().err


def test_pair_keys_from_yaml_and_flags(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("input: in.parquet\noutput: out\ncolumn: q\ncolumn_pair: c\n"
                   "truncation: only_second\nreturn_overflowing_tokens: true\n"
                   "return_sequence_ids: true\n", encoding="utf-8")
    cfg = jobs.load_config(job)
    assert (cfg.column_pair, cfg.truncation, cfg.return_overflowing_tokens,
            cfg.return_sequence_ids, cfg.return_token_type_ids) == ("c", "only_second", True,
                                                                    True, None)
    for key in ("column_pair", "truncation", "return_overflowing_tokens",
                "return_token_type_ids", "return_sequence_ids"):
        assert key in jobs.JOB_KEYS        # recorded in _job.json: resume refuses a change
    from daskwp.cli import build_parser
    ns = build_parser().parse_args(["run", str(job), "--column-pair", "ctx",
                                    "--no-return-sequence-ids", "--return-token-type-ids"])
    assert (ns.column_pair, ns.return_sequence_ids, ns.return_token_type_ids) == \
        ("ctx", False, True)


def test_failed_job_without_parts_does_not_block_its_rerun(tmp_path, capsys):
    """A job that fails before writing any part (bad JSON while counting) leaves _job.json;
    the rerun after fixing the input is not another job's data (issue 37, item 6)."""
    inp = tmp_path / "docs.jsonl"
    inp.write_text('{"text": "one"}\n{"text": "tw\n', encoding="utf-8")
    out = tmp_path / "out"
    rc, _, err = run_cli(*sync_job(inp, out, "-q", "--on-bad-row", "error"), capsys=capsys)
    assert rc == 2 and "docs.jsonl" in err, err
    assert (out / "_job.json").exists() and not list(out.glob("part-*"))
    inp.write_text('{"text": "one"}\n{"text": "two"}\n', encoding="utf-8")
    rc, _, err = run_cli(*sync_job(inp, out, "-q"), capsys=capsys)
    assert rc == 0, err
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["documents"] == 2 and summary["partitions_written"] == 1
    # a folder holding parts of a job with other parameters is still refused
    rc, _, err = run_cli(*sync_job(inp, out, "-q", "--max-length", "64"), capsys=capsys)
    assert rc == 2 and "holds another job's data" in err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["tokenize", "count"])
def test_quiet_failure_prints_one_error_line_and_logs_the_details(tmp_path, command):
    """-q: a job (or a count) that fails on a local cluster prints exactly the one
    ``daskwp: error:`` line, which names a log file holding distributed's report and the
    traceback; without -q the report is printed (issue 37, item 7)."""
    inp = tmp_path / "docs.jsonl"
    inp.write_text('{"text": "one"}\n{"text": "tw\n', encoding="utf-8")
    base = [sys.executable, "-m", "daskwp", command, str(inp),
            *([str(tmp_path / "out")] if command == "tokenize" else []),
            "--n-workers", "1", "--threads-per-worker", "1", "--on-bad-row", "error"]
    env = {k: v for k, v in os.environ.items() if k != "DASKWP_DEBUG"}
    loud = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    assert loud.returncode == 2 and "Compute Failed" in loud.stderr, loud.stderr
    quiet = subprocess.run([*base, "-q"], capture_output=True, text=True, timeout=120,
                           env=env)
    assert quiet.returncode == 2 and quiet.stdout == ""
    lines = quiet.stderr.splitlines()
    # A job counts JSON Lines documents without parsing them, so its bad line fails the
    # write task; `daskwp count` parses while counting.
    task = "counting partition 0" if command == "count" else "partition 0"
    assert len(lines) == 1 and lines[0].startswith(f"daskwp: error: {task} failed: cannot "
                                                   "read "), quiet.stderr
    log = Path(lines[0].rsplit("(details: ", 1)[1].rstrip(")"))
    details = log.read_text()
    assert "Compute Failed" in details and "Traceback" in details and "docs.jsonl" in details
    log.unlink()


_EXIT_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
{body}
"""


@pytest.mark.parametrize("body", [
    # the command: help printed (no command), exit status 2
    "sys.argv = ['daskwp']\nfrom daskwp.cli import console_main\nconsole_main()",
    # a worker process: daskwp's worker plugin set up (once, however many setups)
    "from daskwp.distributed.plugin import freeze_heap_at_exit\n"
    "freeze_heap_at_exit()\nfreeze_heap_at_exit()\n"
    "assert gc.get_freeze_count() == 0",
])
def test_the_heap_is_out_of_the_collectors_reach_when_the_process_exits(body):
    """The console command and a process whose worker plugin was set up freeze the heap
    (gc.freeze) before the interpreter's shutdown, whose collections would traverse all of
    it (0.2-0.3 s of CPU per worker, waited for by the driver closing its cluster): the
    exit handlers registered before still run, and see it frozen."""
    r = subprocess.run([sys.executable, "-c", _EXIT_PROBE.format(body=body)],
                       capture_output=True, text=True, timeout=120)
    assert "frozen at exit: True" in r.stdout, (r.stdout[-500:], r.stderr[-2000:])


def test_the_worker_plugin_freezes_the_heap_at_exit_once(monkeypatch):
    """Setting the worker plugin up registers the freeze at exit once per process."""
    import atexit

    from daskwp.distributed import plugin
    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(plugin, "_EXIT_FREEZE", [])

    class Worker:
        address = "tcp://127.0.0.1:1"
        nthreads = 1
    for _ in range(2):
        p = plugin.DaskwpWorkerPlugin()
        p.setup(Worker())
        p.teardown(Worker())
    import gc
    assert registered == [gc.freeze]
