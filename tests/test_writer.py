"""The one part writer: the accessor's ``to_parquet`` and batch jobs write the same parts, and
rows padded to ``max_length`` are stored trimmed (docs/design.md §3.3) yet read back as
exactly the padded arrays of ``tok(...)``, by every reader daskwp documents."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask
import dask.dataframe as dd

import daskwp
from conftest import corpus_files, every_corpus_line, hf_encode, hf_tokenizer, read_documents
from daskwp.distributed.tasks import write_tokenized_part
from daskwp.frames.partition import (PADDED_KEY, frame_to_table, stores_mask,
                                     table_from_output)

TOK = daskwp.WordPieceTokenizer()
OPTS = dict(max_length=32, stride=8)
CORPUS = every_corpus_line()   # every shared corpus line and the edge cases


def _subset() -> list[str]:
    """A few thousand lines of English, logs and other scripts (the cluster tests)."""
    picked = []
    for p in corpus_files():
        if p.suffix != ".json" and p.stem in ("en_ewt", "HDFS_2k", "zh", "ar"):
            picked += read_documents(p)[:1500]
    return picked + ["", "word " * 300]


def _write(tmp_path, texts, padding, name="part.parquet", **extra) -> str:
    opts = dict(OPTS, truncation=False, add_special_tokens=True, padding=padding, **extra)
    path = str(tmp_path / name)
    arr = pa.array(texts, type=pa.large_string())
    write_tokenized_part(arr, TOK, opts, path, str(tmp_path / f".{name}.tmp"),
                         metadata={"partition": 0}, piece_bytes=1 << 20)
    return path


def _footer(path) -> dict:
    return json.loads(pq.read_metadata(path).metadata[b"daskwp"])


def _concat(batches):
    bs = list(batches)
    return {k: np.concatenate([np.asarray(b[k]) for b in bs]) for k in bs[0]}


@pytest.mark.slow
def test_padded_rows_are_stored_trimmed_and_read_back_exactly(tmp_path):
    """Every line of the shared corpora: the part stores each padded row's real tokens only
    (no mask column, the width in the footer), and read_tokenized gives back the padded
    arrays of tok(...); the stitched ids are HF's."""
    want = TOK(CORPUS, **OPTS)
    path = _write(tmp_path, CORPUS, "max_length")
    table = pq.read_table(path)
    assert "attention_mask" not in table.column_names
    assert table.schema.field("input_ids").type == pa.list_(pa.int32())
    lengths = table.column("input_ids").combine_chunks().value_lengths().to_numpy()
    np.testing.assert_array_equal(lengths, want.attention_mask.sum(axis=1))
    foot = _footer(path)
    assert foot["padded"] == {"width": 32, "mask_dtype": "int32"}
    assert foot["pad_id"] == TOK.vocab.pad_id and foot["rows"] == want.num_rows

    ds = daskwp.read_tokenized(path)
    got = _concat(ds.batches())              # no max_length: the stored width
    for key in ("input_ids", "attention_mask", "metadata"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    got = _concat(ds.batches(1000, max_length=32))
    np.testing.assert_array_equal(got["input_ids"], want.input_ids)
    # the Arrow and pandas readers give the padded partition frame
    back = ds.to_table()
    assert back.column_names == ["logID", "start", "stop", "input_ids", "attention_mask",
                                 "window"]
    ids = back.column("input_ids").combine_chunks().flatten().to_numpy()
    np.testing.assert_array_equal(ids.reshape(want.input_ids.shape), want.input_ids)
    mask = back.column("attention_mask").combine_chunks().flatten().to_numpy()
    np.testing.assert_array_equal(mask.reshape(want.input_ids.shape), want.attention_mask)
    frame = ds.to_pandas()
    np.testing.assert_array_equal(np.stack(frame["input_ids"].to_numpy()), want.input_ids)
    # and the ids are HF's: every document's owned slices, stitched, are its encoding
    flat, offsets, logids = daskwp.stitch_flat(got["input_ids"], got["metadata"])
    hf = hf_encode(hf_tokenizer("bert-base-uncased"), CORPUS)
    assert len(logids) == len(CORPUS)
    bad = [i for i in range(len(CORPUS)) if flat[offsets[i]:offsets[i + 1]].tolist() != hf[i]]
    assert not bad, f"{len(bad)} documents differ, first {bad[:5]}"


def test_trimmed_layout_costs_the_ragged_bytes(tmp_path):
    """A trimmed padded part holds the same list column as the ragged part of the input."""
    docs = CORPUS[:5000]
    padded = pq.read_table(_write(tmp_path, docs, "max_length", name="p.parquet"))
    ragged = pq.read_table(_write(tmp_path, docs, "do_not_pad", name="r.parquet"))
    assert padded.equals(ragged)
    assert "padded" not in _footer(tmp_path / "r.parquet")


def test_documented_plain_pyarrow_recipe(tmp_path):
    """docs/design.md §3.3's recipe (pyarrow and NumPy only, no daskwp) gives the padded
    arrays back."""
    path = _write(tmp_path, CORPUS[:3000], "max_length")
    want = TOK(CORPUS[:3000], **OPTS)
    # -- the recipe, as in docs/design.md §3.3 --
    table = pq.read_table(path)
    info = json.loads(pq.read_metadata(path).metadata[b"daskwp"])
    width, pad_id = info["padded"]["width"], info["pad_id"]
    col = table.column("input_ids").combine_chunks()
    lengths = col.value_lengths().to_numpy()
    mask = (np.arange(width) < lengths[:, None]).astype(info["padded"]["mask_dtype"])
    input_ids = np.full(mask.shape, pad_id, dtype=np.int32)
    input_ids[mask == 1] = col.values.to_numpy()
    # --
    np.testing.assert_array_equal(input_ids, want.input_ids)
    np.testing.assert_array_equal(mask, want.attention_mask)


def test_int8_mask_and_position_outputs_round_trip(tmp_path):
    """The mask dtype and every per-position output come back as tok(...) returns them."""
    docs = CORPUS[:2000]
    kw = dict(mask_dtype="int8", return_token_type_ids=True, return_sequence_ids=True)
    want = TOK(docs, **OPTS, **kw)
    path = _write(tmp_path, docs, "max_length", **kw)
    assert _footer(path)["padded"] == {"width": 32, "mask_dtype": "int8"}
    ds = daskwp.read_tokenized(path)
    assert ds.position_outputs == ["token_type_ids", "sequence_ids"]
    got = _concat(ds.batches())
    for key in ("input_ids", "token_type_ids", "sequence_ids"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        assert got[key].dtype == want[key].dtype, key
    np.testing.assert_array_equal(got["attention_mask"], want.attention_mask)
    back = ds.to_table()
    mask = back.column("attention_mask").combine_chunks()
    assert mask.type == pa.list_(pa.int8())
    np.testing.assert_array_equal(mask.flatten().to_numpy().reshape(want.input_ids.shape),
                                  want.attention_mask)
    tt = back.column("sequence_ids").combine_chunks().flatten().to_numpy()
    np.testing.assert_array_equal(tt.reshape(want.input_ids.shape), want.sequence_ids)


def test_frame_path_trims_like_the_array_path():
    """A partition frame (the GPU workers' path) becomes the same stored table."""
    docs = CORPUS[:3000]
    out = TOK(docs, **OPTS, return_token_type_ids=True)
    want = table_from_output(out, attention_mask=stores_mask("max_length"))
    frame = pd.Series(docs).wordpiece.tokenize(**OPTS, return_token_type_ids=True).to_frame()
    frame = frame.drop(columns="input_index")   # the accessors' column, not the jobs'
    got = frame_to_table(frame, attention_mask=stores_mask("max_length"))
    assert got.schema.metadata[PADDED_KEY] == want.schema.metadata[PADDED_KEY]
    assert got.replace_schema_metadata(None).equals(want.replace_schema_metadata(None))
    # bucket and longest rows stay padded, with their mask
    assert stores_mask("longest") and stores_mask("bucket")
    assert not stores_mask("max_length") and not stores_mask(True)
    assert not stores_mask("do_not_pad") and not stores_mask(False)


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


@pytest.mark.parametrize("padding", ["max_length", "do_not_pad"])
def test_to_parquet_and_cli_write_the_same_dataset(client, tmp_path, padding):
    """The same input through ``daskwp tokenize`` and through the accessor's ``to_parquet``
    (compute=False, then computed): the same columns and values part for part, the same
    footer layout keys, and read_tokenized reads both to the same tensors and frames."""
    from daskwp.cli import main
    docs = _subset()
    inp = tmp_path / "in.txt"
    inp.write_bytes(("\n".join(docs) + "\n").encode("utf-8"))
    cli_out = tmp_path / "cli"
    rc = main(["tokenize", str(inp), str(cli_out), "--scheduler", "synchronous", "-q",
               "--max-length", "32", "--stride", "8", "--padding", padding,
               "--partition-size", "100kB"])
    assert rc == 0
    cli_parts = sorted(cli_out.glob("part-*.parquet"))
    assert len(cli_parts) > 2
    # the accessor on partitions of the CLI's documents, so that part i holds the same rows
    counts = [pq.read_metadata(p).metadata and _footer(p)["documents"] for p in cli_parts]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    ddf = dd.from_delayed([dask.delayed(pd.DataFrame)({"text": pd.Series(
        docs[bounds[i]:bounds[i + 1]], dtype=object)}) for i in range(len(counts))],
        meta=pd.DataFrame({"text": pd.Series([], dtype=object)}), verify_meta=False)
    acc_out = tmp_path / "acc"
    lazy = ddf["text"].wordpiece.tokenize(**OPTS, padding=padding).to_parquet(
        str(acc_out), compute=False)
    assert not list(acc_out.glob("part.*.parquet"))      # nothing written yet
    assert hasattr(lazy, "dask") or hasattr(lazy, "__dask_graph__")
    stats = lazy.compute()
    acc_parts = sorted(acc_out.glob("part.*.parquet"), key=lambda p: int(p.name.split(".")[1]))
    assert len(acc_parts) == len(cli_parts) and stats["documents"] == len(docs)
    for a, c in zip(acc_parts, cli_parts):
        ta, tc = pq.read_table(a), pq.read_table(c)
        # the accessor also carries each row's input index (to join back to the source);
        # job parts need none, their logID is the input row
        assert "input_index" in ta.column_names and "input_index" not in tc.column_names
        ta = ta.drop_columns(["input_index"])
        # the input index (int64, no nulls) goes through daskwp's writer with the rest, as
        # the job's parts, not Arrow's generic writer (about 3x its CPU)
        created = pq.read_metadata(a).created_by
        assert created == pq.read_metadata(c).created_by and "parquet-cpp" not in created
        assert ta.schema.remove_metadata() == tc.schema.remove_metadata(), (a, c)
        assert ta.replace_schema_metadata(None).equals(tc.replace_schema_metadata(None)), (a, c)
        fa, fc = _footer(a), _footer(c)
        for key in ("rows", "documents", "tokens", "unknown_tokens", "logid_offset",
                    "pad_id", "position_outputs", "padded"):
            assert fa.get(key) == fc.get(key), (key, a, c)
        assert (fa.get("padded") is not None) == (padding == "max_length")
    want = TOK(docs, **OPTS, padding=padding)
    da, dc = daskwp.read_tokenized(acc_out), daskwp.read_tokenized(cli_out)
    ga, gc = _concat(da.batches(max_length=32)), _concat(dc.batches(max_length=32))
    for key in ("input_ids", "attention_mask", "metadata", "window"):
        np.testing.assert_array_equal(ga[key], gc[key], err_msg=key)
    np.testing.assert_array_equal(ga["metadata"], want.metadata)
    if padding == "max_length":
        np.testing.assert_array_equal(ga["input_ids"], want.input_ids)
        np.testing.assert_array_equal(ga["attention_mask"], want.attention_mask)
        # the Dask frame read back is the accessor's frame (padded lists and the mask)
        frame = da.to_dask().compute().reset_index(drop=True)
        expect = ddf["text"].wordpiece.tokenize(**OPTS).to_frame().compute()
        expect = expect.reset_index(drop=True)
        assert list(frame.columns) == list(expect.columns)
        for col in ("input_ids", "attention_mask"):
            np.testing.assert_array_equal(np.stack(frame[col].to_numpy()),
                                          np.stack(expect[col].to_numpy()), err_msg=col)
        np.testing.assert_array_equal(frame[["logID", "start", "stop", "window"]].to_numpy(),
                                      expect[["logID", "start", "stop", "window"]].to_numpy())


def _kept_parts(tmp_path, ids, name):
    """``to_parquet`` of a 3-partition frame whose kept ``id`` column is ``ids``: the parts'
    rows (by logID, window) and the ``created_by`` of each part."""
    docs = _subset()[:len(ids)]
    ddf = dd.from_pandas(pd.DataFrame({"text": pd.Series(docs, dtype=object), "id": ids}),
                         npartitions=3, sort=False)
    res = ddf["text"].wordpiece.tokenize(keep_columns=["id"], **OPTS, padding=False)
    with dask.config.set(scheduler="sync"):
        res.to_parquet(str(tmp_path / name))
        frame = res.to_frame().compute().reset_index(drop=True)
    paths = sorted((tmp_path / name).glob("part.*.parquet"))
    parts = pd.concat([pd.read_parquet(p) for p in paths]).sort_values(["logID", "window"])
    return frame, parts.reset_index(drop=True), [pq.read_metadata(p).created_by for p in paths]


@pytest.mark.parametrize("kind", ["int64", "int32", "nullable_int_without_na"])
def test_accessor_parts_with_kept_integers_go_through_daskwps_writer(tmp_path, kind):
    """Kept integer columns without nulls (and the input index) are written by daskwp's own
    writer, not Arrow's: the same values as ``to_frame()`` for every row."""
    n = 900
    ids = {"int64": pd.Series(np.arange(n, dtype=np.int64) * 7 - 3000),
           "int32": pd.Series(np.arange(n, dtype=np.int32)[::-1].copy()),
           "nullable_int_without_na": pd.Series(np.arange(n), dtype="Int64")}[kind]
    frame, parts, created = _kept_parts(tmp_path, ids, "out")
    assert created and all("parquet-cpp" not in c for c in created), created
    assert len(parts) == len(frame)
    np.testing.assert_array_equal(parts["id"].to_numpy(), frame["id"].to_numpy())
    np.testing.assert_array_equal(parts["input_index"].to_numpy(),
                                  frame["input_index"].to_numpy())
    np.testing.assert_array_equal(parts["logID"], frame["logID"])


def test_accessor_parts_with_nulls_or_strings_kept_go_through_arrows_writer(tmp_path):
    """Kept columns daskwp's writer does not take (nulls, strings) fall back to Arrow's
    writer for the parts that hold them, values and nulls kept."""
    n = 900
    ids = pd.Series(np.arange(n), dtype="Int64")
    ids[n - 5] = pd.NA                       # in the last partition only
    frame, parts, created = _kept_parts(tmp_path, ids, "nulls")
    assert "parquet-cpp" not in created[0] and "parquet-cpp" in created[-1], created
    assert parts["id"].isna().sum() == frame["id"].isna().sum() > 0
    np.testing.assert_array_equal(parts["id"].isna().to_numpy(), frame["id"].isna().to_numpy())
    np.testing.assert_array_equal(parts["id"].fillna(-1).to_numpy(dtype=np.int64),
                                  frame["id"].fillna(-1).to_numpy(dtype=np.int64))
    frame, parts, created = _kept_parts(tmp_path, pd.Series([f"d{i}" for i in range(n)]),
                                        "strings")
    assert all("parquet-cpp" in c for c in created), created
    assert parts["id"].tolist() == frame["id"].tolist()


def test_job_parts_with_kept_integers_go_through_daskwps_writer(tmp_path):
    """A batch job's kept column: daskwp's writer for the parts where it holds integers only,
    Arrow's for the part where it holds a null; every row carries its document's value."""
    from daskwp.cli import main
    docs = _subset()[:600]
    ns = [None if i == 590 else i * 3 for i in range(len(docs))]
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"text": d, "n": n}) + "\n" for d, n in zip(docs, ns)), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["tokenize", str(tmp_path / "in.jsonl"), str(out), "--scheduler",
                 "synchronous", "-q", "--max-length", "32", "--stride", "8",
                 "--keep-columns", "n", "--partition-size", "20kB"]) == 0
    parts = sorted(out.glob("part-*.parquet"))
    created = [pq.read_metadata(p).created_by for p in parts]
    assert len(parts) > 2 and all("parquet-cpp" not in c for c in created[:-1]), created
    assert "parquet-cpp" in created[-1], created
    table = pa.concat_tables([pq.read_table(p) for p in parts])
    assert table.column("n").to_pylist() == [ns[i] for i in table.column("logID").to_pylist()]


