"""Megatron indexed datasets (``output_format: megatron``, docs/batch-jobs.md "Megatron
indexed datasets").

The fast tier needs NumPy only: the format byte by byte, sequences and documents, merging, and
jobs read back with daskwp's own reader against HF ``tokenizers``' ids. The megatron tier
(``pip install 'daskwp[megatron]'``: megatron-core and torch) checks byte equality with
megatron-core's ``IndexedDatasetBuilder`` fed HF ids as ``tools/preprocess_data.py`` feeds
it, on every shared corpus, and that ``IndexedDataset`` opens daskwp's files.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import daskwp
from conftest import (DATA, corpus_files, hf_tokenizer, read_documents, requires_data,
                      vocab_path)
from daskwp.cli import main
from daskwp.frames.megatron import (INDEX_HEADER, document_sequences, merge_pairs, read_index,
                                read_sequences, token_dtype, write_pair)
from daskwp.jobs import ConfigError, load_config, make_config, run_job

from test_offsets import emulated_gpu  # noqa: F401  (the emulated CUDA backend)

pytestmark = requires_data

UNCASED = "bert-base-uncased"
MULTI = "bert-base-multilingual-cased"   # 119,547 ids: int32 tokens


def _megatron():
    pytest.importorskip("torch", reason="megatron tier: pip install 'daskwp[megatron]'")
    pytest.importorskip("megatron.core", reason="megatron tier: pip install "
                                                "'daskwp[megatron]'")
    warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
    from megatron.core.datasets import indexed_dataset
    return indexed_dataset


# ---------------------------------------------------------------------------------------
# The format, NumPy only
# ---------------------------------------------------------------------------------------
def test_token_dtype_is_megatrons_optimal_dtype():
    assert token_dtype(30522) == np.uint16
    assert token_dtype(65499) == np.uint16
    assert token_dtype(65500) == np.int32
    assert token_dtype(119547) == np.int32


def test_index_bytes_by_hand(tmp_path):
    # two documents: [5, 6] and [7]; then an empty one (no sequence)
    tokens, lengths, docs = document_sequences(
        np.array([5, 6, 7], np.int32), np.array([0, 2, 3, 3]), np.uint16)
    write_pair(str(tmp_path / "d"), tokens, lengths, docs)
    want = (INDEX_HEADER + struct.pack("<QBQQ", 1, 8, 2, 4)
            + struct.pack("<2i", 2, 1) + struct.pack("<2q", 0, 4)
            + struct.pack("<4q", 0, 1, 2, 2))
    assert (tmp_path / "d.idx").read_bytes() == want
    assert (tmp_path / "d.bin").read_bytes() == struct.pack("<3H", 5, 6, 7)
    tokens32 = tokens.astype(np.int32)
    write_pair(str(tmp_path / "e"), tokens32, lengths, docs)
    assert (tmp_path / "e.idx").read_bytes()[17] == 4            # int32's code
    assert struct.unpack("<2q", (tmp_path / "e.idx").read_bytes()[42:58]) == (0, 8)


SEQUENCE_CASES = [
    # (pieces, pieces_per_document, cls, sep, eod) -> sequences per document
    ([[1, 2], [], [3]], None, None, None, None, [[[1, 2]], [], [[3]]]),
    ([[1, 2], [], [3]], None, 8, 9, None, [[[8, 1, 2, 9]], [], [[8, 3, 9]]]),
    ([[1, 2], [], [3]], None, None, None, 7, [[[1, 2, 7]], [], [[3, 7]]]),
    ([[1, 2], [], [3]], None, 8, 9, 7, [[[8, 1, 2, 9, 7]], [], [[8, 3, 9, 7]]]),
    # pieces: document 0 = [1,2] [] [3]; document 1 = none; document 2 = [] []; 3 = [4]
    ([[1, 2], [], [3], [], [], [4]], [0, 3, 3, 5, 6], None, None, 7,
     [[[1, 2], [3, 7]], [], [], [[4, 7]]]),
    ([[1, 2], [], [3], [4]], [0, 3, 4], 8, 9, None, [[[8, 1, 2, 9], [8, 3, 9]], [[8, 4, 9]]]),
    ([], None, 8, 9, 7, []),
    # a piece per document, none empty: the path without an index of the kept pieces
    ([[1, 2], [3]], None, None, None, None, [[[1, 2]], [[3]]]),
    ([[1, 2], [3]], None, 8, 9, 7, [[[8, 1, 2, 9, 7]], [[8, 3, 9, 7]]]),
]


@pytest.mark.parametrize("eod", [None, 2])
def test_document_sequences_without_empty_documents_as_the_general_path(eod):
    """Documents none of which is empty take a shorter path (no index of the kept pieces):
    the same tokens, lengths, document indices and [UNK] count as the general one, which
    an explicit piece per document takes."""
    from daskwp.frames.megatron import _document_sequences
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 40, 5_000)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    ids = rng.integers(0, 30_000, int(offsets[-1])).astype(np.int32)
    ids[::97] = 100
    one_each = np.arange(len(lens) + 1, dtype=np.int64)
    for dtype in (np.uint16, np.int32, np.int64):
        fast = _document_sequences(ids, offsets, dtype, None, 101, 102, eod, 100)
        general = _document_sequences(ids, offsets, dtype, one_each, 101, 102, eod, 100)
        for a, b in zip(fast[:3], general[:3]):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert fast[3] == general[3] == int(np.count_nonzero(ids == 100))


@pytest.mark.parametrize("case", range(len(SEQUENCE_CASES)))
def test_document_sequences_table(tmp_path, case):
    pieces, ppd, cls, sep, eod, want = SEQUENCE_CASES[case]
    flat = np.array([t for p in pieces for t in p], np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)
    tokens, lengths, docs = document_sequences(
        flat, offsets, np.uint16, pieces_per_document=ppd, cls_id=cls, sep_id=sep,
        eod_id=eod)
    write_pair(str(tmp_path / "d"), tokens, lengths, docs)
    idx, seqs = read_sequences(str(tmp_path / "d"))
    got = [[seqs[s].tolist() for s in range(idx.document_indices[d],
                                            idx.document_indices[d + 1])]
           for d in range(idx.documents)]
    assert got == want


def test_read_index_refuses_what_is_not_an_index(tmp_path):
    write_pair(str(tmp_path / "d"), np.array([1, 2], np.uint16), [2], [0, 1])
    good = (tmp_path / "d.idx").read_bytes()
    cases = {"no MMIDIDX header": b"XXIDIDX\x00\x00" + good[9:],
             "index version 2": good[:9] + struct.pack("<Q", 2) + good[17:],
             "unknown dtype code 9": good[:17] + b"\x09" + good[18:],
             "its header counts": good[:-3]}
    for what, data in cases.items():
        (tmp_path / "bad.idx").write_bytes(data)
        with pytest.raises(ValueError, match=what):
            read_index(str(tmp_path / "bad.idx"))


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_merge_equals_writing_everything_at_once(tmp_path, monkeypatch, kernel_copy):
    """Also where the kernel cannot copy between the files (copy_file_range refused: read
    and write instead)."""
    calls = []
    real = os.copy_file_range

    def copy_file_range(*args):
        calls.append(args)
        if not kernel_copy:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(*args)
    monkeypatch.setattr(os, "copy_file_range", copy_file_range)
    rng = np.random.default_rng(3)
    docs = [list(rng.integers(0, 60000, rng.integers(0, 6))) for _ in range(300)]
    flat = np.array([t for d in docs for t in d], np.int32)
    off = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    whole = str(tmp_path / "whole")
    write_pair(whole, *document_sequences(flat, off, np.uint16, eod_id=3))
    cuts = [0, 0, 17, 150, 151, 300]   # an empty part too
    prefixes = []
    for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        p = str(tmp_path / f"p{k}")
        write_pair(p, *document_sequences(flat[off[a]:off[b]], off[a:b + 1] - off[a],
                                          np.uint16, eod_id=3))
        prefixes.append(p)
    info = merge_pairs(prefixes, str(tmp_path / "merged"))
    assert calls
    assert info["documents"] == 300
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"merged{ext}").read_bytes() == Path(whole + ext).read_bytes()


# ---------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------
def _corpus_inputs() -> list[str]:
    return [str(p) for p in corpus_files() if p.suffix != ".json"]


def _job(inputs, out, vocab=UNCASED, **kw):
    values = dict(input=inputs, output=str(out), output_format="megatron",
                  vocab=str(vocab_path(vocab)), scheduler_address="synchronous", quiet=True,
                  add_special_tokens=False)
    values.update(kw)
    return run_job(make_config(values))


def _documents(prefix):
    """Per document, its sequences (lists), read with daskwp's NumPy reader."""
    idx, seqs = read_sequences(str(prefix))
    d = idx.document_indices
    return [[seqs[s].tolist() for s in range(d[k], d[k + 1])] for k in range(idx.documents)]


