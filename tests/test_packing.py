"""Global packing (``packing: {block_size: N}``, ``--pack N``; docs/batch-jobs.md "Global
packing"): the blocks equal HF ``run_mlm.py``'s ``group_texts`` applied to the whole corpus
tokenized by HF ``tokenizers``, whatever the partitioning and the workers, in every output
format; each block maps back to the document and token it starts at."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import DATA, hf_tokenizer, read_documents, requires_data, vocab_path
from daskwp.frames.megatron import read_sequences
from daskwp.jobs import ConfigError, JobError, make_config, run_job

pytestmark = requires_data

UNCASED = "bert-base-uncased"


@functools.lru_cache(maxsize=None)
def _corpus() -> tuple:
    docs = read_documents(DATA / "corpus" / "en_ewt.txt")[:6000]
    docs += read_documents(DATA / "corpus" / "edge" / "blns.txt")
    docs[10:10] = ["", "  ", ""]
    return tuple(docs)


@functools.lru_cache(maxsize=None)
def _units(special: bool) -> tuple:
    """HF's ids of every document (with [CLS]/[SEP] as its tokenizer call adds them)."""
    hf = hf_tokenizer(UNCASED)
    return tuple(tuple(e.ids) for e in hf.encode_batch(list(_corpus()),
                                                       add_special_tokens=special))


def group_texts(block_size: int, special: bool = True, pad_id: int | None = None):
    """run_mlm.py's group_texts over the whole corpus: concatenate, drop the remainder (or
    pad it); with the document and token each block starts at."""
    units = _units(special)
    concat = np.array([t for u in units for t in u], np.int32)
    total = len(concat) // block_size * block_size
    if pad_id is not None and len(concat) % block_size:
        total += block_size
        concat = np.concatenate([concat, np.full(total - len(concat), pad_id, np.int32)])
    blocks = concat[:total].reshape(-1, block_size)
    lens = np.array([len(u) for u in units])
    ends = np.cumsum(lens)
    pos = np.arange(len(blocks)) * block_size
    doc = np.searchsorted(ends, pos, side="right")
    return blocks, doc, pos - (ends[doc] - lens[doc])


def _input(tmp_path) -> str:
    path = tmp_path / "in.txt"
    if not path.exists():
        path.write_bytes(("\n".join(_corpus()) + "\n").encode("utf-8"))
    return str(path)


def _job(inp, out, **kw):
    values = dict(input=inp, output=str(out), vocab=str(vocab_path(UNCASED)), quiet=True,
                  scheduler_address="synchronous")
    values.update(kw)
    return run_job(make_config(values))


def _parquet_blocks(out):
    t = pq.read_table(sorted(str(p) for p in Path(out).glob("part-*.parquet")))
    return (np.stack(t.column("input_ids").to_numpy(zero_copy_only=False)),
            t.column("logID").to_numpy(), t.column("offset").to_numpy(),
            t.column("block").to_numpy(), t)


# (4096 over 64 partitions: half the writes need the counts of partitions past the next
# one, and run after the spill pass; the others as soon as their next partition is counted)
@pytest.mark.parametrize("block_size", [7, 128, 512, 4096])
def test_blocks_equal_group_texts_over_the_whole_corpus(tmp_path, block_size):
    inp = _input(tmp_path)
    size = Path(inp).stat().st_size
    want, doc, offset = group_texts(block_size)
    for parts in (1, 7, 64):
        s = _job(inp, tmp_path / f"o{parts}", packing=block_size,
                 partition_size=f"{size // parts + 1}B")
        assert s["partitions"] == parts
        got, logid, off, block, _ = _parquet_blocks(tmp_path / f"o{parts}")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(block, np.arange(len(want)))
        np.testing.assert_array_equal(logid, doc)
        np.testing.assert_array_equal(off, offset)
        assert s["packing"]["blocks"] == len(want)


def test_the_input_is_read_once(tmp_path, monkeypatch):
    """Pass 1 counts every partition's documents: the global-offset pass after it reads
    nothing (it counted every partition again, a second read of the whole input), and the
    blocks stay group_texts'."""
    import daskwp.jobs.parts as parts
    counted = []
    real = parts.count_partition

    def count_partition(spec, *args, **kw):
        counted.append(spec.index)
        return real(spec, *args, **kw)
    monkeypatch.setattr(parts, "count_partition", count_partition)
    inp = _input(tmp_path)
    s = _job(inp, tmp_path / "o", packing=128, partition_size="100kB")
    assert s["partitions"] > 3
    assert counted == []
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "o")[0], group_texts(128)[0])


