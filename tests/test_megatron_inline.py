"""The merged pair of an in-process Megatron job written once (``jobs.megatron.InlineMerge``):
each partition appended from memory in input order, recorded as its range of the merged files
with their checksum; no part pairs; a rerun after a failed or killed run goes on from the
recorded ranges and gives the same bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import requires_data, vocab_path
from daskwp.frames.megatron import merge_pairs
from daskwp.jobs import OutputConflictError, make_config, run_job
from daskwp.jobs import driver
from daskwp.jobs import megatron as jm

pytestmark = requires_data


def _values(tmp_path, out="o", **kw):
    from test_megatron import _jsonl, _mixed_documents
    inp = tmp_path / "docs.jsonl"
    if not inp.exists():
        _jsonl(inp, _mixed_documents())
    return dict(input=str(inp), output=str(tmp_path / out), output_format="megatron",
                vocab=str(vocab_path("bert-base-uncased")), scheduler_address="synchronous",
                quiet=True, append_eod=True, partition_size="5KB", on_bad_row="reject", **kw)


def _reference(tmp_path) -> dict:
    """The merged bytes of the job's parts (merge_parts false, merged by merge_pairs)."""
    s = run_job(make_config(_values(tmp_path, "parts", merge_parts=False)))
    merge_pairs(s["megatron"]["prefixes"], str(tmp_path / "ref"))
    return {ext: (tmp_path / f"ref{ext}").read_bytes() for ext in (".bin", ".idx")}


def _same_bytes(summary, want) -> None:
    for ext in (".bin", ".idx"):
        assert Path(summary["megatron"]["prefix"] + ext).read_bytes() == want[ext]


def _records(out: Path) -> dict:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("part-*.json")}


def test_in_process_job_writes_the_merged_pair_once(tmp_path, monkeypatch):
    """No part pair is written and nothing is copied: every partition's record holds its
    range of the merged pair; the bytes are those of merging the parts."""
    import daskwp.frames.megatron as fm
    want = _reference(tmp_path)
    copies = []
    real = fm.append_file
    monkeypatch.setattr(fm, "append_file", lambda s, o: copies.append(s.name) or real(s, o))
    s = run_job(make_config(_values(tmp_path)))
    n = s["partitions"]
    assert n > 4
    _same_bytes(s, want)
    out = tmp_path / "o"
    names = sorted(os.listdir(out))
    assert not [x for x in names if x.endswith((".bin", ".idx")) and x.startswith("part-")]
    assert not [x for x in names if x.startswith(".tmp")]
    # the section files copied into the .idx by finish; no .bin copied
    assert not [c for c in copies if c.endswith(".bin")]
    at = 0
    for i in range(n):
        rec = json.loads((out / f"{jm.part_prefix(i, n)}.json").read_text())
        rng = rec[jm.MERGED_KEY]
        assert rng["bin_bytes"][0] == at
        at = rng["bin_bytes"][1]
    assert at == len(want[".bin"])
    assert s["rejected_rows"] == 0
    # nothing to do: the records check against the merged pair, which stays
    st = os.stat(s["megatron"]["prefix"] + ".bin")
    s2 = run_job(make_config(_values(tmp_path)))
    assert s2["partitions_written"] == 0
    assert os.stat(s["megatron"]["prefix"] + ".bin").st_mtime_ns == st.st_mtime_ns


def _fail_at(monkeypatch, j):
    real = jm.InlineMerge.offer

    def offer(self, index, data):
        if index == j:
            self.drain()   # (the partitions before it appended: as a kill after them)
            raise RuntimeError("killed")
        return real(self, index, data)
    monkeypatch.setattr(jm.InlineMerge, "offer", offer)


