"""``daskwp.connect``: local CPU cluster, existing scheduler, device selection and config."""

from __future__ import annotations

import os
import sys

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import daskwp
from daskwp.distributed import cluster as wp_cluster

GPU_STACK_MISSING = wp_cluster._gpu_stack_missing()
needs_no_gpu_stack = pytest.mark.skipif(not GPU_STACK_MISSING,
                                        reason="dask-cuda, cudf and a GPU are present")

TEXTS = ["Hello, world!", None, "", "the quick brown fox " * 20, "ünïcödé text"] * 4


def _check_tokenizes():
    """A small job on the current client equals the pandas result."""
    s = pd.Series(TEXTS, dtype=object)
    expected = s.wordpiece.tokenize(max_length=16, stride=3)
    res = dd.from_pandas(s, npartitions=3).wordpiece.tokenize(max_length=16, stride=3)
    np.testing.assert_array_equal(res.metadata.compute().to_numpy(),
                                  expected.metadata.to_numpy())
    np.testing.assert_array_equal(res.input_ids.compute(), expected.input_ids)


@needs_no_gpu_stack
def test_auto_picks_cpu_without_the_gpu_stack():
    assert wp_cluster.resolve_device("auto") == "cpu"
    assert wp_cluster.resolve_device(None) == "cpu"  # daskwp.device defaults to "auto"


@needs_no_gpu_stack
def test_gpu_without_the_gpu_stack_says_what_is_missing():
    with pytest.raises(RuntimeError, match="missing: ") as info:
        daskwp.connect(device="gpu")
    assert any(name in str(info.value) for name in ("dask_cuda", "cudf", "a CUDA GPU"))


def test_bad_device_is_rejected():
    with pytest.raises(ValueError, match="device must be one of .* got 'tpu'"):
        daskwp.connect(device="tpu")
    with dask.config.set({"daskwp.device": "npu"}):
        with pytest.raises(ValueError, match="got 'npu'"):
            wp_cluster.resolve_device()


def _malloc_arenas() -> tuple:
    """This process's ``MALLOC_ARENA_MAX`` and the arenas its malloc has (glibc's
    ``malloc_info``)."""
    import ctypes
    import re
    import tempfile
    libc = ctypes.CDLL("libc.so.6")
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "info.xml")
        fp = libc.fopen(path.encode(), b"w")
        libc.malloc_info(0, fp)
        libc.fclose(fp)
        with open(path) as f:
            heaps = len(re.findall(r"<heap nr=", f.read()))
    return os.environ.get("MALLOC_ARENA_MAX"), heaps


def test_connect_cpu_starts_worker_processes_and_closes_them(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("DASKWP_WORKER_MALLOC", raising=False)
    client = daskwp.connect(device="cpu", n_workers=1, threads_per_worker=2,
                            dashboard_address=None)
    try:
        from distributed import Client

        assert isinstance(client, Client)
        workers = client.scheduler_info()["workers"]
        assert len(workers) == 1
        assert [w["nthreads"] for w in workers.values()] == [2]
        pids = client.run(os.getpid)
        assert os.getpid() not in pids.values()  # processes, not threads of this one
        _check_tokenizes()
        # one malloc arena per task thread, from the worker's start (docs/design.md §3.5)
        if sys.platform.startswith("linux"):
            assert list(client.run(_malloc_arenas).values()) == [("2", 2)]
        assert "MALLOC_ARENA_MAX" not in os.environ   # (the nanny's copy, in this process)
        cluster = client.cluster
    finally:
        client.close()
    assert cluster.status.name == "closed"  # the client owned its cluster


def test_worker_arenas_sets_the_nannies_environment_unless_chosen(monkeypatch):
    key = "distributed.nanny.pre-spawn-environ"
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("DASKWP_WORKER_MALLOC", raising=False)
    before = dict(dask.config.get(key))
    with wp_cluster.worker_arenas(3):
        assert dask.config.get(key) == {**before, "MALLOC_ARENA_MAX": "3"}
    assert dask.config.get(key) == before
    with wp_cluster.worker_arenas(None):   # a cluster of threads: no process to start
        assert dask.config.get(key) == before
    with dask.config.set({key: {**before, "MALLOC_ARENA_MAX": "7"}}):
        with wp_cluster.worker_arenas(3):
            assert dask.config.get(key)["MALLOC_ARENA_MAX"] == "7"
    with wp_cluster.worker_arenas(2):   # a LocalCluster's nanny copies it here as it spawns
        os.environ["MALLOC_ARENA_MAX"] = "2"
    assert "MALLOC_ARENA_MAX" not in os.environ   # a later cluster is not misled by it
    monkeypatch.setenv("MALLOC_ARENA_MAX", "5")
    with wp_cluster.worker_arenas(3):
        assert dask.config.get(key) == before
    assert os.environ["MALLOC_ARENA_MAX"] == "5"
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("DASKWP_WORKER_MALLOC", "0")
    with wp_cluster.worker_arenas(3):
        assert dask.config.get(key) == before


def test_local_worker_threads_follows_local_cluster(monkeypatch):
    from distributed.deploy import local
    monkeypatch.setattr(local, "CPU_COUNT", 8)
    monkeypatch.setattr("dask.system.CPU_COUNT", 8)
    assert wp_cluster._local_worker_threads(None, 3) == 3
    assert wp_cluster._local_worker_threads(3, None) == 3     # ceil(8 / 3), as LocalCluster
    assert wp_cluster._local_worker_threads(2, None) == 4
    from distributed.deploy.utils import nprocesses_nthreads
    assert wp_cluster._local_worker_threads(None, None) == nprocesses_nthreads()[1]


def test_connect_to_a_running_scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        with daskwp.connect(scheduler_address=cluster.scheduler_address) as client:
            assert client.scheduler.address == cluster.scheduler_address
            _check_tokenizes()
        # closing the client leaves someone else's cluster running
        assert cluster.status.name == "running"
        with dask.config.set({"daskwp.scheduler_address": cluster.scheduler_address}):
            with daskwp.connect() as client:
                assert client.scheduler.address == cluster.scheduler_address
        with pytest.raises(ValueError, match="do not apply"):
            daskwp.connect(scheduler_address=cluster.scheduler_address, memory_limit="1GB")


@pytest.mark.gpu
def test_connect_gpu_one_worker_per_gpu():
    if GPU_STACK_MISSING:
        pytest.skip(f"GPU stack missing: {', '.join(GPU_STACK_MISSING)}")
    assert wp_cluster.resolve_device("auto") == "gpu"
    with daskwp.connect(device="gpu") as client:
        assert len(client.scheduler_info()["workers"]) == wp_cluster.gpu_count()