def _reference(hf, docs, *, separator=None, special=False, eod=None):
    """What ``preprocess_data.py``'s Encoder.encode gives per document, with HF's ids:
    sequences with tokens only; [CLS]/[SEP] by HF's own post-processor."""
    out = []
    for doc in docs:
        pieces = [] if doc is None else (doc.split(separator) if separator else [doc])
        seqs = []
        for piece in pieces:
            if not hf.encode(piece, add_special_tokens=False).ids:
                continue
            seqs.append(list(hf.encode(piece, add_special_tokens=special).ids))
        if seqs and eod is not None:
            seqs[-1].append(eod)
        out.append(seqs)
    return out


def _jsonl(path, docs):
    with open(path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"text": d}) + "\n")
    return str(path)


def _mixed_documents():
    """Documents of several lines (sentence per line), nulls, empty and blank ones."""
    lines = read_documents(DATA / "corpus" / "en_ewt.txt")[:600]
    lines += read_documents(DATA / "corpus" / "edge" / "blns.txt")
    docs = ["\n".join(lines[i:i + 7]) for i in range(0, len(lines), 7)]
    docs[3:3] = [None, "", "   ", "\n\n", "x\n\ny", "[SEP] [CLS]"]
    return docs


def test_slices_write_the_bytes_of_the_whole_partition(tmp_path, monkeypatch):
    """A partition tokenized and written slice by slice (megatron_slices into
    write_pair_from) gives the bytes and statistics of the whole at once."""
    import pyarrow as pa
    import daskwp.frames.megatron as fm
    docs = _mixed_documents()
    texts = pa.array(docs, pa.large_string())
    tok = daskwp.WordPieceTokenizer(vocab_path(UNCASED))
    for k, opts in enumerate([{}, {"append_eod": True, "add_special_tokens": True},
                              {"document_separator": "\n", "append_eod": True}]):
        tokens, lengths, d, want = fm.megatron_sequences(tok, texts, opts)
        write_pair(str(tmp_path / f"w{k}"), tokens, lengths, d)
        monkeypatch.setattr(fm, "SLICE_BYTES", 500)
        assert len(fm.document_slices(texts)) > 20
        assert sum(len(p) for p in fm.document_slices(texts)) == len(docs)
        clock = {}
        got = fm.write_pair_from(str(tmp_path / f"s{k}"), fm.megatron_slices(
            tok, texts, opts, clock=clock), tokens.dtype)
        monkeypatch.undo()
        assert set(clock) == {"tokenize", "frame"}
        np.testing.assert_array_equal(got.pop("document_lengths"),
                                      want.pop("document_lengths"))
        assert got == want
        for ext in (".bin", ".idx"):
            assert (tmp_path / f"s{k}{ext}").read_bytes() == \
                (tmp_path / f"w{k}{ext}").read_bytes(), (opts, ext)