def test_a_rerun_goes_on_from_the_recorded_ranges(tmp_path, monkeypatch):
    """A run that stops at partition 4 leaves the merge's files and the records of
    partitions 0-3; a torn append after them is cut off; a rerun never writes those four
    again and gives the same bytes. A partition whose range no longer checks is written
    again, with every one after it."""
    want = _reference(tmp_path)
    out = tmp_path / "o"
    _fail_at(monkeypatch, 4)
    with pytest.raises(Exception, match="killed"):
        run_job(make_config(_values(tmp_path)))
    monkeypatch.undo()
    tmp = sorted(out.glob(jm.MERGE_TMP_PREFIX + "*"))
    assert [p.name.split(".", 2)[-1] for p in tmp] == ["bin", "idx", "idx.documents"]
    before = _records(out)
    assert len(before) == 4
    for p in tmp:   # an append killed before its record
        with open(p, "ab") as fh:
            fh.write(b"\x07" * 24)
    s = run_job(make_config(_values(tmp_path)))
    n = s["partitions"]
    assert (s["partitions_skipped"], s["partitions_written"]) == (4, n - 4)
    after = _records(out)
    assert all(after[k] == v for k, v in before.items())
    _same_bytes(s, want)
    assert not list(out.glob(".tmp*"))

    # a finished pair whose byte of partition 2 changed: 0 and 1 kept, the rest rewritten
    rec = json.loads((out / f"{jm.part_prefix(2, n)}.json").read_text())
    pos = rec[jm.MERGED_KEY]["bin_bytes"][0]
    data = bytearray(Path(s["megatron"]["prefix"] + ".bin").read_bytes())
    data[pos] ^= 0xFF
    Path(s["megatron"]["prefix"] + ".bin").write_bytes(bytes(data))
    before = _records(out)
    s2 = run_job(make_config(_values(tmp_path)))
    assert (s2["partitions_skipped"], s2["partitions_written"]) == (2, n - 2)
    after = _records(out)
    for k in sorted(before)[:2]:
        assert after[k] == before[k]
    _same_bytes(s2, want)
    assert not list(out.glob(".tmp*"))


def test_partitions_past_the_bound_are_parts_appended_in_their_turn(tmp_path, monkeypatch):
    """A partition the merge does not take (too many held) is written as a part pair,
    appended in its turn, then recorded as its range and its pair removed."""
    want = _reference(tmp_path)
    real = jm.InlineMerge.offer
    taken = []

    def offer(self, index, data):
        taken.append(index)
        return index % 2 == 0 and real(self, index, data)
    monkeypatch.setattr(jm.InlineMerge, "offer", offer)
    s = run_job(make_config(_values(tmp_path)))
    assert len(taken) == s["partitions"] > 4
    _same_bytes(s, want)
    out = tmp_path / "o"
    assert not list(out.glob("part-*.bin")) and not list(out.glob(".tmp*"))
    for i in range(s["partitions"]):
        rec = json.loads((out / f"{jm.part_prefix(i, s['partitions'])}.json").read_text())
        assert jm.MERGED_KEY in rec and not [f for f in rec["files"] if "part-" in f]


def test_cluster_parts_are_taken_in_process_and_the_reverse_is_refused(tmp_path,
                                                                          monkeypatch):
    """Parts written as a cluster writes them (each its pair, merged by the driver) are
    appended by an in-process rerun, never written again; a cluster run of a job whose
    partitions an in-process run appended is refused by name."""
    want = _reference(tmp_path)
    out = tmp_path / "o"

    class ClusterMerge(jm.PartMerger):   # the cluster's: parts, merged by the driver
        key = None

        def __init__(self, out_dir, cfg, n, job_id, state=None):
            super().__init__(out_dir, n, state)
    monkeypatch.setattr(driver, "InlineMerge", ClusterMerge)
    real = jm._write_part

    def write_part(spec, *a, **k):
        if spec.index == 3:
            raise RuntimeError("killed")
        return real(spec, *a, **k)
    monkeypatch.setattr(jm, "_write_part", write_part)
    with pytest.raises(Exception, match="killed"):
        run_job(make_config(_values(tmp_path)))
    monkeypatch.undo()
    assert len(list(out.glob("part-*.bin"))) == 3
    s = run_job(make_config(_values(tmp_path)))
    assert (s["partitions_skipped"], s["partitions_written"]) == (3, s["partitions"] - 3)
    _same_bytes(s, want)
    assert not list(out.glob("part-*.bin"))

    # the reverse: an in-process run stopped, resumed on a (local) cluster
    _fail_at(monkeypatch, 2)
    with pytest.raises(Exception, match="killed"):
        run_job(make_config(_values(tmp_path, "p")))
    monkeypatch.undo()
    values = _values(tmp_path, "p")
    del values["scheduler_address"]
    with pytest.raises(OutputConflictError, match="started in-process: its first 2 "
                                                  "partitions"):
        run_job(make_config(dict(values, n_workers=1)))


