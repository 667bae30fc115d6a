"""Transparent huge pages (issues 39 and 42): daskwp's pooled output blocks never ask for them
(madvise MADV_HUGEPAGE, VmFlags "hg" in /proc/self/smaps), its word memos do unless the
option huge_pages is false, and the processes daskwp owns (the daskwp command, workers of
clusters daskwp.connect starts) turn NumPy's request off; a user's own process keeps
NumPy's choice."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import daskwp
from daskwp import cli

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(),
                                reason="needs /proc/self/smaps (Linux)")

_RANGE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) ")


def _huge_vmas() -> set:
    """(start, end) of this process's mappings flagged MADV_HUGEPAGE."""
    out, current = set(), None
    with open("/proc/self/smaps") as f:
        for line in f:
            m = _RANGE.match(line)
            if m:
                current = (int(m[1], 16), int(m[2], 16))
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
                out.add(current)
    return out


def _huge(a: np.ndarray) -> bool:
    """Whether the memory of ``a`` (a page well inside it) is flagged MADV_HUGEPAGE."""
    addr = a.__array_interface__["data"][0] + a.nbytes // 2
    return any(lo <= addr < hi for lo, hi in _huge_vmas())


def _numpy_madvise(on=None) -> bool:
    """NumPy's setting (and set it to ``on`` when given); returns the setting before."""
    setter = np._core.multiarray._set_madvise_hugepage
    before = setter(True)
    setter(before if on is None else on)
    return before


@pytest.fixture
def restore():
    """Restores NumPy's huge-page setting after the test."""
    numpy_before = _numpy_madvise()
    yield
    _numpy_madvise(numpy_before)


_FRESH = r"""
import json, re, sys
import numpy as np
np._core.multiarray._set_madvise_hugepage(False)   # NumPy's own flags stay out of the way
import daskwp
sys.path.insert(0, sys.argv[1])
from test_host_pool_huge_pages import _huge, _huge_vmas
tok = daskwp.WordPieceTokenizer(num_threads=1)
before = _huge_vmas()
tok.encode([" ".join(f"w{i}x{j}" for j in range(40)) for i in range(2_000)])  # outputs < 4 MB
memos = daskwp.memory.info()["word_cache"]["memos"]
# the memo's block: a range of its own mapping of exactly its bytes (others, like the 1 GiB
# arenas of Arrow's mimalloc pool, may ask for huge pages as they like)
memo_bytes = daskwp.memory.info()["word_cache"]["bytes"]
memo_huge = sum(hi - lo == memo_bytes for lo, hi in _huge_vmas() - before)
ids = tok(["the quick brown fox jumps over the lazy dog"] * 12_000, max_length=128,
          padding="max_length")["input_ids"]
pooled = daskwp.memory.info()["host_pool"]["live"] >= ids.nbytes >= 4 << 20
print(json.dumps({"pooled": pooled, "pool_huge": _huge(ids), "memos": memos,
                  "memo_huge": memo_huge}))
"""


def _fresh(**env) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "DASKWP_HUGE_PAGES"}
    e.update(env)
    r = subprocess.run([sys.executable, "-c", _FRESH, str(Path(__file__).parent)], env=e,
                       capture_output=True, text=True, timeout=300, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env,memo_huge", [({}, True), ({"DASKWP_HUGE_PAGES": "0"}, False)])
def test_memos_ask_for_huge_pages_unless_the_option_is_false_pooled_blocks_never(env, memo_huge):
    # a fresh process each: glibc reuses freed memory whose flags stay as they were
    got = _fresh(**env)
    assert got["pooled"] and got["memos"] >= 1, got
    assert got["pool_huge"] is False, got
    assert (got["memo_huge"] > 0) is memo_huge, got   # a memo of 4 MB and more: its own mapping


def test_the_daskwp_command_turns_numpys_off(restore, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("hello world\n" * 10)
    _numpy_madvise(True)
    big = np.ones(64 << 20, np.uint8)
    assert _huge(big)                           # what the test looks for, before
    assert cli.main(["tokenize", str(src), str(tmp_path / "out"), "-q"]) == 0
    assert _numpy_madvise() is False
    assert not _huge(np.ones(64 << 20, np.uint8))


def test_a_users_process_keeps_numpys_setting(restore):
    _numpy_madvise(True)
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    tok(["the quick brown fox"] * 100, max_length=16)
    assert _numpy_madvise() is True


def _worker_numpy_huge() -> tuple:
    """(NumPy's setting, a 64 MB array flagged MADV_HUGEPAGE) in a worker."""
    return _numpy_madvise(), _huge(np.ones(64 << 20, np.uint8))


@pytest.mark.slow   # starts a cluster of one worker process
def test_workers_of_a_cluster_daskwp_starts_turn_numpys_off():
    client = daskwp.connect(device="cpu", n_workers=1, threads_per_worker=1,
                            dashboard_address=":0")
    try:
        assert list(client.run(_worker_numpy_huge).values()) == [(False, False)]
        client.restart()                        # a new worker process gets it too
        assert list(client.run(_worker_numpy_huge).values()) == [(False, False)]
    finally:
        client.close()
