"""Batch-job inputs (daskwp/jobs/inputs/, docs/batch-jobs.md "Inputs"): compressed files,
streams, invalid UTF-8 in every format, JSON arrays, include/exclude, hidden names, CSV
splitting, ``quoting`` and ``keep_columns``.

The reference for every output is the single-machine tokenizer on the same documents (as
bytes: invalid UTF-8 is the tokenizer's U+FFFD), with logIDs numbered globally. Jobs run in
this process (``--scheduler synchronous``).
"""

from __future__ import annotations

import bz2
import codecs
import csv
import gzip
import io
import json
import lzma
import os
import random
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import daskwp
from daskwp import jobs
from daskwp.cli import build_parser, main
from daskwp.jobs import inputs
from daskwp.jobs.inputs import compression as input_compression

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "daskwp" / "data" / "sample.txt"

# -- helpers ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


def sample_lines(n: int | None = None) -> list[str]:
    text = SAMPLE.read_text(encoding="utf-8")
    lines = text[:-1].split("\n")
    return lines[:n] if n else lines


def as_bytes(docs) -> list:
    return [d.encode("utf-8") if isinstance(d, str) else d for d in docs]


def read_output(out: Path) -> pa.Table:
    parts = sorted(out.glob("part-*.parquet"))
    assert parts, f"no part files in {out}"
    # padded rows are stored trimmed (docs/design.md §3.3): read back as written
    return daskwp.read_tokenized(out).to_table()


def assert_output(out: Path, tok, docs: list, max_length: int = 128) -> pa.Table:
    """The dataset at ``out`` equals the tokenizer's windows of ``docs`` (str, bytes or
    None), logIDs = positions in ``docs``."""
    table = read_output(out)
    exp = tok(pa.array(as_bytes(docs), type=pa.large_binary()), max_length=max_length)
    rows, width = exp["input_ids"].shape
    assert table.num_rows == rows
    meta = np.stack([table.column(c).to_numpy() for c in ("logID", "start", "stop")], axis=1)
    np.testing.assert_array_equal(meta, exp["metadata"])
    ids = table.column("input_ids").combine_chunks().flatten().to_numpy()
    np.testing.assert_array_equal(ids.reshape(rows, width), exp["input_ids"])
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["documents"] == len(docs)
    return table


def job(inp, out, *extra) -> int:
    """``daskwp tokenize INPUT OUTPUT --scheduler synchronous -q ...``; a list of inputs
    (the CLI takes one) runs through ``run_job(make_config(...))``."""
    if isinstance(inp, (list, tuple)):
        assert not extra
        jobs.run_job(jobs.make_config({"input": [str(i) for i in inp], "output": str(out),
                                       "scheduler_address": "synchronous", "quiet": True}))
        return 0
    return main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
                 *map(str, extra)])


def job_partitions(out: Path) -> list[dict]:
    return [p["spec"] for p in json.loads((out / "_job.json").read_text())["partitions"]]


def text_bytes(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


def plan(paths, column="text", partition_size=1 << 30, **kw):
    """list_input_files + plan_partitions, warnings collected: (specs, warning messages)."""
    messages: list[str] = []
    files = inputs.list_input_files(paths if isinstance(paths, list) else str(paths))
    specs = inputs.plan_partitions(files, column, partition_size, warn=messages.append, **kw)
    return specs, messages


def read_all(specs) -> list:
    return [d for s in specs for d in inputs.read_partition(s).to_pylist()]


_bad_bytes = [0]


def _count_bad(e):
    _bad_bytes[0] += e.end - e.start
    return ("\ufffd", e.end)


codecs.register_error("daskwp-test-count", _count_bad)


def python_invalid_bytes(b: bytes) -> int:
    """Bytes Python's errors="replace" decoding replaces (the tokenizer's rule)."""
    _bad_bytes[0] = 0
    b.decode("utf-8", "daskwp-test-count")
    return _bad_bytes[0]


# -- 1. compressed inputs -----------------------------------------------------------------

def _zstd(data: bytes) -> bytes:
    try:
        import zstandard
        return zstandard.ZstdCompressor().compress(data)
    except ImportError:
        return pa.compress(data, "zstd", asbytes=True)


COMPRESSORS = {
    ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
    ".zst": _zstd, ".zstd": _zstd,
    ".lz4": lambda d: pa.Codec("lz4").compress(d, asbytes=True),
}


def _available(ext):
    if ext in (".zst", ".zstd"):
        return input_compression._codec_available("zstd")
    if ext == ".lz4":
        return input_compression._codec_available("lz4")
    return True


@pytest.mark.parametrize("ext", list(COMPRESSORS))
def test_compressed_text_is_decompressed(tmp_path, tok, ext):
    """1,000 compressed lines are 1,000 documents (they were 138 garbage "documents")."""
    if not _available(ext):
        pytest.skip(f"no {ext} codec in this installation")
    lines = sample_lines(1000)
    inp = tmp_path / f"corpus.txt{ext}"
    inp.write_bytes(COMPRESSORS[ext](text_bytes(lines)))
    assert job(inp, tmp_path / "out", "--partition-size", "4KB") == 0
    assert_output(tmp_path / "out", tok, lines)
    specs = job_partitions(tmp_path / "out")
    assert len(specs) == 1 and specs[0]["compression"]  # one partition per compressed file


def test_compressed_csv_jsonl_and_json_take_the_inner_extension(tmp_path, tok):
    lines = sample_lines(30)
    d = tmp_path / "in"
    d.mkdir()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "text"])
    w.writerows([i, t] for i, t in enumerate(lines[:10]))
    (d / "a.csv.gz").write_bytes(gzip.compress(buf.getvalue().encode()))
    (d / "b.jsonl.bz2").write_bytes(bz2.compress(
        "".join(json.dumps({"text": t}) + "\n" for t in lines[10:20]).encode()))
    (d / "c.json.xz").write_bytes(lzma.compress(
        json.dumps([{"text": t} for t in lines[20:30]], indent=2).encode()))
    assert job(d, tmp_path / "out") == 0
    assert_output(tmp_path / "out", tok, lines)
    assert [s["format"] for s in job_partitions(tmp_path / "out")] == ["csv", "jsonl", "json"]


