"""The host memory pool (daskwp/backends/memory.py, kernels/host_pool.cpp): freed output blocks of
4 MB and more are handed out again, up to a limit, and results never change."""

import gc
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import daskwp
from daskwp.backends import memory as host_pool

BIG = ["the quick brown fox jumps over the lazy dog " * 4] * 60_000  # ~10.6 MB of text


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.fixture
def pool_limit():
    """Restores the pool's limit (and empties it) after the test. Gives the bytes of the
    pool's blocks that objects of earlier tests in this process still hold (collected
    first): a test's ``live`` figures are its own blocks above them."""
    before = host_pool.host_pool_info()["limit"]
    gc.collect()
    yield host_pool.host_pool_info()["live"]
    host_pool.set_host_pool_limit(before)
    host_pool.release_host_memory()


def test_freed_blocks_are_handed_out_again(pool_limit):
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    host_pool.set_host_pool_limit(1 << 30)
    host_pool.release_host_memory()
    first = tok(BIG, max_length=128, stride=32)
    ids, mask = first["input_ids"], first["attention_mask"]
    assert ids.nbytes >= 4 << 20 and mask.nbytes >= 4 << 20
    expected = ids.copy()
    blocks = {_address(ids), _address(mask)}
    info = host_pool.host_pool_info()
    assert info["live"] >= pool_limit + ids.nbytes + mask.nbytes
    pooled = info["live"] - pool_limit + info["cached"]
    del first, ids, mask
    info = host_pool.host_pool_info()
    assert info["live"] == pool_limit and info["cached"] == pooled
    again = tok(BIG, max_length=128, stride=32)
    # The same blocks, already mapped: nothing new was allocated.
    assert {_address(again["input_ids"]), _address(again["attention_mask"])} == blocks
    info = host_pool.host_pool_info()
    assert info["live"] - pool_limit + info["cached"] == pooled
    np.testing.assert_array_equal(again["input_ids"], expected)


def test_limit_zero_keeps_nothing(pool_limit):
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    host_pool.set_host_pool_limit(0)
    out = tok(BIG, max_length=128, stride=32)
    assert host_pool.host_pool_info()["live"] > pool_limit
    del out
    info = host_pool.host_pool_info()
    assert info == {"limit": 0, "cached": 0, "live": pool_limit}


def test_lowering_the_limit_and_release_free_cached_blocks(pool_limit):
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    host_pool.set_host_pool_limit(1 << 30)
    host_pool.release_host_memory()
    tok.encode(BIG)  # freed at once: its id buffer and word memo blocks are cached
    cached = host_pool.host_pool_info()["cached"]
    assert cached >= 4 << 20
    host_pool.set_host_pool_limit(cached - 1)  # the oldest blocks go until the rest fits
    assert 0 <= host_pool.host_pool_info()["cached"] < cached
    host_pool.set_host_pool_limit(0)
    assert host_pool.host_pool_info()["cached"] == 0
    host_pool.set_host_pool_limit(1 << 30)
    tok.encode(BIG)
    assert host_pool.release_host_memory() == cached
    assert host_pool.host_pool_info()["cached"] == 0


def test_small_outputs_are_not_pooled(pool_limit):
    host_pool.release_host_memory()
    enc = daskwp.WordPieceTokenizer().encode(["hello world"] * 100)
    assert host_pool.host_pool_info()["live"] == pool_limit
    assert enc.to_list()[0] == daskwp.WordPieceTokenizer().encode(["hello world"]).to_list()[0]


def test_negative_limit_is_refused():
    with pytest.raises(ValueError, match=">= 0"):
        host_pool.set_host_pool_limit(-1)


