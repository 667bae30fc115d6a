"""The merge of a Megatron job's parts while the job runs (``jobs.megatron.PartMerger``,
``frames.megatron.PairAppender``): parts appended in order as they complete, the same bytes
as merging them all at the end, nothing left behind when a part is refused."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import requires_data, vocab_path
from daskwp.frames.megatron import (PairAppender, document_sequences, frame_pieces,
                                    merge_pairs, read_index, write_pair)
from daskwp.jobs import make_config, run_job
from daskwp.jobs import megatron as jm


def _parts(folder: Path, n: int, seed: int = 5, shortest: int = 0) -> list[str]:
    """``n`` parts named as a job names them (``part-NNNNN``), one of them empty, and
    ``folder/whole``: all their documents (of ``shortest`` to 8 tokens) written at once
    (what merging them gives)."""
    rng = np.random.default_rng(seed)
    docs = [list(rng.integers(0, 30000, rng.integers(shortest, 9))) for _ in range(60 * n)]
    flat = np.array([t for d in docs for t in d], np.int32)
    off = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    write_pair(str(folder / "whole"), *document_sequences(flat, off, np.uint16, eod_id=102))
    cuts = np.sort(rng.integers(0, len(docs), n - 1))
    cuts = [0, *cuts[:1], *cuts[:1], *cuts[2:], len(docs)]   # part 1 empty
    prefixes = []
    for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        p = str(folder / jm.part_prefix(k, n))
        write_pair(p, *document_sequences(flat[off[a]:off[b]], off[a:b + 1] - off[a],
                                          np.uint16, eod_id=102))
        prefixes.append(p)
    return prefixes


def test_parts_are_appended_in_order_as_they_complete(tmp_path):
    n = 6
    prefixes = _parts(tmp_path, n)
    merger = jm.PartMerger(str(tmp_path), n)
    appended = []
    for i in [2, 0, 1, 5, 3, 4]:   # completion order
        merger.part_done(i)
        merger.drain()
        appended.append(merger.appended)
    assert appended == [0, 1, 3, 3, 4, 6]
    info = merger.finish(str(tmp_path / "got"))
    merger.close()
    assert info["documents"] == sum(read_index(p + ".idx").documents for p in prefixes)
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"got{ext}").read_bytes() == (tmp_path / f"whole{ext}").read_bytes()
    assert not list(tmp_path.glob(".tmp*"))


def test_a_refused_part_stops_the_merge_and_leaves_nothing(tmp_path):
    n = 4
    prefixes = _parts(tmp_path, n)
    with open(prefixes[2] + ".bin", "ab") as fh:   # longer than its index says
        fh.write(b"\x00\x00")
    (tmp_path / ".tmp-merge-dead.bin").write_bytes(b"x")   # a killed driver's
    with jm.PartMerger(str(tmp_path), n) as merger:
        assert not (tmp_path / ".tmp-merge-dead.bin").exists()
        for i in range(n):
            merger.part_done(i)
        merger.drain()
        assert merger.appended == 2
        assert "holds" in str(merger.failed)
        assert merger.finish(str(tmp_path / "got")) is None
    assert not list(tmp_path.glob(".tmp*"))
    assert not (tmp_path / "got.bin").exists()
    with pytest.raises(ValueError, match="part-00002.bin holds"):
        merge_pairs(prefixes, str(tmp_path / "m"))
    assert not list(tmp_path.glob("m.*"))


def test_appender_refuses_mixed_dtypes_and_an_empty_merge(tmp_path):
    write_pair(str(tmp_path / "a"), np.array([1, 2], np.uint16), [2], [0, 1])
    write_pair(str(tmp_path / "b"), np.array([1, 2], np.int32), [2], [0, 1])
    with pytest.raises(ValueError, match="one dtype only"):
        merge_pairs([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "m"))
    with pytest.raises(ValueError, match="at least one dataset"):
        merge_pairs([], str(tmp_path / "m"))
    with PairAppender(str(tmp_path / "e")) as out:
        with pytest.raises(ValueError, match="at least one dataset"):
            out.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.idx", "b.bin", "b.idx"]


@requires_data
def test_job_merges_each_part_before_the_next_is_written(tmp_path, monkeypatch):
    """On the synchronous scheduler (partitions complete in order) every partition is
    appended as soon as it is framed: when the last is, the others are in the merge."""
    from test_megatron import _jsonl, _mixed_documents
    inp = _jsonl(tmp_path / "docs.jsonl", _mixed_documents())
    seen = []
    real = jm.InlineMerge.offer

    def offer(self, index, data):
        taken = real(self, index, data)
        self.drain()
        seen.append((index, self.appended))
        return taken
    monkeypatch.setattr(jm.InlineMerge, "offer", offer)
    values = dict(input=inp, output=str(tmp_path / "o"), output_format="megatron",
                  vocab=str(vocab_path("bert-base-uncased")), scheduler_address="synchronous",
                  quiet=True, append_eod=True, partition_size="5KB")
    s = run_job(make_config(values))
    n = s["partitions"]
    assert n > 4
    assert seen == [(i, i + 1) for i in range(n)]
    m = s["megatron"]
    assert 0 <= m["merge_tail_cpu_seconds"] <= m["merge_cpu_seconds"]
    monkeypatch.undo()
    want = run_job(make_config(dict(values, output=str(tmp_path / "w"), merge_parts=False)))
    merge_pairs(want["megatron"]["prefixes"], str(tmp_path / "end"))
    for ext in (".bin", ".idx"):
        assert Path(m["prefix"] + ext).read_bytes() == (tmp_path / f"end{ext}").read_bytes()
    assert not list((tmp_path / "o").glob(".tmp*"))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
@pytest.mark.parametrize("cls_id,sep_id,eod_id", [(None, None, None), (None, None, 3),
                                                  (101, 102, None), (101, 102, 3),
                                                  (7, None, None)])
@pytest.mark.parametrize("longest", [5, 40])
def test_frame_pieces_table(dtype, cls_id, sep_id, eod_id, longest):
    """The native framing (uint16, int32) and NumPy's (other dtypes) against pieces framed
    one by one in Python, empty pieces included; pieces shorter and longer than the
    kernel's blocks of 16 ids, which it copies whole past a piece's end except near the
    arrays' ends."""
    rng = np.random.default_rng(longest)
    lengths = rng.integers(0, longest + 1, 200)
    lengths[:3] = 0
    ids = rng.integers(0, 30000, int(lengths.sum())).astype(np.int32)
    last = rng.random(200) < 0.4
    want, start = [], 0
    for k, m in enumerate(lengths):
        piece = ([] if cls_id is None else [cls_id]) + ids[start:start + m].tolist() + \
            ([] if sep_id is None else [sep_id]) + ([eod_id] if eod_id is not None and
                                                    last[k] else [])
        want += piece
        start += m
    out, out_lens = frame_pieces(ids, lengths, dtype, cls_id, sep_id, eod_id, last)
    assert out.dtype == dtype
    assert out.tolist() == want
    assert int(out_lens.sum()) == len(want)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