def test_compression_is_detected_by_magic_bytes(tmp_path, tok):
    """A gzip stream named .txt, or with no extension, is decompressed too; several gzip
    members in one file are one text."""
    lines = sample_lines(50)
    (tmp_path / "notes.txt").write_bytes(gzip.compress(text_bytes(lines[:20])))
    (tmp_path / "blob").write_bytes(gzip.compress(text_bytes(lines[20:35])) +
                                    gzip.compress(text_bytes(lines[35:])))
    files = inputs.list_input_files([str(tmp_path / "notes.txt"), str(tmp_path / "blob")])
    assert [(f.format, f.compression) for f in files] == [("text", "gzip"), ("text", "gzip")]
    assert job([tmp_path / "notes.txt", tmp_path / "blob"], tmp_path / "out") == 0
    assert_output(tmp_path / "out", tok, lines)


def test_counting_a_compressed_text_file_streams(tmp_path):
    data = text_bytes(["a"] * 100_000) + b"last line without newline"
    (tmp_path / "x.gz").write_bytes(gzip.compress(data))
    specs, _ = plan(tmp_path / "x.gz")
    assert inputs.count_partition(specs[0]) == 100_001
    assert len(inputs.read_partition(specs[0])) == 100_001


@pytest.mark.parametrize("name, content, message", [
    ("a.zip", b"PK\x03\x04" + b"\0" * 40, "zip archive"),
    ("a.tar.gz", gzip.compress(b"x", mtime=0), "tar archive"),
    ("a.tgz", gzip.compress(b"x", mtime=0), "tar archive"),
    ("a.parquet.gz", gzip.compress(b"PAR1", mtime=0), "compressed Parquet"),
    ("a.gz", b"plain text, not gzip\n", "does not hold gzip data"),
    ("a.txt.gz", gzip.compress(b"x", mtime=0)[:12], "as gzip"),  # truncated
])
def test_unreadable_compressed_inputs_are_refused_by_name(tmp_path, capsys, name, content,
                                                          message):
    (tmp_path / name).write_bytes(content)
    rc = job(tmp_path / name, tmp_path / "out")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert name in err and message in err, err


def test_a_codec_this_installation_lacks_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "a.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    monkeypatch.setattr(input_compression, "_codec_available", lambda codec: codec != "zstd")
    with pytest.raises(jobs.InputError, match=r"a\.txt\.zst.*cannot decompress zstd.*"
                                              r"zstandard"):
        inputs.list_input_files(str(tmp_path / "a.txt.zst"))


def test_tar_inside_gzip_is_refused(tmp_path, capsys):
    import tarfile
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        info = tarfile.TarInfo("x.txt")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"a\n"))
    (tmp_path / "data.gz").write_bytes(gzip.compress(raw.getvalue()))
    assert job(tmp_path / "data.gz", tmp_path / "out") == 2
    assert "tar archive" in capsys.readouterr().err


# -- 2. streams ---------------------------------------------------------------------------

def test_dash_is_standard_input(tmp_path, tok, monkeypatch):
    lines = sample_lines(200)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text_bytes(lines))))
    assert job("-", tmp_path / "out") == 0
    table = assert_output(tmp_path / "out", tok, lines)
    assert table.num_rows >= 200


def test_dev_stdin_pipe_is_spooled(tmp_path, tok):
    """/dev/stdin on a pipe (size 0) gave 0 documents and exit 0."""
    lines = sample_lines(100)
    r, w = os.pipe()
    os.write(w, text_bytes(lines))
    os.close(w)
    saved = os.dup(0)
    try:
        os.dup2(r, 0)
        assert job("/dev/stdin", tmp_path / "out") == 0
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(r)
    assert_output(tmp_path / "out", tok, lines)