@pytest.mark.parametrize("cut", ["finish", "unfinish"])
def test_a_rerun_completes_a_move_of_the_pair_cut_half_way(tmp_path, cut):
    """A run killed between the two renames of the pair (``.bin`` moved, ``.idx`` not) left
    one file under each name: the rerun completes the move and keeps every partition."""
    want = _reference(tmp_path)
    s = run_job(make_config(_values(tmp_path)))
    out = tmp_path / "o"
    job_id = json.loads((out / "_job.json").read_text())["job_id"]
    tmp = str(out / (jm.MERGE_TMP_PREFIX + job_id))
    merged = s["megatron"]["prefix"]
    if cut == "finish":     # finish renamed the .bin, not yet the .idx
        os.replace(merged + ".idx", tmp + ".idx")
    else:                   # unfinish_pair renamed the .bin back, not yet the .idx
        from daskwp.frames.megatron import unfinish_pair
        from daskwp.frames.megatron import read_index
        idx = read_index(merged + ".idx")
        unfinish_pair(merged, tmp, idx.sequences, idx.documents, os.path.getsize(merged + ".bin"))
        os.replace(tmp + ".idx", merged + ".idx")
    before = _records(out)
    s2 = run_job(make_config(_values(tmp_path)))
    assert s2["partitions_written"] == 0
    assert _records(out) == before
    _same_bytes(s2, want)


def _refuse_direct(monkeypatch):
    """O_DIRECT refused at open, as tmpfs refuses it (EINVAL)."""
    import errno
    real = os.open

    def fake(path, flags, *a, **k):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", fake)


def _open_flags(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as fh:
        return int(next(x for x in fh if x.startswith("flags:")).split()[1], 8)


@pytest.mark.skipif(not hasattr(os, "O_DIRECT") or not os.path.exists("/proc/self/fdinfo"),
                    reason="O_DIRECT and /proc are Linux's")
@pytest.mark.parametrize("refused", [False, True])
def test_the_merged_bin_bypasses_the_page_cache_else_is_buffered(tmp_path, monkeypatch,
                                                                 refused):
    """The merge writes the .bin with O_DIRECT (no page-cache copy), and where the file
    system refuses it, buffered as before: the same bytes either way."""
    want = _reference(tmp_path)
    if refused:
        _refuse_direct(monkeypatch)
    seen = []
    real = jm.InlineMerge.finish

    def finish(self, merged):
        self.drain()
        fh = self.appender._bin
        seen.append((self.appender.bin_direct, bool(_open_flags(fh.fileno()) & os.O_DIRECT)))
        return real(self, merged)
    monkeypatch.setattr(jm.InlineMerge, "finish", finish)
    s = run_job(make_config(_values(tmp_path)))
    assert seen == [(not refused, not refused)]
    _same_bytes(s, want)
    assert not list((tmp_path / "o").glob(".tmp*"))


@pytest.mark.parametrize("refused", [False, True])
@pytest.mark.parametrize("chunk", [None, 8192])
def test_a_rerun_after_a_kill_with_a_buffered_tail_gives_the_same_bytes(
        tmp_path, monkeypatch, refused, chunk):
    """Killed after partition 4 (its .bin ends inside a block: the block's tail was written
    padded, then the file cut): the unfinished .bin holds exactly the recorded bytes; torn
    bytes after them are cut and the rerun's tail read back into the buffer, the same bytes
    at the end. With a small buffer, whole buffers are written within a partition too."""
    import daskwp.frames.megatron as fm
    want = _reference(tmp_path)
    out = tmp_path / "o"
    if chunk:
        monkeypatch.setattr(fm, "_DIRECT_CHUNK", chunk)
    if refused:
        _refuse_direct(monkeypatch)
    real = jm.InlineMerge.offer

    def offer(self, index, data):
        if index == 4:
            self.drain()
            raise RuntimeError("killed")
        return real(self, index, data)
    monkeypatch.setattr(jm.InlineMerge, "offer", offer)
    with pytest.raises(Exception, match="killed"):
        run_job(make_config(_values(tmp_path)))
    monkeypatch.setattr(jm.InlineMerge, "offer", real)
    recs = sorted(out.glob("part-*.json"))
    assert len(recs) == 4
    end = json.loads(recs[-1].read_text())[jm.MERGED_KEY]["bin_bytes"][1]
    assert end % fm._DIRECT_ALIGN, "the test needs a .bin that ends inside a block"
    (binfile,) = out.glob(jm.MERGE_TMP_PREFIX + "*.bin")
    assert binfile.stat().st_size == end
    assert binfile.read_bytes() == want[".bin"][:end]
    with open(binfile, "ab") as fh:   # an append killed before its record
        fh.write(b"\x07" * 5000)
    s = run_job(make_config(_values(tmp_path)))
    assert (s["partitions_skipped"], s["partitions_written"]) == (4, s["partitions"] - 4)
    _same_bytes(s, want)


def test_direct_append_file_writes_what_it_was_given(tmp_path, monkeypatch):
    """_DirectAppendFile: pieces of every size across buffer and block boundaries, flushed
    at odd points (the file then holds exactly what was appended), reopened keeping an
    unaligned prefix, and a write refused after open (EINVAL) goes on buffered."""
    import errno

    import numpy as np

    import daskwp.frames.megatron as fm
    monkeypatch.setattr(fm, "_DIRECT_CHUNK", 3 * fm._DIRECT_ALIGN)
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    path = str(tmp_path / "x.bin")
    f = fm._DirectAppendFile.open(path)
    if f is None:
        pytest.skip("this file system refuses O_DIRECT")
    at = 0
    for k, size in enumerate([1, 4095, 4096, 5000, 12288, 7, 20000, 3]):
        assert f.write(data[at:at + size]) == size
        at += size
        if k % 2:
            f.flush()
            assert Path(path).read_bytes() == data[:at]
    f.flush()
    f.close()
    assert Path(path).read_bytes() == data[:at]
    keep = 9999
    f = fm._DirectAppendFile.open(path, keep)
    f.write(data[keep:keep + 30000])
    f.flush()
    assert Path(path).read_bytes() == data[:keep + 30000]
    real = os.pwrite
    refused = []

    def pwrite(fd, buf, offset):
        if _open_flags(fd) & os.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, buf, offset)
    monkeypatch.setattr(os, "pwrite", pwrite)
    f.write(data[keep + 30000:])
    f.flush()
    f.close()
    assert refused and not f.direct
    assert Path(path).read_bytes() == data