def test_job_equals_hf_with_the_numpy_reader(tmp_path):
    """Fast tier: a JSON Lines job (nulls, empty and blank documents, several partitions)
    read back with daskwp's reader equals HF's ids per document, every option set."""
    docs = _mixed_documents()
    inp = _jsonl(tmp_path / "docs.jsonl", docs)
    hf = hf_tokenizer(UNCASED)
    tok = daskwp.WordPieceTokenizer(vocab_path(UNCASED))
    for k, (opts, ref) in enumerate([
            ({}, {}),
            ({"append_eod": True, "add_special_tokens": True},
             {"special": True, "eod": tok.vocab.sep_id}),
            ({"document_separator": "\n", "append_eod": True, "eod_token": "[PAD]"},
             {"separator": "\n", "eod": tok.vocab.pad_id})]):
        s = _job(inp, tmp_path / f"o{k}", partition_size="20KB", **opts)
        assert s["partitions"] > 3
        prefix = s["megatron"]["prefix"]
        assert prefix.endswith("text_sentence" if "document_separator" in opts
                               else "text_document")
        assert _documents(prefix) == _reference(hf, docs, **ref), opts
        assert {"read", "tokenize", "frame", "write"} <= set(s["cpu_seconds"])
        assert s["megatron"]["merge_cpu_seconds"] >= 0