def test_named_pipe_is_spooled(tmp_path, tok):
    lines = sample_lines(300)
    fifo = tmp_path / "docs.jsonl"
    os.mkfifo(fifo)
    payload = "".join(json.dumps({"text": t}) + "\n" for t in lines).encode()

    def writer():
        with open(fifo, "wb") as fh:
            fh.write(payload)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    files = inputs.list_input_files(str(fifo), spool_dir=str(tmp_path / "spool"))
    t.join(10)
    assert files[0].format == "jsonl" and files[0].source == str(fifo)
    assert Path(files[0].path).parent == tmp_path / "spool"
    assert Path(files[0].path).read_bytes() == payload
    specs = inputs.plan_partitions(files, "text", 1 << 20)
    assert [d if isinstance(d, str) else d.decode() for d in read_all(specs)] == lines


def test_named_pipe_job(tmp_path, tok):
    lines = sample_lines(120)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "wb") as fh:
            fh.write(text_bytes(lines))
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    assert job(fifo, tmp_path / "out") == 0
    t.join(10)
    assert_output(tmp_path / "out", tok, lines)


@pytest.mark.skipif(not os.path.exists("/proc/version"), reason="no /proc")
def test_proc_files_are_read(tmp_path, tok):
    """/proc files report size 0: they gave no documents."""
    text = Path("/proc/version").read_bytes()
    assert os.stat("/proc/version").st_size == 0
    assert job("/proc/version", tmp_path / "out") == 0
    assert_output(tmp_path / "out", tok, text.decode().rstrip("\n").split("\n"))


def test_spooled_stream_is_content_addressed(tmp_path, monkeypatch):
    """The same stream content spooled to the same folder is the same file (path, size,
    mtime), so a rerun of a job on it has the same input fingerprint and resumes."""
    spool = tmp_path / "spool"
    got = []
    for _ in range(2):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n")))
        got.append(inputs.list_input_files("-", spool_dir=str(spool)))
    assert got[0] == got[1] and got[0][0].source == "-"
    assert inputs.input_fingerprint(got[0]) == inputs.input_fingerprint(got[1])
    assert os.listdir(spool) == [Path(got[0][0].path).name]


# -- 3. invalid UTF-8: one rule for every format ------------------------------------------

BAD_DOCS = [b"caf\xe9 au lait", b"fine text", b"\xff\xfe broken start", b"cut \xe2\x82",
            b"ok \xc3\xa9 ok", b"x"]


def _write_every_format(d: Path, docs: list[bytes]) -> dict[str, Path]:
    d.mkdir()
    paths = {"text": d / "t.txt", "csv": d / "t.csv", "tsv": d / "t.tsv",
             "jsonl": d / "t.jsonl", "json": d / "t.json", "parquet": d / "t.parquet"}
    paths["text"].write_bytes(b"\n".join(docs) + b"\n")
    paths["csv"].write_bytes(b"id,text\n" + b"".join(b"%d,%s\n" % (i, x)
                                                     for i, x in enumerate(docs)))
    paths["tsv"].write_bytes(b"id\ttext\n" + b"".join(b"%d\t%s\n" % (i, x)
                                                      for i, x in enumerate(docs)))
    paths["jsonl"].write_bytes(b"".join(b'{"id": %d, "text": "%s"}\n' % (i, x)
                                        for i, x in enumerate(docs)))
    paths["json"].write_bytes(b"[\n" + b",\n".join(b'  {"id": %d, "text": "%s"}' % (i, x)
                                                   for i, x in enumerate(docs)) + b"\n]\n")
    pq.write_table(pa.table({"text": pa.array(docs, pa.binary())}), paths["parquet"])
    return paths


@pytest.mark.parametrize("fmt", ["text", "csv", "tsv", "jsonl", "json", "parquet"])
def test_invalid_utf8_is_replaced_in_every_format(tmp_path, tok, fmt):
    """One invalid byte failed a CSV ("invalid UTF8 data") or JSON Lines ("'utf-8' codec
    can't decode byte 0xe9") job; text and Parquet replaced it. Now all do."""
    paths = _write_every_format(tmp_path / "in", BAD_DOCS)
    assert job(paths[fmt], tmp_path / "out") == 0
    assert_output(tmp_path / "out", tok, BAD_DOCS)
    specs, _ = plan(paths[fmt])
    texts = inputs.read_partition(specs[0])
    assert [bytes(x) if x is not None else None for x in texts.to_pylist()] == [
        x for x in BAD_DOCS] or texts.to_pylist() == [x.decode("utf-8", "replace")
                                                      for x in BAD_DOCS]
    assert inputs.count_invalid_utf8(texts) == (sum(map(python_invalid_bytes, BAD_DOCS)), 3)
    assert inputs.count_invalid_utf8(texts) == (5, 3)