@pytest.mark.parametrize("n,unk_share", [(0, 0.0), (1000, 0.0), (1000, 0.05),
                                         ((1 << 20) + 5, 0.0), (3 * (1 << 20) + 7, 0.01)])
def test_frame_counts_the_unknown_id_as_numpy_does(dtype, n, unk_share):
    """The unknown-token count of a Megatron slice comes from the framing pass (the
    native scan of the ids' range, blocks of 2**20 ids; NumPy for other dtypes): it
    equals ``count_nonzero(ids == unk)``, with and without [UNK] in the ids, and the framed
    bytes are those of :func:`document_sequences`."""
    from daskwp import _ext
    from daskwp.frames import megatron as fm
    rng = np.random.default_rng(n)
    ids = rng.integers(101, 30000, n).astype(np.int32)
    ids[rng.random(n) < unk_share] = 100
    if n:
        ids[-1] = 100 if unk_share else 101      # the last of a block's tail
    bounds = np.unique(np.concatenate([[0], rng.integers(0, n + 1, n // 20), [n]]))
    want = int(np.count_nonzero(ids == 100))
    assert (want > 0) == (unk_share > 0)
    tokens, lengths, docs, unknown = fm._document_sequences(ids, bounds, dtype, eod_id=102,
                                                            unk_id=100)
    assert unknown == want
    ref = document_sequences(ids, bounds, dtype, eod_id=102)
    assert tokens.tobytes() == ref[0].tobytes()
    assert lengths.tolist() == ref[1].tolist() and docs.tolist() == ref[2].tolist()
    if dtype != np.int64:   # the binding itself: the count, and none without an unk id
        pieces = np.diff(bounds)
        out = np.empty(n, dtype=dtype)
        assert _ext.frame_sequences(ids, pieces, -1, -1, -1, None, out, 100) == want
        assert _ext.frame_sequences(ids, pieces, -1, -1, -1, None, out) == 0
        assert out.tobytes() == ids.astype(dtype).tobytes()


def test_frame_output_comes_from_the_host_pool_and_is_reused():
    """A slice's framed tokens (4 MB and more) are a block of the host pool: held, they
    count as its live bytes; freed, the next slice's tokens are written into a cached
    block's size, already mapped (not fresh pages). They pickle as any array."""
    import pickle

    from daskwp.backends.memory import host_pool_info
    n = 3 << 20   # 6 MB of uint16 tokens
    ids = (np.arange(n, dtype=np.int32) % 30000).astype(np.int32)
    bounds = np.arange(0, n + 1, 1000, dtype=np.int64)
    bounds[-1] = n
    live = host_pool_info()["live"]
    tokens = document_sequences(ids, bounds, np.uint16, eod_id=102)[0]
    assert host_pool_info()["live"] >= live + tokens.nbytes
    want = tokens.tobytes()
    assert pickle.loads(pickle.dumps(tokens)).tobytes() == want
    del tokens
    cached = host_pool_info()["cached"]
    assert cached >= len(want)
    again = document_sequences(ids, bounds, np.uint16, eod_id=102)[0]
    assert host_pool_info()["cached"] <= cached - len(want)   # a cached block, reused
    assert again.tobytes() == want
    empty = document_sequences(ids[:0], np.zeros(1, np.int64), np.uint16, eod_id=102)[0]
    assert empty.dtype == np.uint16 and len(empty) == 0


def test_frame_pieces_refuses_ids_the_dtype_cannot_hold():
    with pytest.raises(ValueError, match="token id 70000 does not fit the output dtype"):
        frame_pieces(np.array([1, 70000], np.int32), np.array([2]), np.uint16, eod_id=3,
                     last=np.array([True]))
    with pytest.raises(ValueError, match="token id -1 does not fit"):
        frame_pieces(np.array([-1, 2], np.int32), np.array([2]), np.uint16)
    with pytest.raises(ValueError, match="token id 300 does not fit"):
        frame_pieces(np.array([300], np.int32), np.array([1]), np.uint8)
    with pytest.raises(ValueError, match="lengths add up to 3 tokens, values holds 2"):
        frame_pieces(np.array([1, 2], np.int32), np.array([3]), np.int32, 101, 102)


@requires_data
def test_the_host_pool_keeps_a_bounded_cache_between_partitions(tmp_path, monkeypatch):
    """A Megatron partition keeps the host pool's freed blocks for the next one (whose
    outputs then reuse them instead of fresh memory), as long as the pool caches no more
    than HOST_POOL_KEEP x its text: the cache does not grow from partition to partition."""
    import daskwp
    from test_megatron import _jsonl, _mixed_documents
    inp = _jsonl(tmp_path / "docs.jsonl", _mixed_documents() * 200)   # 19 MB of text
    daskwp.memory.release()
    seen = []
    bound = jm._bound_partition_memory

    def bound_and_look(text_bytes):
        released = bound(text_bytes)
        seen.append((text_bytes, daskwp.memory.info()["host_pool"]["cached"], released))
        return released

    monkeypatch.setattr(jm, "_bound_partition_memory", bound_and_look)
    s = run_job(make_config(dict(input=inp, output=str(tmp_path / "o"),
                                 output_format="megatron", append_eod=True,
                                 vocab=str(vocab_path("bert-base-uncased")),
                                 scheduler_address="synchronous", quiet=True,
                                 partition_size="6MB")))
    assert s["partitions"] == len(seen) > 2
    largest = max(t for t, _, _ in seen)
    full = [(t, c, r) for t, c, r in seen if t > 0.8 * largest]   # the last may be small
    assert len(full) >= 3, seen
    assert all(0 < c <= 4 * t for t, c, r in full)
    assert len({c for _, c, _ in full[1:]}) == 1   # reused, not grown


def test_the_host_pool_is_trimmed_to_what_the_partitions_in_flight_use(monkeypatch):
    """After a partition Arrow's freed memory always goes back; the host pool's cache is
    trimmed (its oldest blocks) to 4 x the partition's text bytes for each partition this
    process has written at once (the most, counted around the task), when it holds more (the bound of 8 x one partition kept up to
    twice what a partition uses, then released everything)."""
    trimmed = []
    cached = {"cached": 0}
    monkeypatch.setattr(jm, "host_pool_info", lambda: dict(cached))
    monkeypatch.setattr(jm, "trim_host_memory", lambda n: trimmed.append((cached["cached"], n)))
    for c, text, in_flight, want in [(0, 10, 1, False), (40, 10, 1, False),
                                     (41, 10, 1, True), (70, 10, 1, True),
                                     (70, 10, 2, False), (81, 10, 2, True),
                                     (5, 0, 1, True), (4, 0, 0, False)]:
        cached["cached"] = c
        monkeypatch.setattr(jm, "_in_flight", [1, in_flight])
        assert jm._bound_partition_memory(text) is want, (c, text, in_flight)
    assert trimmed == [(41, 40), (70, 40), (81, 80), (5, 4)]
    # the count around the task: the most at once, not the number now
    monkeypatch.setattr(jm, "_in_flight", [0, 0])
    seen = []
    task = jm._counted(lambda: seen.append(list(jm._in_flight)) or (
        jm._counted(lambda: seen.append(list(jm._in_flight)))()))
    task()
    assert seen == [[1, 1], [2, 2]] and jm._in_flight == [0, 2]



def _append_all_and_compare(out, prefixes, tmp_path) -> None:
    """Append every pair of ``prefixes`` to ``out`` (a PairAppender), finish it, and check
    its two files equal ``tmp_path``'s ``whole`` pair."""
    for p in prefixes:
        out.append(p)
    out.finish()
    for ext in (".bin", ".idx"):
        with open(out.prefix + ext, "rb") as fh:
            assert fh.read() == (tmp_path / f"whole{ext}").read_bytes()


def test_a_durable_merge_drops_the_pages_it_wrote_and_read(tmp_path, monkeypatch):
    """With fsync (a job's merge) each append syncs the merged pair, then drops its cached
    pages and those of the part's .bin (never before the sync: only clean pages drop; the
    part's .idx is read again by the job's check); without fsync nothing is dropped. The bytes are those of one write."""
    import os
    n = 3
    prefixes = _parts(tmp_path, n)
    events = []
    real_sync, real_fsync, real_advise = os.fdatasync, os.fsync, os.posix_fadvise

    def name(fd):
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))

    def fdatasync(fd):
        events.append(("sync", name(fd)))
        real_sync(fd)

    def fsync(fd):
        events.append(("sync", name(fd)))
        real_fsync(fd)

    def posix_fadvise(fd, offset, length, advice):
        assert (offset, length, advice) == (0, 0, os.POSIX_FADV_DONTNEED)
        events.append(("drop", name(fd)))
        real_advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "posix_fadvise", posix_fadvise)
    for durable in (False, True):
        events.clear()
        _append_all_and_compare(PairAppender(str(tmp_path / f".tmp-m{durable}"),
                                             fsync=durable), prefixes, tmp_path)
        if not durable:
            assert events == []
            continue
        m = ".tmp-mTrue"
        want = []
        for p in prefixes:
            part = os.path.basename(p)
            want += [("sync", m + ".bin"), ("drop", m + ".bin"), ("sync", m + ".idx"),
                     ("drop", m + ".idx"), ("drop", part + ".bin")]
        want += [("sync", m + ".bin"), ("drop", m + ".bin"), ("sync", m + ".idx"),
                 ("drop", m + ".idx")]   # finish: the header written
        assert events == want


@requires_data
def test_records_hold_the_part_checksum_and_older_sha256_records_resume(tmp_path):
    """A part record (merge_parts false, or a cluster's parts) holds each file's 128-bit
    part checksum (``hash128``, computed as the pair is written); records of earlier versions (``sha256``) are still verified: kept
    when their files match, rewritten when one does not."""
    import json

    from daskwp.frames.part_writer import SHA256_CHECKSUM_KEY
    from daskwp.jobs.records import file_digest
    from test_megatron import _jsonl, _mixed_documents
    inp = _jsonl(tmp_path / "docs.jsonl", _mixed_documents())
    values = dict(input=inp, output=str(tmp_path / "o"), output_format="megatron",
                  vocab=str(vocab_path("bert-base-uncased")), scheduler_address="synchronous",
                  quiet=True, partition_size="20KB", merge_parts=False)
    s = run_job(make_config(values))
    n = s["partitions"]
    want = {p + ext: Path(p + ext).read_bytes() for p in s["megatron"]["prefixes"]
            for ext in (".bin", ".idx")}
    records = sorted((tmp_path / "o").glob("part-*.json"))
    assert len(records) == n > 2
    for r in records:
        rec = json.loads(r.read_text())
        for name, f in rec["files"].items():
            assert set(f) == {"bytes", "hash128"}
            assert f["hash128"] == file_digest(str(tmp_path / "o" / name))
            del f["hash128"]   # as an earlier version wrote it
            f["sha256"] = file_digest(str(tmp_path / "o" / name), SHA256_CHECKSUM_KEY)
        r.write_text(json.dumps(rec))
    data = bytearray((tmp_path / "o" / "part-00001.bin").read_bytes())
    data[0] ^= 0xFF
    (tmp_path / "o" / "part-00001.bin").write_bytes(bytes(data))
    s2 = run_job(make_config(values))
    assert s2["partitions_skipped"] == n - 1 and s2["partitions_written"] == 1
    assert {p: Path(p).read_bytes() for p in want} == want


@requires_data
def test_threads_merge_the_bytes_of_the_synchronous_scheduler(tmp_path):
    """Parts completing out of order on dask's threaded scheduler (the merge thread
    appending while other parts are written) merge into the same bytes."""
    from test_megatron import _jsonl, _mixed_documents
    inp = _jsonl(tmp_path / "docs.jsonl", _mixed_documents() * 3)
    values = dict(input=inp, vocab=str(vocab_path("bert-base-uncased")), quiet=True,
                  output_format="megatron", append_eod=True, partition_size="4KB")
    got = {}
    for sched in ("synchronous", "threads"):
        s = run_job(make_config(dict(values, output=str(tmp_path / sched),
                                     scheduler_address=sched)))
        assert s["partitions"] > 20
        got[sched] = [Path(s["megatron"]["prefix"] + ext).read_bytes()
                      for ext in (".bin", ".idx")]
    assert got["threads"] == got["synchronous"]


def test_appends_sync_the_pair_not_the_section_files(tmp_path, monkeypatch):
    """Each append writes back the merged .bin and .idx; the pointer and document section
    files, copied into the .idx (fsync'ed) by finish and then removed, are never synced.
    The merged bytes are those of one write."""
    import os
    n = 4
    prefixes = _parts(tmp_path, n)
    synced = []
    real = os.fdatasync

    def fdatasync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}").rsplit(".tmp-x", 1)[-1])
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    out = PairAppender(str(tmp_path / ".tmp-x"), fsync=True)
    for p in prefixes:
        out.append(p)
    out.finish()
    assert synced == [".bin", ".idx"] * n
    for ext in (".bin", ".idx"):
        assert (tmp_path / f".tmp-x{ext}").read_bytes() == \
            (tmp_path / f"whole{ext}").read_bytes()
    assert sorted(q.name for q in tmp_path.glob(".tmp-x*")) == [".tmp-x.bin", ".tmp-x.idx"]


