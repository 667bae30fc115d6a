"""A cluster's Megatron parts without the page cache: each worker writes its part's
``.bin`` and ``.idx`` with ``O_DIRECT`` (``write_pair_from(direct=True)``), the driver's
merge (``jobs.megatron.PartMerger``) reads each part's ``.bin`` with ``O_DIRECT`` and
writes the merged ``.bin`` so; the bytes are those of buffered files, and where the file
system refuses ``O_DIRECT`` (tmpfs) the same files are written buffered."""

from __future__ import annotations

import errno
import os
import threading

import numpy as np
import pytest

import daskwp.frames.megatron as fm
from daskwp.frames.megatron import read_index, write_pair_from
from daskwp.jobs import megatron as jm

pytestmark = pytest.mark.skipif(
    not hasattr(os, "O_DIRECT") or not os.path.exists("/proc/self/fdinfo"),
    reason="O_DIRECT and /proc are Linux's")


def _flags(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as fh:
        return int(next(x for x in fh if x.startswith("flags:")).split()[1], 8)


def _direct_works(folder) -> bool:
    fd = fm.open_direct(str(folder / ".probe"), os.O_WRONLY | os.O_CREAT)
    if fd is not None:
        os.close(fd)
    os.unlink(folder / ".probe")
    return fd is not None


def _refuse_direct(monkeypatch):
    """O_DIRECT refused at open, as tmpfs refuses it (EINVAL)."""
    real = os.open

    def fake(path, flags, *a, **k):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", fake)


def _pieces(seed: int, n_pieces: int):
    """``(tokens, sequence_lengths, document_indices, stats)`` slices of random documents
    (empty ones among them), sized so that the files cross the direct buffer's blocks at
    odd offsets."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_pieces):
        docs = [rng.integers(0, 30000, rng.integers(0, 600)) for _ in range(rng.integers(1, 40))]
        tokens, lengths, d = fm.document_sequences(
            np.concatenate(docs).astype(np.int32) if docs else np.zeros(0, np.int32),
            np.concatenate([[0], np.cumsum([len(x) for x in docs])]), np.uint16, eod_id=102)
        out.append((tokens, lengths, d, {"documents": len(docs)}))
    return out


@pytest.mark.parametrize("n_pieces", [1, 7, 60])
def test_direct_part_writes_the_bytes_of_a_buffered_one(tmp_path, monkeypatch, n_pieces):
    """write_pair_from(direct=True): both files through O_DIRECT file descriptors (the
    .bin's every byte), the same bytes and checksums as buffered, fsync'ed; with O_DIRECT
    refused, buffered files with those bytes again."""
    if not _direct_works(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    pieces = _pieces(n_pieces, n_pieces)
    through, synced = {}, []
    real_put, real_fsync = fm._DirectAppendFile._put, os.fsync

    def put(self, nbytes, *where):
        assert _flags(self.fd) & os.O_DIRECT
        ext = self.path.rsplit(".", 1)[1]
        through[ext] = through.get(ext, 0) + nbytes
        return real_put(self, nbytes, *where)

    def fsync(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)
    monkeypatch.setattr(fm._DirectAppendFile, "_put", put)
    monkeypatch.setattr(os, "fsync", fsync)
    hashes = {}
    for name, direct in (("b", False), ("d", True)):
        h = {ext: jm.checksum_hash() for ext in (".bin", ".idx")}
        write_pair_from(str(tmp_path / name), iter(pieces), np.uint16, fsync=True,
                        digests=h, direct=direct)
        hashes[name] = {ext: jm.checksum_hex(x) for ext, x in h.items()}
    monkeypatch.undo()
    assert synced == ["b.bin", "b.idx", "d.bin", "d.idx"]
    size = {ext: os.path.getsize(tmp_path / f"b.{ext}") for ext in ("bin", "idx")}
    # whole blocks written: at least every byte, the last block padded (then cut)
    assert set(through) == {"bin", "idx"}
    for ext in ("bin", "idx"):
        assert size[ext] <= through[ext] < size[ext] + 2 * fm._DIRECT_ALIGN
        assert (tmp_path / f"d.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()
    assert hashes["d"] == hashes["b"]
    _refuse_direct(monkeypatch)
    write_pair_from(str(tmp_path / "r"), iter(pieces), np.uint16, direct=True)
    monkeypatch.undo()
    for ext in ("bin", "idx"):
        assert (tmp_path / f"r.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()


def test_part_bin_is_written_behind_while_the_next_buffer_fills(tmp_path, monkeypatch):
    """write_pair_from(direct=True): each full buffer of the .bin is written by a writer
    thread while the caller goes on filling the next one (its write blocked here until the
    caller has filled half the next buffer), one write in flight; the bytes those of a
    buffered pair, every buffer back in the pool after."""
    if not _direct_works(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 64 << 10)
    pieces = _pieces(60, 60)
    assert sum(p[0].nbytes for p in pieces) > 4 * fm._DIRECT_CHUNK
    caller = threading.get_ident()
    real_put = fm._DirectAppendFile._put
    first_put, half_filled = threading.Event(), threading.Event()
    puts, in_flight, most = [], [0], [0]
    lock = threading.Lock()

    def put(self, nbytes, *where):
        if self.path.endswith(".bin") and nbytes == fm._DIRECT_CHUNK:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            puts.append(threading.get_ident())
            if len(puts) == 1:
                first_put.set()
                assert half_filled.wait(10), "the caller waited for the write"
            try:
                return real_put(self, nbytes, *where)
            finally:
                with lock:
                    in_flight[0] -= 1
        return real_put(self, nbytes, *where)

    real_write = fm._DirectAppendFile.write

    def write(self, data):
        n = real_write(self, data)
        if first_put.is_set() and self._base == fm._DIRECT_CHUNK and \
                self._fill >= fm._DIRECT_CHUNK // 2:
            half_filled.set()
        return n
    monkeypatch.setattr(fm._DirectAppendFile, "_put", put)
    monkeypatch.setattr(fm._DirectAppendFile, "write", write)
    fm._idle_buffers.clear()
    write_pair_from(str(tmp_path / "d"), iter(pieces), np.uint16, fsync=True, direct=True)
    monkeypatch.undo()
    assert half_filled.is_set()
    assert len(puts) >= 4 and caller not in puts and most[0] == 1
    assert len(fm._idle_buffers) == 2   # the .bin's two (the .idx took one of them)
    write_pair_from(str(tmp_path / "b"), iter(pieces), np.uint16)
    for ext in ("bin", "idx"):
        assert (tmp_path / f"d.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()


def test_a_failed_write_behind_is_raised_to_the_writer(tmp_path, monkeypatch):
    """A write-behind that fails (a full disk) raises its error in the caller's thread,
    at its next full buffer or at complete_file/close; the buffers come back to the pool
    and the file is closed."""
    if not _direct_works(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 64 << 10)
    real_put = fm._DirectAppendFile._put
    caller = threading.get_ident()

    def put(self, nbytes, *where):
        if threading.get_ident() != caller:
            raise OSError(errno.ENOSPC, "No space left on device", self.path)
        return real_put(self, nbytes, *where)
    monkeypatch.setattr(fm._DirectAppendFile, "_put", put)
    fm._idle_buffers.clear()
    chunk = np.arange(fm._DIRECT_CHUNK // 2, dtype=np.uint16)
    for data, calls in ((chunk, 8), (chunk, 2)):
        fh = fm.create_file(str(tmp_path / "x.bin"), direct=True, behind=True)
        with pytest.raises(OSError, match="No space") as got:
            try:
                for _ in range(calls):
                    fm._write_array(fh, data)
                fm.complete_file(fh, True)
            finally:
                fd = fh.fileno()
                fh.close()
        assert got.value.errno == errno.ENOSPC
        with pytest.raises(OSError):
            os.fstat(fd)
        assert len(fm._idle_buffers) == 2


def test_read_direct_gives_any_range_of_the_file(tmp_path, monkeypatch):
    """_read_direct: the bytes of unaligned ranges (within a block, across blocks and
    across the buffer's size), read with O_DIRECT; ValueError past the end; buffered
    where O_DIRECT is refused."""
    if not _direct_works(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 4 * fm._DIRECT_ALIGN)
    data = np.random.default_rng(3).integers(0, 256, 5 * 4 * fm._DIRECT_ALIGN + 77,
                                             dtype=np.uint8).tobytes()
    path = str(tmp_path / "f")
    with open(path, "wb") as fh:
        fh.write(data)
    seen = []
    real = os.preadv

    def preadv(fd, bufs, offset):
        seen.append((bool(_flags(fd) & os.O_DIRECT), offset % fm._DIRECT_ALIGN))
        return real(fd, bufs, offset)
    monkeypatch.setattr(os, "preadv", preadv)
    for offset, count in [(0, len(data)), (1, 10), (4095, 2), (34, 3 * 4096 + 5),
                          (5000, len(data) - 5000), (len(data), 0)]:
        got = b"".join(bytes(v) for v in fm._read_direct(path, offset, count))
        assert got == data[offset:offset + count], (offset, count)
    assert seen and all(direct and aligned == 0 for direct, aligned in seen)
    with pytest.raises(ValueError, match="ends 10 bytes early"):
        b"".join(bytes(v) for v in fm._read_direct(path, len(data) - 5, 15))
    _refuse_direct(monkeypatch)
    got = b"".join(bytes(v) for v in fm._read_direct(path, 34, 3 * 4096 + 5))
    assert got == data[34:34 + 3 * 4096 + 5]
    monkeypatch.undo()
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 4 * fm._DIRECT_ALIGN)
    calls = []

    def refusing(fd, bufs, offset):   # opened with O_DIRECT, then its reads refused
        calls.append(offset)
        if _flags(fd) & os.O_DIRECT and len(calls) > 1:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, bufs, offset)
    monkeypatch.setattr(os, "preadv", refusing)
    got = b"".join(bytes(v) for v in fm._read_direct(path, 34, 3 * 4096 + 5 + 4 * 4096))
    assert got == data[34:34 + 7 * 4096 + 5]
    assert len(calls) >= 2


def test_the_cluster_merge_reads_and_writes_the_bin_without_the_page_cache(tmp_path,
                                                                          monkeypatch):
    """PartMerger: the merged .bin is written through O_DIRECT, each part's .bin read with
    O_DIRECT; the merged pair equals merge_pairs' (buffered) of the same parts."""
    if not _direct_works(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    from test_megatron_merge import _parts
    n = 5
    prefixes = _parts(tmp_path, n)
    fm.merge_pairs(prefixes, str(tmp_path / "ref"))
    reads = []
    real = fm._read_direct

    def read_direct(path, offset, count):
        for view in real(path, offset, count):
            reads.append(os.path.basename(path))
            yield view
    monkeypatch.setattr(fm, "_read_direct", read_direct)
    with jm.PartMerger(str(tmp_path), n) as merger:
        assert merger.appender.bin_direct
        for i in range(n):
            merger.part_done(i)
        merger.finish(str(tmp_path / "got"))
    sizes = [os.path.getsize(p + ".bin") for p in prefixes]
    assert sorted(set(reads)) == sorted(os.path.basename(p) + ".bin"
                                        for p, s in zip(prefixes, sizes) if s)
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"got{ext}").read_bytes() == (tmp_path / f"ref{ext}").read_bytes()
    assert read_index(str(tmp_path / "got.idx")).documents == \
        sum(read_index(p + ".idx").documents for p in prefixes)


def test_direct_buffers_are_reused_and_bounded():
    """Each file's direct buffer comes back to the pool at close; the next file takes it
    (a mapping already touched), and at most _IDLE_BUFFERS_KEPT are kept."""
    fm._idle_buffers.clear()
    a = fm._take_buffer()
    fm._give_buffer(a)
    assert fm._take_buffer() is a
    bufs = [fm._take_buffer() for _ in range(fm._IDLE_BUFFERS_KEPT + 2)]
    for b in bufs:
        fm._give_buffer(b)
    assert len(fm._idle_buffers) == fm._IDLE_BUFFERS_KEPT
    assert bufs[-1].closed and not bufs[0].closed


def test_index_from_pieces_is_the_index_of_the_whole(tmp_path):
    """_write_index_pieces of lists of consecutive pieces (a partition's slices) writes
    the bytes of write_index of the concatenated arrays; a decrease at a piece boundary or
    a wrong end is refused."""
    rng = np.random.default_rng(11)
    lengths = [rng.integers(0, 50, k).astype(np.int32) for k in (0, 5, 1, 40, 0, 7)]
    ends = np.cumsum([len(a) for a in lengths])
    docs = [np.zeros(1, np.int64)] + [np.sort(rng.integers(e - len(a), e + 1, 3)) for a, e
                                      in zip(lengths, ends)]
    docs[-1][-1] = ends[-1]
    fm.write_index(str(tmp_path / "w.idx"), np.concatenate(lengths), np.concatenate(docs),
                   np.uint16)
    fm._write_index_pieces(str(tmp_path / "p.idx"), lengths, docs, np.uint16, direct=True)
    assert (tmp_path / "p.idx").read_bytes() == (tmp_path / "w.idx").read_bytes()
    bad = [d.copy() for d in docs]
    bad[3][0] = bad[2][-1] - 1   # decreases where two pieces meet
    with pytest.raises(ValueError, match="never decrease"):
        fm._write_index_pieces(str(tmp_path / "b.idx"), lengths, bad, np.uint16)
    with pytest.raises(ValueError, match=f"number of sequences \\({ends[-1]}\\)"):
        fm._write_index_pieces(str(tmp_path / "b.idx"), lengths, docs[:-1], np.uint16)


def test_part_index_is_written_without_a_partition_sized_array(tmp_path):
    """write_pair_from streams the .idx from the slices' entries: no array of the whole
    partition's lengths, pointers or document indices (the old peak of a worker's
    partition: ~28 bytes a sequence on top of its slices)."""
    import tracemalloc
    k, n = 40, 25_000   # 1M sequences in 40 slices
    pieces = [(np.ones(n, np.uint16), np.ones(n, np.int32), np.arange(n + 1, dtype=np.int64),
               {"documents": n, "document_lengths": np.ones(n, np.int64)}) for _ in range(k)]
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        stats = write_pair_from(str(tmp_path / "x"), iter(pieces), np.uint16, direct=True)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    # the slices' own entries (12 bytes a sequence, kept until the index is written) and
    # the concatenated document lengths of the statistics (8 bytes); a pointers array of
    # the whole (8 bytes) or the concatenated lengths and indices (12) would pass 20
    assert peak < 20.5 * k * n, peak
    assert stats["documents"] == k * n and len(stats["document_lengths"]) == k * n
    ix = read_index(str(tmp_path / "x.idx"))
    assert ix.sequences == k * n and ix.documents == k * n
    assert int(ix.sequence_pointers[-1]) == 2 * (k * n - 1)


def test_part_tasks_slice_smaller_than_in_process_merges(tmp_path, monkeypatch):
    """A partition written as a part by its own task (a cluster's, or merge_parts false)
    is tokenized in slices of PART_SLICE_BYTES of text; one an in-process job appends from
    memory in slices of SLICE_BYTES. Both give the same merged bytes."""
    from test_megatron_inline import _values
    from daskwp.jobs import make_config, run_job
    seen = []
    real = jm.megatron_slices

    def slices(*a, **k):
        seen.append(a[5] if len(a) > 5 else k.get("nbytes"))
        return real(*a, **k)
    monkeypatch.setattr(jm, "megatron_slices", slices)
    s = run_job(make_config(_values(tmp_path, "parts", merge_parts=False)))
    assert seen and set(seen) == {jm.PART_SLICE_BYTES}
    assert jm.PART_SLICE_BYTES < fm.SLICE_BYTES
    seen.clear()
    m = run_job(make_config(_values(tmp_path, "inline")))
    assert seen and set(seen) == {None}
    fm.merge_pairs(s["megatron"]["prefixes"], str(tmp_path / "ref"))
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"ref{ext}").read_bytes() == \
            open(m["megatron"]["prefix"] + ext, "rb").read()


def _vm_flags(buf) -> list:
    """The VmFlags of the mapping that holds ``buf`` (/proc/self/smaps)."""
    import ctypes
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError("no mapping holds the buffer")


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_HUGEPAGE")
                    or not os.path.exists("/proc/self/smaps")
                    or not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="transparent huge pages (a kernel built with them) and smaps are "
                           "Linux's")
@pytest.mark.parametrize("setting", [None, "true", "false"])
def test_direct_buffers_ask_for_huge_pages(monkeypatch, setting):
    """A new direct I/O buffer asks for transparent huge pages (VmFlags 'hg': the pinning
    of its pages for each direct read or write costs a fraction of 4 KB pages'), unless
    DASKWP_HUGE_PAGES is false."""
    if setting is None:
        monkeypatch.delenv("DASKWP_HUGE_PAGES", raising=False)
    else:
        monkeypatch.setenv("DASKWP_HUGE_PAGES", setting)
    monkeypatch.setattr(fm, "_idle_buffers", [])
    buf = fm._take_buffer()
    try:
        assert ("hg" in _vm_flags(buf)) == (setting != "false")
    finally:
        buf.close()


def test_a_buffer_pooled_at_another_chunk_size_is_not_taken(tmp_path, monkeypatch):
    """The idle buffers are of the chunk size they were made at: a buffer pooled while the
    size was another (a test's smaller chunk) is dropped, not taken by the next file,
    which would copy a chunk's bytes into a smaller buffer."""
    fm._idle_buffers.clear()
    with monkeypatch.context() as m:
        m.setattr(fm, "_DIRECT_CHUNK", 8192)
        small = fm._take_buffer()
        fm._give_buffer(small)
        assert fm._idle_buffers == [small]   # pooled at its own size
    fh = fm.create_file(str(tmp_path / "f"), direct=True)
    if not getattr(fh, "direct", False):
        fh.close()
        pytest.skip("this file system refuses O_DIRECT")
    data = np.arange(3 * fm._DIRECT_CHUNK // 8 + 5, dtype=np.int64)
    try:
        fh.write(data)
        fm.complete_file(fh)
    finally:
        fh.close()
    assert (tmp_path / "f").read_bytes() == data.tobytes()
    assert small.closed and small not in fm._idle_buffers
    assert all(len(b) == fm._DIRECT_CHUNK for b in fm._idle_buffers)


def test_cluster_part_idx_through_the_page_cache_and_not_fsynced(tmp_path, monkeypatch):
    """A cluster's part (write_megatron_partition, partition-local): its .bin through
    O_DIRECT, its .idx through the page cache, neither they nor the record fsync'ed; the
    bytes those of a buffered pair of the same slices. A rerun keeps the part while its
    files match the record, and not once its .idx differs (what a crash of the system
    could leave behind without the fsyncs)."""
    if not _direct_works(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    import json

    import daskwp
    from daskwp.frames.megatron import megatron_slices
    from daskwp.jobs import list_input_files, plan_partitions, read_partition
    from daskwp.jobs.records import check_part_record, part_stem
    rng = np.random.default_rng(3)
    words = ["alpha", "beta", "gamma", "delta", "the", "quick", "brown", "fox", "jumps"]
    src = tmp_path / "in.jsonl"
    with open(src, "w", encoding="utf-8") as fh:
        for _ in range(3000):
            fh.write(json.dumps({"text": " ".join(rng.choice(words, rng.integers(0, 40)))})
                     + "\n")
    spec = plan_partitions(list_input_files(str(src)), "text", 1 << 30)[0]
    tok = daskwp.WordPieceTokenizer(os.path.join(os.path.dirname(daskwp.__file__), "data",
                                                 "bert-base-uncased-vocab.txt"),
                                    lowercase=True, num_threads=1)
    opts = {"add_special_tokens": False, "append_eod": True, "eod_token": None,
            "document_separator": None}
    out = tmp_path / "out"
    out.mkdir()
    opened, synced = {}, []
    real_create, real_fsync = fm.create_file, os.fsync

    def track_create(path, *a, **k):
        fh = real_create(path, *a, **k)
        opened[str(path).rsplit(".", 1)[1]] = bool(_flags(fh.fileno()) & os.O_DIRECT)
        return fh

    def track_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)
    monkeypatch.setattr(fm, "create_file", track_create)
    monkeypatch.setattr(os, "fsync", track_fsync)
    stats = jm.write_megatron_partition(spec, None, str(out), tok, opts, "job-1", 1)
    monkeypatch.undo()
    assert opened == {"bin": True, "idx": False}
    assert synced == []
    prefix = out / part_stem(0, 1)
    slices = megatron_slices(tok, read_partition(spec), opts, None, {}, 4 << 10)
    write_pair_from(str(tmp_path / "ref"), slices, np.uint16)
    for ext in ("bin", "idx"):
        assert (tmp_path / f"ref.{ext}").read_bytes() == \
            (out / (part_stem(0, 1) + "." + ext)).read_bytes()
    assert read_index(str(prefix) + ".idx").documents == stats["documents"] == 3000
    rec = check_part_record(str(out), 0, 1, "job-1", 3000)
    assert rec is not None and rec["documents"] == 3000
    with open(str(prefix) + ".idx", "r+b") as fh:   # a stale page of the index
        fh.seek(40)
        b = fh.read(1)
        fh.seek(40)
        fh.write(bytes([b[0] ^ 1]))
    assert check_part_record(str(out), 0, 1, "job-1", 3000) is None


def test_part_bin_completes_while_the_idx_is_written(tmp_path, monkeypatch):
    """write_pair_from(direct=True): the .bin's last buffer goes to disk and is fsync'ed on
    another thread while the caller writes the .idx (the .bin's completion held here until
    the .idx has begun); write_pair_from returns once both are done, the .bin closed, the
    bytes those of a buffered pair. An error of that completion is raised by it."""
    if not _direct_works(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    pieces = _pieces(7, 7)
    caller = threading.get_ident()
    idx_begun, done = threading.Event(), []
    real_complete, real_index = fm.complete_file, fm._write_index_pieces

    def complete(fh, fsync=False):
        if fh.name.endswith(".bin"):
            assert idx_begun.wait(10), "the .idx waited for the .bin"
            done.append(threading.get_ident())
        return real_complete(fh, fsync)

    def index(*a, **k):
        idx_begun.set()
        return real_index(*a, **k)
    monkeypatch.setattr(fm, "complete_file", complete)
    monkeypatch.setattr(fm, "_write_index_pieces", index)
    write_pair_from(str(tmp_path / "d"), iter(pieces), np.uint16, fsync=True, direct=True,
                    index_direct=False)
    assert len(done) == 1 and done[0] != caller

    def fail(fh, fsync=False):
        if fh.name.endswith(".bin"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_complete(fh, fsync)
    monkeypatch.setattr(fm, "complete_file", fail)
    with pytest.raises(OSError, match="No space"):
        write_pair_from(str(tmp_path / "e"), iter(pieces), np.uint16, direct=True,
                        index_direct=False)
    monkeypatch.undo()
    write_pair_from(str(tmp_path / "b"), iter(pieces), np.uint16)
    for ext in ("bin", "idx"):
        assert (tmp_path / f"d.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()