def test_invalid_utf8_in_json_lines_keeps_documents_in_place(tmp_path, tok):
    """Invalid bytes in another field, blank and whitespace-only lines, CRLF: every
    document stays at its logID, with its own bytes."""
    data = (b'{"text": "caf\xe9 one", "id": 1}\n\n   \n'
            b'{"text": "two", "other": "\xff"}\r\n'
            b'\t\n{"text": "\xe2\x82 three"}\n{"id": 4}\n{"text": "five"}')
    (tmp_path / "a.jsonl").write_bytes(data)
    specs, _ = plan(tmp_path / "a.jsonl")
    texts = inputs.read_partition(specs[0])
    assert [None if x is None else bytes(x) for x in texts.to_pylist()] == [
        b"caf\xe9 one", b"two", b"\xe2\x82 three", None, b"five"]
    assert inputs.count_invalid_utf8(texts) == (3, 2)
    assert job(tmp_path / "a.jsonl", tmp_path / "out") == 0
    assert_output(tmp_path / "out", tok, [b"caf\xe9 one", b"two", b"\xe2\x82 three", None,
                                          b"five"])


def test_count_invalid_utf8_matches_pythons_replace_rule():
    rng = random.Random(7)
    pieces = [b"a", b" ", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\x80", b"\xbf",
              b"\xc0", b"\xc1\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
              b"\xf5", b"\xff", b"\xe2\x82", b"\xf0\x9f", b"\xc3", b"\xe0\xa0", b"\xf0\x90\x80"]
    for _ in range(300):
        docs = [None if rng.random() < 0.1 else
                b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
                for _ in range(rng.randint(0, 30))]
        want = [python_invalid_bytes(d) if d else 0 for d in docs]
        for typ in (pa.binary(), pa.large_binary()):
            got = inputs.count_invalid_utf8(pa.array(docs, type=typ))
            assert got == (sum(want), sum(1 for w in want if w)), docs
    # string arrays, chunked arrays, slices, dictionaries, nulls
    assert inputs.count_invalid_utf8(pa.array(["a", None, "é"])) == (0, 0)
    assert inputs.count_invalid_utf8(pa.nulls(3)) == (0, 0)
    assert inputs.count_invalid_utf8(pa.array([], pa.large_binary())) == (0, 0)
    assert inputs.count_invalid_utf8(pa.chunked_array(
        [pa.array([b"\xff"]), pa.array([b"ok", b"\xe9\xe9"])])) == (3, 2)
    assert inputs.count_invalid_utf8(pa.array([b"ok", b"\xff", b"\xe9t\xe9", b"x"]).slice(1, 2)) \
        == (3, 2)
    assert inputs.count_invalid_utf8(pa.array(["x", "y", "x"]).dictionary_encode()) == (0, 0)


def test_count_invalid_utf8_on_big_partitions():
    """Several 4 MB slices, one bad byte in one of them; sequences never span documents."""
    docs = [b"hello world " * 100] * 12_000
    docs[9_001] = b"caf\xe9"
    docs[9_002] = b"\xa9 starts with a continuation byte"
    docs[100] = b"ends with a lead \xc3"
    docs[101] = b"\xa9 follows it"
    assert inputs.count_invalid_utf8(pa.array(docs, pa.large_binary())) == (4, 4)


def test_summary_counts_replaced_bytes_and_documents(tmp_path):
    paths = _write_every_format(tmp_path / "in", BAD_DOCS)
    assert job(paths["csv"], tmp_path / "out") == 0
    summary = json.loads((tmp_path / "out" / "_summary.json").read_text())
    assert summary["invalid_utf8_bytes"] == sum(map(python_invalid_bytes, BAD_DOCS))
    assert summary["invalid_utf8_documents"] == 3


# -- 4. JSON arrays, include/exclude, hidden names ----------------------------------------

def test_directory_with_a_pretty_printed_json_array(tmp_path, tok):
    """A .json array file failed ("Expecting value")."""
    lines = sample_lines(40)
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text(json.dumps([{"text": t, "n": i} for i, t in enumerate(lines[:20])],
                                         indent=4), encoding="utf-8")
    (d / "b.json").write_text("\ufeff  \n" + json.dumps(lines[20:35] + [None]),
                              encoding="utf-8")   # strings (and a null), after a BOM
    (d / "c.json").write_text("\n".join(json.dumps({"text": t}) for t in lines[35:]),
                              encoding="utf-8")  # JSON Lines named .json
    assert job(d, tmp_path / "out") == 0
    assert_output(tmp_path / "out", tok, lines[:35] + [None] + lines[35:])
    assert [s["format"] for s in job_partitions(tmp_path / "out")] == ["json", "json", "jsonl"]