@pytest.mark.parametrize("empty_last", [False, True])
def test_the_index_end_is_written_while_the_last_partition_is_tokenized(tmp_path,
                                                                        monkeypatch,
                                                                        empty_last):
    """The last partition's task tells the merge the dataset's documents when it starts;
    the merge thread then writes the .idx's pointers and document indices of the
    partitions appended at their places (as many sequences as documents: each is one),
    so finish writes at most the last partition's. An empty document in the last partition
    (one sequence fewer than planned) makes finish write them all again. The bytes are
    those of merging the parts either way."""
    import time

    from test_megatron import DATA, _jsonl, read_documents
    from test_megatron_merge import _counting_finish
    lines = read_documents(DATA / "corpus" / "en_ewt.txt")[:900]
    docs = ["\n".join(lines[i:i + 3]) for i in range(0, len(lines), 3)]
    if empty_last:
        docs[-2] = ""
    _jsonl(tmp_path / "docs.jsonl", docs)
    want = _reference(tmp_path)
    planned, real_offer = [], jm.InlineMerge.offer

    def offer(self, index, data):
        if index == self.n - 1:   # the merge thread's work ahead done before it
            t = time.monotonic() + 60
            while (self.appended < index or not self._planned or
                   self.appender.ahead_pending()) and time.monotonic() < t:
                time.sleep(0.01)
            planned.append((self.appender._plan, self.appender.sequences))
        return real_offer(self, index, data)
    monkeypatch.setattr(jm.InlineMerge, "offer", offer)
    written = _counting_finish(monkeypatch)
    s = run_job(make_config(_values(tmp_path)))
    _same_bytes(s, want)
    n, seqs, n_docs = s["partitions"], s["megatron"]["sequences"], s["megatron"]["documents"]
    assert n > 4 and n_docs == len(docs) and seqs == n_docs - empty_last
    assert planned[0][0] == (n_docs, n_docs)
    rec = json.loads((tmp_path / "o" / f"{jm.part_prefix(n - 1, n)}.json").read_text())
    last = rec[jm.MERGED_KEY]
    tail = (8 * (last["sequences"][1] - last["sequences"][0]) +
            8 * (last["documents"][1] - last["documents"][0]))
    everything = 8 * seqs + 8 * (n_docs + 1)
    # (the merge thread may write the last partition's too, before finish)
    if empty_last:
        assert sum(written) == everything
    else:
        assert sum(written) <= tail < everything / 4