def test_partitions_spilled_slice_by_slice(tmp_path, monkeypatch):
    """Pass 1 tokenizes and spills a partition a slice of documents at a time: with slices
    of a few kB (many per partition) the blocks and statistics are the same."""
    import daskwp.frames.megatron as fm
    inp = _input(tmp_path)
    want = _job(inp, tmp_path / "w", packing=128, partition_size="200kB")
    monkeypatch.setattr(fm, "SLICE_BYTES", 3000)
    assert len(fm.document_slices(pa.array(list(_corpus())))) > 100
    got = _job(inp, tmp_path / "g", packing=128, partition_size="200kB")
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "g")[0], group_texts(128)[0])
    for key in ("documents", "rows", "tokens", "unknown_tokens", "length_percentiles"):
        assert got[key] == want[key], key


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
def test_units_in_memory_are_bounded(tmp_path, monkeypatch, scheduler):
    """In this process a few partitions' units are held in memory at once, not the whole
    input's: dask's threads may run the spills ahead of the writes (seen: 21 of 23
    partitions between their spill and their write), so past a bound (4, or twice the
    threads) a partition is spilled; the blocks are the same."""
    from dask.system import CPU_COUNT

    import daskwp.jobs.packing as packing
    peak = []
    real = packing.spill_partition

    def spill(*args):
        out = real(*args)
        peak.append(packing.units_held())
        return out
    monkeypatch.setattr(packing, "spill_partition", spill)
    s = _job(_input(tmp_path), tmp_path / "o", packing=128, partition_size="20kB",
             scheduler_address=scheduler)
    assert s["partitions"] > 20 and len(peak) == s["partitions"]
    bound = 4 if scheduler == "synchronous" else max(4, 2 * CPU_COUNT)
    assert 0 < max(peak) <= bound + (scheduler == "threads") * CPU_COUNT, peak
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "o")[0], group_texts(128)[0])


@pytest.mark.parametrize("block_size", [7, 4096])
def test_units_partly_in_memory_partly_spilled(tmp_path, monkeypatch, block_size):
    """Past the bound a partition's units are spilled: every other partition so (the
    following partitions' heads from memory or from their spills, some writes after the
    pass), the blocks stay group_texts'."""
    import daskwp.jobs.packing as packing
    calls = []

    def held():
        calls.append(1)
        return 10 ** 6 if len(calls) % 2 else 0
    monkeypatch.setattr(packing, "units_held", held)
    inp = _input(tmp_path)
    size = Path(inp).stat().st_size
    s = _job(inp, tmp_path / "o", packing=block_size, partition_size=f"{size // 64 + 1}B")
    assert s["partitions"] == 64 and len(calls) == 64
    got, logid, off, _, _ = _parquet_blocks(tmp_path / "o")
    want, doc, offset = group_texts(block_size)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(logid, doc)
    np.testing.assert_array_equal(off, offset)
    assert not [p for p in os.listdir(tmp_path / "o") if p.startswith(".")]


def test_unknown_tokens_counted_by_the_kernel(tmp_path, monkeypatch):
    """Pass 1 takes each slice's [UNK] count from the kernel that wrote the ids (no pass
    over them): the summary's unknown_tokens are HF's."""
    import daskwp.core.lengths as lengths
    import daskwp.jobs.packing as packing

    def no_pass(values, value):
        raise AssertionError("the ids were counted again")
    monkeypatch.setattr(lengths, "count_equal", no_pass)
    monkeypatch.setattr(packing, "count_equal", no_pass, raising=False)
    hf = hf_tokenizer(UNCASED)
    unk = hf.token_to_id("[UNK]")
    want = sum(u.count(unk) for u in _units(True))
    assert want > 0
    s = _job(_input(tmp_path), tmp_path / "o", packing=128, partition_size="200kB")
    assert s["unknown_tokens"] == want


def _buffered_only(monkeypatch):
    """As on a platform or file system without direct I/O."""
    import os
    monkeypatch.delattr(os, "O_DIRECT", raising=False)