@pytest.mark.parametrize("content, message", [
    ('[{"text": "a"}, 3]', "item 1"),
    ('[{"text": 5}]', "not text"),
    ('{"text": "a",\n "b": 1}', "cannot read"),
])
def test_bad_json_array_items_are_errors(tmp_path, capsys, content, message):
    """Errors with on_bad_row: error; the default rejects a bad item (its reason in the
    rejects file), and a file that holds no JSON object at all is an error either way."""
    (tmp_path / "a.json").write_text(content, encoding="utf-8")
    assert job(tmp_path / "a.json", tmp_path / "strict", "--on-bad-row", "error") == 2
    assert message in capsys.readouterr().err
    rc = job(tmp_path / "a.json", tmp_path / "out")
    err = capsys.readouterr().err
    if message == "cannot read":
        assert rc == 2 and message in err, err
    else:
        assert rc == 0, err
        assert message in (tmp_path / "out" / "_rejects-00000.jsonl").read_text()


def _tree(root: Path, names: list[str]) -> None:
    for n in names:
        p = root / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"{n}\n", encoding="utf-8")


def test_glob_and_directory_walk_skip_the_same_hidden_names(tmp_path):
    """A glob included _-prefixed files that a directory walk skipped."""
    root = tmp_path / "d"
    _tree(root, ["a.txt", "_b.txt", ".c.txt", "sub/d.txt", "_meta/e.txt", ".git/f.txt",
                 "sub/_SUCCESS", "sub/g.txt.crc", "sub/h.txt~", "sub/i.txt"])
    rel = lambda files: [Path(f.path).relative_to(root).as_posix() for f in files]  # noqa
    walked = rel(inputs.list_input_files(str(root)))
    assert walked == ["a.txt", "sub/d.txt", "sub/i.txt"]
    assert rel(inputs.list_input_files(str(root / "**" / "*"))) == walked
    assert rel(inputs.list_input_files(str(root / "**" / "*.txt"))) == \
        ["a.txt", "sub/d.txt", "sub/i.txt"]
    assert rel(inputs.list_input_files(str(root / "*"))) == ["a.txt"]
    # named explicitly, they are inputs
    assert rel(inputs.list_input_files(str(root / "_*.txt"))) == ["_b.txt"]
    assert rel(inputs.list_input_files(str(root / "_meta" / "*"))) == ["_meta/e.txt"]
    assert rel(inputs.list_input_files(str(root / "_meta" / "e.txt"))) == ["_meta/e.txt"]


def test_include_and_exclude_patterns(tmp_path):
    root = tmp_path / "d"
    _tree(root, ["a.jsonl", "b.txt", "sub/c.jsonl", "sub/deep/d.jsonl", "old/e.jsonl",
                 "sub/old/f.jsonl", "_g.jsonl", "tmp/h.txt"])

    def ls(**kw):
        return [Path(f.path).relative_to(root).as_posix()
                for f in inputs.list_input_files(str(root), **kw)]

    assert ls(include=["*.jsonl"]) == ["a.jsonl", "old/e.jsonl", "sub/c.jsonl",
                                       "sub/deep/d.jsonl", "sub/old/f.jsonl"]
    assert ls(include=["sub/*.jsonl"]) == ["sub/c.jsonl"]
    assert ls(include=["sub/**/*.jsonl"]) == ["sub/c.jsonl", "sub/deep/d.jsonl",
                                              "sub/old/f.jsonl"]
    assert ls(include=["sub"]) == ["sub/c.jsonl", "sub/deep/d.jsonl", "sub/old/f.jsonl"]
    assert ls(include=["*.jsonl"], exclude=["old"]) == ["a.jsonl", "sub/c.jsonl",
                                                        "sub/deep/d.jsonl"]
    assert ls(exclude=["old/**", "*.txt"]) == ["a.jsonl", "sub/c.jsonl", "sub/deep/d.jsonl",
                                               "sub/old/f.jsonl"]
    assert ls(include=["[ab].*"]) == ["a.jsonl", "b.txt"]
    assert ls(include=["[!ab].*"]) == ["old/e.jsonl", "sub/c.jsonl", "sub/deep/d.jsonl",
                                       "sub/old/f.jsonl", "tmp/h.txt"]
    assert ls(include=["_*.jsonl"]) == ["_g.jsonl"]  # named explicitly
    # an absolute folder (the driver's output directory inside the input): left out
    assert ls(exclude=[str(root / "sub")]) == ["a.jsonl", "b.txt", "old/e.jsonl",
                                                "tmp/h.txt"]
    assert ls(exclude=[str(root / "sub") + "/**/*.jsonl"]) == ["a.jsonl", "b.txt",
                                                               "old/e.jsonl", "tmp/h.txt"]
    with pytest.raises(jobs.InputError, match="holds no files that include/exclude select"):
        ls(include=["*.csv"])


