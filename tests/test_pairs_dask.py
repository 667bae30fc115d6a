"""Sentence pairs and per-position outputs through Dask frames, Parquet parts, batch jobs and
``read_tokenized`` (docs/design.md §2.8, §3.3, §4).

The reference is the single-machine ``tok(texts, text_pair=..., ...)`` on the whole input
(HF-exact, tests/test_pairs.py), and HF ``tokenizers`` itself for the ids and type ids of the
cluster run:

* the partition frame and the stored table carry every per-position output as a list
  column (the rows of ``input_ids``), for padded and ragged rows; an output the frames
  have never seen (``offset_mapping``, ``word_ids``, an unregistered name) is carried and
  read back with no new code;
* pairs built from the shared corpora (short EWT sentences first, long documents glued from
  Moby-Dick lines second) through the accessor on a LocalCluster of two worker processes,
  ``to_parquet`` and ``read_tokenized``; the stitched second sequences rebuild each context
  exactly once;
* ``daskwp tokenize`` / ``daskwp run conf/qa-pairs.yaml`` with ``--column-pair`` on Parquet,
  CSV and JSON Lines input, null and empty sides, resume and the refusal of a mismatch;
* ``padding="bucket"`` with pairs, end to end.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from conftest import DATA, read_documents
from daskwp.cli import main
from daskwp.core.ragged import BatchWindows, RaggedRows
from daskwp.frames.partition import frame_from_output, table_from_output
from daskwp.frames.stitching import stitch_frame
from daskwp.frames.schema import POSITION_OUTPUTS

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf" / "qa-pairs.yaml"
EXTRAS = ("token_type_ids", "sequence_ids")
ROW_KEYS = ("input_ids", "attention_mask", "metadata", *EXTRAS)


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


def short_sentences(n: int) -> list[str]:
    lines = [x for x in read_documents(DATA / "corpus" / "en_ewt.txt") if x.strip()]
    return lines[:n]


def long_documents(n: int) -> list[str]:
    lines = read_documents(DATA / "corpus" / "en_book_moby_dick.txt")
    docs, at = [], 0
    for size in itertools.islice(itertools.cycle([1, 3, 8, 20, 45]), n):
        docs.append(" ".join(lines[at:at + size]))
        at += size
    return docs


def corpus_pairs(tok, n: int, max_length: int, stride: int):
    """``n`` (question, context) pairs whose question leaves room for windows of the
    context (more than ``stride`` tokens), with null and empty sides among them."""
    firsts, seconds = short_sentences(3 * n), long_documents(3 * n)
    room = max_length - 3 - np.diff(tok.encode(firsts).offsets)
    keep = [i for i in range(len(firsts)) if room[i] > stride][:n]
    firsts, seconds = [firsts[i] for i in keep], [seconds[i] for i in keep]
    firsts[2], seconds[5], seconds[7] = None, None, ""
    firsts[9] = ""
    return firsts, seconds


def clean(x):
    return "" if x is None or (isinstance(x, float) and x != x) else x


def read_back(path, width: int) -> dict:
    """Every batch of ``read_tokenized(path)`` padded to ``width``, concatenated."""
    ds = daskwp.read_tokenized(path)
    batches = list(ds.batches(max_length=width))
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def assert_rows_equal(got: dict, want, keys=ROW_KEYS):
    for k in keys:
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def stitch_contexts(ids, metadata) -> list[list[int]]:
    return [list(x) for x in daskwp.stitch(ids, metadata)]


# ---------------------------------------------------------------------------------------
# The partition frame and the stored table
# ---------------------------------------------------------------------------------------
def _rows(x):
    return x.to_list() if isinstance(x, RaggedRows) else x.tolist()


@pytest.mark.parametrize("padding", ["max_length", "do_not_pad", "longest"])
@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("mask_dtype", ["int32", "int8"])
def test_frame_and_table_carry_position_outputs(tok, padding, paired, mask_dtype):
    firsts, seconds = corpus_pairs(tok, 30, 40, 7)
    kw = dict(max_length=40, stride=7, padding=padding, return_token_type_ids=True,
              return_sequence_ids=True, mask_dtype=mask_dtype)
    out = tok(firsts, text_pair=seconds, **kw) if paired else tok(seconds, **kw)
    frame = frame_from_output(out)
    table = table_from_output(out, attention_mask=True)
    assert list(frame.columns) == ["logID", "start", "stop", "input_ids", "attention_mask",
                                   "window", *EXTRAS]
    assert table.column_names == list(frame.columns)
    for name in ("input_ids", "attention_mask", *EXTRAS):
        want = _rows(out[name])
        assert table.column(name).to_pylist() == want, name
        assert [list(x) for x in frame[name]] == want, name
    assert table.schema.field("sequence_ids").type == pa.list_(pa.int8())
    assert table.schema.field("token_type_ids").type == pa.list_(pa.from_numpy_dtype(
        np.dtype(mask_dtype)))
    np.testing.assert_array_equal(frame[["logID", "start", "stop"]].to_numpy(),
                                  np.asarray(out.metadata))


def _with_new_outputs(out: BatchWindows, width: int) -> BatchWindows:
    """``out`` plus per-position outputs no caller of the frames names: two registered
    ones that the tokenizer does not return yet (``word_ids``; ``offset_mapping``, two
    values per position) and one that is in no list at all (``label_ids``). Values are a
    function of (row, column), the same for ragged and padded rows."""
    data = dict(out)
    ids = out["input_ids"]
    if isinstance(ids, RaggedRows):
        off = np.asarray(ids.offsets)
        row = np.repeat(np.arange(len(off) - 1), np.diff(off))
        pos = row * width + (np.arange(off[-1]) - off[:-1][row])
        data["word_ids"] = RaggedRows((pos % 7).astype(np.int32), ids.offsets)
        data["offset_mapping"] = RaggedRows(np.stack([pos, pos + 3], axis=1), ids.offsets)
        data["label_ids"] = RaggedRows((pos % 5).astype(np.int16), ids.offsets)
    else:
        rows = ids.shape[0]
        pos = np.arange(rows * width, dtype=np.int64).reshape(rows, width)
        real = np.asarray(out["attention_mask"]) != 0
        data["word_ids"] = np.where(real, pos % 7, -1).astype(np.int32)
        data["offset_mapping"] = np.where(real[..., None], np.stack([pos, pos + 3], axis=2),
                                          0)
        data["label_ids"] = np.where(real, pos % 5, 0).astype(np.int16)
    return BatchWindows(data, out.doc_row_offsets)


@pytest.mark.parametrize("padding", ["max_length", "do_not_pad"])
def test_an_output_the_frames_never_saw_needs_no_new_code(tok, tmp_path, padding):
    firsts, seconds = corpus_pairs(tok, 20, 32, 5)
    out = _with_new_outputs(tok(firsts, text_pair=seconds, max_length=32, stride=5,
                                padding=padding, return_sequence_ids=True,
                                return_token_type_ids=False), 32)
    table = table_from_output(out)
    names = table.column_names
    assert names[names.index("window") + 1:] == ["sequence_ids", "word_ids",
                                                 "offset_mapping", "label_ids"]
    # offset_mapping: list<int64> of 2 * n values, begin and end of each position in turn
    assert table.schema.field("offset_mapping").type == pa.list_(pa.int64())
    lens = np.diff(table.column("input_ids").combine_chunks().offsets.to_numpy())
    om = np.diff(table.column("offset_mapping").combine_chunks().offsets.to_numpy())
    np.testing.assert_array_equal(om, 2 * lens)
    # a file that another writer wrote: read_tokenized finds the registered outputs by
    # name; the padded value of each is tok(padding="max_length")'s
    pq.write_table(table, tmp_path / "part.0.parquet")
    ds = daskwp.read_tokenized(tmp_path, pad_id=tok.vocab.pad_id)
    assert ds.position_outputs == ["sequence_ids", "word_ids", "offset_mapping"]
    got = read_back(tmp_path, 32) if padding == "max_length" else \
        {k: np.concatenate([b[k] for b in ds.batches(max_length=32)])
         for k in ("input_ids", "word_ids", "offset_mapping", "sequence_ids")}
    padded = _with_new_outputs(tok(firsts, text_pair=seconds, max_length=32, stride=5,
                                   return_sequence_ids=True, return_token_type_ids=False), 32)
    for k in ("input_ids", "sequence_ids", "word_ids", "offset_mapping"):
        np.testing.assert_array_equal(got[k], padded[k], err_msg=k)
    assert got["offset_mapping"].shape == (padded.num_rows, 32, 2)
    # stitching a two-valued output gives its pairs per owned token
    frame = frame_from_output(out)
    st = stitch_frame(frame, "offset_mapping")
    flat = [tuple(v) for doc in st["offset_mapping"] for v in doc]
    own = [tuple(padded["offset_mapping"][r, c]) for r, (_, a, b) in
           enumerate(np.asarray(padded.metadata)) for c in range(a, b + 1)]
    assert flat == own


def test_bucketed_frames_carry_position_outputs(tok):
    """Bucketed rows (single texts, which the core buckets today) with a per-position
    output in every bucket: the frame and the table merge it in document and window order
    with the ids."""
    from daskwp.core.buckets import BucketedWindows

    docs = long_documents(30)
    out = tok(docs, max_length=40, stride=6, padding="bucket", bucket_widths=(8, 24, 40))
    assert len(out.buckets) == 3
    buckets = []
    for width, b in out.buckets:
        data = dict(b)
        data["sequence_ids"] = (np.asarray(b.input_ids) % 3).astype(np.int8)
        buckets.append((width, BatchWindows(data, b.doc_row_offsets)))
    frame = frame_from_output(BucketedWindows(buckets))
    table = table_from_output(BucketedWindows(buckets))
    assert list(frame.columns)[-2:] == ["bucket", "sequence_ids"]
    ids = table.column("input_ids").to_pylist()
    assert table.column("sequence_ids").to_pylist() == [[x % 3 for x in r] for r in ids]
    assert [list(x) for x in frame["sequence_ids"]] == [[x % 3 for x in r] for r in ids]
    assert table.schema.field("sequence_ids").type == pa.list_(pa.int8())


def test_registry_pads_are_what_tok_pads_with(tok):
    """Each output's ``pad`` in POSITION_OUTPUTS is the value tok(padding="max_length")
    puts on padding positions (for the outputs the tokenizer returns today)."""
    pad = {o.name: o.pad for o in POSITION_OUTPUTS}
    out = tok(["a b"], text_pair=["c"], max_length=12, return_token_type_ids=True,
              return_sequence_ids=True)
    real = out.attention_mask[0] != 0
    assert not real.all()
    for name in EXTRAS:
        assert set(out[name][0][~real].tolist()) == {pad[name]}, name


# ---------------------------------------------------------------------------------------
# The accessor on a LocalCluster of worker processes
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_accessor_pairs_on_a_local_cluster(tok, tmp_path):
    import dask.dataframe as dd
    from distributed import Client, LocalCluster
    from tokenizers import BertWordPieceTokenizer

    import daskwp.accessors  # noqa: F401  (registers .wordpiece)

    firsts, seconds = corpus_pairs(tok, 120, 64, 16)
    df = pd.DataFrame({"question": firsts, "context": seconds})
    opts = dict(max_length=64, stride=16, truncation="only_second",
                return_overflowing_tokens=True, return_token_type_ids=True,
                return_sequence_ids=True)
    want = tok(firsts, text_pair=seconds, **opts)
    # the reference itself against HF: ids, type ids and the overflow mapping
    hf = BertWordPieceTokenizer(str(tok.vocab.source), lowercase=True)
    hf.enable_truncation(64, stride=16, strategy="only_second")
    hf.enable_padding(length=64, pad_id=tok.vocab.pad_id)
    encs = hf.encode_batch([(clean(a), clean(b)) for a, b in zip(firsts, seconds)])
    rows = [(i, w) for i, e in enumerate(encs) for w in [e, *e.overflowing]]
    assert want.input_ids.tolist() == [w.ids for _, w in rows]
    assert want.token_type_ids.tolist() == [w.type_ids for _, w in rows]
    assert want.metadata[:, 0].tolist() == [i for i, _ in rows]

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        ddf = dd.from_pandas(df, npartitions=5)
        for padding in ("max_length", "do_not_pad"):
            res = ddf["question"].wordpiece.tokenize(tok, text_pair=ddf["context"],
                                                     padding=padding, **opts)
            assert res.position_outputs == list(EXTRAS)
            out = tmp_path / f"parts-{padding}"
            res.to_parquet(out)
            got = read_back(out, 64)
            assert_rows_equal(got, want)
            # every pair is present, with its global logID, and the contexts come back
            assert sorted(set(got["metadata"][:, 0])) == list(range(len(firsts)))
            assert stitch_contexts(got["input_ids"], got["metadata"]) == \
                tok.encode(seconds).to_list()
            frame = res.to_frame().compute()
            assert list(frame.columns)[-3:] == [*EXTRAS, "input_index"]
            if padding == "max_length":
                np.testing.assert_array_equal(res.token_type_ids.compute(),
                                              want.token_type_ids)
                seq = res.sequence_ids
                assert seq.dtype == np.int8
                np.testing.assert_array_equal(seq.compute(), want.sequence_ids)
                eager = res.compute()
                np.testing.assert_array_equal(eager.sequence_ids, want.sequence_ids)
            else:
                with pytest.raises(ValueError, match="padding='max_length'"):
                    res.token_type_ids
        # the stitched second sequences, cluster-wide, from the frame's own column
        res = ddf["question"].wordpiece.tokenize(tok, text_pair=ddf["context"], **opts)
        st = res.stitch(res.to_frame()[["logID", "start", "stop", "window", "input_ids"]])
        st = st.compute().sort_values("logID")
        assert [list(x) for x in st["input_ids"]] == tok.encode(seconds).to_list()
    # the eager pandas accessor: the same rows and outputs
    eager = df["question"].wordpiece.tokenize(tok, text_pair=df["context"], **opts)
    for k in EXTRAS:
        np.testing.assert_array_equal(getattr(eager, k), want[k])
    with pytest.raises(AttributeError, match="no attribute 'word_ids'"):
        eager.word_ids


# ---------------------------------------------------------------------------------------
# Batch jobs: --column-pair
# ---------------------------------------------------------------------------------------
JOB_FLAGS = ["--column", "question", "--column-pair", "context", "--max-length", "48",
             "--stride", "11", "--truncation", "only_second", "--return-overflowing-tokens",
             "--return-token-type-ids", "--return-sequence-ids"]
JOB_OPTS = dict(max_length=48, stride=11, truncation="only_second",
                return_overflowing_tokens=True, return_token_type_ids=True,
                return_sequence_ids=True)


def write_pairs(path: Path, fmt: str, firsts, seconds) -> Path:
    df = pd.DataFrame({"id": range(len(firsts)), "question": firsts, "context": seconds})
    if fmt == "parquet":
        schema = pa.schema([("id", pa.int64()), ("question", pa.string()),
                            ("context", pa.string())])
        pq.write_table(pa.Table.from_pandas(df, schema=schema, preserve_index=False), path,
                       row_group_size=17)
    elif fmt == "csv":
        df.to_csv(path, index=False)
    else:
        with open(path, "w", encoding="utf-8") as fh:
            for i, (a, b) in enumerate(zip(firsts, seconds)):
                obj = {"id": i}
                if a is not None:
                    obj["question"] = a
                if b is not None or i % 2:          # a missing key, or a null
                    obj["context"] = b
                fh.write(json.dumps(obj) + "\n")
    return path


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
@pytest.mark.parametrize("padding", ["max_length", "do_not_pad"])
def test_tokenize_column_pair_equals_tok(tok, tmp_path, capsys, fmt, padding):
    firsts, seconds = corpus_pairs(tok, 90, 48, 11)
    inp = write_pairs(tmp_path / f"in.{fmt}", fmt, firsts, seconds)
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
               "--partition-size", "6KB", "--padding", padding, "--keep-columns", "id",
               *JOB_FLAGS])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["documents"] == len(firsts)
    assert summary["partitions"] > 2
    want = tok([clean(a) for a in firsts], text_pair=[clean(b) for b in seconds], **JOB_OPTS)
    got = read_back(out, 48)
    assert_rows_equal(got, want)
    assert stitch_contexts(got["input_ids"], got["metadata"]) == \
        tok.encode([clean(b) for b in seconds]).to_list()
    # the kept column follows each row's pair; the job recorded the pair options
    table = pa.concat_tables(pq.read_table(p) for p in sorted(out.glob("part-*.parquet")))
    assert [str(x) for x in table.column("id").to_pylist()] == \
        [str(x) for x in table.column("logID").to_pylist()]     # CSV keeps strings
    params = json.loads((out / "_job.json").read_text())["parameters"]
    assert params["column_pair"] == "context" and params["truncation"] == "only_second"
    assert params["return_sequence_ids"] is True
    assert summary["tokens"] == sum(len(x) for x in tok.encode(
        [clean(b) for b in seconds]).to_list())


def test_null_and_empty_sides_give_one_row_per_pair(tok, tmp_path, capsys):
    firsts = [None, "", "a question", None, "   ", "q", "who?"]
    seconds = ["some context here", None, "", None, "", "word " * 30, None]
    inp = write_pairs(tmp_path / "in.jsonl", "jsonl", firsts, seconds)
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
               "--max-length", "16", "--stride", "3", "--column", "question",
               "--column-pair", "context", "--return-sequence-ids"])
    assert rc == 0, capsys.readouterr().err
    want = tok([clean(a) for a in firsts], text_pair=[clean(b) for b in seconds],
               max_length=16, stride=3, return_sequence_ids=True)
    got = read_back(out, 16)
    assert_rows_equal(got, want, ("input_ids", "attention_mask", "metadata",
                                  "sequence_ids"))
    logids = got["metadata"][:, 0]
    assert sorted(set(logids)) == list(range(len(firsts)))
    assert [int(np.sum(logids == i)) for i in (0, 1, 2, 3, 4)] == [1, 1, 1, 1, 1]


@pytest.mark.slow
def test_conf_qa_pairs_runs_on_a_local_cluster_and_resumes(tok, tmp_path, capsys):
    from daskwp import jobs

    cfg = jobs.load_config(CONF)
    assert (cfg.column, cfg.column_pair, cfg.truncation) == ("question", "context",
                                                             "only_second")
    firsts, seconds = corpus_pairs(tok, 150, cfg.max_length, cfg.stride)
    inp = write_pairs(tmp_path / "qa.parquet", "parquet", firsts, seconds)
    out = tmp_path / "qa"
    args = ["run", str(CONF), "--set", f"input={inp}", "--set", f"output={out}",
            "--set", "partition_size=8KB", "-q"]
    assert main(args) == 0, capsys.readouterr().err
    want = tok(firsts, text_pair=seconds, max_length=cfg.max_length, stride=cfg.stride,
               truncation=cfg.truncation, padding=cfg.padding,
               return_overflowing_tokens=cfg.return_overflowing_tokens,
               return_token_type_ids=cfg.return_token_type_ids,
               return_sequence_ids=cfg.return_sequence_ids)
    got = read_back(out, cfg.max_length)
    assert_rows_equal(got, want)
    assert stitch_contexts(got["input_ids"], got["metadata"]) == \
        tok.encode(seconds).to_list()
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["partitions"] > 2
    parts = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    # resume: nothing to write, nothing rewritten (synchronous: no cluster to start)
    assert main([*args, "--scheduler-address", "synchronous", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["partitions_skipped"] == summary["partitions"]
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")} == parts
    # another pair option, or no pair at all, is another job's output: refused
    for change in (["--no-return-sequence-ids"], ["--set", "column_pair=question2"],
                   ["--truncation", "only_first"]):
        rc = main([*args, "--scheduler-address", "synchronous", *change])
        err = capsys.readouterr().err
        assert rc == 2, (change, err)
        assert "another job" in err or "no column 'question2'" in err, (change, err)
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")} == parts


def test_column_pair_errors_name_the_problem(tok, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("a question\n", encoding="utf-8")
    pairs = write_pairs(tmp_path / "in.parquet", "parquet", ["q"] * 3, ["c"] * 3)
    cases = [
        ([str(text), "--column-pair", "context"], "column_pair 'context'.*read as text"),
        ([str(pairs), "--column", "question", "--column-pair", "question"],
         "column_pair names the text column 'question'"),
        ([str(pairs), "--column", "question", "--column-pair", "ctx"],
         "no column 'ctx'; columns found: 'id', 'question', 'context'"),
        ([str(pairs), "--column", "question", "--column-pair", "id"],
         "column_pair 'id' .* holds int64, not text"),
        ([str(pairs), "--column", "question", "--column-pair", "context", "--truncation",
          "longest_first", "--return-overflowing-tokens"], "longest_first.*only_second"),
        ([str(pairs), "--column", "question", "--truncation", "only_second"],
         "only_second.*no text_pair"),
        ([str(pairs), "--column", "question", "--column-pair", "context",
          "--keep-columns", "sequence_ids"], "'sequence_ids' is a column of the output"),
    ]
    import re
    for k, (argv, pattern) in enumerate(cases):
        rc = main(["tokenize", argv[0], str(tmp_path / f"out{k}"), "--scheduler",
                   "synchronous", "-q", *argv[1:]])
        err = capsys.readouterr().err
        assert rc == 2 and re.search(pattern, err), (argv, err)
        assert not (tmp_path / f"out{k}" / "_job.json").exists()


def test_empty_input_with_column_pair(tok, tmp_path, capsys):
    inp = write_pairs(tmp_path / "in.parquet", "parquet", [], [])
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
               *JOB_FLAGS])
    assert rc == 0, capsys.readouterr().err
    table = pq.read_table(next(out.glob("part-*.parquet")))
    assert table.num_rows == 0
    assert table.column_names[-2:] == list(EXTRAS)


# ---------------------------------------------------------------------------------------
# padding="bucket" with pairs (docs/design.md §2.8, §7)
# ---------------------------------------------------------------------------------------
BUCKET_WIDTHS = (16, 32, 48)


def test_bucket_padding_with_pairs_tok(tok):
    """Pairs in length buckets: every bucket's rows are the pair rows of that width (the
    ragged rows padded), with their type and sequence ids."""
    firsts, seconds = corpus_pairs(tok, 40, 48, 11)
    ragged = tok(firsts, text_pair=seconds, padding=False, **JOB_OPTS)
    out = tok(firsts, text_pair=seconds, padding="bucket", bucket_widths=BUCKET_WIDTHS,
              **JOB_OPTS)
    rows = {k: ragged[k].to_list() for k in ("input_ids", *EXTRAS)}
    seen = 0
    for width, b in out.buckets:
        for r, (logid, window) in enumerate(zip(np.asarray(b.metadata)[:, 0],
                                                np.asarray(b["window"]))):
            src = int(ragged.doc_row_offsets[logid]) + int(window)
            n = len(rows["input_ids"][src])
            assert n <= width
            assert b.input_ids[r][:n].tolist() == rows["input_ids"][src]
            for k in EXTRAS:
                assert b[k][r][:n].tolist() == rows[k][src]
            seen += 1
    assert seen == ragged.num_rows


def test_bucket_padding_with_pairs_accessor(tok):
    """The accessor's frame of bucketed pairs: a ``bucket`` column and the outputs."""
    firsts, seconds = corpus_pairs(tok, 40, 48, 11)
    df = pd.DataFrame({"question": firsts, "context": seconds})
    import daskwp.accessors  # noqa: F401
    res = df["question"].wordpiece.tokenize(tok, text_pair=df["context"], padding="bucket",
                                            bucket_widths=BUCKET_WIDTHS, **JOB_OPTS)
    frame = res.to_frame()
    assert "bucket" in frame.columns and set(EXTRAS) <= set(frame.columns)
    ragged = tok(firsts, text_pair=seconds, padding=False, **JOB_OPTS)
    assert len(frame) == ragged.num_rows