@pytest.mark.parametrize("direct", [True, False])
def test_spill_files_round_trip_in_chunks(tmp_path, monkeypatch, direct):
    """A spill written in pieces through chunks of two pages (direct I/O where the file
    system takes it, else buffered) reads back exactly, any range, converted to the
    reader's dtype; the file holds only what was written; a range past its end is an
    error."""
    import daskwp.jobs.packing as packing
    if not direct:
        _buffered_only(monkeypatch)
    monkeypatch.setattr(packing, "_CHUNK", 2 * packing._ALIGN)
    rng = np.random.default_rng(0)
    pieces = [rng.integers(0, 30000, n, dtype=np.uint16)
              for n in (0, 1, 3001, 4096, 7, 12289, 5)]
    path = packing._spill_path(str(tmp_path), 3, "ids")
    w = packing._SpillWriter(path)
    if not direct:
        assert not w.direct
    for piece in pieces:
        w.write(piece)
    w.close()
    want = np.concatenate(pieces)
    assert Path(path).stat().st_size == want.nbytes
    for lo, hi in ((0, len(want)), (1, 2), (2047, 2049), (4095, 12000), (len(want) - 1,
                                                                       len(want)), (5, 5)):
        out = np.full(hi - lo, -1, np.int32)
        packing._read_spilled(str(tmp_path), 3, "ids", np.uint16, lo, hi, out)
        np.testing.assert_array_equal(out, want[lo:hi].astype(np.int32))
    with pytest.raises(packing.JobError, match="ends before byte"):
        packing._read_spilled(str(tmp_path), 3, "ids", np.uint16, len(want) - 1,
                              len(want) + 1, np.empty(2, np.int32))


def test_a_failed_spill_write_is_raised(tmp_path, monkeypatch):
    """A chunk's write fails in its background thread (a full disk): the error reaches
    the task, at the next chunk or at close."""
    import errno
    import os

    import daskwp.jobs.packing as packing
    monkeypatch.setattr(packing, "_CHUNK", 2 * packing._ALIGN)
    w = packing._SpillWriter(str(tmp_path / "spill"))

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        try:
            w.write(np.zeros(3 * packing._ALIGN, np.uint16))
        finally:
            w.close()


@pytest.mark.parametrize("direct", [True, False])
def test_blocks_through_small_chunks_and_reused_buffers(tmp_path, monkeypatch, direct):
    """Spills written and read in chunks of two pages, direct or buffered, and the
    buffers a partition's blocks are cut into reused by the next partition (in each
    output format): the blocks stay group_texts'."""
    import daskwp.jobs.packing as packing
    if not direct:
        _buffered_only(monkeypatch)
    monkeypatch.setattr(packing, "_CHUNK", 2 * packing._ALIGN)
    inp = _input(tmp_path)
    want = group_texts(128)[0]
    _job(inp, tmp_path / "o", packing=128, partition_size="40kB")
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "o")[0], want)
    s = _job(inp, tmp_path / "m", packing=128, partition_size="40kB",
             output_format="megatron")
    np.testing.assert_array_equal(np.stack(read_sequences(s["megatron"]["prefix"])[1]), want)
    # a rerun spills every partition (a fresh run's units stay in memory)
    for p in (tmp_path / "o").glob("part-00003.*"):
        p.unlink()
    _job(inp, tmp_path / "o", packing=128, partition_size="40kB")
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "o")[0], want)


def test_a_fresh_run_keeps_the_units_in_memory(tmp_path, monkeypatch):
    """A fresh run's writes take each partition's units from memory: nothing is spilled
    unless a write runs after the pass (its last block reaches past the next partition,
    as with 4096-token blocks over 64 partitions: those partitions alone); the blocks are
    group_texts' either way."""
    import daskwp.jobs.packing as packing
    spilled = []
    real = packing._SpillWriter

    class Counted(real):
        def __init__(self, path):
            spilled.append(path)
            super().__init__(path)
    monkeypatch.setattr(packing, "_SpillWriter", Counted)
    inp = _input(tmp_path)
    _job(inp, tmp_path / "o", packing=128, partition_size="20kB")
    assert spilled == []
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "o")[0], group_texts(128)[0])
    size = Path(inp).stat().st_size
    s = _job(inp, tmp_path / "l", packing=4096, partition_size=f"{size // 64 + 1}B")
    assert s["partitions"] == 64 and 0 < len(spilled) // 2 < 64, len(spilled)
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "l")[0], group_texts(4096)[0])


