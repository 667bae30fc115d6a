"""API edges a new user hits: argument checks, slicing, inputs that are not batches of
texts, categorical columns, decoding windows, stitching frames that moved, and the Dask
operations on tokenized frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import daskwp

TOK = daskwp.WordPieceTokenizer()
DOCS = ["hello world", "", None, "naïve café, déjà vu", "a b c d e f g h i j k l m n o p"]


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True, 2**31])
def test_num_threads_is_checked(bad):
    with pytest.raises(ValueError, match=r"num_threads"):
        TOK.encode(["a"], num_threads=bad)
    with pytest.raises(ValueError, match=r"num_threads"):
        daskwp.WordPieceTokenizer(num_threads=bad)


def test_encoding_slices_are_encodings():
    enc = TOK.encode(DOCS)
    full = enc.to_list()
    for sl in (slice(0, 2), slice(1, None), slice(None, -1), slice(3, 3), slice(-2, None),
               slice(10, 20)):
        part = enc[sl]
        assert isinstance(part, daskwp.Encoding)
        assert part.to_list() == full[sl], sl
        assert int(part.offsets[0]) == 0
    with pytest.raises(ValueError, match="step"):
        enc[::2]
    with pytest.raises(TypeError, match="integers or slices"):
        enc[1.0]
    with pytest.raises(KeyError, match="no output '0'; keys: input_ids"):   # names: outputs
        enc["0"]
    with pytest.raises(IndexError, match="document 9 out of range for 5 documents"):
        enc[9]
    rows = daskwp.RaggedRows(np.arange(6, dtype=np.int32), np.array([0, 2, 6]))
    assert rows[1:].to_list() == [[2, 3, 4, 5]] and isinstance(rows[1:], daskwp.RaggedRows)


@pytest.mark.parametrize("texts", [{"a": "b"}, {"x", "y"}, frozenset(["x"])])
def test_mappings_and_sets_are_not_batches(texts):
    with pytest.raises(TypeError, match=type(texts).__name__):
        TOK.encode(texts)
    with pytest.raises(TypeError, match=type(texts).__name__):
        TOK(texts)


def test_categorical_series_is_its_texts():
    texts = ["b a", "a", None, "b a", "c"]
    cat = pd.Series(texts, dtype="category")
    assert TOK.encode(cat).to_list() == TOK.encode(texts).to_list()
    got = cat.wordpiece.tokenize(max_length=8).input_ids
    assert np.array_equal(got, TOK(texts, max_length=8).input_ids)
    with pytest.raises(TypeError, match="categories"):
        pd.Series([1, 2], dtype="category").wordpiece.tokenize()


def test_decode_takes_the_windows_of_a_call():
    texts = ["hello world!", "a much longer text " * 10]
    out = TOK(texts, max_length=16, stride=4)
    rows = TOK.decode(out)
    assert rows == TOK.decode(out.input_ids) and len(rows) == out.num_rows
    assert rows[0] == "hello world!"
    ragged = TOK(texts, max_length=16, padding=False)
    assert TOK.decode(ragged) == TOK.decode(out.input_ids[:0]) + TOK.decode(ragged.input_ids)


def test_stitch_frame_requires_window_once_rows_may_move():
    from daskwp.frames.stitching import stitch_frame
    texts = ["one two three four five six seven eight nine ten"] * 2 + ["eleven"]
    res = pd.Series(texts).wordpiece.tokenize(max_length=6, stride=1)
    frame = res.to_frame()
    # what stitching must give: each document's ids once (with the rows' [CLS]/[SEP] cut)
    want = [d.tolist() for d in daskwp.stitch(res.input_ids, res.metadata)]
    assert want == TOK.encode(texts).to_list()
    shuffled = frame.sample(frac=1.0, random_state=0)
    assert shuffled["logID"].tolist() != frame["logID"].tolist()
    got = res.stitch(shuffled, column="input_ids")
    assert [np.asarray(v).tolist() for v in got["input_ids"]] == want
    # without 'window' the rows' order is unknown: an error, not a silent wrong result
    with pytest.raises(ValueError, match="'window' column"):
        res.stitch(shuffled.drop(columns="window"), column="input_ids")
    # a frame known to be in tokenized order may omit it
    ordered = stitch_frame(frame.drop(columns="window"), "input_ids", ordered=True)
    assert [np.asarray(v).tolist() for v in ordered["input_ids"]] == want


def test_bench_refuses_an_empty_file(tmp_path, capsys):
    from daskwp.cli import main
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    rc = main(["bench", str(empty), "--repeat", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "no text to measure" in err and "x HF" not in err


def test_a_high_unknown_rate_is_reported_with_its_likely_cause(tmp_path, capsys):
    from daskwp.cli import main
    import json
    inp = tmp_path / "in.txt"
    inp.write_text("Hello World. The Quick Brown Fox Jumps Over The Lazy Dog.\n" * 20,
                   encoding="utf-8")
    rc = main(["tokenize", str(inp), str(tmp_path / "bad"), "--scheduler", "synchronous",
               "--no-lowercase"])
    err = capsys.readouterr().err
    assert rc == 0 and "warning" in err and "--lowercase" in err, err
    summary = json.loads((tmp_path / "bad" / "_summary.json").read_text())
    assert summary["unknown_token_rate"] > 0.01 and summary["warnings"]
    rc = main(["tokenize", str(inp), str(tmp_path / "good"), "--scheduler", "synchronous"])
    err = capsys.readouterr().err
    assert rc == 0 and "warning" not in err
    assert json.loads((tmp_path / "good" / "_summary.json").read_text())["warnings"] == []


def test_the_device_is_part_of_a_tokenizers_identity():
    from dask.base import tokenize
    from daskwp.distributed.state import WorkerState, tokenizer_key
    cpu = daskwp.WordPieceTokenizer(device="cpu")
    gpu = daskwp.WordPieceTokenizer(device="gpu")
    assert tokenize(cpu) != tokenize(gpu) and tokenizer_key(cpu) != tokenizer_key(gpu)
    assert tokenize(cpu) == tokenize(daskwp.WordPieceTokenizer(device="cpu"))
    state = WorkerState(name="test_device_identity")
    assert state.tokenizer(gpu) is gpu
    assert state.tokenizer(cpu) is cpu           # not the GPU instance seen first
    assert state.tokenizer(daskwp.WordPieceTokenizer(device="cpu")) is cpu


def test_text_chunks_of_plain_chunked_and_cast_arrays():
    import pyarrow as pa

    from daskwp.core.strings import text_chunks
    tok = daskwp.WordPieceTokenizer()
    texts = ["Hello there", None, "naïve café", ""]
    want = tok.encode(texts)
    for t in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
        arr = pa.array([None if x is None else x.encode() if "binary" in str(t) else x
                        for x in texts], type=t)
        assert text_chunks(arr) == [arr]           # a plain array is its own chunk
        assert np.array_equal(tok.encode(arr).token_ids, want.token_ids)
        sliced = arr.slice(2)                      # an offset into the buffers
        assert np.array_equal(tok.encode(sliced).token_ids, tok.encode(texts[2:]).token_ids)
    assert text_chunks(pa.array([], pa.string())) == []
    chunked = pa.chunked_array([pa.array([], pa.string()), pa.array(texts[:2]),
                                pa.array([], pa.string()), pa.array(texts[2:])])
    assert [len(c) for c in text_chunks(chunked)] == [2, 2]
    assert np.array_equal(tok.encode(chunked).token_ids, want.token_ids)
    dictionary = pa.array(texts).dictionary_encode()   # cast by to_arrow, not passed as is
    assert text_chunks(dictionary)[0].type == pa.string()
    assert np.array_equal(tok.encode(dictionary).token_ids, want.token_ids)