def test_partitioning_does_not_change_the_bytes(tmp_path):
    docs = _mixed_documents()
    inp = _jsonl(tmp_path / "docs.jsonl", docs)
    outs = [_job(inp, tmp_path / f"o{k}", partition_size=size, append_eod=True)
            ["megatron"]["prefix"] for k, size in enumerate(["1GB", "7KB", "2KB"])]
    for ext in (".bin", ".idx"):
        first = Path(outs[0] + ext).read_bytes()
        assert all(Path(o + ext).read_bytes() == first for o in outs[1:])


def test_megatron_options_that_do_not_apply_are_refused(tmp_path):
    inp = _jsonl(tmp_path / "d.jsonl", ["a b"])
    for key, value in [("max_length", 64), ("truncation", True),
                       ("return_offsets_mapping", True), ("padding", "do_not_pad")]:
        with pytest.raises(ConfigError, match=f"{key}=.*does not apply to output_format "
                                              f"'megatron'"):
            _job(inp, tmp_path / "o", **{key: value})
    with pytest.raises(ConfigError, match="eod_token '<eod>' is not a token"):
        _job(inp, tmp_path / "o", append_eod=True, eod_token="<eod>")
    assert not (tmp_path / "o").exists()


def test_resume_keeps_complete_pairs_and_gives_the_same_bytes(tmp_path):
    """Parts (merge_parts false, or a cluster's): a rerun keeps every complete pair and
    rewrites the others with the same bytes (an in-process job's merged pair:
    tests/test_megatron_inline.py)."""
    inp = _jsonl(tmp_path / "docs.jsonl", _mixed_documents())
    out = tmp_path / "out"
    s = _job(inp, out, partition_size="5KB", merge_parts=False)
    n = s["partitions"]
    assert n >= 6
    want = {p.name: p.read_bytes() for p in out.glob("part-*.[bi][id]*")}
    assert len(want) == 2 * n

    def state():
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("part-*")}

    before = state()
    # a killed run: part 1's record never renamed, part 3's data corrupt, leftovers
    os.unlink(out / "part-00001.json")
    data = bytearray((out / "part-00003.bin").read_bytes())
    data[0] ^= 0xFF
    (out / "part-00003.bin").write_bytes(bytes(data))
    (out / ".tmp-part-2-dead.bin").write_bytes(b"x")
    s2 = _job(inp, out, partition_size="5KB", merge_parts=False)
    assert s2["partitions_written"] == 2 and s2["partitions_skipped"] == n - 2
    after = state()
    for name, st in before.items():
        if not name.startswith(("part-00001.", "part-00003.")):
            assert after[name] == st, name
    assert not list(out.glob(".tmp-*"))
    assert {p.name: p.read_bytes() for p in out.glob("part-*.[bi][id]*")} == want
    s3 = _job(inp, out, partition_size="5KB", merge_parts=False)
    assert s3["partitions_written"] == 0


def test_another_format_is_another_job(tmp_path):
    inp = _jsonl(tmp_path / "d.jsonl", ["a b", "c"])
    _job(inp, tmp_path / "o")
    with pytest.raises(daskwp.jobs.OutputConflictError, match="output_format"):
        _job(inp, tmp_path / "o", output_format="parquet")


def test_cli_yaml_and_accessor_write_the_same_bytes(tmp_path, capsys):
    docs = _mixed_documents()
    inp = _jsonl(tmp_path / "docs.jsonl", docs)
    vocab = str(vocab_path(UNCASED))
    rc = main(["tokenize", inp, str(tmp_path / "cli"), "--output-format", "megatron",
               "--vocab", vocab, "--scheduler", "synchronous", "--no-special-tokens",
               "--append-eod", "--partition-size", "10KB", "-q"])
    assert rc == 0
    job = tmp_path / "job.yaml"
    job.write_text(f"input: {inp}\noutput: {tmp_path / 'yaml'}\noutput_format: megatron\n"
                   f"vocab: {vocab}\nadd_special_tokens: false\nappend_eod: true\n"
                   f"scheduler_address: synchronous\nquiet: true\n")
    assert run_job(load_config(job))["megatron"]["merged"]
    import dask.dataframe as dd
    import pandas as pd
    ddf = dd.from_pandas(pd.DataFrame({"text": pd.Series(docs, dtype=object)}),
                         npartitions=5)
    info = ddf["text"].wordpiece.to_megatron(tmp_path / "acc" / "data", vocab,
                                            add_special_tokens=False, append_eod=True)
    assert info["documents"] == len(docs)
    assert sorted(os.listdir(tmp_path / "acc")) == ["data.bin", "data.idx"]
    for ext in (".bin", ".idx"):
        want = (tmp_path / "cli" / f"text_document{ext}").read_bytes()
        assert (tmp_path / "yaml" / f"text_document{ext}").read_bytes() == want
        assert (tmp_path / "acc" / f"data{ext}").read_bytes() == want