@requires_data
def test_summary_seconds_include_the_merge_of_the_parts(tmp_path, monkeypatch):
    """The summary's ``seconds`` are the whole job's (docs/batch-jobs.md): the merge of the
    parts after the last one is written included."""
    import time

    from test_megatron import _jsonl, _mixed_documents
    import daskwp.jobs.driver as driver
    inp = _jsonl(tmp_path / "docs.jsonl", _mixed_documents())
    real = driver.finish_megatron

    called = []

    def slow_finish(*a, **k):
        called.append(time.perf_counter())
        time.sleep(0.5)
        return real(*a, **k)
    monkeypatch.setattr(driver, "finish_megatron", slow_finish)
    started = []
    real_run = driver._run_job

    def timed_run(*a, **k):   # t0: just before the job's own clock starts
        started.append(time.perf_counter())
        return real_run(*a, **k)
    monkeypatch.setattr(driver, "_run_job", timed_run)
    cfg = make_config(dict(input=inp, output=str(tmp_path / "o"), output_format="megatron",
                           quiet=True, vocab=str(vocab_path("bert-base-uncased")),
                           scheduler_address="synchronous"))
    s = run_job(cfg)
    wall = time.perf_counter() - started[0]
    # before the merge, then 0.5 s in it (less 0.1 s: the job's clock starts after t0)
    assert called[0] - started[0] + 0.4 <= s["seconds"] <= wall


