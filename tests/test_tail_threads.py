"""The end of an in-process job (issue 42, idle cores): a partition left running alone on
dask's threaded scheduler takes the cores the finished ones freed for its next pieces
(:func:`daskwp.distributed.local.in_process_share`), and its output does not change."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

import daskwp
from conftest import DATA, read_documents, requires_data
from daskwp.distributed import tasks
from daskwp.distributed.local import InProcess, in_process_share


def _wait_for(cond, timeout: float = 10.0) -> bool:
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
        assert b_started.wait(10)
        seen["both"] = in_process_share()
        a_read.set()
        _wait_for(lambda: in_process_share() == 4)   # b collected: a runs alone
        seen["alone"] = in_process_share()

    def b():
        b_started.set()
        assert a_read.wait(10)
        seen["b"] = in_process_share()

    runner.get({"a": (a,), "b": (b,)}, ["a", "b"])
    assert seen == {"both": 2, "b": 2, "alone": 4}
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
    monkeypatch.setattr(tasks, "in_process_share", lambda: next(asked))
    real = type(tok).encode

    def encode(self, texts, *a, num_threads=None, **k):
        used.append(num_threads)
        return real(self, texts, *a, num_threads=num_threads, **k)
    monkeypatch.setattr(type(tok), "encode", encode)
    tasks.write_tokenized_part(texts, tok, options, str(tmp_path / "a.parquet"),
                               str(tmp_path / ".a.tmp"), piece_bytes=16 << 10)
    assert len(used) > 5 and used == ([1, 2, 2, 1, 2] * 1000)[:len(used)]
    monkeypatch.setattr(tasks, "in_process_share", lambda: None)   # off an InProcess thread
    del used[:]
    tasks.write_tokenized_part(texts, tok, options, str(tmp_path / "b.parquet"),
                               str(tmp_path / ".b.tmp"), piece_bytes=16 << 10)
    from daskwp.backends.cpu import default_num_threads
    assert set(used) == {default_num_threads()}
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))
