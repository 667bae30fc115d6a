"""The end of an in-process job (issues 42 and 39, idle cores): a partition left running alone
on dask's threaded scheduler takes the cores the finished ones freed for its next pieces
(:func:`daskwp.distributed.local.in_process_share`), and its output does not change."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

import daskwp
from conftest import DATA, read_documents, requires_data
from daskwp.backends.cpu import default_num_threads, set_task_num_threads
from daskwp.distributed import tasks
from daskwp.distributed.local import InProcess, in_process_share


def _wait_for(cond, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def test_a_task_left_alone_gets_every_core():
    runner = InProcess("threads", num_workers=2)
    runner.cores = 4   # the share does not depend on this machine's cores
    b_started, a_read = threading.Event(), threading.Event()
    seen = {}

    def a():
        assert b_started.wait(60)
        # a kernel call that sets no thread count (a Megatron slice's, a count's) takes
        # the same share, asked at each call
        seen["both"] = (in_process_share(), default_num_threads())
        a_read.set()
        _wait_for(lambda: in_process_share() == 4)   # b collected: a runs alone
        seen["alone"] = (in_process_share(), default_num_threads())

    def b():
        b_started.set()
        assert a_read.wait(60)
        seen["b"] = in_process_share()

    runner.get({"a": (a,), "b": (b,)}, ["a", "b"])
    assert seen == {"both": (2, 2), "b": 2, "alone": (4, 4)}
    assert in_process_share() is None   # not on a task thread
    assert runner.running == 0


def test_the_synchronous_scheduler_and_workers_get_no_share():
    seen = []
    InProcess("synchronous").get({"x": (lambda: seen.append(in_process_share()),)}, ["x"])
    assert seen == [None]


@requires_data
def test_each_piece_takes_the_share_of_the_moment(tmp_path, monkeypatch):
    """The encode + fill path asks for the share before every piece; the part is the one
    a fixed thread count writes."""
    docs = read_documents(DATA / "corpus" / "en_ewt.txt")[:3000]
    texts = pa.array(docs, pa.string())
    tok = daskwp.WordPieceTokenizer()
    options = dict(max_length=64, stride=8, truncation=False, add_special_tokens=True,
                   padding="do_not_pad", bucket_widths="auto")
    asked, used = iter([1, 2, 2, 1, 2] * 1000), []
    # an InProcess thread's share of the moment, as its threads set it (local._start_thread)
    set_task_num_threads(lambda: next(asked))
    real = type(tok).encode

    def encode(self, texts, *a, num_threads=None, **k):
        used.append(num_threads)
        return real(self, texts, *a, num_threads=num_threads, **k)
    monkeypatch.setattr(type(tok), "encode", encode)
    try:
        tasks.write_tokenized_part(texts, tok, options, str(tmp_path / "a.parquet"),
                                   str(tmp_path / ".a.tmp"), piece_bytes=16 << 10)
    finally:
        set_task_num_threads(None)   # off an InProcess thread
    assert len(used) > 5 and used == ([1, 2, 2, 1, 2] * 1000)[:len(used)]
    del used[:]
    tasks.write_tokenized_part(texts, tok, options, str(tmp_path / "b.parquet"),
                               str(tmp_path / ".b.tmp"), piece_bytes=16 << 10)
    assert set(used) == {default_num_threads()}
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


@requires_data
def test_megatron_slices_of_a_partition_alone_take_the_freed_cores(monkeypatch):
    """A Megatron partition's slices on an InProcess thread: those made while another task
    runs on one core each, those after it finished on every core; the sequences are the
    ones a fixed thread count makes."""
    import numpy as np

    from daskwp.backends.cpu import CPU
    from daskwp.frames.megatron import megatron_slices
    docs = read_documents(DATA / "corpus" / "en_ewt.txt")[:4000]
    texts = pa.array(docs, pa.string())
    tok = daskwp.WordPieceTokenizer()
    options = dict(add_special_tokens=False, append_eod=True)
    used = []
    real = type(CPU).encode

    def encode(self, model, texts, num_threads, *a, **k):
        used.append(num_threads)
        return real(self, model, texts, num_threads, *a, **k)
    monkeypatch.setattr(type(CPU), "encode", encode)
    ref = list(megatron_slices(tok, texts, options, nbytes=16 << 10))
    runner = InProcess("threads", num_workers=2, tasks=2)
    runner.cores = 4
    b_started, b_may_end = threading.Event(), threading.Event()
    got = []

    def a():
        assert b_started.wait(60)
        del used[:]
        slices = megatron_slices(tok, texts, options, nbytes=16 << 10)
        got.append(next(slices))   # b runs: its share
        b_may_end.set()
        assert _wait_for(lambda: in_process_share() == 4)   # b collected: alone
        got.extend(slices)

    def b():
        b_started.set()
        assert b_may_end.wait(60)

    runner.get({"a": (a,), "b": (b,)}, ["a", "b"])
    assert len(used) == len(ref) > 5
    assert used[0] == 2 and set(used[1:]) == {4}
    for (t1, l1, d1, s1), (t2, l2, d2, s2) in zip(got, ref):
        assert np.array_equal(t1, t2) and np.array_equal(l1, l2) and np.array_equal(d1, d2)