def test_bucket_padding_with_pairs_job(tok, tmp_path, capsys):
    """A job with --padding bucket and --column-pair: read_tokenized gives one batch per
    bucket width, with the outputs."""
    firsts, seconds = corpus_pairs(tok, 40, 48, 11)
    inp = write_pairs(tmp_path / "in.parquet", "parquet", firsts, seconds)
    rc = main(["tokenize", str(inp), str(tmp_path / "out"), "--scheduler", "synchronous",
               "-q", "--padding", "bucket", "--bucket-widths", "16", "--bucket-widths", "32",
               *JOB_FLAGS])
    assert rc == 0, capsys.readouterr().err
    batches = list(daskwp.read_tokenized(tmp_path / "out").batches())
    assert {b.input_ids.shape[1] for b in batches} <= {16, 32, 48}
    for batch in batches:
        assert set(EXTRAS) <= set(batch)


def test_pairs_return_token_type_ids_by_default(tok, tmp_path, capsys):
    """issue 37.2: a pair gives token_type_ids unless return_token_type_ids=False, in
    tok(...), the accessor and a --column-pair job (so read_tokenized batches); single texts
    do not (HF returns them for BERT's pairs)."""
    from tokenizers import BertWordPieceTokenizer

    firsts = ["who wrote it?", "", "what is the name of the whale"]
    seconds = ["the book was written by herman melville", "some context", None]
    hf = BertWordPieceTokenizer(str(daskwp.core.vocab.DEFAULT_VOCAB_PATH), lowercase=True)
    hf.enable_padding(length=24, pad_id=0)
    want_types = [e.type_ids for e in hf.encode_batch(list(zip(firsts, [clean(b) for b in
                                                                        seconds])))]
    out = tok(firsts, text_pair=[clean(b) for b in seconds], max_length=24)
    assert out["token_type_ids"].tolist() == want_types
    assert "token_type_ids" not in tok(firsts, max_length=24)
    off = tok(firsts, text_pair=[clean(b) for b in seconds], max_length=24,
              return_token_type_ids=False)
    assert "token_type_ids" not in off and "token_type_ids" not in off.keys()
    # the accessor
    frame = pd.DataFrame({"q": firsts, "c": seconds})
    res = frame["q"].wordpiece.tokenize(text_pair=frame["c"], max_length=24)
    assert [list(x) for x in res.to_frame()["token_type_ids"]] == want_types
    res = frame["q"].wordpiece.tokenize(text_pair=frame["c"], max_length=24,
                                        return_token_type_ids=False)
    assert "token_type_ids" not in res.to_frame().columns
    # a job, read back
    inp = write_pairs(tmp_path / "in.parquet", "parquet", firsts, seconds)
    for extra, wanted in (([], True), (["--no-return-token-type-ids"], False)):
        out_dir = tmp_path / f"out{len(extra)}"
        rc = main(["tokenize", str(inp), str(out_dir), "--scheduler", "synchronous", "-q",
                   "--max-length", "24", "--column", "question", "--column-pair", "context",
                   *extra])
        assert rc == 0, capsys.readouterr().err
        got = read_back(out_dir, 24)
        assert ("token_type_ids" in got) is wanted
        if wanted:
            assert got["token_type_ids"].tolist() == want_types