def test_buffers_are_reused_across_partitions_and_dropped_at_the_end(tmp_path,
                                                                   monkeypatch):
    """The blocks' buffers are taken again by the next partition (a few new mappings for
    dozens of partitions; a fresh run spills nothing: no chunk buffers), and a job run in
    this process drops them when it ends."""
    import mmap

    import daskwp.jobs.packing as packing
    made = []
    real = mmap.mmap

    def counted(fileno, length, *args, **kw):
        if fileno == -1:
            made.append(length)
        return real(fileno, length, *args, **kw)
    monkeypatch.setattr(mmap, "mmap", counted)
    s = _job(_input(tmp_path), tmp_path / "o", packing=128, partition_size="20kB")
    assert s["partitions"] > 20
    assert 1 <= len(made) <= 3, made
    assert packing._idle == {}
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "o")[0], group_texts(128)[0])


def test_packed_parquet_parts_have_the_parts_layout(tmp_path):
    """Blocks go through daskwp's part writer layout (no dictionaries: ids have tens of
    thousands of values), as the unpacked job's parts do."""
    inp = _input(tmp_path)
    _job(inp, tmp_path / "o", packing=128, partition_size="200kB")
    parts = sorted(Path(tmp_path / "o").glob("part-*.parquet"))
    assert len(parts) > 1
    for part in parts:
        meta = pq.ParquetFile(part).metadata
        assert meta.created_by.startswith("daskwp parquet writer")
        for rg in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                assert not any("DICTIONARY" in e
                               for e in meta.row_group(rg).column(c).encodings)


def test_pad_last_and_no_special_tokens(tmp_path):
    inp = _input(tmp_path)
    hf = hf_tokenizer(UNCASED)
    pad = hf.token_to_id("[PAD]")
    for special in (True, False):
        want, doc, offset = group_texts(100, special, pad_id=pad)
        s = _job(inp, tmp_path / f"o{special}", partition_size="20KB",
                 packing={"block_size": 100, "pad_last": True}, add_special_tokens=special)
        got, logid, off, _, t = _parquet_blocks(tmp_path / f"o{special}")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(logid, doc)
        np.testing.assert_array_equal(off, offset)
        mask = np.stack(t.column("attention_mask").to_numpy(zero_copy_only=False))
        real = sum(len(u) for u in _units(special))
        assert mask.sum() == real and mask[-1, -1] == (real % 100 == 0)
        # every block maps back to its text: block k starts at token offset k of logID k
        units = _units(special)
        for k in range(0, len(got), 97):
            assert got[k, 0] == units[logid[k]][off[k]]


def test_megatron_and_datasets_hold_the_same_blocks(tmp_path):
    datasets = pytest.importorskip("datasets")
    inp = _input(tmp_path)
    want, doc, _ = group_texts(256)
    s = _job(inp, tmp_path / "m", packing=256, partition_size="30KB",
             output_format="megatron")
    idx, seqs = read_sequences(s["megatron"]["prefix"])
    np.testing.assert_array_equal(np.stack(seqs), want)
    assert idx.documents == len(want)
    _job(inp, tmp_path / "d", packing=256, partition_size="30KB", output_format="datasets")
    ds = datasets.load_from_disk(str(tmp_path / "d")).with_format("numpy")
    np.testing.assert_array_equal(np.stack(ds["input_ids"]), want)
    np.testing.assert_array_equal(ds["logID"], doc)


def test_resume_keeps_complete_parts(tmp_path):
    inp = _input(tmp_path)
    out = tmp_path / "o"
    s = _job(inp, out, packing=64, partition_size="40KB")
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    victim = sorted(out.glob("part-*.json"))[2]
    victim.unlink()
    s2 = _job(inp, out, packing=64, partition_size="40KB")
    assert s2["partitions_written"] == 1 and s2["partitions_skipped"] == s["partitions"] - 1
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    changed = [k for k in before if before[k] != after[k]]
    assert changed == [victim.name.replace(".json", ".parquet")]
    np.testing.assert_array_equal(_parquet_blocks(out)[0], group_texts(64)[0])
    assert not list(out.glob(".tmp-*"))


