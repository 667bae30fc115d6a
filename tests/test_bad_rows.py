"""The row policy of batch jobs (docs/batch-jobs.md "Bad rows"; issue 37, item 5).

One bad row never stops a job: a question too long for ``only_second`` windows, a JSON Lines
line cut off mid-object or holding invalid UTF-8 outside a string, a non-text value in the
text column, a CSV record with another number of fields. By default (``on_bad_row:
reject``) such a row keeps its logID as an empty document, is listed in the partition's
``_rejects-NNNNN.jsonl`` (file, row, logID, partition, reason) and counted in the summary;
every other row is the tokenizer's. ``--on-bad-row error`` fails the job as before. The
rejects survive a resume, and a part whose rejects file is missing is written again.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import daskwp
from daskwp.cli import main
from test_pairs_dask import corpus_pairs, write_pairs

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf" / "qa-pairs.yaml"
SAMPLE = REPO / "daskwp" / "data" / "sample.txt"


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


def rejects(out: Path) -> list[dict]:
    rows = []
    for p in sorted(out.glob("_rejects-*.jsonl")):
        rows += [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines()]
    return rows


def read_back(out: Path, width: int) -> dict:
    batches = list(daskwp.read_tokenized(out).batches(max_length=width))
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def assert_rows(got: dict, want, keys=("input_ids", "attention_mask", "metadata")):
    for k in keys:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_qa_job_rejects_questions_too_long_for_only_second(tok, tmp_path, capsys):
    """500 pairs, HF run_qa's windows (conf/qa-pairs.yaml); two questions leave no room
    for the context: the job completes, those pairs are empty documents in the rejects
    file, every other row equals tok(...); a resume reports them again; with
    --on-bad-row error the job fails (exit 1)."""
    cfg = daskwp.jobs.load_config(CONF)
    firsts, seconds = corpus_pairs(tok, 500, cfg.max_length, cfg.stride)
    long_question = " ".join(firsts[20:60])
    assert len(tok.encode([long_question])[0]) > cfg.max_length - 3 - cfg.stride
    bad = [17, 301]
    for i in bad:
        firsts[i] = long_question
    inp = write_pairs(tmp_path / "qa.parquet", "parquet", firsts, seconds)
    out = tmp_path / "qa"
    args = ["run", str(CONF), "--set", f"input={inp}", "--set", f"output={out}",
            "--set", "partition_size=64KB", "--scheduler-address", "synchronous"]
    rc = main(args)
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    assert "rejected     2 rows" in printed.out
    kw = dict(max_length=cfg.max_length, stride=cfg.stride, truncation=cfg.truncation,
              padding=cfg.padding, return_overflowing_tokens=True,
              return_token_type_ids=True, return_sequence_ids=True)
    clean_firsts = [None if i in bad else q for i, q in enumerate(firsts)]
    clean_seconds = [None if i in bad else c for i, c in enumerate(seconds)]
    want = tok(clean_firsts, text_pair=clean_seconds, **kw)
    got = read_back(out, cfg.max_length)
    assert_rows(got, want, ("input_ids", "attention_mask", "metadata", "token_type_ids",
                            "sequence_ids"))
    assert np.array_equal(np.unique(got["metadata"][:, 0]), np.arange(500))
    listed = rejects(out)
    assert [r["logID"] for r in listed] == bad and [r["row"] for r in listed] == bad
    assert all(r["file"] == str(inp) and "only_second" in r["reason"]
               and "300" not in r["reason"][:12] for r in listed), listed
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["rejected_rows"] == 2 and summary["documents"] == 500
    assert len(summary["rejects_files"]) == 2 and summary["partitions"] > 2

    # a resume keeps every part and still reports the rejects
    assert main([*args, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["partitions_skipped"] == summary["partitions"]
    assert again["rejected_rows"] == 2 and again["rejects_files"] == summary["rejects_files"]

    # --on-bad-row error: the first refused question fails the job
    strict = [f"output={tmp_path / 'strict'}" if a.startswith("output=") else a for a in args]
    rc = main([*strict, "--on-bad-row", "error", "-q"])
    err = capsys.readouterr().err
    assert rc == 1 and "only_second" in err and "daskwp: error: partition" in err, err


def _bad_inputs(folder: Path) -> tuple[list, dict]:
    """Three files of good and bad rows; the documents a clean reading gives (None for a
    bad row) and the bad logIDs with a word of their reason."""
    folder.mkdir()
    lines = SAMPLE.read_text(encoding="utf-8")[:-1].split("\n")
    good = iter(lines)
    docs, bad = [], {}
    # a.csv: a record with 3 fields, one with 1, and an unterminated quote at the end
    rows = ["text,id"]
    for i in range(12):
        if i in (3, 7):
            rows.append(f"{next(good).replace(',', ' ')},{i},extra" if i == 3 else "lonely")
            bad[len(docs)] = "field"
            docs.append(None)
        else:
            t = next(good).replace('"', "'")
            rows.append(f'"{t}",{i}')
            docs.append(t)
    rows.append('"never closed,12')
    bad[len(docs)] = "field"
    docs.append(None)
    (folder / "a.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    # b.jsonl: a cut-off object, invalid UTF-8 outside a string, a number in the text
    # column, an array; a blank line is no document; invalid UTF-8 inside a string is
    # read as U+FFFD ("Invalid UTF-8"), not a bad row
    special = {4: (b'{"text": "cut off in the mid', "not valid JSON"),
               6: (b'{"text": "x"} \xff\xfe', "not valid JSON"),
               9: (b'{"text": 42}', "holds a number"),
               11: (b'["text"]', "an array"),
               13: (b'{"text": "caf\xe9 au lait"}', None)}
    out = []
    for i in range(15):
        line, reason = special.get(i, (None, None))
        if line is None:
            t = next(good)
            line = json.dumps({"text": t}).encode()
        elif reason is None:
            t = "caf\ufffd au lait"
        else:
            bad[len(docs)] = reason
            t = None
        out.append(line)
        docs.append(t)
        if i == 2:
            out.append(b"   ")
    (folder / "b.jsonl").write_bytes(b"\n".join(out) + b"\n")
    # c.json: an array with a boolean item and an object whose text is a list
    items = [next(good), True, {"text": ["x"]}, {"text": next(good)}, None]
    (folder / "c.json").write_text(json.dumps(items), encoding="utf-8")
    first = len(docs)
    docs += [items[0], None, None, items[3]["text"], None]
    bad[first + 1] = "a boolean"
    bad[first + 2] = "an array"
    return docs, bad


def test_bad_rows_of_every_format_are_rejected_with_their_place(tok, tmp_path, capsys):
    docs, bad = _bad_inputs(tmp_path / "in")
    out = tmp_path / "out"
    base = ["tokenize", str(tmp_path / "in"), str(out), "--scheduler", "synchronous",
            "--max-length", "32", "--stride", "8"]
    rc = main([*base, "-q"])
    assert rc == 0, capsys.readouterr().err
    want = tok(docs, max_length=32, stride=8)
    assert_rows(read_back(out, 32), want)
    listed = rejects(out)
    assert [r["logID"] for r in listed] == sorted(bad)
    for r in listed:
        assert bad[r["logID"]] in r["reason"], r
    files = {"a.csv": 0, "b.jsonl": 13, "c.json": 13 + 15}   # first logIDs
    for r in listed:
        name = Path(r["file"]).name
        assert r["row"] == r["logID"] - files[name], r
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["rejected_rows"] == len(bad) and summary["documents"] == len(docs)

    # the default policy's opposite: the first bad row is an input error (exit 2)
    for name in ("a.csv", "b.jsonl", "c.json"):
        rc = main(["tokenize", str(tmp_path / "in" / name), str(tmp_path / f"strict-{name}"),
                   "--scheduler", "synchronous", "--on-bad-row", "error", "-q"])
        err = capsys.readouterr().err
        assert rc == 2 and name in err, (name, err)


def test_rejects_survive_a_resume_and_a_part_without_its_rejects_is_rewritten(
        tok, tmp_path, capsys):
    docs, bad = _bad_inputs(tmp_path / "in")
    out = tmp_path / "out"
    args = ["tokenize", str(tmp_path / "in"), str(out), "--scheduler", "synchronous",
            "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["partitions"] == 3 and len(first["rejects_files"]) == 3
    listed = rejects(out)
    parts = sorted(out.glob("part-*.parquet"))
    # part 0 missing, part 1's rejects file missing: both written again, part 2 kept
    parts[0].unlink()
    (out / "_rejects-00001.jsonl").unlink()
    kept = parts[2].stat().st_mtime_ns
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["partitions_written"] == 2 and again["partitions_skipped"] == 1
    assert parts[2].stat().st_mtime_ns == kept
    assert rejects(out) == listed and again["rejected_rows"] == len(bad)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]   # no temporary file
