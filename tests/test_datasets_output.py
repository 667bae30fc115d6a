"""HuggingFace ``datasets`` on disk (``output_format: datasets``), and the default Parquet
output through ``datasets.load_dataset("parquet")`` (docs/batch-jobs.md "HuggingFace
datasets"). Checked with the real ``datasets`` package (the test extra)."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import pytest

import daskwp
from conftest import DATA, read_documents, requires_data
from daskwp.jobs import ConfigError, make_config, run_job

datasets = pytest.importorskip("datasets", reason="pip install -e '.[test]' has it")

pytestmark = requires_data


def _docs():
    lines = read_documents(DATA / "corpus" / "en_ewt.txt")[:1500]
    lines += read_documents(DATA / "corpus" / "edge" / "blns.txt")
    return lines[:700] + [None, "", "   "] + lines[700:]


def _jsonl(path, docs):
    with open(path, "w", encoding="utf-8") as fh:
        for i, d in enumerate(docs):
            fh.write(json.dumps({"text": d, "id": f"doc{i}"}) + "\n")
    return str(path)


def _job(inp, out, **kw):
    values = dict(input=inp, output=str(out), scheduler_address="synchronous", quiet=True,
                  partition_size="40KB", max_length=48, stride=8)
    values.update(kw)
    return run_job(make_config(values))


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def test_load_from_disk_gives_the_windows(tmp_path):
    docs = _docs()
    inp = _jsonl(tmp_path / "d.jsonl", docs)
    s = _job(inp, tmp_path / "ds", output_format="datasets", return_token_type_ids=True,
             keep_columns=["id"])
    assert s["partitions"] > 3 and s["datasets"]["shards"] == s["partitions"]
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    want = daskwp.WordPieceTokenizer()(docs, max_length=48, stride=8,
                                       return_token_type_ids=True)
    assert ds.column_names == ["logID", "start", "stop", "input_ids", "attention_mask",
                               "window", "token_type_ids", "id"]
    assert ds.features["input_ids"] == datasets.List(datasets.Value("int32"))
    assert ds.features["id"] == datasets.Value("large_string")   # as the input column
    assert len(ds) == len(want["input_ids"])
    t = ds.with_format("numpy")
    np.testing.assert_array_equal(np.stack([t["logID"], t["start"], t["stop"]], 1),
                                  want["metadata"])
    for col in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(np.stack(t[col]), want[col])
    assert ds["id"] == [f"doc{i}" for i in want["metadata"][:, 0]]
    # the features are declared: dataset_info.json, as datasets writes them
    info = json.loads((tmp_path / "ds" / "dataset_info.json").read_text())
    assert datasets.Features.from_dict(info["features"]) == ds.features
    assert ds.features == datasets.Features.from_arrow_schema(ds.data.schema)


def test_load_dataset_parquet_reads_the_parquet_output(tmp_path):
    docs = _docs()
    inp = _jsonl(tmp_path / "d.jsonl", docs)
    for padding in ("max_length", "do_not_pad"):
        out = tmp_path / padding
        _job(inp, out, padding=padding)
        files = sorted(str(p) for p in out.glob("part-*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=files, split="train",
                                   cache_dir=str(tmp_path / "cache"))
        stored = pa.concat_tables([pq.read_table(f) for f in files])
        assert ds.column_names == stored.column_names
        assert ds.data.table.cast(stored.schema).equals(stored)
        if padding == "do_not_pad":
            # ragged rows are stored as they are: the datasets output holds the same rows
            _job(inp, tmp_path / "ds", output_format="datasets", padding=padding)
            disk = datasets.load_from_disk(str(tmp_path / "ds"))
            # and the mask the parquet parts leave out (derivable: 1 on every stored token)
            assert disk.column_names == ["logID", "start", "stop", "input_ids",
                                         "attention_mask", "window"]
            shared = disk.data.table.drop(["attention_mask"])
            assert shared.equals(ds.data.table.cast(shared.schema))
            mask = disk.data.table.column("attention_mask").combine_chunks()
            assert pa.compute.all(pa.compute.equal(mask.flatten(), 1)).as_py()
            assert mask.value_lengths().equals(
                disk.data.table.column("input_ids").combine_chunks().value_lengths())


def test_resume_rewrites_only_a_broken_shard(tmp_path):
    inp = _jsonl(tmp_path / "d.jsonl", _docs())
    out = tmp_path / "ds"
    s = _job(inp, out, output_format="datasets")
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("data-*.arrow")}
    want = datasets.load_from_disk(str(out), keep_in_memory=True).data.table
    shard = sorted(out.glob("data-*.arrow"))[1]
    data = bytearray(shard.read_bytes())
    data[-20] ^= 0xFF
    shard.write_bytes(bytes(data))
    os.unlink(out / "state.json")
    s2 = _job(inp, out, output_format="datasets")
    assert s2["partitions_written"] == 1 and s2["partitions_skipped"] == s["partitions"] - 1
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("data-*.arrow")}
    assert [k for k in before if before[k] != after[k]] == [shard.name]
    assert datasets.load_from_disk(str(out)).data.table.equals(want)


def test_options_of_another_format_are_refused(tmp_path):
    inp = _jsonl(tmp_path / "d.jsonl", ["a b"])
    for fmt in ("datasets", "parquet"):
        with pytest.raises(ConfigError, match=f"append_eod=True does not apply to "
                                              f"output_format '{fmt}'.*'megatron'"):
            _job(inp, tmp_path / "o", output_format=fmt, append_eod=True)
    with pytest.raises(ConfigError, match="parquet_compat=True does not apply"):
        _job(inp, tmp_path / "o", output_format="datasets", parquet_compat=True)
    assert not (tmp_path / "o").exists()


def test_bad_rows_are_rejected_as_empty_rows(tmp_path):
    docs = _docs()[:300]
    inp = tmp_path / "d.jsonl"
    _jsonl(inp, docs)
    lines = inp.read_text(encoding="utf-8").split("\n")
    lines[7] = "not json"
    inp.write_text("\n".join(lines), encoding="utf-8")
    s = _job(str(inp), tmp_path / "ds", output_format="datasets")
    assert s["rejected_rows"] == 1
    ds = datasets.load_from_disk(str(tmp_path / "ds")).with_format("numpy")
    want = daskwp.WordPieceTokenizer()([None if i == 7 else d for i, d in enumerate(docs)],
                                       max_length=48, stride=8)
    np.testing.assert_array_equal(np.stack(ds["input_ids"]), want["input_ids"])
    assert _job(str(inp), tmp_path / "ds", output_format="datasets")["partitions_written"] == 0


def test_sentence_pairs_give_the_pair_windows(tmp_path):
    """A ``column_pair`` job in the datasets format (it failed with ArrowTypeError: the text
    bytes of a two-column partition): the pair windows, token type ids by default, and a
    question too long for only_second rejected as an empty pair (the row policy)."""
    docs = [d for d in _docs()[:400] if d]
    questions = [" ".join(d.split()[:4]) for d in docs[:200]]
    contexts = docs[200:400]
    questions[5] = " ".join(["word"] * 60)   # leaves no room for the context
    inp = tmp_path / "qa.jsonl"
    inp.write_text("".join(json.dumps({"q": q, "c": c}) + "\n"
                           for q, c in zip(questions, contexts)), encoding="utf-8")
    s = _job(str(inp), tmp_path / "ds", output_format="datasets", column="q",
             column_pair="c")
    assert s["rejected_rows"] == 1 and s["input_bytes"] > 0
    ds = datasets.load_from_disk(str(tmp_path / "ds")).with_format("numpy")
    questions[5] = None
    want = daskwp.WordPieceTokenizer()(questions, text_pair=[None if i == 5 else c for i, c
                                                             in enumerate(contexts)],
                                       max_length=48, stride=8)
    assert "token_type_ids" in ds.column_names
    for col in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(np.stack(ds[col]), want[col])
