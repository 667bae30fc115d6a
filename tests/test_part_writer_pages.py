"""A written part leaves no page cache behind (daskwp/frames/part_writer.py): it is written
without the page cache (``O_DIRECT``) where the file system allows, else its pages are
dropped after its fsync (drop_cached_pages), so that a large job's parts do not fill the
cache and push the memory its later writes need into reclaim; a part staged for upload is
written through the cache and keeps its pages. The bytes are the same either way."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from daskwp.frames import megatron, part_writer
from daskwp.frames.part_writer import PartWriter

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="mincore and posix_fadvise residency: Linux")


def _table(rows: int = 60_000) -> pa.Table:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 30_000, rows * 64, dtype=np.int32)   # ~8 MB of values
    offsets = np.arange(0, rows * 64 + 1, 64, dtype=np.int32)
    return pa.table({"logID": np.arange(rows, dtype=np.int64),
                     "input_ids": pa.ListArray.from_arrays(offsets, ids)})


def _write(path, drop_cache: bool) -> str:
    with PartWriter(str(path), str(path) + ".tmp", drop_cache=drop_cache) as w:
        w.write(_table())
        w.close({"partition": 0})
    return str(path)


def _resident_fraction(path: str) -> float:
    """The share of the file's pages in the page cache (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    page = os.sysconf("SC_PAGE_SIZE")
    n = (size + page - 1) // page
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)   # maps, touches nothing
        try:
            anchor = ctypes.c_char.from_buffer(m)
            vec = (ctypes.c_ubyte * n)()
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size),
                              vec)
            del anchor
            if rc != 0:
                pytest.skip(f"mincore failed: errno {ctypes.get_errno()}")
        finally:
            m.close()
    return sum(v & 1 for v in vec) / n


def _drops_pages_here(folder) -> bool:
    """Whether this file system drops clean pages on POSIX_FADV_DONTNEED (tmpfs does not:
    its pages are the file)."""
    p = os.path.join(folder, "probe.bin")
    with open(p, "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    dropped = _resident_fraction(p) < 0.5
    os.unlink(p)
    return dropped


@linux_only
def test_a_written_part_leaves_the_page_cache(tmp_path):
    if not _drops_pages_here(tmp_path):
        pytest.skip("this file system keeps its pages (tmpfs)")
    kept = _write(tmp_path / "kept.parquet", drop_cache=False)
    dropped = _write(tmp_path / "dropped.parquet", drop_cache=True)
    assert os.path.getsize(dropped) > 1 << 20
    assert _resident_fraction(kept) > 0.9      # written, never read: all cached
    assert _resident_fraction(dropped) < 0.1   # fsync'ed, then dropped
    # still the same complete part, its checksum verified by the job's check
    assert pq.read_table(dropped).equals(pq.read_table(kept))
    assert pq.read_metadata(dropped).metadata[part_writer.CHECKSUM_KEY] == \
        pq.read_metadata(kept).metadata[part_writer.CHECKSUM_KEY]


def _refuse_direct(monkeypatch) -> None:
    """Every file as on a file system that refuses ``O_DIRECT`` (tmpfs)."""
    monkeypatch.setattr(megatron, "open_direct", lambda *a, **k: None)


def _takes_direct(folder) -> bool:
    fd = megatron.open_direct(os.path.join(folder, "probe.bin"), os.O_WRONLY | os.O_CREAT)
    if fd is None:
        return False
    os.close(fd)
    os.unlink(os.path.join(folder, "probe.bin"))
    return True


def test_a_part_is_written_direct_where_the_file_system_allows(tmp_path, monkeypatch):
    if not _takes_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT (tmpfs)")
    opened = []
    real = part_writer._HashingFile.__init__

    def init(self, *a, **k):
        real(self, *a, **k)
        opened.append(self.direct)
    monkeypatch.setattr(part_writer._HashingFile, "__init__", init)
    calls = []
    monkeypatch.setattr(os, "posix_fadvise", lambda *a: calls.append(a), raising=False)
    direct = _write(tmp_path / "direct.parquet", drop_cache=True)
    kept = _write(tmp_path / "kept.parquet", drop_cache=False)   # staged: through the cache
    assert opened == [True, False] and calls == []   # nothing cached: nothing to drop
    _refuse_direct(monkeypatch)
    buffered = _write(tmp_path / "buffered.parquet", drop_cache=True)
    assert opened[-1] is False and len(calls) == 1
    # the same bytes, the checksum in the footer included, whichever way they went
    with open(direct, "rb") as a, open(buffered, "rb") as b, open(kept, "rb") as c:
        assert a.read() == b.read() == c.read()
    assert pq.read_table(direct).num_rows == 60_000


def test_a_part_file_must_not_exist(tmp_path):
    tmp = tmp_path / "a.parquet.tmp"
    for drop_cache in (True, False):
        tmp.write_bytes(b"someone's")
        with pytest.raises(FileExistsError):
            part_writer._HashingFile(str(tmp), drop_cache)
        assert tmp.read_bytes() == b"someone's"


def test_pages_are_dropped_after_the_fsync_and_never_before(tmp_path, monkeypatch):
    _refuse_direct(monkeypatch)   # a buffered part: its pages are dropped
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", fd)),
                                                  real_fsync(fd))[1])
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, off, n, advice: calls.append(("fadvise", fd, off, n,
                                                                 advice)),
                        raising=False)
    monkeypatch.setattr(os, "POSIX_FADV_DONTNEED", 4, raising=False)
    _write(tmp_path / "a.parquet", drop_cache=True)
    assert [c[0] for c in calls] == ["fsync", "fadvise"]
    assert calls[1] == ("fadvise", calls[0][1], 0, 0, os.POSIX_FADV_DONTNEED)
    calls.clear()
    _write(tmp_path / "b.parquet", drop_cache=False)   # a staged part, uploaded next
    assert [c[0] for c in calls] == ["fsync"]


def test_no_page_cache_advice_where_the_system_has_none(tmp_path, monkeypatch):
    _refuse_direct(monkeypatch)
    monkeypatch.delattr(os, "posix_fadvise", raising=False)
    path = _write(tmp_path / "a.parquet", drop_cache=True)
    assert pq.read_table(path).num_rows == 60_000
    with open(path, "rb") as f:
        assert part_writer.drop_cached_pages(f.fileno()) is False
