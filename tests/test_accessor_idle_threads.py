"""The accessor's to_parquet on a distributed cluster gives its last parts the idle threads
of their worker process (daskwp/accessors/lazy.py ``compute_lending_idle_threads``), as a
batch job's driver does (``give_idle_threads``). The cluster here runs its workers in this
process: one process of two threads."""

from __future__ import annotations

import threading

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")
import dask  # noqa: E402
import dask.dataframe as dd  # noqa: E402

import daskwp  # noqa: E402,F401  the accessors
from daskwp.accessors import lazy  # noqa: E402
from daskwp.distributed import state, tasks  # noqa: E402
from daskwp.distributed import lending  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=":0")
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _texts(i):
    return pd.Series([f"document {i} number {j} of the partition" for j in range(20)],
                     dtype="string", name="text")


def _series(n=3):
    # known partition lengths: each part's read is fused into its write task
    text = pd.concat([_texts(i) for i in range(n)], ignore_index=True)
    return dd.from_pandas(text.to_frame(), npartitions=n, sort=False)["text"]


@pytest.fixture
def asked():
    """Set once ``give_idle_threads`` has been asked (see :func:`_sent`)."""
    return threading.Event()


@pytest.fixture
def slow_last_part(monkeypatch, asked):
    """Partition 2's write waits (at most 60 s) until the driver has asked
    ``give_idle_threads``: it is still running when parts 0 and 1 are done, however slowly
    the driver hears of them (the cluster's workers are threads of this process)."""
    real = tasks.write_tokenized_part

    def slow(texts, tokenizer, options, path, *args, partition=None, **kwargs):
        if partition == 2:
            asked.wait(60)
        return real(texts, tokenizer, options, path, *args, partition=partition, **kwargs)
    monkeypatch.setattr(tasks, "write_tokenized_part", slow)


def _sent(monkeypatch, asked=None) -> list:
    calls: list = []
    real = lending.give_idle_threads

    def record(client, running, workers):
        sent = real(client, running, workers)
        calls.append((set(running), sent))
        if asked is not None:
            asked.set()
        return sent
    monkeypatch.setattr(lending, "give_idle_threads", record)
    return calls


@pytest.mark.parametrize("lazy_call", [False, True])
def test_last_part_gets_the_idle_workers_threads(client, tmp_path, monkeypatch, lazy_call,
                                                 asked, slow_last_part):
    calls = _sent(monkeypatch, asked)
    res = _series().wordpiece.tokenize(max_length=16)
    with dask.config.set(scheduler=client.get):
        if lazy_call:
            stats = res.to_parquet(tmp_path / "out", compute=False).compute()
        else:
            res.to_parquet(tmp_path / "out")
            stats = None
    # asked once the last part was the only one left; it got the process's two threads
    assert calls, "give_idle_threads was not asked"
    running, sent = calls[-1]
    assert len(running) == 1
    (last,) = running
    assert last[1] == 2
    assert [v for w in sent.values() for v in w.values()] == [2]
    # and given back after: the same write computed again has the same keys
    assert state._TASK_THREADS.get(last) == 1
    out = pd.read_parquet(tmp_path / "out")
    assert out["logID"].nunique() == 60
    if stats is not None:
        assert stats["documents"] == 60 and stats["parts"] == 3


def test_output_equals_the_plain_dask_compute(client, tmp_path):
    res = _series().wordpiece.tokenize(max_length=16, stride=4)
    with dask.config.set(scheduler=client.get):
        lent = res.to_parquet(tmp_path / "lent", compute=False).compute()
        plain = dask.compute(res.to_parquet(tmp_path / "plain", compute=False))[0]
    assert lent["documents"] == plain["documents"] == 60
    for i in range(3):
        a = pd.read_parquet(tmp_path / "lent" / f"part.{i}.parquet")
        b = pd.read_parquet(tmp_path / "plain" / f"part.{i}.parquet")
        pd.testing.assert_frame_equal(a, b)


def _broken(i):
    if i == 1:
        raise RuntimeError("partition one is broken")
    return _texts(i)


def test_a_failing_part_raises_its_error(client, tmp_path):
    s = dd.from_map(_broken, range(3), meta=pd.Series([], dtype="string", name="text"))
    with dask.config.set(scheduler=client.get):
        with pytest.raises(RuntimeError, match="partition one is broken"):
            s.wordpiece.tokenize(max_length=16).to_parquet(tmp_path / "bad")


def test_without_a_cluster_it_computes_as_dask_does(tmp_path, monkeypatch):
    calls = _sent(monkeypatch)
    res = _series().wordpiece.tokenize(max_length=16)
    with dask.config.set(scheduler="sync"):
        stats = res.to_parquet(tmp_path / "out", compute=False).compute()
    assert stats["documents"] == 60 and calls == []
    assert isinstance(res.to_parquet(tmp_path / "o2", compute=False), lazy.PartsWrite)