def test_a_rerun_checks_its_complete_parts_before_writing(tmp_path, monkeypatch):
    # A rerun whose counts no longer place its complete parts where they were written fails
    # before it writes the missing part (the fresh run's overlapped writes are not used).
    from daskwp.jobs import packing
    inp = _input(tmp_path)
    out = tmp_path / "o"
    _job(inp, out, packing=64, partition_size="40KB")
    victim = sorted(out.glob("part-*.json"))[2]
    victim.unlink()
    missing = victim.name.replace(".json", ".parquet")
    before = (out / missing).stat().st_mtime_ns
    real = packing._spill_counts

    def shifted(spill):   # the input's first partition now one token longer
        units, docs = real(spill)
        return (units + 1 if spill["index"] == 0 else units), docs
    monkeypatch.setattr(packing, "_spill_counts", shifted)
    with pytest.raises(JobError, match="starts at token"):
        _job(inp, out, packing=64, partition_size="40KB")
    assert (out / missing).stat().st_mtime_ns == before
    assert not (out / victim.name).exists()


def test_parts_are_written_and_committed_off_the_task_thread(tmp_path, monkeypatch):
    """A write task cuts its blocks and hands the part's write, fsync and renames to a
    commit thread of its own, then returns (its thread goes on to the next task); at most
    one commit per task thread is in flight, and the job's parts and statistics are those
    the commits wrote."""
    import threading

    from daskwp.jobs import packing
    seen = []
    real = packing.commit_part

    def commit_part(out_dir, index, *args, **kw):
        seen.append((threading.current_thread().name, index,
                     sum(t.name.startswith("daskwp-commit-") for t in threading.enumerate())))
        return real(out_dir, index, *args, **kw)
    monkeypatch.setattr(packing, "commit_part", commit_part)
    inp = _input(tmp_path)
    s = _job(inp, tmp_path / "o", packing=128, partition_size="100kB")
    assert s["partitions"] > 3 and len(seen) == s["partitions"]
    assert {name for name, _, _ in seen} == {f"daskwp-commit-{i}" for _, i, _ in seen}
    assert max(n for _, _, n in seen) == 1   # (one task thread: synchronous)
    got, logid, _, _, _ = _parquet_blocks(tmp_path / "o")
    want, doc, _ = group_texts(128)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(logid, doc)
    assert s["rows"] == len(want) and s["cpu_seconds"]["write"] > 0
    assert packing._commits == {} and packing._commit_threads == {}


def test_a_failed_commit_fails_the_job_and_a_rerun_writes_the_part(tmp_path, monkeypatch):
    """A commit that fails in its thread fails the job, naming its partition; the part is
    not complete (no record, no temporary file left), and a rerun writes it."""
    from daskwp.jobs import packing
    real = packing.commit_part

    def commit_part(out_dir, index, *args, **kw):
        if index == 2:
            raise OSError(28, "No space left on device")
        return real(out_dir, index, *args, **kw)
    monkeypatch.setattr(packing, "commit_part", commit_part)
    inp = _input(tmp_path)
    out = tmp_path / "o"
    with pytest.raises(JobError, match="partition 2 .*No space left on device"):
        _job(inp, out, packing=128, partition_size="100kB")
    assert 2 not in _recorded(out)
    assert not list(out.glob(".tmp-2-*"))
    assert packing._commits == {} and packing._commit_threads == {}
    monkeypatch.undo()
    s = _job(inp, out, packing=128, partition_size="100kB")
    assert 1 <= s["partitions_written"] < s["partitions"]
    np.testing.assert_array_equal(_parquet_blocks(out)[0], group_texts(128)[0])


def _recorded(out) -> set:
    """The partitions whose part is complete (its record written)."""
    return {json.loads(p.read_text())["partition"] for p in Path(out).glob("part-*.json")}


def _lose_commit(monkeypatch, index):
    """The commit of partition ``index`` lost once, as with a worker gone after its write
    task returned: the part is not written and no outcome is kept."""
    from daskwp.jobs import packing
    real = packing._run_commit
    lost = []

    def run_commit(job_id, spec, commit):
        if spec.index == index and not lost:
            lost.append(index)
            from daskwp.jobs.packing import _give_back
            _give_back("blocks", commit.args[-2].pop())   # (its buffer, as a dead worker's)
            return
        real(job_id, spec, commit)
    monkeypatch.setattr(packing, "_run_commit", run_commit)
    return lost


