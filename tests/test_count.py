"""Token counts (``daskwp count``, ``.wordpiece.count()``) and the length percentiles of
batch-job summaries (docs/batch-jobs.md "Counting tokens").

Counts are checked against HF ``tokenizers``' ids of the same documents, percentiles against
NumPy's nearest-rank percentiles (``method="inverted_cdf"``) of HF's lengths.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pytest

import daskwp
from conftest import (DATA, corpus_files, hf_tokenizer, read_documents, requires_data,
                      vocab_path)
from daskwp.cli import main
from daskwp.core.lengths import LengthCounts, TokenCounts
from daskwp.jobs import make_config, run_job

from test_offsets import emulated_gpu  # noqa: F401  (the emulated CUDA backend)

pytestmark = requires_data

UNCASED = "bert-base-uncased"
QS = (0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100)


def _want(lengths) -> dict:
    lengths = np.asarray(lengths)
    return {q: int(np.percentile(lengths, q, method="inverted_cdf")) for q in QS}


def test_percentiles_are_numpys_nearest_rank_and_merge_exactly():
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 10, 999, 5000):
        lengths = rng.integers(0, 300, n) * rng.integers(1, 4, n)
        lc = LengthCounts.of(lengths)
        assert {q: lc.percentile(q) for q in QS} == _want(lengths)
        cuts = sorted(rng.integers(0, n + 1, 4))
        parts = [LengthCounts.of(a) for a in np.split(lengths, cuts)]
        merged = LengthCounts.merge(parts)
        np.testing.assert_array_equal(merged.values, lc.values)
        np.testing.assert_array_equal(merged.counts, lc.counts)
        assert merged.tokens == int(lengths.sum()) and merged.documents == n
        hist = lc.histogram()
        assert sum(c for _, _, c in hist) == n
        assert [lo for lo, _, _ in hist][:3] == [0, 1, 2] or n < 3
        for lo, hi, c in hist:
            assert c == int(((lengths >= lo) & (lengths <= hi)).sum())
    assert LengthCounts().percentile(50) is None
    assert LengthCounts().summary()["max"] is None
    with pytest.raises(ValueError, match="percentile must be in"):
        LengthCounts.of([1]).percentile(0)


@functools.lru_cache(maxsize=None)
def hf_counts(path: str):
    """HF's lengths and [UNK] count of the documents of a corpus file."""
    hf = hf_tokenizer(UNCASED)
    unk = hf.token_to_id("[UNK]")
    encs = hf.encode_batch(read_documents(path), add_special_tokens=False)
    return np.array([len(e.ids) for e in encs]), sum(e.ids.count(unk) for e in encs)


class _Corpus(dict):
    def __missing__(self, path):
        return hf_counts(path)


def _files(select=lambda p: True) -> list[str]:
    return [str(p) for p in corpus_files() if p.suffix != ".json" and select(str(p))]


