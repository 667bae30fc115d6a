"""The arrow stage of a written partition (issue 42): the Arrow table built from the kernel's
buffers and the part's statistics (rows, document tokens, unknown tokens, document lengths),
checked against the tokenizer's own output for every way a piece is made (the encode + fill
path with and without truncation, ``tok(...)`` for pairs, overflow and per-position outputs,
bucketed rows), over many pieces per partition."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from conftest import DATA, read_documents, requires_data, vocab_path
from daskwp.core.buckets import BucketedWindows
from daskwp.core.lengths import LengthCounts
from daskwp.distributed import tasks
from daskwp.distributed.tasks import write_tokenized_part
from daskwp.frames.partition import frame_from_output, table_from_output, window_numbers

UNCASED = "bert-base-uncased"


def _naive_windows(starts, rows):
    starts = np.asarray(starts, dtype=np.int64)
    return (np.arange(rows) - np.repeat(starts[:-1], np.diff(starts))).astype(np.int32)


def _naive_lengths(lengths):
    values, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
    return values.tolist(), counts.tolist()


def test_window_numbers_equal_the_row_number_within_each_document():
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 200))
        per = rng.integers(1, [2, 4, 60][trial % 3], n)   # all single rows, few, many
        starts = np.concatenate([[0], np.cumsum(per)])
        got = window_numbers(starts, int(per.sum()))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, _naive_windows(starts, int(per.sum())))
    assert window_numbers(np.zeros(1, np.int64), 0).tolist() == []


def test_length_counts_of_count_like_numpy_unique():
    rng = np.random.default_rng(3)
    for top in (1, 5, 130, 70_000, 10**9):   # bincount and the sorting fallback
        lengths = rng.integers(0, top, 500)
        lc = LengthCounts.of(lengths)
        assert lc.values.dtype == np.int64 and lc.counts.dtype == np.int64
        assert (lc.values.tolist(), lc.counts.tolist()) == _naive_lengths(lengths)
    lc = LengthCounts.of([-3, 2, 2])   # not lengths, still counted exactly
    assert (lc.values.tolist(), lc.counts.tolist()) == ([-3, 2], [1, 2])
    assert LengthCounts.of([]).documents == 0


def test_length_counts_of_rows_by_document_offsets_equal_by_logid():
    rng = np.random.default_rng(5)
    for trial in range(100):
        n = int(rng.integers(1, 100))
        per = rng.integers(0 if trial % 4 == 0 else 1, 5, n)   # some without a row
        starts = np.concatenate([[0], np.cumsum(per)])
        owned = rng.integers(0, 100, int(per.sum()))
        logid = np.repeat(np.arange(n), per) + 11
        lengths = np.zeros(n, np.int64)
        np.add.at(lengths, logid - 11, owned)
        lc = LengthCounts.of_rows(None, owned, starts)
        assert (lc.values.tolist(), lc.counts.tolist()) == _naive_lengths(lengths)
        if (per > 0).all():   # every document has a row: the logID form agrees
            by_logid = LengthCounts.of_rows(logid, owned)
            assert by_logid.values.tolist() == lc.values.tolist()
            assert by_logid.counts.tolist() == lc.counts.tolist()


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer(vocab_path(UNCASED))


@pytest.fixture(scope="module")
def docs():
    ewt = read_documents(DATA / "corpus" / "en_ewt.txt")[:600]
    blns = read_documents(DATA / "corpus" / "edge" / "blns.txt")   # unknown tokens
    book = read_documents(DATA / "corpus" / "en_book_moby_dick.txt")[:900]
    long_docs = [" ".join(book[i:i + 30]) for i in range(0, 900, 30)]   # many windows
    out = []
    for i, d in enumerate(ewt):
        out.append(d)
        if i % 20 == 0:
            out.append(blns[i // 20 % len(blns)])
            out.append("\u2603 " + d)   # an unknown token in a truncated row too
        if i % 25 == 0:
            out.append(long_docs[i // 25 % len(long_docs)])
        if i % 50 == 0:
            out.append("")
    return out


BASE = dict(max_length=48, stride=8, truncation=False, add_special_tokens=True,
            padding="do_not_pad", bucket_widths="auto")

CASES = {
    "ragged": {},
    "max_length": {"padding": "max_length"},
    "truncated": {"truncation": True},
    "truncated_overflow": {"truncation": True, "return_overflowing_tokens": True},
    "bucket": {"padding": "bucket"},
    "token_type_ids": {"return_token_type_ids": True},
}


def _reference(tok, texts, options, pairs=None):
    """rows, document tokens, unknown tokens, lengths per document, windows of ``tok(...)``
    on the whole partition at once (rows owning ``[start, stop]``)."""
    call = {k: v for k, v in options.items() if k != "bucket_widths" or
            options["padding"] == "bucket"}
    kw = {} if pairs is None else {"text_pair": pairs}
    out = tok(texts, **call, **kw, return_tensors="np")
    if isinstance(out, BucketedWindows):
        ids_rows = [r for _, b in out.buckets for r in np.asarray(b["input_ids"])]
        meta = np.concatenate([np.asarray(b["metadata"]) for _, b in out.buckets])
        return len(meta), meta, ids_rows, None
    ids = out["input_ids"]
    rows = [np.asarray(ids[i]) for i in range(len(out["metadata"]))]
    return len(rows), np.asarray(out["metadata"]), rows, out.doc_row_offsets


@pytest.mark.parametrize("case", sorted(CASES))
@requires_data
def test_part_statistics_equal_the_tokenizers_windows(tmp_path, tok, docs, case):
    options = dict(BASE, **CASES[case])
    texts = pa.array(docs, pa.string())
    stats = write_tokenized_part(texts, tok, options, str(tmp_path / "p.parquet"),
                                 str(tmp_path / ".p.tmp"), logid_offset=1000,
                                 piece_bytes=4096)   # many pieces
    n_rows, meta, rows, doc_rows = _reference(tok, texts, options)
    owned = meta[:, 2] - meta[:, 1] + 1
    lengths = np.zeros(len(docs), np.int64)
    np.add.at(lengths, meta[:, 0], owned)
    unk = tok.vocab.unk_id
    unknown = sum(int(np.count_nonzero(r[s:e + 1] == unk))
                  for r, (_, s, e) in zip(rows, meta))
    assert unknown > 0   # the input has unknown tokens to count
    assert stats["rows"] == n_rows and stats["documents"] == len(docs)
    assert stats["tokens"] == int(owned.sum())
    assert stats["unknown_tokens"] == unknown
    assert (stats["length_counts"]["values"], stats["length_counts"]["counts"]) == \
        _naive_lengths(lengths)
    if doc_rows is not None:   # rows stored in document order, numbered within each
        table = pq.read_table(tmp_path / "p.parquet")
        np.testing.assert_array_equal(table.column("logID").to_numpy(), meta[:, 0] + 1000)
        np.testing.assert_array_equal(table.column("start").to_numpy(), meta[:, 1])
        np.testing.assert_array_equal(table.column("stop").to_numpy(), meta[:, 2])
        np.testing.assert_array_equal(table.column("window").to_numpy(),
                                      _naive_windows(doc_rows, n_rows))


@requires_data
def test_pair_part_statistics_equal_the_tokenizers_windows(tmp_path, tok, docs):
    options = dict(BASE, truncation="only_second", return_overflowing_tokens=True)
    first = [d[:40] for d in docs]
    table = pa.table({"text": pa.array(first), "text_pair": pa.array(docs)})
    stats = write_tokenized_part(table, tok, options, str(tmp_path / "p.parquet"),
                                 str(tmp_path / ".p.tmp"), piece_bytes=4096)
    n_rows, meta, rows, _ = _reference(tok, first, options, pairs=docs)
    owned = meta[:, 2] - meta[:, 1] + 1
    lengths = np.zeros(len(docs), np.int64)
    np.add.at(lengths, meta[:, 0], owned)
    assert stats["rows"] == n_rows and stats["tokens"] == int(owned.sum())
    assert (stats["length_counts"]["values"], stats["length_counts"]["counts"]) == \
        _naive_lengths(lengths)


def test_untruncated_pieces_are_counted_from_the_encoding(tok):
    """The encode + fill path without truncation counts tokens, unknown tokens and lengths
    from the encoding: it reads no row metadata (neither ``out_meta`` nor the table's)."""
    enc = tok.encode(["hello world", "", "\u2603 snowman \u2603", "a b c d e f g"])
    table = pa.table({"input_ids": pa.array([[1]] * 4, pa.list_(pa.int32()))})
    stats = {"rows": 0, "tokens": 0, "unknown_tokens": 0}
    tasks._account(stats, table, None, enc, tok, {"truncation": False})
    lengths = np.diff(enc.offsets)
    assert stats["tokens"] == int(lengths.sum())
    assert stats["unknown_tokens"] == int(np.count_nonzero(enc.token_ids == tok.vocab.unk_id))
    assert stats["unknown_tokens"] > 0
    lc = LengthCounts.merge(stats["length_counts"])
    assert (lc.values.tolist(), lc.counts.tolist()) == _naive_lengths(lengths)


def test_count_equal_over_several_steps(monkeypatch):
    from daskwp.core import lengths
    monkeypatch.setattr(lengths, "_COUNT_STEP", 1000)
    values = np.random.default_rng(1).integers(0, 50, 12_345).astype(np.int32)
    for v in (0, 7, 49, 50):
        assert lengths.count_equal(values, v) == int(np.count_nonzero(values == v))
    assert lengths.count_equal(values[:10], 7) == int(np.count_nonzero(values[:10] == 7))
    assert lengths.count_equal(np.zeros(0, np.int32), 0) == 0


def test_table_metadata_columns_are_the_outputs(tok):
    out = tok(["one two three four five six seven", "", "eight"], max_length=6, stride=1,
              padding=False, return_tensors="np")
    table = table_from_output(out)
    meta = np.asarray(out["metadata"])
    for k, name in enumerate(("logID", "start", "stop")):
        col = table.column(name)
        assert col.type == pa.int64()
        np.testing.assert_array_equal(col.to_numpy(), meta[:, k])
    np.testing.assert_array_equal(table.column("window").to_numpy(),
                                  _naive_windows(out.doc_row_offsets, len(meta)))
    frame = frame_from_output(out)   # the accessors' frame numbers its rows the same way
    np.testing.assert_array_equal(frame["window"].to_numpy(),
                                  _naive_windows(out.doc_row_offsets, len(meta)))
    assert frame["window"].dtype == np.int32


def _job_options(**keys) -> dict:
    """The options a batch job passes to its partition writer for these config keys."""
    from daskwp.jobs import make_config
    from daskwp.jobs.driver import _PARTITION_OPTIONS
    cfg = make_config(dict(input="in.txt", output="out", **keys))
    return {k: getattr(cfg, k) for k in _PARTITION_OPTIONS}


@pytest.mark.parametrize("keys", [{}, {"padding": "max_length"}, {"truncation": True},
                                  {"padding": "longest"}, {"padding": "bucket"}],
                         ids=["ragged", "max_length", "truncated", "longest", "bucket"])
@requires_data
def test_job_options_take_the_encode_path_and_write_the_same_part(tmp_path, tok, docs,
                                                                    monkeypatch, keys):
    """A job's options (``offsets_unit`` is always set, ``return_offsets_mapping`` off) take
    the encode + fill path; the part is byte for byte the one ``tok(...)`` gives."""
    options = _job_options(max_length=48, stride=8, **keys)
    assert options["offsets_unit"] and not options["return_offsets_mapping"]
    assert tasks._plain(options)
    assert not tasks._plain(dict(options, return_offsets_mapping=True))
    texts = pa.array(docs, pa.string())
    encoded = []
    real_encode = type(tok).encode

    def encode(self, *a, **k):
        encoded.append(1)
        return real_encode(self, *a, **k)

    def write(name):
        return write_tokenized_part(texts, tok, options, str(tmp_path / name),
                                    str(tmp_path / f".{name}.tmp"), logid_offset=5,
                                    piece_bytes=8192)
    monkeypatch.setattr(type(tok), "encode", encode)
    plain = write("plain.parquet")
    assert encoded   # the encode + fill path ran
    monkeypatch.setattr(tasks, "_plain", lambda options: False)
    del encoded[:]
    called = write("called.parquet")
    assert not encoded   # tok(...) on each piece
    assert (tmp_path / "plain.parquet").read_bytes() == \
        (tmp_path / "called.parquet").read_bytes()
    for k in ("rows", "tokens", "unknown_tokens", "documents", "length_counts"):
        assert plain[k] == called[k], k