def test_a_commit_lost_in_this_process_fails_the_job(tmp_path, monkeypatch):
    """Units held in memory (a job in this process) cannot be written again: a commit
    that never ended fails the job, and a rerun writes the part."""
    inp = _input(tmp_path)
    out = tmp_path / "o"
    _lose_commit(monkeypatch, 1)
    with pytest.raises(JobError, match="partition 1's part was not committed"):
        _job(inp, out, packing=128, partition_size="100kB")
    assert 1 not in _recorded(out) and 0 in _recorded(out)
    monkeypatch.undo()
    s = _job(inp, out, packing=128, partition_size="100kB")
    assert s["partitions_written"] == 1
    np.testing.assert_array_equal(_parquet_blocks(out)[0], group_texts(128)[0])


def test_a_commit_lost_on_a_cluster_is_written_again_from_its_spill(tmp_path, monkeypatch):
    """On a cluster a partition's tokens are spilled: a part whose commit ended with its
    worker (after its write task returned) is written again from the spills once the
    others are collected; the job's blocks are group_texts'."""
    from distributed import LocalCluster
    lost = _lose_commit(monkeypatch, 3)
    inp = _input(tmp_path)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        s = _job(inp, tmp_path / "o", packing=128, partition_size="50KB",
                 scheduler_address=cluster.scheduler_address)
    assert lost == [3] and _recorded(tmp_path / "o") == set(range(s["partitions"]))
    got, logid, _, _, _ = _parquet_blocks(tmp_path / "o")
    want, doc, _ = group_texts(128)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(logid, doc)
    assert s["packing"]["blocks"] == len(want)


def test_packing_refuses_window_options(tmp_path):
    inp = _input(tmp_path)
    with pytest.raises(ConfigError, match="max_length=64 does not apply to packing"):
        _job(inp, tmp_path / "o", packing=64, max_length=64)
    with pytest.raises(ConfigError, match="packing.block_size must be"):
        _job(inp, tmp_path / "o", packing=0)


@pytest.mark.slow
def test_blocks_on_worker_processes(tmp_path):
    """Two worker processes, 23 partitions: the blocks of the synchronous run."""
    from distributed import LocalCluster
    inp = _input(tmp_path)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        _job(inp, tmp_path / "o", packing=128, partition_size="50KB",
             scheduler_address=cluster.scheduler_address)
    got, logid, off, _, _ = _parquet_blocks(tmp_path / "o")
    want, doc, offset = group_texts(128)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(logid, doc)
    summary = json.loads((tmp_path / "o" / "_summary.json").read_text())
    assert summary["packing"]["blocks"] == len(want)


@pytest.mark.slow
def test_killed_worker_and_killed_driver(tmp_path):
    """A worker process SIGKILLed while parts are written (its commit in flight, maybe):
    the job completes with group_texts' blocks; the driver SIGKILLed mid-job: the rerun
    keeps every complete part (same mtime), writes the rest, and the blocks are the
    same."""
    import sys

    from distributed import Client, LocalCluster
    from conftest import REPO_ROOT, rerun_after_killing_the_job, run_killing_a_worker

    inp = _input(tmp_path)
    want, doc, _ = group_texts(128)
    out = tmp_path / "w"
    cfg = make_config(dict(input=inp, output=str(out), vocab=str(vocab_path(UNCASED)),
                           quiet=True, device="cpu", packing=128, partition_size="10KB"))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        s, killed = run_killing_a_worker(cluster, lambda: run_job(cfg, client=client),
                                         lambda: len(list(out.glob("part-*.json"))) >= 2)
    assert killed, "the job ended before a worker could be killed"
    got, logid, _, _, _ = _parquet_blocks(out)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(logid, doc)
    assert _recorded(out) == set(range(s["partitions"]))

    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "daskwp", "tokenize", inp, str(out), "--pack", "128",
           "--vocab", str(vocab_path(UNCASED)), "--scheduler", "synchronous",
           "--partition-size", "10KB", "-q"]
    rerun_after_killing_the_job(cmd, out, REPO_ROOT)
    np.testing.assert_array_equal(_parquet_blocks(out)[0], want)