def test_parts_without_merging_are_listed_for_megatron(tmp_path):
    inp = _jsonl(tmp_path / "d.jsonl", ["a b", "", "c d e"] * 200)
    s = _job(inp, tmp_path / "o", partition_size="1KB", merge_parts=False)
    m = s["megatron"]
    assert not m["merged"] and len(m["prefixes"]) == s["partitions"] > 2
    assert not (tmp_path / "o" / "text_document.bin").exists()
    args = (tmp_path / "o" / "_megatron_data_args.txt").read_text().split()
    assert args[1::2] == m["prefixes"]
    assert [int(w) for w in args[0::2]] == [read_index(p + ".idx").tokens
                                            for p in m["prefixes"]]
    whole = _job(inp, tmp_path / "whole")["megatron"]["prefix"]
    assert [d for p in m["prefixes"] for d in _documents(p)] == _documents(whole)


# ---------------------------------------------------------------------------------------
# The GPU path: the same bytes through the emulated CUDA build
# ---------------------------------------------------------------------------------------
def test_emulated_gpu_writes_the_same_bytes(tmp_path, emulated_gpu):
    from daskwp.frames.megatron import megatron_sequences
    cpu = daskwp.WordPieceTokenizer(vocab_path(MULTI), lowercase=False)
    gpu = daskwp.WordPieceTokenizer(cpu.vocab, device="gpu", **cpu.settings)
    docs = pa.array(_mixed_documents()[:60] + read_documents(DATA / "corpus" / "multi" /
                                                             "ja.txt")[:30])
    opts = {"add_special_tokens": True, "append_eod": True, "document_separator": "\n"}
    from daskwp.testing.emulated_cuda import DevArray
    assert isinstance(gpu.encode(docs).token_ids, DevArray)   # the emulated kernel ran
    for name, tok in (("cpu", cpu), ("gpu", gpu)):
        tokens, lengths, d, _ = megatron_sequences(tok, docs, opts)
        write_pair(str(tmp_path / name), tokens, lengths, d)
    assert token_dtype(len(cpu.vocab)) == np.int32
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"gpu{ext}").read_bytes() == (tmp_path / f"cpu{ext}").read_bytes()


# ---------------------------------------------------------------------------------------
# megatron-core: byte equality with IndexedDatasetBuilder, IndexedDataset reads daskwp's
# ---------------------------------------------------------------------------------------
def _builder_reference(indexed_dataset, prefix, sequences_per_document, vocab_size):
    """megatron-core's IndexedDatasetBuilder fed as preprocess_data.py feeds it: one
    ``add_document(ids, sentence_lens)`` per document."""
    b = indexed_dataset.IndexedDatasetBuilder(
        prefix + ".bin", dtype=indexed_dataset.DType.optimal_dtype(vocab_size))
    for seqs in sequences_per_document:
        b.add_document([t for s in seqs for t in s], [len(s) for s in seqs])
    b.finalize(prefix + ".idx")


def _assert_megatron_equal(indexed_dataset, ours, ref_prefix, want_docs):
    for ext in (".bin", ".idx"):
        assert Path(ours + ext).read_bytes() == Path(ref_prefix + ext).read_bytes(), ext
    ds = indexed_dataset.IndexedDataset(ours)
    flat = [s for d in want_docs for s in d]
    assert len(ds) == len(flat)
    np.testing.assert_array_equal(
        ds.document_indices, np.concatenate([[0], np.cumsum([len(d) for d in want_docs])]))
    for i in range(len(flat)):
        assert ds[i].tolist() == flat[i]