def _default_limit() -> int:
    phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min(max(phys // 8, 256 << 20), 16 << 30)


@pytest.mark.parametrize("value,expected", [
    ("0", 0),
    pytest.param("64", 64 << 20, marks=pytest.mark.slow),
    pytest.param("junk", None, marks=pytest.mark.slow),
    pytest.param("", None, marks=pytest.mark.slow)])
def test_limit_from_the_environment(value, expected):
    expected = _default_limit() if expected is None else expected
    code = "import daskwp; print(daskwp.memory.info()['host_pool']['limit'])"
    env = dict(os.environ, DASKWP_HOST_POOL_MB=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert int(out) == expected


_REFAULT = r"""
import resource, sys, numpy as np
from daskwp.backends.memory import tune_worker_malloc
tuned = tune_worker_malloc() if sys.argv[1] == "tune" else False
a = np.ones(2 << 20)  # 16 MB: an allocation above glibc's fixed 128 KB mmap threshold
del a
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    a = np.ones(2 << 20)
    del a
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.slow
def test_worker_malloc_tuning_keeps_temporaries_mapped():
    # A Dask nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536: then every 16 MB
    # temporary is mapped and faulted in afresh; after
    # tune_worker_malloc (run by the per-worker state, test_dask.py) it is reused from the
    # heap (docs/design.md §3.5).
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="65536")
    env.pop("DASKWP_WORKER_MALLOC", None)
    runs = {}
    for mode in ("plain", "tune"):
        out = subprocess.run([sys.executable, "-c", _REFAULT, mode], env=env, check=True,
                             capture_output=True, text=True, timeout=120).stdout.split()
        runs[mode] = (out[0] == "True", int(out[1]))
    # 5 x 16 MB faulted in again: 4 KB pages, or 2 MB ones where NumPy asks for huge pages
    assert runs["plain"][1] >= 5 * 8, runs
    assert runs["tune"][0] and runs["tune"][1] * 10 <= runs["plain"][1], runs
    # Opted out, or outside a nanny's environment: nothing changes.
    for extra in ({"DASKWP_WORKER_MALLOC": "0"}, {"MALLOC_TRIM_THRESHOLD_": None}):
        e = {k: v for k, v in {**env, **extra}.items() if v is not None}
        out = subprocess.run([sys.executable, "-c", _REFAULT, "tune"], env=e, check=True,
                             capture_output=True, text=True, timeout=120).stdout.split()
        assert out[0] == "False", (extra, out)


_HEAP_CHURN = r"""
import json, resource, sys, numpy as np
from daskwp.backends.memory import tune_command_malloc
if sys.argv[1] == "command":   # the daskwp command, then whether it tuned
    from daskwp.cli import main
    main(["count", sys.argv[2], "--quiet", "--json"])
tuned = tune_command_malloc()
def churn():   # a job's partitions: a few temporaries of some MB at once, then freed
    for _ in range(5):
        held = [np.ones(6 << 17) for _ in range(4)]
        del held
churn()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(json.dumps([tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_daskwp_command_keeps_its_jobs_temporaries_mapped(tmp_path):
    # Outside a nanny, glibc's dynamic thresholds trim the heap's top once 4 x 6 MB are
    # freed: each partition's temporaries were faulted in afresh. The daskwp command
    # raises the thresholds as a worker's (backends/memory.py tune_command_malloc);
    # a MALLOC_*_ variable or worker_malloc off leaves malloc alone.
    doc = tmp_path / "in.jsonl"
    doc.write_text('{"text": "hello world"}\n')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != "DASKWP_WORKER_MALLOC"}

    def run(mode, **extra):
        out = subprocess.run([sys.executable, "-c", _HEAP_CHURN, mode, str(doc)],
                             env={**env, **extra}, check=True, capture_output=True,
                             text=True, timeout=120).stdout
        return json.loads(out.strip().splitlines()[-1])

    tuned, faults = run("command")
    assert tuned and faults * 10 <= run("library", DASKWP_WORKER_MALLOC="0")[1]
    assert run("library", DASKWP_WORKER_MALLOC="0")[1] >= 4 * 256   # refaulted: >= 4 MB
    assert run("command", DASKWP_WORKER_MALLOC="0")[0] is False
    assert run("command", MALLOC_TOP_PAD_="0")[0] is False


def test_trim_frees_the_oldest_blocks_and_keeps_the_limit(pool_limit):
    """trim_host_memory(n): the cache down to at most n bytes (its oldest blocks), the
    limit as it was; nothing freed when it holds n or less."""
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    host_pool.set_host_pool_limit(1 << 30)
    host_pool.release_host_memory()
    a = tok(BIG, max_length=128, stride=32)
    b = tok(BIG, max_length=128, stride=32)
    del a, b
    cached = host_pool.host_pool_info()["cached"]
    assert cached >= 16 << 20
    assert host_pool.trim_host_memory(cached) == 0
    freed = host_pool.trim_host_memory(cached // 2)
    info = host_pool.host_pool_info()
    assert 0 < info["cached"] <= cached // 2 and freed == cached - info["cached"]
    assert info["limit"] == 1 << 30


def test_release_idle_frees_only_blocks_not_taken_since_the_mark(pool_limit):
    """release_idle_host_memory(mark): the cached blocks freed before the mark and not taken
    since go; those taken since (in use, or freed again) stay, and serve the same call
    again without a new block."""
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    host_pool.set_host_pool_limit(1 << 30)
    host_pool.release_host_memory()
    del tok(BIG[: len(BIG) // 4], max_length=128, stride=32)["input_ids"]
    stale = host_pool.host_pool_info()["cached"]   # blocks of a quarter's sizes
    assert stale >= 4 << 20
    mark = host_pool.host_pool_mark()
    again = tok(BIG, max_length=128, stride=32)    # four times larger: other blocks
    expected = again["input_ids"].copy()
    del again
    info = host_pool.host_pool_info()
    assert info["live"] == pool_limit
    freed = host_pool.release_idle_host_memory(mark)
    assert 0 < freed <= stale
    kept = host_pool.host_pool_info()["cached"]
    assert kept == info["cached"] - freed
    assert host_pool.release_idle_host_memory(mark) == 0   # nothing idle since: no change
    out = tok(BIG, max_length=128, stride=32)   # served from the kept blocks alone
    info = host_pool.host_pool_info()
    assert info["live"] - pool_limit + info["cached"] == kept
    np.testing.assert_array_equal(out["input_ids"], expected)
    del out
    assert host_pool.release_idle_host_memory(host_pool.host_pool_mark()) == kept
    assert host_pool.host_pool_info()["cached"] == 0


def test_a_job_partition_leaves_only_the_blocks_it_used(pool_limit, tmp_path):
    """A batch job's partition (jobs.parts.write_partition) frees the cached blocks it did
    not take: a worker's cache holds its last partition's blocks, not every size its earlier
    partitions' outputs came in (its RSS grew with the partitions it had written)."""
    from daskwp.jobs import driver
    from daskwp.jobs.config import make_config
    from daskwp.jobs.inputs import PartitionSpec
    from daskwp.jobs.parts import write_partition
    tok = daskwp.WordPieceTokenizer(num_threads=1)
    host_pool.set_host_pool_limit(1 << 30)
    host_pool.release_host_memory()
    stale = tok(BIG, max_length=128, stride=32, padding="max_length")
    del stale   # ~100 MB of padded windows' blocks, cached
    cached = host_pool.host_pool_info()["cached"]
    assert cached >= 32 << 20
    src = tmp_path / "in.txt"
    src.write_text("hello world, a small partition\n" * 1000)
    out = tmp_path / "out"
    out.mkdir()
    cfg = make_config({"input": str(src), "output": str(out), "max_length": 128})
    opts = {k: getattr(cfg, k) for k in driver._PARTITION_OPTIONS}
    spec = PartitionSpec(index=0, path=str(src), format="text", column="text", byte_start=0,
                         byte_end=src.stat().st_size)
    stats = write_partition(spec, 0, str(out), tok, opts, "j" * 32, 1)
    assert stats["documents"] == 1000
    # the partition's blocks are under 4 MB (not pooled): none of the earlier ones is kept
    assert host_pool.host_pool_info()["cached"] == 0
