"""The device check (``benchmarks/gpu_check.sh`` + ``benchmarks/gpu_check.py``) without a GPU.

GPU time is rare, so the check must work the first time it meets a device. Here:

* the dry run, ``GPU_CHECK_CPU_ONLY=1 GPU_CHECK_FAST=1 bash benchmarks/gpu_check.sh DATA``,
  exits 0 and writes a JSON whose sections are all there, with parity true for every step
  it runs without a device (CPU == HF, the emulated CUDA backend == CPU on every corpus x
  vocabulary, the launcher timed stage by stage == the launcher untimed, the distributed job read
  back == the CPU job) and a summary line last;
* the comparisons name the first differing document when the outputs differ;
* the tests the script names exist: each alternative of its NVRTC step's ``-k`` selects a
  test, and its GPU step's default paths are there. (The dry run takes the gpu-marked
  tests of two files, ``GPU_TESTS``, not of the whole suite: without a device they all
  skip, and collecting the whole suite cost ~12 s of the dry run's ~40 s of CPU.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import daskwp
from conftest import DATA, REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_check.sh"
MODULE = REPO_ROOT / "benchmarks" / "gpu_check.py"
#: The dry run's gpu-marked tests (``GPU_CHECK_TESTS``): a ``pytest.mark.gpu`` file and the
#: backends' "gpu" parameter.
GPU_TESTS = "tests/test_cuda.py tests/test_backends.py"


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_module", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_dry_run_writes_the_whole_report(tmp_path):
    env = dict(os.environ, GPU_CHECK_CPU_ONLY="1", GPU_CHECK_FAST="1", OUT=str(tmp_path),
               PYTHON=sys.executable, GPU_CHECK_TESTS=GPU_TESTS)
    for k in ("GPU_CHECK_REBUILD", "GPU_CHECK_ARGS", "RAYON_NUM_THREADS"):
        env.pop(k, None)
    r = subprocess.run(["bash", str(SCRIPT), str(DATA)], env=env, capture_output=True,
                       text=True, timeout=900, cwd=str(REPO_ROOT))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("gpu_check: parity ok, GPU ") and "daskwp CPU (" in last, last

    R = json.loads((tmp_path / "gpu_check.json").read_text())
    for key in ("version", "mode", "env", "findings", "nvrtc", "parity", "throughput",
                "variants", "anchors", "cluster", "summary", "build", "gpu_tests", "sections", "errors",
                "total_s"):
        assert key in R, key
    assert R["mode"] == "cpu-only" and R["fast"] is True
    assert R["errors"] == {}, R["errors"]
    assert R["gpu_tests"]["rc"] == 0 and R["gpu_tests"].get("failures", 0) == 0
    assert R["gpu_tests"]["tests"] > 0   # (none selected would pass: rc 5 counts as 0)
    assert R["build"]["rc"] == 0

    P = R["parity"]
    assert P["ok"] is True and P["failures"] == []
    assert P["cpu_hf"]["ok"] is True and P["cpu_hf"]["corpora"] >= 1
    emulated = P["backend"] == "emulated"
    if emulated:   # the kernel file on the host: every corpus x vocabulary compared
        n_vocabs = len(R["env"]["vocabularies"])
        assert len(P["matrix"]) == n_vocabs * R["env"]["corpus_files"]
        assert all(m["encode"] and not m["windows_failed"] for m in P["matrix"])
        T = R["throughput"]
        assert T["partitions"] and all(p["timed_matches_untimed"] for p in T["partitions"])
        for p in T["partitions"]:
            assert {"upload", "checks", "plan", "count", "scan", "write", "windows",
                    "download"} <= set(p["stages_wall_ms"])
        assert R["anchors"]["gpu_equals_cpu"] is True
        assert R["variants"]["ok"] is True and R["variants"]["rows"]
    else:
        assert P["backend"] is None   # no C++ compiler: no emulated backend

    A = R["anchors"]
    assert A["daskwp_cpu_all_gbs"] > 0 and A["daskwp_cpu_1thread_gbs"] > 0
    assert A["rayon_num_threads"] == "unset"
    if isinstance(A.get("hf_all_gbs"), float):
        assert A["hf_equals_cpu"] is True
    assert isinstance(A["nanotoken_all_gbs"], (float, str))   # a figure, or why skipped

    C = R["cluster"]
    assert C["ok"] is True and C["logids_global"] is True and C["first_batch_equal"] is True
    assert C["rows"][0] == C["rows"][1] > 0
    assert "LocalCluster" in C["device_cluster"]

    F = R["findings"]
    assert set(F) >= {"dask_token_ignores_device", "worker_cache_ignores_device",
                      "accessor_has_device_keyword", "connect_gpu_needs_cudf"}

    S = R["summary"]
    assert S["parity_ok"] is True and S["gpu_kernel_gbs"] is None and S["line"] == last
    md = (tmp_path / "gpu_check.md").read_text()
    assert md.startswith("# daskwp GPU check (cpu-only, fast)") and last in md
    assert (tmp_path / "gpu_check.log").stat().st_size > 0
    assert len(list(tmp_path.iterdir())) <= 8   # what the device tool brings back


def _alternatives(expr: str) -> list[str]:
    """The top-level ``or`` terms of a ``-k`` expression."""
    terms, depth, start = [], 0, 0
    for m in re.finditer(r"\(|\)|\bor\b", expr):
        if m.group() == "(":
            depth += 1
        elif m.group() == ")":
            depth -= 1
        elif depth == 0:
            terms.append(expr[start:m.start()].strip())
            start = m.end()
    return terms + [expr[start:].strip()]


def test_the_tests_the_script_names_exist():
    """A test of ``gpu_check.sh``'s NVRTC step renamed or gone would drop out of the device
    check silently (the step fails only when its ``-k`` selects nothing at all): each
    alternative of the ``-k`` must select a test of its file. The GPU step's default paths
    (``GPU_CHECK_TESTS``) and the dry run's must exist."""
    text = SCRIPT.read_text()
    step = re.search(r'pytest -q -p no:cacheprovider (\S+) -rs \\\n\s*-k "([^"]+)"', text)
    assert step, "gpu_check.sh: the NVRTC step's pytest line not found"
    path, expr = step.groups()
    terms = _alternatives(expr)
    assert len(terms) >= 2 and all(terms), terms
    defaults = re.findall(r"\$\{GPU_CHECK_TESTS:-([^}]+)\}", text)
    assert defaults, "gpu_check.sh: GPU_CHECK_TESTS's default not found"
    for p in " ".join(defaults).split() + GPU_TESTS.split() + [path]:
        assert (REPO_ROOT / p).exists(), p
    # one interpreter, pytest's own -k, one collection per term (the file imports once)
    code = ("import contextlib, io, sys, pytest\n"
            "for term in sys.argv[2:]:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        rc = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider',\n"
            "                          sys.argv[1], '-k', term])\n"
            "    print(term, '->', int(rc))\n")
    r = subprocess.run([sys.executable, "-c", code, path, *terms, "no_such_test_name"],
                       capture_output=True, text=True, timeout=300, cwd=str(REPO_ROOT))
    rcs = dict(line.rsplit(" -> ", 1) for line in r.stdout.splitlines() if " -> " in line)
    assert rcs.get("no_such_test_name") == "5", r.stdout + r.stderr[-3000:]   # the probe
    assert {t: rcs.get(t) for t in terms} == {t: "0" for t in terms}, r.stdout + r.stderr[-3000:]