@pytest.mark.parametrize("separator", [None, "\n"])
def test_the_driver_gives_the_merge_the_total_before_the_last_partitions(tmp_path,
                                                                        monkeypatch,
                                                                        separator):
    """The driver hands the merge the dataset's documents as soon as the pass has them,
    and the pass is done before the last len(missing) // AHEAD_SHARE + 1 partitions are
    written (their writes wait for the total), so the .idx's end is written ahead while
    they are; the counts of those after the first of them keep none of their bytes (they
    run early). With a document_separator (no plan) the graph is the plain one. The bytes
    are those of merging the parts."""
    from daskwp.jobs.inputs import reading
    from test_megatron import DATA, _jsonl, read_documents
    lines = read_documents(DATA / "corpus" / "en_ewt.txt")[:1200]
    _jsonl(tmp_path / "docs.jsonl", ["\n".join(lines[i:i + 3])
                                     for i in range(0, len(lines), 3)])
    monkeypatch.setattr(jm.InlineMerge, "AHEAD_SHARE", 4)
    kw = {} if separator is None else {"document_separator": separator}
    s = run_job(make_config(_values(tmp_path, "parts", merge_parts=False, **kw)))
    merge_pairs(s["megatron"]["prefixes"], str(tmp_path / "ref"))
    want = {ext: (tmp_path / f"ref{ext}").read_bytes() for ext in (".bin", ".idx")}
    offered, told, kept_counts = [], [], []
    real_offer, real_expect = jm.InlineMerge.offer, jm.InlineMerge.expect_documents
    real_kept = reading.read_counted_bytes

    def offer(self, index, data):
        offered.append(index)
        return real_offer(self, index, data)

    def expect_documents(self, documents):
        told.append((documents, max(offered, default=-1)))
        return real_expect(self, documents)

    def read_counted_bytes(spec):
        kept_counts.append(spec.index)
        return real_kept(spec)
    monkeypatch.setattr(jm.InlineMerge, "offer", offer)
    monkeypatch.setattr(jm.InlineMerge, "expect_documents", expect_documents)
    monkeypatch.setattr(reading, "read_counted_bytes", read_counted_bytes)
    s = run_job(make_config(_values(tmp_path, **kw)))
    _same_bytes(s, want)
    n = s["partitions"]
    assert n >= 12 and offered == list(range(n))
    m = n // 4
    if separator is None:
        # first told by the driver, before partition n - 1 - m was offered
        assert told[0] == (s["documents"], n - 2 - m)
        assert sorted(kept_counts) == list(range(n - m))
    else:   # told by the last partition's task, as before; every count kept its bytes
        assert told[0] == (s["documents"], n - 2)
        assert sorted(kept_counts) == list(range(n))


@pytest.mark.parametrize("separator", [None, "\n"])
def test_writes_take_their_partitions_in_order_when_every_count_is_known(tmp_path,
                                                                         monkeypatch,
                                                                         separator):
    """With every partition's count known at planning (a Parquet input: its row groups'
    rows) no pass orders the writes: on threads each write still takes the next partition
    in input order (dask.order started them out of order, 18, 1, 0, 17, ..., and each past
    the merge's bound was written as a part and copied), and the driver tells the merge
    the total at once. The bytes are those of the same documents' JSON Lines job."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from test_megatron import DATA, _jsonl, read_documents
    lines = read_documents(DATA / "corpus" / "en_ewt.txt")[:1500]
    docs = ["\n".join(lines[i:i + 3]) for i in range(0, len(lines), 3)]
    docs[5:5] = [None, ""]
    _jsonl(tmp_path / "docs.jsonl", docs)
    pq.write_table(pa.table({"text": docs}), tmp_path / "docs.parquet", row_group_size=20)
    kw = {} if separator is None else {"document_separator": separator}

    def values(out, **more):
        v = _values(tmp_path, out, **kw)
        v.update(scheduler_address="threads", **more)
        return v
    s = run_job(make_config(values("ref")))
    want = {ext: Path(s["megatron"]["prefix"] + ext).read_bytes() for ext in (".bin", ".idx")}
    started, told = [], []
    real_write, real_expect = driver._WRITERS["megatron"], jm.InlineMerge.expect_documents

    def write(spec, *args, **kwargs):
        started.append(spec.index)
        return real_write(spec, *args, **kwargs)

    def expect_documents(self, documents):
        told.append((documents, len(started)))
        return real_expect(self, documents)
    monkeypatch.setitem(driver._WRITERS, "megatron", write)
    monkeypatch.setattr(jm.InlineMerge, "expect_documents", expect_documents)
    s = run_job(make_config(values("o", input=str(tmp_path / "docs.parquet"),
                                   partition_size="2KB")))
    n = s["partitions"]
    assert s["run"]["mode"] == "threads" and n >= 12
    assert sorted(started) == list(range(n))
    # (two threads: one may note its partition just after the next one's)
    assert all(i >= j - 1 for j, i in enumerate(started)), started
    assert told and told[0][0] == len(docs) and told[0][1] <= 2   # (at once)
    _same_bytes(s, want)
    assert not list((tmp_path / "o").glob("part-*.bin"))