def test_include_exclude_are_options_with_repeatable_flags(tmp_path):
    ns = build_parser().parse_args(["tokenize", "in", "out", "--include", "*.jsonl",
                                    "--include", "*.txt", "--exclude", "old",
                                    "--quoting", "none", "--keep-columns", "id",
                                    "--keep-columns", "source"])
    assert ns.include == ["*.jsonl", "*.txt"] and ns.exclude == ["old"]
    assert ns.keep_columns == ["id", "source"] and ns.quoting == "none"
    cfg = jobs.make_config({"input": "in", "output": "out", "include": "*.jsonl",
                            "exclude": ["old", "tmp"], "quoting": "none",
                            "keep_columns": ["id"]})
    assert (cfg.include, cfg.exclude, cfg.quoting, cfg.keep_columns) == (
        ["*.jsonl"], ["old", "tmp"], "none", ["id"])
    cfg = jobs.make_config({"input": "in", "output": "out"})
    assert (cfg.include, cfg.exclude, cfg.quoting, cfg.keep_columns) == (None, None, "csv",
                                                                         None)
    for key, bad, message in (("quoting", "quotes", "quoting must be one of 'csv', 'none'"),
                              ("keep_columns", ["id", "id"], "twice"),
                              ("keep_columns", ["logID"], "column of the output"),
                              ("include", [""], "glob pattern")):
        with pytest.raises(jobs.ConfigError, match=message):
            jobs.make_config({"input": "in", "output": "out", key: bad})
    assert "quoting" in jobs.JOB_KEYS and "keep_columns" in jobs.JOB_KEYS
    assert "include" not in jobs.JOB_KEYS  # the input fingerprint covers the file list


def test_include_exclude_in_a_job(tmp_path, tok):
    root = tmp_path / "d"
    _tree(root, ["a.txt", "b.log", "sub/c.txt", "old/d.txt"])
    assert job(root, tmp_path / "out", "--include", "*.txt", "--exclude", "old") == 0
    assert_output(tmp_path / "out", tok, ["a.txt", "sub/c.txt"])


# -- 5. CSV partitions --------------------------------------------------------------------

def _csv_rows(rng: random.Random, n: int) -> list[list[str]]:
    def value():
        return "".join(rng.choice(["a", "b c", ",", "\n", '"', "é", "\r\n", "word", " "])
                       for _ in range(rng.randint(0, 6)))
    return [[str(i), value(), value()] for i in range(n)]


def _write_csv(path: Path, rows, header=("id", "text", "other"), delimiter=",",
               lineterminator="\n") -> bytes:
    buf = io.StringIO(newline="")
    w = csv.writer(buf, delimiter=delimiter, lineterminator=lineterminator)
    w.writerow(header)
    w.writerows(rows)
    data = buf.getvalue().encode("utf-8")
    path.write_bytes(data)
    return data


def test_big_csv_is_split_at_record_boundaries(tmp_path, tok):
    """A CSV was one partition whatever its size (110 MB: 2.6 GB peak)."""
    rows = [[str(i), t.replace("a", 'a "quoted"\nline, a'), "x"]
            for i, t in enumerate(sample_lines(600))]
    data = _write_csv(tmp_path / "big.csv", rows)
    assert job(tmp_path / "big.csv", tmp_path / "out", "--partition-size", "8KB") == 0
    assert_output(tmp_path / "out", tok, [r[1] for r in rows])
    specs = job_partitions(tmp_path / "out")
    assert len(specs) >= len(data) // 8192
    header_end = data.index(b"\n") + 1
    assert all(s["header_end"] == header_end for s in specs)
    assert specs[0]["byte_start"] == header_end and specs[-1]["byte_end"] == len(data)
    assert all(a["byte_end"] == b["byte_start"] for a, b in zip(specs, specs[1:]))


@pytest.mark.parametrize("seed", range(8))
def test_csv_pieces_hold_whole_records(tmp_path, seed):
    """Quoted values with newlines, CRLF, doubled quotes and delimiters: the pieces read
    back as exactly the records of the file, in order."""
    rng = random.Random(seed)
    rows = _csv_rows(rng, rng.randint(50, 400))
    delimiter = rng.choice([",", "\t"])
    name = "t.csv" if delimiter == "," else "t.tsv"
    _write_csv(tmp_path / name, rows, delimiter=delimiter,
               lineterminator=rng.choice(["\n", "\r\n"]))
    specs, messages = plan(tmp_path / name, partition_size=rng.choice([40, 200, 1000]))
    assert len(specs) > 1 and not messages
    assert [x.decode() for x in read_all(specs)] == [r[1] for r in rows]
    assert sum(inputs.count_partition(s) for s in specs) == len(rows)


def test_csv_with_a_quote_inside_a_value_is_not_split_after_it(tmp_path):
    """A quote inside an unquoted value (a plain character to the parser) makes the later
    boundaries unknowable: the rest is one partition, with a warning; the records are
    those of the whole file."""
    lines = ["id,text"] + [f'{i},"multi\nline ""{i}"""' if i % 3 else f"{i},plain {i}"
                           for i in range(200)]
    lines[120] = '119,a 5" screen'
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole = pacsv.read_csv(tmp_path / "t.csv",
                           parse_options=pacsv.ParseOptions(newlines_in_values=True),
                           convert_options=pacsv.ConvertOptions(
                               column_types={"text": pa.large_binary()}))
    specs, messages = plan(tmp_path / "t.csv", partition_size=300)
    assert 1 < len(specs) < 20
    assert len(messages) == 1 and "cannot split" in messages[0] and "quoting: none" in \
        messages[0]
    assert read_all(specs) == whole.column("text").to_pylist()