def test_cluster_runs_pass_1_first_partition_by_partition_on_a_worker(tmp_path):
    """On a cluster, partition i's spill, count and write are placed on one worker (i modulo
    the workers), and pass 1 runs before the writes whenever both are ready: writes are
    left for the end, where a worker would otherwise wait for the other's last spill."""
    from distributed import LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    seen = {}

    class Record(SchedulerPlugin):
        def transition(self, key, start, finish, *args, **kwargs):
            ts = self.scheduler.tasks.get(key)
            if ts is not None and isinstance(key, tuple) and finish in ("waiting",
                                                                         "processing"):
                seen[key] = (ts.priority, ts.worker_restrictions, ts.loose_restrictions)

    inp = _input(tmp_path)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        plugin = Record()
        plugin.scheduler = cluster.scheduler
        cluster.scheduler.add_plugin(plugin, name="record")
        workers = sorted(cluster.scheduler.workers)
        _job(inp, tmp_path / "o", packing=128, partition_size="50KB",
             scheduler_address=cluster.scheduler_address)
    got, _, _, _, _ = _parquet_blocks(tmp_path / "o")
    np.testing.assert_array_equal(got, group_texts(128)[0])
    by = {}
    for (name, i), value in seen.items():
        kind = name.split("-")[1] + ("-count" if "count" in name else "")
        by.setdefault(kind, {})[i] = value
    n = len(by["pack"])
    assert n > 4 and set(by["spill"]) == set(by["spill-count"]) == set(range(n))
    for i in range(n):
        for kind in ("spill", "spill-count", "pack"):
            _, where, loose = by[kind][i]
            assert where == {workers[i % 2]} and loose, (kind, i)
    assert max(p for p, _, _ in by["spill"].values()) < \
        min(p for p, _, _ in by["pack"].values())


def test_a_packed_job_runs_no_offset_graph_after_its_passes(tmp_path, monkeypatch):
    """The two passes give every offset: the job submits no graph after them (on a
    cluster, one more scheduler round trip with nothing to do)."""
    from daskwp.jobs import driver

    def no_graph(*args, **kwargs):
        raise AssertionError("a packed job ran the offset pass's graph")

    monkeypatch.setattr(driver, "run_graph", no_graph)
    _job(_input(tmp_path), tmp_path / "o", packing=128, partition_size="200KB")
    got, logid, _, _, _ = _parquet_blocks(tmp_path / "o")
    want, doc, _ = group_texts(128)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(logid, doc)
    summary = json.loads((tmp_path / "o" / "_summary.json").read_text())
    assert summary["documents"] == len(_corpus())


def test_cli_and_yaml(tmp_path, capsys):
    from daskwp.cli import main
    from daskwp.jobs import load_config
    inp = _input(tmp_path)
    vocab = str(vocab_path(UNCASED))
    assert main(["tokenize", inp, str(tmp_path / "cli"), "--pack", "128", "--vocab", vocab,
                 "--scheduler", "synchronous", "--partition-size", "100KB"]) == 0
    assert "packing      " in capsys.readouterr().out
    job = tmp_path / "job.yaml"
    job.write_text(f"input: {inp}\noutput: {tmp_path / 'yaml'}\nvocab: {vocab}\n"
                   f"packing: {{block_size: 128, pad_last: true}}\n"
                   f"scheduler_address: synchronous\nquiet: true\n")
    run_job(load_config(job, ["packing={block_size: 128}"]))
    want = group_texts(128)[0]
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "cli")[0], want)
    np.testing.assert_array_equal(_parquet_blocks(tmp_path / "yaml")[0], want)


def test_url_outputs_are_refused_for_the_new_formats(tmp_path):
    inp = _input(tmp_path)
    for kw in ({"packing": 64},):   # Parquet, Megatron and datasets: a URL is fine
        with pytest.raises(ConfigError, match="local or shared filesystem path only"):
            _job(inp, "s3://bucket/out", **kw)