@pytest.mark.parametrize("n", [3, 30])
def test_a_direct_merge_writes_the_bin_and_the_index_end_without_the_page_cache(tmp_path,
                                                                               monkeypatch,
                                                                               n):
    """PairAppender(direct=True): every .bin byte goes through an O_DIRECT file, and at
    finish the pointers and the document indices through two regions
    (_DirectRegion), all but their partial first and last blocks (shared with the lengths
    and each other) with O_DIRECT; the bytes are those of one write (n=3: the .idx's
    lengths end in its first block, the header's, and nothing is direct; n=30: past
    it, whole blocks of pointers and indices)."""
    import os

    import daskwp.frames.megatron as fm
    prefixes = _parts(tmp_path, n)
    whole = read_index(str(tmp_path / "whole.idx"))
    through = {}

    def flags(fd):
        with open(f"/proc/self/fdinfo/{fd}") as fh:
            return int(next(x for x in fh if x.startswith("flags:")).split()[1], 8)

    real_write = fm._DirectAppendFile.write
    real_region, real_pwrite = fm._DirectRegion.write, os.pwrite

    def count(self, nbytes):
        assert flags(self.fd) & os.O_DIRECT
        ext = self.path.rsplit(".", 1)[1]
        through[ext] = through.get(ext, 0) + nbytes

    def write(self, data):
        count(self, memoryview(data).nbytes)
        return real_write(self, data)

    def region(self, data):
        through["idx"] = through.get("idx", 0) + memoryview(data).nbytes
        return real_region(self, data)

    def pwrite(fd, data, offset):
        n = real_pwrite(fd, data, offset)
        if flags(fd) & os.O_DIRECT and os.readlink(f"/proc/self/fd/{fd}").endswith(".idx"):
            through["idx direct"] = through.get("idx direct", 0) + n
        return n
    monkeypatch.setattr(fm._DirectAppendFile, "write", write)
    monkeypatch.setattr(fm._DirectRegion, "write", region)
    monkeypatch.setattr(os, "pwrite", pwrite)
    out = PairAppender(str(tmp_path / ".tmp-d"), fsync=True, direct=True)
    assert out.bin_direct
    _append_all_and_compare(out, prefixes, tmp_path)
    assert (fm._FIXED + 4 * whole.sequences > fm._DIRECT_ALIGN) == (n == 30)
    end = 8 * whole.sequences + 8 * (whole.documents + 1)
    assert through["bin"] == os.path.getsize(tmp_path / "whole.bin")
    # the pointers, and the document indices held in memory (not the section file's
    # leading 0: write_from)
    assert through["idx"] == 8 * whole.sequences + 8 * whole.documents
    direct = through.get("idx direct", 0)
    assert end - 4 * fm._DIRECT_ALIGN <= direct <= end
    assert (direct > 0) == (n == 30)
    assert not list(tmp_path.glob(".tmp-d.idx.*"))


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("more", [0, 1, 25, -1])
def test_an_index_planned_ahead_gives_the_bytes_of_one_write(tmp_path, monkeypatch,
                                                             direct, more):
    """PairAppender.plan_index + write_ahead: with the dataset's own counts (more=0) the
    pointers and document indices are written as the parts are appended, and finish
    writes none of them; with more sequences and documents than it ends with (1, 25:
    the regions placed past the real end), or fewer (-1: dropped when the appends pass
    it), finish writes them all at their real places. The bytes are those of one
    write either way."""
    import daskwp.frames.megatron as fm
    n = 30
    prefixes = _parts(tmp_path, n)
    whole = read_index(str(tmp_path / "whole.idx"))
    import threading
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 8192)   # several buffers of each region
    # the document indices on a thread of their own (direct) or not
    monkeypatch.setattr(fm, "_PARALLEL_ENTRIES", 1 if direct else 1 << 40)
    threads = set()
    real_documents = fm.PairAppender._documents_to

    def documents_to(self, *args):
        threads.add(threading.current_thread().name.split("_")[0])
        return real_documents(self, *args)
    monkeypatch.setattr(fm.PairAppender, "_documents_to", documents_to)
    out = PairAppender(str(tmp_path / ".tmp-p"), fsync=True, direct=direct, keep=True)
    assert out.plan_index(whole.sequences + more, whole.documents + more)
    assert not out.plan_index(whole.sequences, whole.documents)   # once
    steps = 0
    for p in prefixes:
        out.append(p)
        while out.write_ahead(17):
            steps += 1
        assert not out.ahead_pending()
    assert steps > n
    written = []
    real = fm._DirectRegion.write

    def write(self, data):
        written.append(memoryview(data).nbytes)
        return real(self, data)
    monkeypatch.setattr(fm._DirectRegion, "write", write)
    out.finish()
    # the document indices go through write too: buffered, or (direct, kept) from the
    # memory that holds them as they are written to the section file (all but its leading
    # 0, read from the file: write_from)
    again = 8 * whole.sequences + 8 * whole.documents + (0 if direct else 8)
    assert sum(written) == (0 if more == 0 else again)
    for ext in (".bin", ".idx"):
        with open(out.prefix + ext, "rb") as fh:
            assert fh.read() == (tmp_path / f"whole{ext}").read_bytes()
    assert not list(tmp_path.glob(".tmp-p.idx.*"))
    assert threads == ({"MainThread", "daskwp-idx"} if direct else {"MainThread"})