@pytest.mark.parametrize("start,step", [(0, 1), (1000, 1), (5, 3), (-7, -2)])
def test_range_index_labels_computed_from_logids(start, step):
    """A source partition on a RangeIndex with no kept columns: its ``input_index`` labels
    are computed from the rows' logIDs (no index gathered), and equal what the general
    path (the index as an Arrow table, taken by position) gives."""
    from daskwp.distributed.tasks import source_hook
    from daskwp.frames.partition import (attach_kept_columns, attach_range_index,
                                         source_table)
    n, offset = 50, 12_345
    index = pd.RangeIndex(start, start + step * n, step)
    # rows of several windows per document, and a document with none
    logid = np.repeat(np.arange(n, dtype=np.int64) + offset, [2, 0, 1, 3, 1] * (n // 5))
    table = pa.table({"logID": logid, "start": np.zeros(len(logid), np.int64)})
    hook, kept = source_hook(index, None, offset)
    assert hook.func is attach_range_index and kept is None
    got = hook(table)
    want = attach_kept_columns(table, source_table(index, None), offset)
    assert got.equals(want), (got.schema, want.schema)
    assert got.column("input_index").to_pylist() == index[logid - offset].tolist()
    assert hook(table.slice(0, 0)).column("input_index").to_pylist() == []
    # other indexes, and kept columns, keep the general path
    for other, kept_frame in ((pd.Index(np.arange(n) * 2), None),
                              (index, pd.DataFrame({"id": np.arange(n)}, index=index))):
        hook, kept = source_hook(other, kept_frame, offset)
        assert hook.func is attach_kept_columns and kept is not None
        assert hook(table).column("input_index").to_pylist() == \
            other[logid - offset].tolist()