def test_every_spill_writer_is_closed_when_one_close_fails(tmp_path, monkeypatch):
    """The ids spill's close fails (a full disk at its last chunk): the lens spill is
    still closed (its file descriptor and pooled buffers given back) and the first error
    reaches the task."""
    import errno

    import daskwp.jobs.packing as packing
    writers = [packing._SpillWriter(str(tmp_path / n)) for n in ("ids", "lens")]
    for w in writers:
        w.write(np.arange(10, dtype=np.uint16))
    closed = []

    def fails():
        closed.append("ids")
        raise OSError(errno.ENOSPC, "No space left on device")
    real = writers[1].close
    monkeypatch.setattr(writers[0], "close", fails)
    monkeypatch.setattr(writers[1], "close", lambda: (closed.append("lens"), real()))
    with pytest.raises(OSError, match="No space left"):
        packing._close_all(writers)
    assert closed == ["ids", "lens"]
    with pytest.raises(OSError):   # its descriptor was closed
        os.fstat(writers[1].fd)
    assert (tmp_path / "lens").stat().st_size == 20


@pytest.mark.parametrize("fmt", ["parquet", "megatron", "datasets"])
def test_packing_tasks_do_not_import_pandas(tmp_path, fmt):
    """Both passes of a packed partition (spill, then its blocks written in ``fmt``) in a
    fresh process import no pandas: ``pa.array`` of the block columns did (its pandas
    check), ~0.25 s of CPU in each cluster worker's first packed partition."""
    import subprocess
    import sys
    code = f"""
import sys
import numpy as np
import daskwp
from daskwp.jobs import list_input_files, plan_partitions
from daskwp.jobs import packing
folder = {str(tmp_path)!r}
with open(folder + "/in.txt", "w") as fh:
    fh.write("hello world\\nmore text here\\n" * 300)
tok = daskwp.WordPieceTokenizer({str(vocab_path("bert-base-uncased"))!r}, lowercase=True)
specs = plan_partitions(list_input_files(folder + "/in.txt"), "text", 3000)
assert len(specs) > 1 and "pandas" not in sys.modules
opts = {{"add_special_tokens": True, "on_bad_row": "error", "output_format": {fmt!r},
         "packing": {{"block_size": 16, "pad_last": True}}, "compression": "zstd"}}
spills = [packing.spill_partition(s, folder, tok, opts) for s in specs]
starts = np.concatenate([[0], np.cumsum([s["units"] for s in spills])]).tolist()
packing.write_packed_partition(specs[0], starts, 0, folder, tok, opts, "j", len(specs),
                               spills[0], 0)
assert packing.collect_commits("j")[0]["rows"] > 0
print("pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("fmt", ["parquet", "megatron"])
def test_packed_parts_are_hashed_as_written(tmp_path, monkeypatch, fmt):
    """A packed part's record holds its files' checksums computed as they were written (no
    read-back): the checksums of their bytes, which a rerun checks. Parquet parts and
    Megatron pairs are written without the page cache (O_DIRECT) where the file system
    takes it."""
    from daskwp.frames import megatron as fm
    from daskwp.jobs import records
    real = records.file_digest
    direct = []
    real_put = fm._DirectAppendFile._put

    def file_digest(path, *a, **k):
        assert not str(path).endswith((".parquet", ".bin", ".idx")), \
            f"{path} read back for its checksum"
        return real(path, *a, **k)

    def put(self, nbytes):
        direct.append(self.path)
        return real_put(self, nbytes)
    monkeypatch.setattr(records, "file_digest", file_digest)
    monkeypatch.setattr(fm._DirectAppendFile, "_put", put)
    inp = _input(tmp_path)
    kw = dict(packing=128, partition_size="200kB")
    if fmt == "megatron":
        kw.update(output_format="megatron", merge_parts=False)
    _job(inp, tmp_path / "o", **kw)
    monkeypatch.undo()
    ext = (".parquet",) if fmt == "parquet" else (".bin", ".idx")
    parts = sorted(p for p in Path(tmp_path / "o").glob("part-*") if p.suffix in ext)
    assert len(parts) > 2
    for part in parts:
        rec = json.loads(part.with_suffix(".json").read_text())
        assert rec["files"][part.name]["hash128"] == records.file_digest(str(part))
    probe = fm.open_direct(str(tmp_path / "probe"), os.O_WRONLY | os.O_CREAT)
    if probe is not None:
        os.close(probe)
        if fmt == "megatron":
            assert {"bin", "idx"} <= {p.rsplit(".", 1)[1] for p in direct}
        else:
            assert any("packed-" in os.path.basename(p) for p in direct), direct
    s = _job(inp, tmp_path / "o", **kw)   # a rerun keeps them all
    assert s["partitions_skipped"] == s["partitions"]