@pytest.mark.slow
@pytest.mark.parametrize("vocab", [UNCASED, MULTI])
def test_every_corpus_equals_indexed_dataset_builder(tmp_path, vocab):
    """Every shared corpus (text and log files, one document per line), several
    partitions: daskwp's merged pair is byte for byte what IndexedDatasetBuilder writes
    from HF's ids, and IndexedDataset reads it back (uint16 and int32 tokens)."""
    indexed_dataset = _megatron()
    inputs = _corpus_inputs()
    lowercase = vocab == UNCASED
    s = _job(inputs, tmp_path / "o", vocab=vocab, lowercase=lowercase,
             partition_size="1MB", input_format="text")
    assert s["partitions"] > 5
    docs = [d for f in inputs for d in read_documents(f)]
    assert s["documents"] == len(docs)
    hf = hf_tokenizer(vocab)
    want = [[e.ids] if e.ids else [] for e in hf.encode_batch(docs, add_special_tokens=False)]
    ref = str(tmp_path / "ref")
    _builder_reference(indexed_dataset, ref, want, hf.get_vocab_size())
    assert s["megatron"]["dtype"] == ("uint16" if vocab == UNCASED else "int32")
    _assert_megatron_equal(indexed_dataset, s["megatron"]["prefix"], ref, want)


@pytest.mark.parametrize("opts", [
    pytest.param({"append_eod": True}, marks=pytest.mark.slow),
    {"append_eod": True, "add_special_tokens": True},
    pytest.param({"document_separator": "\n", "append_eod": True, "add_special_tokens": True},
                 marks=pytest.mark.slow),
    pytest.param({"document_separator": "\n", "merge_parts": False}, marks=pytest.mark.slow),
])
def test_options_equal_indexed_dataset_builder(tmp_path, opts):
    indexed_dataset = _megatron()
    docs = _mixed_documents()
    inp = _jsonl(tmp_path / "docs.jsonl", docs)
    s = _job(inp, tmp_path / "o", partition_size="8KB", **opts)
    hf = hf_tokenizer(UNCASED)
    sep_id = hf.token_to_id("[SEP]")
    want = _reference(hf, docs, separator=opts.get("document_separator"),
                      special=opts.get("add_special_tokens", False),
                      eod=sep_id if opts.get("append_eod") else None)
    m = s["megatron"]
    if m["merged"]:
        ref = str(tmp_path / "ref")
        _builder_reference(indexed_dataset, ref, want, hf.get_vocab_size())
        _assert_megatron_equal(indexed_dataset, m["prefix"], ref, want)
        return
    # the parts: each one is what the builder writes for its documents; add_index of all
    # of them in order is the whole
    start = 0
    b = indexed_dataset.IndexedDatasetBuilder(str(tmp_path / "all.bin"), dtype=np.uint16)
    for k, prefix in enumerate(m["prefixes"]):
        n = read_index(prefix + ".idx").documents
        ref = str(tmp_path / f"ref{k}")
        _builder_reference(indexed_dataset, ref, want[start:start + n], hf.get_vocab_size())
        _assert_megatron_equal(indexed_dataset, prefix, ref, want[start:start + n])
        b.add_index(prefix)
        start += n
    b.finalize(str(tmp_path / "all.idx"))
    assert start == len(docs)
    whole = str(tmp_path / "whole")
    _builder_reference(indexed_dataset, whole, want, hf.get_vocab_size())
    _assert_megatron_equal(indexed_dataset, str(tmp_path / "all"), whole, want)


@pytest.mark.slow
def test_cluster_job_and_accessor_on_worker_processes(tmp_path):
    """A job on a LocalCluster of two worker processes, and the accessor on it, write the
    bytes of the synchronous job."""
    from distributed import Client, LocalCluster
    import dask.dataframe as dd
    import pandas as pd

    docs = _mixed_documents()
    inp = _jsonl(tmp_path / "docs.jsonl", docs)
    want = _job(inp, tmp_path / "sync", append_eod=True)["megatron"]["prefix"]
    vocab = str(vocab_path(UNCASED))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        s = _job(inp, tmp_path / "dist", append_eod=True, partition_size="6KB",
                 scheduler_address=cluster.scheduler_address)
        ddf = dd.from_pandas(pd.DataFrame({"text": pd.Series(docs, dtype=object)}),
                             npartitions=7)
        info = ddf["text"].wordpiece.to_megatron(str(tmp_path / "acc" / "d"), vocab,
                                                add_special_tokens=False, append_eod=True)
        assert client.run(lambda: 1)   # the cluster did the work and is still up
    assert s["partitions_written"] == s["partitions"] > 4
    for ext in (".bin", ".idx"):
        data = Path(want + ext).read_bytes()
        assert Path(s["megatron"]["prefix"] + ext).read_bytes() == data
        assert Path(info["prefix"] + ext).read_bytes() == data