@pytest.mark.parametrize("memory", [0, None])
@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("more", [0, 1, 25, -1])
def test_documents_go_straight_to_a_planned_region(tmp_path, monkeypatch, direct, more,
                                                   memory):
    """A merge that keeps no state to resume (a cluster's: keep False) with a plan: once
    the plan's region holds every document index before a part's, the part's indices are
    written straight into it, not to the section file (whose bytes went through the page
    cache twice); a plan dropped after (more sequences and documents planned than there
    are: 1, 25; fewer: -1) first gets them back in the section file. The bytes are those
    of one write, with write_ahead between the appends or behind them. (memory 0: the
    indices before the region's go to the section file; by default they are held in
    memory, and the section file holds only the leading 0.)"""
    import os

    import daskwp.frames.megatron as fm
    if memory is not None:
        monkeypatch.setattr(fm, "_DOCUMENT_MEMORY", memory)
    n = 30
    prefixes = _parts(tmp_path, n)
    whole = read_index(str(tmp_path / "whole.idx"))
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 8192)   # several buffers of each region
    out = PairAppender(str(tmp_path / ".tmp-s"), fsync=True, direct=direct)
    assert out.plan_index(whole.sequences + more, whole.documents + more)
    section = out.prefix + ".idx.documents"
    sizes = []
    for k, p in enumerate(prefixes):
        out.append(p)
        sizes.append(os.path.getsize(section))
        if k >= 2 and k % 7 != 3:   # (the pointers left behind now and then)
            while out.write_ahead(17):
                pass
    documents = [read_index(p + ".idx").documents for p in prefixes]
    if memory is None:
        # the first three parts' indices held in memory, the others straight to the
        # region (-1: the plan dropped, all back in the section file, then memory)
        assert sizes[-1] == 8 * out._file_entries
        if more >= 0:
            assert out._memory_entries == sum(documents[:3]) and sizes[-1] == 8
    elif more >= 0:
        # the first three parts' indices went to the section file (no write_ahead yet),
        # the others (the region caught up) straight to the region
        assert sizes[-1] == 8 * (1 + sum(documents[:3])) < 8 * (whole.documents + 1)
    out.finish()
    for ext in (".bin", ".idx"):
        with open(out.prefix + ext, "rb") as fh:
            assert fh.read() == (tmp_path / f"whole{ext}").read_bytes()
    assert not list(tmp_path.glob(".tmp-s.idx.*"))


