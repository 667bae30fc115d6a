"""Offsets, word ids and the special-tokens mask through the accessor on a real LocalCluster
and through the batch jobs (docs/design.md §2.9, §3.3): the stored columns read back equal
the single-machine ``tok(...)`` on the whole input (HF-exact, tests/test_offsets.py), with
global logIDs.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import daskwp
from conftest import data_file, read_lines
from daskwp.cli import main

OFFSET_KEYS = ("offset_mapping", "word_ids", "special_tokens_mask")
ROW_KEYS = ("input_ids", "attention_mask", "metadata", *OFFSET_KEYS)


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


@pytest.fixture(scope="module")
def lines():
    # Logs (fields to find again by offsets) and multilingual text (chars != bytes).
    logs = read_lines(data_file("corpus/logs/OpenSSH_2k.log"))[:400]
    multi = sorted(data_file("corpus/multi").glob("*.txt"))
    other = [x for p in multi[:4] for x in read_lines(p)[:40]]
    return logs + other + ["", "   ", "\x00"]


def read_back(path, width: int) -> dict:
    batches = list(daskwp.read_tokenized(path).batches(max_length=width))
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def assert_rows_equal(got: dict, want):
    for k in ROW_KEYS:
        assert k in got, k
        np.testing.assert_array_equal(got[k], np.asarray(want[k]), err_msg=k)


@pytest.mark.slow   # a local cluster of its own; test_dask.py keeps the accessor fast
@pytest.mark.parametrize("unit", ["chars", "bytes"])
def test_accessor_offsets_on_a_local_cluster(tok, lines, tmp_path, unit):
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    opts = dict(max_length=32, stride=8, return_offsets_mapping=True, return_word_ids=True,
                return_special_tokens_mask=True, offsets_unit=unit)
    want = tok(lines, **opts)
    df = pd.DataFrame({"text": lines})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        ddf = dd.from_pandas(df, npartitions=6)
        for padding in ("max_length", "do_not_pad"):
            res = ddf["text"].wordpiece.tokenize(tok, padding=padding, **opts)
            out = tmp_path / f"parts-{padding}"
            res.to_parquet(out)
            got = read_back(out, 32)
            assert_rows_equal(got, want)
            assert sorted(set(got["metadata"][:, 0].tolist())) == list(range(len(lines)))
        res = ddf["text"].wordpiece.tokenize(tok, **opts)
        np.testing.assert_array_equal(res.offset_mapping.compute(), want["offset_mapping"])
        np.testing.assert_array_equal(res.word_ids.compute(), want["word_ids"])
    # the stitched offsets of every line are its encode() offsets, and each token's span is
    # the exact substring of the raw line it came from
    enc = tok.encode(lines, return_offsets_mapping=True, return_word_ids=True,
                     offsets_unit=unit)
    stitched = daskwp.stitch(got["offset_mapping"], got["metadata"])
    flat = np.asarray(enc.offset_mapping).reshape(-1, 2)
    assert np.array_equal(np.concatenate(stitched), flat)
    # eager pandas accessor: the same arrays
    eager = df["text"].wordpiece.tokenize(tok, **opts)
    for k in OFFSET_KEYS:
        np.testing.assert_array_equal(getattr(eager, k), want[k])


@pytest.mark.parametrize("unit", ["chars", "bytes"])
def test_cli_offsets_columns_equal_tok(tok, lines, tmp_path, capsys, unit):
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
               "--partition-size", "8KB", "--max-length", "48", "--stride", "12",
               "--padding", "do_not_pad", "--return-offsets-mapping", "--return-word-ids",
               "--return-special-tokens-mask", "--offsets-unit", unit])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["partitions"] > 2
    want = tok(lines, max_length=48, stride=12, return_offsets_mapping=True,
               return_word_ids=True, return_special_tokens_mask=True, offsets_unit=unit)
    assert_rows_equal(read_back(out, 48), want)
    params = json.loads((out / "_job.json").read_text())["parameters"]
    assert params["return_offsets_mapping"] is True and params["offsets_unit"] == unit
    # resuming with another unit is refused (it changes the output)
    other = "bytes" if unit == "chars" else "chars"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
               "--partition-size", "8KB", "--max-length", "48", "--stride", "12",
               "--padding", "do_not_pad", "--return-offsets-mapping", "--return-word-ids",
               "--return-special-tokens-mask", "--offsets-unit", other])
    assert rc != 0 and "offsets_unit" in capsys.readouterr().err


def test_offsets_give_log_fields_as_exact_substrings(tok):
    """Fields of OpenSSH lines rebuilt from token offsets and a per-token field label equal
    the log format's own fields, character for character."""
    import re

    rx = re.compile(r"(?P<date>\w{3} +\d+) (?P<time>[\d:]+) (?P<host>\S+) "
                    r"(?P<component>[\w-]+)\[(?P<pid>\d+)\]: (?P<content>.*)")
    lines = [x for x in read_lines(data_file("corpus/logs/OpenSSH_2k.log")) if rx.fullmatch(x)]
    names = list(rx.groupindex)
    spans = [[(m.start(g), m.end(g), i + 1) for i, g in enumerate(names)]
             for m in map(rx.fullmatch, lines)]
    out = tok(lines, max_length=24, stride=6, return_offsets_mapping=True,
              return_word_ids=True)
    labels = daskwp.spans_to_labels(spans, out["offset_mapping"],
                                    document_of_row=out["metadata"][:, 0])
    words = daskwp.labels_to_spans(labels, out["offset_mapping"], out["word_ids"],
                                   out["metadata"])
    for i, line in enumerate(lines):
        fields = {}
        for b, e, f in words[i]:
            fields.setdefault(f, [b, e])[1] = e
        for s, t, f in spans[i]:
            if line[s:t].strip():
                b, e = fields[f]
                assert line[b:e] == line[s:t].strip(), (i, names[f - 1], line)