def test_small_or_compressed_csv_is_one_partition(tmp_path):
    data = _write_csv(tmp_path / "a.csv", _csv_rows(random.Random(1), 50))
    specs, messages = plan(tmp_path / "a.csv", partition_size=len(data))
    assert len(specs) == 1 and specs[0].header_end == 0 and not messages
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(data))
    specs, messages = plan(tmp_path / "b.csv.gz", partition_size=64)
    assert len(specs) == 1 and "read as one partition" in messages[0]
    assert len(inputs.read_partition(specs[0])) == 50


def test_plan_warns_through_python_warnings_by_default(tmp_path):
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"x\n" * 1000))
    files = inputs.list_input_files(str(tmp_path / "a.txt.gz"))
    with pytest.warns(inputs.InputWarning, match="read as one partition"):
        inputs.plan_partitions(files, "text", 10)


# -- 6. quoting ---------------------------------------------------------------------------

def test_quoting_none_reads_a_stray_quote_as_a_character(tmp_path):
    """A stray " in a TSV merged records."""
    docs = ['"quoted start', "plain", 'closing quote"', "last"]
    (tmp_path / "t.tsv").write_text("id\ttext\n" + "".join(f"{i}\t{d}\n"
                                                            for i, d in enumerate(docs)),
                                    encoding="utf-8")
    merged, _ = plan(tmp_path / "t.tsv")
    assert len(read_all(merged)) < len(docs)  # quoting: csv (the default)
    specs, _ = plan(tmp_path / "t.tsv", quoting="none")
    assert [x.decode() for x in read_all(specs)] == docs
    # and it splits at every newline
    specs, messages = plan(tmp_path / "t.tsv", partition_size=1, quoting="none")
    assert len(specs) == len(docs) and not messages
    assert [x.decode() for x in read_all(specs)] == docs


def test_quoting_none_in_a_job(tmp_path, tok):
    docs = ['"quoted start', "plain", 'closing quote"', "last"]
    (tmp_path / "t.tsv").write_text("text\n" + "".join(f"{d}\n" for d in docs),
                                    encoding="utf-8")
    assert job(tmp_path / "t.tsv", tmp_path / "out", "--quoting", "none") == 0
    assert_output(tmp_path / "out", tok, docs)


# -- 7. keep_columns ----------------------------------------------------------------------

def _kept_inputs(d: Path, lines: list[str]) -> list[Path]:
    d.mkdir()
    n = len(lines) // 4
    chunks = [lines[k * n:(k + 1) * n] for k in range(3)] + [lines[3 * n:]]
    ids = iter(range(1000, 1000 + len(lines)))
    paths = [d / "a.parquet", d / "b.csv", d / "c.jsonl", d / "d.json"]
    pq.write_table(pa.table({"doc_id": [f"id-{next(ids)}" for _ in chunks[0]],
                             "text": chunks[0]}), paths[0], row_group_size=3)
    _write_csv(paths[1], [[f"id-{next(ids)}", t] for t in chunks[1]], header=("doc_id", "text"))
    paths[2].write_text("".join(json.dumps({"doc_id": f"id-{next(ids)}", "text": t}) + "\n"
                                for t in chunks[2]), encoding="utf-8")
    paths[3].write_text(json.dumps([{"doc_id": f"id-{next(ids)}", "text": t}
                                    for t in chunks[3]], indent=1), encoding="utf-8")
    return paths


def test_keep_columns_reader_returns_the_columns_with_the_text(tmp_path, tok):
    lines = sample_lines(40)
    paths = _kept_inputs(tmp_path / "in", lines)
    specs, _ = plan([str(p) for p in paths], partition_size=200, keep_columns=["doc_id"])
    assert len(specs) > 4
    texts, ids = [], []
    offset = 0
    for s in specs:
        t, kept = inputs.read_partition_with_columns(s)
        assert kept.num_rows == len(t) and kept.schema.field("doc_id").type == pa.large_string()
        texts += t.to_pylist()
        ids += kept.column("doc_id").to_pylist()
        # what a part writer does: tokenize, then carry each document's values to its rows
        out = tok(t, max_length=16)
        table = pa.table({"logID": out["metadata"][:, 0] + offset})
        table = inputs.attach_kept_columns(table, kept, offset)
        assert table.column("doc_id").to_pylist() == [ids[i] for i in
                                                      table.column("logID").to_pylist()]
        offset += len(t)
    assert [x if isinstance(x, str) else x.decode() for x in texts] == lines
    assert ids == [f"id-{1000 + i}" for i in range(len(lines))]
    assert inputs.read_partition_with_columns(plan(paths[0])[0][0])[1] is None