@pytest.mark.parametrize("shortest", [0, 1])
@pytest.mark.parametrize("plan", ["early", "late", "dropped", "none"])
def test_document_indices_held_in_memory_stay_within_the_bound(tmp_path, monkeypatch,
                                                                shortest, plan):
    """A merge that keeps no state to resume holds the document indices appended before
    the plan in memory instead of the section file: a part's whose documents are one
    sequence each (shortest 1: no empty document) as a run (two numbers, none of the
    bound), others' as arrays up to _DOCUMENT_MEMORY bytes, past which they go to the
    section file after what memory held. The plan told early (after two parts), late
    (after 25 of 30), dropped (more sequences than there are) or never: the bytes are
    those of one write."""
    import os

    import daskwp.frames.megatron as fm
    limit = 8 * 40
    monkeypatch.setattr(fm, "_DOCUMENT_MEMORY", limit)
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 8192)
    monkeypatch.setattr(fm, "_RUN_ENTRIES", 7)   # runs made and checked in pieces
    monkeypatch.setattr(fm, "_RUN_BASE", np.arange(7, dtype=np.int64))
    n = 30
    prefixes = _parts(tmp_path, n, shortest=shortest)
    whole = read_index(str(tmp_path / "whole.idx"))
    out = PairAppender(str(tmp_path / ".tmp-b"), fsync=True, direct=True)
    section = out.prefix + ".idx.documents"
    at = {"early": 2, "late": 25, "dropped": 25, "none": None}[plan]
    for k, p in enumerate(prefixes):
        if k == at:
            more = 3 if plan == "dropped" else 0
            assert out.plan_index(whole.sequences + more, whole.documents + more)
        out.append(p)
        assert out._memory_bytes <= limit
        if shortest:   # every part a run: nothing in the file, no array in memory
            assert out._memory_bytes == 0 and os.path.getsize(section) == 8
        assert 8 * out._file_entries == os.path.getsize(section)
        while out.write_ahead(11):
            pass
    if not shortest:
        assert os.path.getsize(section) > 8   # (spilled past the bound)
    out.finish()
    for ext in (".bin", ".idx"):
        with open(out.prefix + ext, "rb") as fh:
            assert fh.read() == (tmp_path / f"whole{ext}").read_bytes()
    assert not list(tmp_path.glob(".tmp-b.idx.*"))