def test_bad_rows_are_rejected_as_documents_of_no_sequence(tmp_path):
    """The row policy (on_bad_row: reject, the default): a line that is not a JSON object is
    an empty document (no sequence, its logID kept) listed in the rejects file; the rerun
    keeps the part with its rejects file; on_bad_row: error fails the job."""
    docs = _mixed_documents()[:200]
    inp = tmp_path / "docs.jsonl"
    _jsonl(inp, docs)
    lines = inp.read_text(encoding="utf-8").split("\n")
    lines[5] = "{broken json"
    lines[150] = "[1, 2]"
    inp.write_text("\n".join(lines), encoding="utf-8")
    s = _job(str(inp), tmp_path / "o", partition_size="4KB")
    assert s["rejected_rows"] == 2
    rejects = [json.loads(x) for f in sorted((tmp_path / "o").glob("_rejects-*.jsonl"))
               for x in f.read_text().splitlines()]
    assert [r["logID"] for r in rejects] == [5, 150]
    want = _reference(hf_tokenizer(UNCASED), [None if i in (5, 150) else d
                                              for i, d in enumerate(docs)])
    assert _documents(s["megatron"]["prefix"]) == want
    s2 = _job(str(inp), tmp_path / "o", partition_size="4KB")
    assert s2["partitions_written"] == 0 and s2["rejected_rows"] == 2
    with pytest.raises(daskwp.jobs.JobError, match="JSON parse error"):
        _job(str(inp), tmp_path / "e", on_bad_row="error")


def test_cluster_writes_are_partition_local(tmp_path):
    """On a cluster a Megatron job's writes take no value of the global-offset pass
    (``job_graph``'s ``local``): the pass counts only the last partitions ahead
    (``PartMerger.counted_ahead``), the others' counts come from their writes' statistics,
    which the driver feeds to the pass (``PassSums``' ``external``)."""
    from daskwp.jobs.driver import PassSums, job_graph
    from daskwp.jobs.inputs import PartitionSpec
    from daskwp.jobs.megatron import PartMerger, write_megatron_partition

    specs = [PartitionSpec(index=i, path="x.jsonl", format="jsonl", column="text",
                           byte_start=i, byte_end=i + 1) for i in range(17)]
    counts = [None] * 17
    counts[3] = 9   # known (a kept part's)
    missing = [i for i in range(17) if i != 3]
    merger = PartMerger.__new__(PartMerger)
    merger._plannable = True
    counted = merger.counted_ahead(missing, counts)
    assert counted == [15, 16]   # len(missing) // AHEAD_SHARE
    merger._plannable = False    # a document_separator: no plan, no count
    assert merger.counted_ahead(missing, counts) == []
    tok = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)), lowercase=True)
    g = job_graph(specs, counts, missing, str(tmp_path), tok, {}, "j" * 32, "cpu",
                  write=write_megatron_partition, local=missing, counted=counted)
    for i in missing:
        task = g.dsk[g.write_keys[i]]
        assert set(task.dependencies) == {g.tokenizer_key}, i
    assert {k[1] for k in g.count_from_write} == set(missing) - {15, 16}
    assert set(g.count_from_write.values()) == {g.count_keys[i] for i in missing
                                                 if i not in (15, 16)}
    writes = set(g.write_keys.values())
    sums = PassSums({k: v for k, v in g.dsk.items() if k not in writes},
                    keep={g.tokenizer_key}, external=g.count_from_write.values())
    assert sorted(k for k in sums.remote_keys if k in g.count_keys) == \
        sorted(g.count_keys[i] for i in (15, 16))
    got = sums.add({g.count_keys[15]: 5, g.count_keys[16]: 6})
    assert g.offset_keys[-1] not in got
    got = sums.add({g.count_keys[i]: 1 for i in missing if i not in (15, 16)})
    assert got[g.offset_keys[-1]] == 14 + 9 + 5 + 6
    assert sums.values[g.offset_keys[16]] == 14 + 9 + 5