def test_keep_columns_types_and_errors(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "a", "n": 1, "f": 1.5, "b": true}\n'
                                      '{"text": "b", "n": 2, "f": 2, "b": false}\n'
                                      '{"text": "c"}\n', encoding="utf-8")
    specs, _ = plan(tmp_path / "a.jsonl", keep_columns=["n", "f", "b", "text"])
    _, kept = inputs.read_partition_with_columns(specs[0])
    assert kept.schema.types == [pa.int64(), pa.float64(), pa.bool_(), pa.large_string()]
    assert kept.to_pylist()[2] == {"n": None, "f": None, "b": None, "text": "c"}
    (tmp_path / "b.txt").write_text("x\n", encoding="utf-8")
    (tmp_path / "c.csv").write_text("text,n\nx,1\n", encoding="utf-8")
    (tmp_path / "d.jsonl").write_text('{"text": "a", "n": [1]}\n', encoding="utf-8")
    (tmp_path / "e.jsonl").write_text('{"text": "a", "n": 1}\n{"text": "a", "n": "x"}\n',
                                      encoding="utf-8")
    for paths, message in (([tmp_path / "b.txt"], "has no columns"),
                           ([tmp_path / "c.csv"], "has no column 'missing'"),
                           ([tmp_path / "a.jsonl", tmp_path / "c.csv"], "one type"),
                           ([tmp_path / "d.jsonl"], "lists or objects"),
                           ([tmp_path / "e.jsonl"], "several types")):
        keep = ["missing"] if "missing" in message else ["n"]
        with pytest.raises(jobs.InputError, match=message):
            plan([str(p) for p in paths], keep_columns=keep)


def test_csv_kept_columns_are_valid_strings(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"text,src\nx,caf\xe9\ny,ok\n")
    specs, _ = plan(tmp_path / "a.csv", keep_columns=["src", "text"])
    texts, kept = inputs.read_partition_with_columns(specs[0])
    assert kept.column("src").to_pylist() == ["caf\ufffd", "ok"]
    assert kept.column("text").to_pylist() == ["x", "y"]


def test_keep_columns_in_a_job(tmp_path, tok):
    lines = sample_lines(40)
    paths = _kept_inputs(tmp_path / "in", lines)
    assert job(tmp_path / "in", tmp_path / "out", "--keep-columns", "doc_id",
               "--partition-size", "200B") == 0
    table = assert_output(tmp_path / "out", tok, lines)
    assert table.column("doc_id").to_pylist() == [
        f"id-{1000 + i}" for i in table.column("logID").to_pylist()]
    assert paths


# -- the plan survives _job.json ----------------------------------------------------------

def test_partition_specs_round_trip_through_json(tmp_path):
    _kept_inputs(tmp_path / "in", sample_lines(20))
    (tmp_path / "in" / "e.txt.gz").write_bytes(gzip.compress(b"a\nb\n"))
    specs, _ = plan([str(tmp_path / "in" / n) for n in ("a.parquet", "b.csv", "c.jsonl",
                                                         "d.json")], partition_size=100,
                    keep_columns=["doc_id"], quoting="csv")
    specs += plan(tmp_path / "in" / "e.txt.gz")[0]
    for s in specs:
        again = inputs.PartitionSpec.from_json(json.loads(json.dumps(s.to_json())))
        assert again == s
    # an older _job.json without the new fields
    old = {"index": 0, "path": "x.txt", "format": "text", "column": "text", "byte_start": 0,
           "byte_end": 3, "row_groups": [], "documents": None}
    assert inputs.PartitionSpec.from_json(old).quoting == "csv"


def test_json_lines_are_counted_without_parsing(tmp_path, monkeypatch):
    """The count pass of a JSON Lines partition counts its non-blank lines (the documents,
    a bad line included, as the row policy reads it) without parsing any JSON."""
    lines = ['{"text": "a"}', "", "  \t", '{"text": "b\\nc"}', "not json", "{}",
             '{"text": null}', " \r", '{"text": "d", "x": 1}'] * 50
    (tmp_path / "in.jsonl").write_text("\n".join(lines), encoding="utf-8")
    specs, _ = plan(tmp_path / "in.jsonl", partition_size=200)
    assert len(specs) > 5
    want = [len(inputs.read_partition(s, [])) for s in specs]
    assert sum(want) == 6 * 50

    def no_parsing(*a, **k):
        raise AssertionError("the count pass parsed JSON")
    monkeypatch.setattr(inputs.json_format, "read_jsonl", no_parsing)
    monkeypatch.setattr(inputs.reading, "read_partition", no_parsing)
    assert [inputs.count_partition(s, lenient=True) for s in specs] == want
    assert [inputs.count_partition(s) for s in specs] == want