def test_a_resumed_merge_drops_what_was_written_ahead(tmp_path):
    """A merge killed after writing ahead (kept to resume) and reopened: its .idx is cut to
    the lengths, and the bytes are those of one write."""
    n = 6
    prefixes = _parts(tmp_path, n)
    whole = read_index(str(tmp_path / "whole.idx"))
    out = PairAppender(str(tmp_path / ".tmp-r"), fsync=True, direct=True, keep=True)
    out.plan_index(whole.sequences, whole.documents)
    for p in prefixes[:3]:
        out.append(p)
    out.write_ahead()
    state = (out.sequences, out.documents, out.bin_bytes, str(out.dtype))
    out._files, files = [], out._files   # killed: nothing closed nor removed
    for _, fh in files:
        fh.close()
    out2 = PairAppender(str(tmp_path / ".tmp-r"), fsync=True, direct=True, keep=True,
                        resume=state)
    _append_all_and_compare(out2, prefixes[3:], tmp_path)


def _counting_finish(monkeypatch) -> list:
    """Bytes :meth:`PairAppender.finish` writes to the ``.idx``'s pointers and document
    indices (its regions), listed as it writes them."""
    import daskwp.frames.megatron as fm
    written, finishing = [], []
    real_finish = fm.PairAppender.finish

    def finish(self):
        finishing.append(True)
        return real_finish(self)

    def counted(real):
        def write(self, *args):
            if finishing:
                written.append(args[-1] if len(args) == 3 else memoryview(args[0]).nbytes)
            return real(self, *args)
        return write
    monkeypatch.setattr(fm.PairAppender, "finish", finish)
    monkeypatch.setattr(fm._DirectRegion, "write", counted(fm._DirectRegion.write))
    monkeypatch.setattr(fm._DirectRegion, "write_from", counted(fm._DirectRegion.write_from))
    return written


@pytest.mark.parametrize("plannable", [True, False])
def test_merge_writes_the_index_end_ahead_once_told_the_documents(tmp_path, monkeypatch,
                                                                   plannable):
    """Told the dataset's documents (the driver's pass, before the last parts are written),
    a plannable merge writes the pointers and document indices of the parts appended while
    it waits for the next: finish writes only the last part's; the bytes are those of
    merging all the parts at the end. Not plannable (a document_separator): finish writes
    them all."""
    import time
    n = 6
    prefixes = _parts(tmp_path, n, shortest=1)
    ix = [read_index(p + ".idx") for p in prefixes]
    documents, sequences = sum(i.documents for i in ix), sum(i.sequences for i in ix)
    assert documents == sequences   # (no empty document: every one is a sequence)
    written = _counting_finish(monkeypatch)
    with jm.PartMerger(str(tmp_path), n, plannable=plannable) as merger:
        merger.expect_documents(documents)
        for i in range(n - 1):
            merger.part_done(i)
        merger.drain()
        end = time.monotonic() + 60
        while plannable and (not merger._planned or merger.appender.ahead_pending()) \
                and time.monotonic() < end:
            time.sleep(0.01)
        merger.part_done(n - 1)
        info = merger.finish(str(tmp_path / "got"))
    assert (info["documents"], info["sequences"]) == (documents, sequences)
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"got{ext}").read_bytes() == (tmp_path / f"whole{ext}").read_bytes()
    everything = 8 * sequences + 8 * (documents + 1)
    if plannable:
        assert sum(written) <= 8 * ix[-1].sequences + 8 * ix[-1].documents < everything / 4
    else:
        assert sum(written) == everything
    assert not list(tmp_path.glob(".tmp*"))


_TOTAL_TOLD = threading.Event()     # (module-level: the workers' tasks find it)
_HELD: list = []


def _write_last_after_the_total(spec, *args, **kwargs):
    """The Megatron part writer, holding the last partition's write until the driver has
    told its merge the total (60 s at most: the assertions then fail, not hang)."""
    if spec.index == args[5] - 1:      # (logid_offset, out_dir, tok, options, job, n)
        _HELD.append(_TOTAL_TOLD.wait(60))
    return jm.write_megatron_partition(spec, *args, **kwargs)


