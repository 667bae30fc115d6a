"""The merges stop when closed; the pair's writes take every byte (short writes)."""
import hashlib
import threading
import time

import numpy as np

from daskwp.frames import megatron as fm
from daskwp.jobs import megatron as jm


def test_a_closed_merge_stops_after_the_append_it_is_in(tmp_path, monkeypatch):
    appended, started = [], threading.Event()

    def slow_append(self, index):
        # the append lasts until the merge is closed (at most 60 s), however late the
        # test's thread gets to close it
        started.set()
        end = time.monotonic() + 60
        while not self._closed and time.monotonic() < end:
            time.sleep(0.005)
        appended.append(index)
    monkeypatch.setattr(jm.PartMerger, "_append", slow_append)
    merger = jm.PartMerger(str(tmp_path), 5)
    for i in range(5):
        merger.part_done(i)
    assert started.wait(60)
    merger.close()      # during the first append: the four others are not done
    assert appended == [0]
    assert merger.finish(str(tmp_path / "merged")) is None


def test_the_inline_merge_holds_one_partition_a_core_as_dask_counts_them(tmp_path, monkeypatch):
    import dask.system
    monkeypatch.setattr(dask.system, "CPU_COUNT", 3)
    merge = jm.InlineMerge(str(tmp_path), _Cfg(), 4, "j" * 32)
    try:
        assert merge.hold == 3
    finally:
        merge.close()


class _Cfg:
    column = "text"
    document_separator = None


class _Dribble:
    """A file whose write takes at most 7 bytes (an unbuffered file may take fewer than
    given)."""

    def __init__(self):
        self.data = bytearray()

    def write(self, b) -> int:
        b = bytes(memoryview(b).cast("B")[:7])
        self.data += b
        return len(b)


def test_arrays_are_written_whole_and_hashed_as_written():
    a = np.arange(1000, dtype=np.uint16)
    out = _Dribble()
    h = hashlib.sha256()
    fm._write_array(fm.HashingWriter(out, h), a)
    assert bytes(out.data) == a.tobytes()
    assert h.hexdigest() == hashlib.sha256(a.tobytes()).hexdigest()