@pytest.mark.slow
def test_cluster_job_with_bad_rows_writes_the_rejects_of_the_threads_job(tmp_path):
    """A cluster's partition-local writes record no logID offset and write their rejected
    rows numbered from the partition's first (``_rejects-NNNNN.jsonl.local``, a file of
    the part); the driver writes the rejects files from them once the pass has the
    offsets (the same bytes as the job in this process), and again for a kept part whose
    rejects file is missing (a driver stopped before it wrote it)."""
    from distributed import Client, LocalCluster

    docs = _mixed_documents() * 3
    inp = tmp_path / "docs.jsonl"
    _jsonl(inp, docs)
    lines = inp.read_text(encoding="utf-8").split("\n")
    for k in (5, 150, 151, len(docs) - 2):
        lines[k] = "{broken json"
    inp.write_text("\n".join(lines), encoding="utf-8")
    kw = dict(partition_size="4KB", append_eod=True)
    want = _job(str(inp), tmp_path / "t", **kw)
    want_rejects = {f.name: f.read_bytes() for f in (tmp_path / "t").glob("_rejects-*")}
    assert len(want_rejects) >= 3
    out = tmp_path / "c"
    cfg = make_config(dict(input=str(inp), output=str(out), output_format="megatron",
                           vocab=str(vocab_path(UNCASED)), quiet=True,
                           add_special_tokens=False, **kw))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        s = run_job(cfg, client=client)
        assert s["run"]["mode"] == "cluster" and s["rejected_rows"] == 4
        records = [json.loads(p.read_text()) for p in sorted(out.glob("part-*.json"))]
        assert records and all(r["logid_offset"] is None for r in records)
        local = {r["rejects_local"] for r in records if r.get("rejects_local")}
        assert local == {n + ".local" for n in want_rejects}
        assert all(r["rejects_local"] in r["files"] for r in records if r.get("rejected"))
        got = {f.name: f.read_bytes() for f in out.glob("_rejects-*.jsonl")}
        assert got == want_rejects
        job = json.loads((out / "_job.json").read_text())
        assert [p["logid_offset"] for p in job["partitions"]] == \
            [p["logid_offset"] for p in json.loads(
                (tmp_path / "t" / "_job.json").read_text())["partitions"]]
        lost = sorted(out.glob("_rejects-*.jsonl"))[-1]
        lost.unlink()
        s2 = run_job(cfg, client=client)
    assert s2["partitions_written"] == 0 and s2["rejected_rows"] == 4
    assert lost.read_bytes() == want_rejects[lost.name]
    for ext in (".bin", ".idx"):
        assert Path(s["megatron"]["prefix"] + ext).read_bytes() == \
            Path(want["megatron"]["prefix"] + ext).read_bytes()


@pytest.mark.slow
def test_killed_worker_and_killed_driver(tmp_path):
    """A worker process SIGKILLed mid-job: the job completes; the driver SIGKILLed mid-job:
    the rerun keeps every complete part (same mtime) and merges the same bytes as an
    uninterrupted job."""
    import sys

    from distributed import Client, LocalCluster
    from conftest import REPO_ROOT, rerun_after_killing_the_job, run_killing_a_worker

    docs = _mixed_documents() * 4
    inp = _jsonl(tmp_path / "docs.jsonl", docs)
    want = _job(inp, tmp_path / "clean", partition_size="3KB", append_eod=True)
    want = {ext: Path(want["megatron"]["prefix"] + ext).read_bytes() for ext in (".bin",
                                                                              ".idx")}
    out = tmp_path / "w"
    cfg = make_config(dict(input=inp, output=str(out), output_format="megatron",
                           vocab=str(vocab_path(UNCASED)), quiet=True, device="cpu",
                           add_special_tokens=False, append_eod=True, partition_size="3KB"))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        s, killed = run_killing_a_worker(cluster, lambda: run_job(cfg, client=client),
                                         lambda: len(list(out.glob("part-*.json"))) >= 2)
    assert killed, "the job ended before a worker could be killed"
    for ext in (".bin", ".idx"):
        assert Path(s["megatron"]["prefix"] + ext).read_bytes() == want[ext]

    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "daskwp", "tokenize", inp, str(out), "--output-format",
           "megatron", "--vocab", str(vocab_path(UNCASED)), "--no-special-tokens",
           "--append-eod", "--scheduler", "synchronous", "--partition-size", "3KB", "-q"]
    summary = rerun_after_killing_the_job(cmd, out, REPO_ROOT)
    for ext in (".bin", ".idx"):
        assert Path(summary["megatron"]["prefix"] + ext).read_bytes() == want[ext]