@requires_data
def test_cluster_job_tells_the_merge_the_documents_before_its_last_part(tmp_path,
                                                                        monkeypatch):
    """On a cluster the driver hands its merge the dataset's documents as soon as it has
    summed the pass's counts, without waiting for the parts to be written, and the merge
    writes the .idx's end ahead: finish writes only what the last parts hold. The bytes
    are the synchronous job's. (The last part's write is held until the total is told:
    which comes first is otherwise a race.)"""
    from distributed import Client, LocalCluster
    import daskwp.jobs.driver as jd
    from test_megatron import DATA, _jsonl, read_documents
    lines = read_documents(DATA / "corpus" / "en_ewt.txt")[:1200]
    inp = _jsonl(tmp_path / "docs.jsonl", ["\n".join(lines[i:i + 3])
                                           for i in range(0, len(lines), 3)])
    values = dict(input=inp, output_format="megatron",
                  vocab=str(vocab_path("bert-base-uncased")), quiet=True, append_eod=True, add_special_tokens=False, partition_size="5KB")
    want = run_job(make_config(dict(values, output=str(tmp_path / "sync"),
                                    scheduler_address="synchronous")))["megatron"]["prefix"]
    told = []
    real_expect, real_done = jm.PartMerger.expect_documents, jm.PartMerger.part_done

    def expect_documents(self, documents):
        told.append((documents, sum(self.complete)))
        try:
            return real_expect(self, documents)
        finally:
            _TOTAL_TOLD.set()

    def part_done(self, index):
        told.append(("done", index))
        return real_done(self, index)
    monkeypatch.setattr(jm.PartMerger, "expect_documents", expect_documents)
    monkeypatch.setattr(jm.PartMerger, "part_done", part_done)
    written = _counting_finish(monkeypatch)
    monkeypatch.setitem(jd._WRITERS, "megatron", _write_last_after_the_total)
    _TOTAL_TOLD.clear()
    _HELD.clear()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        s = run_job(make_config(dict(values, output=str(tmp_path / "o"))), client=client)
    n, m = s["partitions"], s["megatron"]
    assert n > 4 and _HELD == [True]
    documents = [t for t in told if t[0] != "done"]
    assert documents[0][0] == s["documents"] and documents[0][1] < n
    assert told.index(documents[0]) < told.index(("done", n - 1))
    # (the merge thread may write the last part's too, before finish)
    assert sum(written) < (8 * m["sequences"] + 8 * (m["documents"] + 1)) / 2
    for ext in (".bin", ".idx"):
        assert Path(m["prefix"] + ext).read_bytes() == Path(want + ext).read_bytes()


@pytest.mark.parametrize("shortest", [0, 1])   # empty documents (no run) or none (a run)
def test_a_kept_direct_merge_reads_its_document_indices_back_only_to_resume(
        tmp_path, monkeypatch, shortest):
    """PairAppender(keep=True, direct=True), an in-process job's merge (InlineMerge): the
    document indices' section file is written without the page cache and the indices it
    gets are held in memory too (a run as two numbers), so the .idx takes them from there:
    only the section's leading 0 is read back. Resumed from its files (a killed run), the
    indices of the datasets appended before are read from the section file. The bytes are
    those of one write either way."""
    import daskwp.frames.megatron as fm
    n = 8
    prefixes = _parts(tmp_path, n, shortest=shortest)
    whole = read_index(str(tmp_path / "whole.idx"))
    datasets = []
    for p in prefixes:
        ix = read_index(p + ".idx")
        datasets.append(([np.fromfile(p + ".bin", dtype=np.uint16)],
                         np.array(ix.sequence_lengths), np.array(ix.document_indices[1:])))
    read_back = []
    real_from = fm._DirectRegion.write_from

    def write_from(self, fd, offset, count):
        read_back.append(count)
        return real_from(self, fd, offset, count)
    monkeypatch.setattr(fm._DirectRegion, "write_from", write_from)

    def appender(name, resume=None):
        return PairAppender(str(tmp_path / name), fsync=True, direct=True, keep=True,
                            resume=resume)

    def check(out):
        for ext in (".bin", ".idx"):
            with open(out.prefix + ext, "rb") as fh:
                assert fh.read() == (tmp_path / f"whole{ext}").read_bytes()
        assert not list(tmp_path.glob(f"{os.path.basename(out.prefix)}.idx.*"))

    out = appender(".tmp-a")
    assert fcntl.fcntl(out._doc.fileno(), fcntl.F_GETFL) & os.O_DIRECT
    for tokens, lengths, ends in datasets:
        out.append_data(tokens, lengths, ends, np.uint16)
    out.plan_index(out.sequences, out.documents)
    out.write_ahead()
    out.finish()
    check(out)
    assert sum(read_back) == 8   # the leading 0 only

    read_back.clear()
    out = appender(".tmp-b")
    for tokens, lengths, ends in datasets[:4]:
        out.append_data(tokens, lengths, ends, np.uint16)
    state = (out.sequences, out.documents, out.bin_bytes, str(out.dtype))
    before = out.documents
    out._files, files = [], out._files   # killed: nothing closed nor removed
    for _, fh in files:
        fh.close()
    out = appender(".tmp-b", resume=state)
    for tokens, lengths, ends in datasets[4:]:
        out.append_data(tokens, lengths, ends, np.uint16)
    out.finish()
    check(out)
    assert sum(read_back) == 8 * (before + 1)   # those of the run before, from its file
    assert whole.documents == out.documents