def _run(capsys, *args):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.mark.slow
def test_count_command_equals_hf_per_file_and_in_total(capsys, tmp_path):
    """Every shared text and log corpus, many partitions per file."""
    files = _files()
    corpus = _Corpus()
    out = _run(capsys, "count", *files, "--vocab", vocab_path(UNCASED), "--scheduler",
               "synchronous", "--partition-size", "200KB", "--json", "-q",
               "--input-format", "text")
    report = json.loads(out)
    assert report["partitions"] > len(files)
    assert [f["path"] for f in report["files"]] == files
    for f in report["files"]:
        lengths, unk = corpus[f["path"]]
        assert (f["documents"], f["tokens"], f["unknown_tokens"]) == \
            (len(lengths), int(lengths.sum()), unk), f["path"]
        p = f["length_percentiles"]
        want = _want(lengths)
        assert [p["p50"], p["p90"], p["p99"], p["max"]] == \
            [want[50], want[90], want[99], int(lengths.max())]
    everything = np.concatenate([corpus[f][0] for f in files])
    total = report["total"]
    assert total["documents"] == len(everything)
    assert total["tokens"] == int(everything.sum())
    lc = LengthCounts.from_json(total["length_counts"])
    assert {q: lc.percentile(q) for q in QS} == _want(everything)
    assert total["fits_max_length"]["128"] == pytest.approx(np.mean(everything <= 126))
    # the printed report: one row per file and the total, the histogram
    text = _run(capsys, "count", *files[:3], "--vocab", vocab_path(UNCASED), "--scheduler",
                "synchronous", "--input-format", "text", "--plot", tmp_path / "l.png")
    first = corpus[files[0]][0]
    assert f"{len(first):,}" in text and "total" in text
    assert f"p99 {_want(np.concatenate([corpus[f][0] for f in files[:3]]))[99]:,}" in text
    assert "max_length 512:" in text and "| " in text
    assert (tmp_path / "l.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_accessors_count_the_same():
    path = _files(lambda p: p.endswith("en_ewt.txt"))[0]
    corpus = _Corpus()
    docs = read_documents(path) + [None, ""]
    lengths = np.concatenate([corpus[path][0], [0, 0]])
    import dask.dataframe as dd
    tok = daskwp.WordPieceTokenizer(vocab_path(UNCASED))
    series = pd.Series(docs, dtype=object)
    eager = series.wordpiece.count(tok)
    lazy = dd.from_pandas(series, npartitions=7).wordpiece.count(tok)
    for c in (eager, lazy):
        assert isinstance(c, TokenCounts)
        assert (c.documents, c.tokens, c.unknown_tokens) == \
            (len(docs), int(lengths.sum()), corpus[path][1])
        assert {q: c.lengths.percentile(q) for q in QS} == _want(lengths)
        assert c.text_bytes == sum(len(d.encode()) for d in docs if d)


def test_job_summaries_have_length_percentiles(tmp_path):
    files = _files(lambda p: "multi" in p)[:4]
    corpus = _Corpus()
    lengths = np.concatenate([corpus[f][0] for f in files])
    want = _want(lengths)
    for fmt, extra in (("parquet", {"max_length": 64, "stride": 8}),
                       ("megatron", {"add_special_tokens": False})):
        cfg = make_config(dict(input=files, output=str(tmp_path / fmt), output_format=fmt,
                               vocab=str(vocab_path(UNCASED)), quiet=True,
                               scheduler_address="synchronous", partition_size="100KB",
                               **extra))
        for run in range(2):   # the second run keeps every part: from their records
            s = run_job(cfg)
            assert s["partitions_written"] == (0 if run else s["partitions"])
            p = s["length_percentiles"]
            assert [p["min"], p["p50"], p["p90"], p["p95"], p["p99"], p["max"]] == \
                [int(lengths.min()), want[50], want[90], want[95], want[99],
                 int(lengths.max())], (fmt, run)
            assert p["mean"] == round(lengths.mean(), 2)
        text = daskwp.jobs.format_summary(s)
        assert f"p99 {want[99]:,}" in text


def test_emulated_gpu_counts_equal_cpu(emulated_gpu):
    from daskwp.core.lengths import count_tokens
    cpu = daskwp.WordPieceTokenizer(vocab_path(UNCASED))
    gpu = daskwp.WordPieceTokenizer(cpu.vocab, device="gpu", **cpu.settings)
    docs = read_documents(DATA / "corpus" / "edge" / "blns.txt") + ["", None]
    a, b = count_tokens(cpu, docs), count_tokens(gpu, docs)
    assert (a.documents, a.tokens, a.unknown_tokens) == (b.documents, b.tokens,
                                                         b.unknown_tokens)
    np.testing.assert_array_equal(a.lengths.values, b.lengths.values)
    np.testing.assert_array_equal(a.lengths.counts, b.lengths.counts)


@pytest.mark.parametrize("chunk", [1, 5, 1 << 18])
def test_unknown_tokens_counted_in_chunks(monkeypatch, chunk):
    """``count_equal`` (the jobs' ``[UNK]`` count over their ids) compares a chunk at a time
    (no token-sized temporary): every chunk size, a last short chunk and no tokens at all
    give the count of the whole, which is also the count loop's."""
    from daskwp.core import lengths
    monkeypatch.setattr(lengths, "_COUNT_STEP", chunk)
    tok = daskwp.WordPieceTokenizer(vocab_path(UNCASED))
    docs = read_documents(DATA / "corpus" / "edge" / "blns.txt")
    wants = []
    for texts in (docs, docs[:40], ["", None]):
        ids = tok.encode(texts).token_ids
        wants.append(int(np.count_nonzero(ids == tok.vocab.unk_id)))
        assert lengths.count_equal(ids, tok.vocab.unk_id) == wants[-1]
        assert lengths.count_tokens(tok, texts).unknown_tokens == wants[-1]
    assert wants[0] > 0


def test_count_follows_the_row_policy(capsys, tmp_path):
    """issue 37.5 through ``daskwp count``: a broken JSON line or a CSV record with another
    number of fields does not stop a count; the row is an empty document (as in a job's
    summary), listed with its file, row and reason; ``--on-bad-row error`` fails on it."""
    docs = read_documents(DATA / "corpus" / "en_ewt.txt")[:40]
    jl = tmp_path / "a.jsonl"
    jl.write_text("".join('{"text": "cut off\n' if i == 7 else json.dumps({"text": d}) + "\n"
                          for i, d in enumerate(docs)), encoding="utf-8")
    csv = tmp_path / "b.csv"
    csv.write_text("text,id\n" + "".join(f'"{d.replace(chr(34), "")}",{i}' +
                                         (",extra" if i == 3 else "") + "\n"
                                         for i, d in enumerate(docs[:10])), encoding="utf-8")
    common = ["--vocab", vocab_path(UNCASED), "--scheduler", "synchronous", "-q"]
    report = json.loads(_run(capsys, "count", jl, csv, *common, "--json",
                             "--partition-size", "1KB"))
    assert report["partitions"] > 2
    assert [(r["file"], r["row"]) for r in report["rejects"]] == [(str(jl), 7), (str(csv), 3)]
    assert "not valid JSON" in report["rejects"][0]["reason"]
    assert [f["rejected_rows"] for f in report["files"]] == [1, 1]
    assert report["total"]["rejected_rows"] == 2
    hf = hf_tokenizer(UNCASED)
    kept = [d for i, d in enumerate(docs) if i != 7] + \
        [d.replace('"', "") for i, d in enumerate(docs[:10]) if i != 3]
    assert report["total"]["documents"] == 50
    assert report["total"]["tokens"] == sum(len(e.ids) for e in hf.encode_batch(
        kept, add_special_tokens=False))
    assert report["total"]["length_percentiles"]["min"] == 0   # the empty documents
    text = _run(capsys, "count", jl, "--vocab", vocab_path(UNCASED), "--scheduler",
                "synchronous")
    assert "rejected 1 rows" in text and f"{jl} row 7: JSON Lines line" in text
    rc = main([str(a) for a in ("count", jl, "--on-bad-row", "error", *common)])
    assert rc == 2 and "row 7" in capsys.readouterr().err