def test_encoding_mismatch_names_the_first_differing_document():
    gc = _gpu_check()
    tok = daskwp.WordPieceTokenizer()
    docs = ["zero", "one two", "three four", "five, six", "seven"]
    e = tok.encode(docs)
    assert gc.diff_encoding(e.token_ids.copy(), e.offsets.copy(), e.token_ids, e.offsets,
                            docs) is None
    ids = e.token_ids.copy()
    ids[e.offsets[3]] += 1
    msg = gc.diff_encoding(ids, e.offsets.copy(), e.token_ids, e.offsets, docs)
    assert msg.startswith("first differing document 3 'five, six'"), msg
    off = e.offsets.copy()
    off[2:] += 1
    ids2 = np.insert(e.token_ids, e.offsets[1], 0)
    msg = gc.diff_encoding(ids2, off, e.token_ids, e.offsets, docs)
    assert "first differing document 1 'one two'" in msg, msg


@pytest.mark.parametrize("kw", [dict(max_length=8, stride=2), dict(max_length=8, padding=False),
                                dict(max_length=16, padding="bucket",
                                     bucket_widths=(4, 8)),
                                dict(max_length=8, logid_offset=100)],
                         ids=["padded", "ragged", "bucket", "logid"])
def test_windows_mismatch_names_the_first_differing_document(kw):
    gc = _gpu_check()
    tok = daskwp.WordPieceTokenizer()
    docs = ["a b", "one two three four five six seven eight nine ten", "", "x y z"]
    exp = tok(docs, **kw)
    assert gc.diff_windows(tok(docs, **kw), exp, docs, kw.get("logid_offset", 0)) is None
    got = tok(docs, **kw)
    if hasattr(got, "buckets"):
        width, b = got.buckets[-1]
        target = b["input_ids"]
        doc = int(b["metadata"][0, 0])
    else:
        target = got["input_ids"]
        target = getattr(target, "values", target)
        doc = 1
    r0 = int(np.asarray(got.doc_row_offsets)[1]) if not hasattr(got, "buckets") else 0
    if target.ndim == 2:
        target[r0, 2] += 1
    else:
        start = int(got["input_ids"].offsets[r0])
        target[start + 2] += 1
    msg = gc.diff_windows(got, exp, docs, kw.get("logid_offset", 0))
    assert msg is not None and f"document {doc} {docs[doc][:160]!r}" in msg, msg


def test_tiled_inputs_keep_their_documents():
    gc = _gpu_check()
    base = gc.large_string(["ab cd", "", "é ü", "xyz"])
    small = gc.tiled(base, 8e-6)           # fewer bytes than the base: a prefix
    assert small.to_pylist() == ["ab cd", "", "é ü"]
    big = gc.tiled(base, 50e-6)
    assert big.to_pylist() == base.to_pylist() * (len(big) // len(base))
    assert gc.arrow_nbytes(big) >= 50
    assert gc.one_document(base, 20e-6).to_pylist()[0].startswith("ab cd é ü xyz")
