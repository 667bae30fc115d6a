"""The read stage of a text partition in one native pass (daskwp/kernels/text_lines.cpp,
``daskwp.jobs.inputs``): lines split on b"\\n" with the newlines removed, and each line's
bytes outside well-formed UTF-8 (every maximal ill-formed subsequence's bytes, Python's
``errors="replace"`` rule).

The reference is plain Python: ``bytes.split(b"\\n")`` and the bytes Python's own UTF-8
decoder reports as errors. Every line of every shared corpus file is compared, as read
and with adversarial bytes spliced in at every position of a 16-byte block and around the
64-byte ones, on every width of the kernel this CPU has (64-byte AVX-512 blocks, 16-byte
blocks, 8-byte words, one byte at a time), in place and into
another buffer; then through partitions, compressed files and one whole job against
HuggingFace's ids.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import random

import numpy as np
import pyarrow as pa
import pytest

from conftest import DATA, hf_encode, vocab_path
from daskwp import _ext
from daskwp.jobs import InputError, inputs

#: The kernel's widths on this CPU (64: where it has AVX-512 VBMI2).
WIDTHS = tuple(_ext.split_widths())

# -- the reference ------------------------------------------------------------------------

_errors = [0]


def _count_errors(e):
    _errors[0] += e.end - e.start
    return ("\ufffd", e.end)


codecs.register_error("daskwp-text-lines-count", _count_errors)


def invalid_bytes(line: bytes) -> int:
    """The bytes Python's UTF-8 decoder replaces (one U+FFFD per maximal subpart)."""
    _errors[0] = 0
    line.decode("utf-8", "daskwp-text-lines-count")
    return _errors[0]


def reference(data: bytes) -> tuple[list[bytes], list[int]]:
    """(lines, invalid bytes of each line): split on b"\\n" only; a last line without a
    newline is a line; no input, no line."""
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()
    return lines, [invalid_bytes(line) for line in lines]


def native(data: bytes, width: int, in_place: bool):
    """(lines, invalid bytes of each line) from ``_ext.split_lines``."""
    src = np.frombuffer(data, dtype=np.uint8)
    out = src.copy() if in_place else np.full(len(src), 0xAB, dtype=np.uint8)  # exact size
    offsets, bad_lines, bad_bytes = _ext.split_lines(out if in_place else src, out, width)
    assert offsets.dtype == np.int64 and offsets[0] == 0
    assert np.all(np.diff(offsets) >= 0) and offsets[-1] <= len(data)
    assert np.all(np.diff(bad_lines) > 0) and np.all(bad_bytes > 0)
    lines = [out[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]
    per = [0] * len(lines)
    for i, n in zip(bad_lines.tolist(), bad_bytes.tolist()):
        per[i] = n
    return lines, per


def assert_same(data: bytes, what: str = "") -> None:
    want = reference(data)
    for width in WIDTHS:
        for in_place in (True, False):
            got = native(data, width, in_place)
            assert got[0] == want[0], (what, width, in_place, "lines")
            assert got[1] == want[1], (what, width, in_place, "invalid bytes")


# -- adversarial bytes --------------------------------------------------------------------

#: Truncated sequences, overlongs, surrogates, above U+10FFFF, lone continuation bytes,
#: bytes that never occur, well-formed neighbours, CR/LF and newlines in odd places.
EDGE_BYTES = [
    b"\x80", b"\xbf", b"\x80\x80\x80", b"\xc0", b"\xc1", b"\xc0\xaf", b"\xc1\xbf", b"\xc2",
    b"\xdf", b"\xe0", b"\xe0\xa0", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed", b"\xed\xa0\x80",
    b"\xed\xbf\xbf", b"\xed\x9f\xbf", b"\xef\xbf\xbd", b"\xef\xbf\xbf", b"\xef\xbb\xbf",
    b"\xf0", b"\xf0\x90", b"\xf0\x90\x80", b"\xf0\x8f\xbf\xbf", b"\xf0\x9f\x98\x80",
    b"\xf0\x9f\x98", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xf8\x88\x80\x80",
    b"\xfe", b"\xff", b"\xe2\x82", b"\xe2\x82\xac", b"\xc3\xa9", b"\xe4\xb8\xad", b"\xc3",
    b"\n", b"\r\n", b"\r", b"\n\n", b"\xe2\n\x82", b"\xf0\x9f\n\x98\x80", b"\xc3\n\xa9",
    b"\x00", b"\x7f", b" ", b"\t", b"a", b"hello", b"0123456789abcdef",
]

BAD_CASES = {
    "empty input": b"",
    "one newline": b"\n",
    "empty lines": b"\n\n\n",
    "empty lines between": b"a\n\n\nb\n",
    "last line without newline": b"one\ntwo",
    "only a last line": b"no newline at all",
    "CR/LF kept as CR": b"one\r\ntwo\r\n\r\n",
    "lone CR": b"\r",
    "truncated at the end": b"x\xe2\x82",
    "truncated 4-byte at the end": b"x\xf0\x9f\x98",
    "lead at the end": b"\xf0",
    "lead before a newline": b"\xe2\n\x82\xac\n",
    "overlongs": b"\xc0\xaf\xe0\x80\xaf\xf0\x80\x80\xaf\n",
    "surrogates": b"\xed\xa0\x80\xed\xbf\xbf\n",
    "above U+10FFFF": b"\xf4\x90\x80\x80\xf5\x80\x80\x80\n",
    "lone continuation bytes": b"\x80\xbf\x80\n\xbf",
    "every byte": bytes(range(256)),
    "every byte twice with newlines": bytes(range(256)) * 2 + b"\n" + bytes(range(255, -1, -1)),
    "newline at each block end": (b"a" * 15 + b"\n") * 9,
    "newline at each block start": (b"\n" + b"b" * 15) * 9,
    "all newlines": b"\n" * 100,
    "sequence across a block edge": b"a" * 14 + b"\xf0\x9f\x98\x80" + b"b" * 30,
    "sequence across a 64-byte block edge": b"a" * 62 + b"\xf0\x9f\x98\x80" + b"b" * 70,
    "truncated across a 64-byte block edge": b"a" * 63 + b"\xe2\x82" + b"\n" + b"c" * 70,
    "newline at each 64-byte block end": (b"a" * 63 + b"\n") * 5,
    "invalid bytes on many lines of a block": (b"\xff\n\xc3\n\xe2\x82x\n") * 40,
    "more than 8 newlines a block, then long lines": b"x\n" * 70 + b"y" * 200 + b"\n",
    "truncated across a block edge": b"a" * 15 + b"\xf0\x9f\x98" + b"\n" + b"c" * 16,
}


@pytest.mark.parametrize("name", list(BAD_CASES))
def test_bad_input_cases(name):
    assert_same(BAD_CASES[name], name)


def test_every_edge_piece_at_every_block_position():
    """Each piece placed at offsets 0..40 of ASCII filler (every 8- and 16-byte block edge)
    and around the first two 64-byte block edges, with and without a newline around it."""
    for piece in EDGE_BYTES:
        for at in (*range(41), *range(58, 70), *range(122, 134)):
            for tail in (b"", b"\n", b"z" * 20):
                assert_same(b"q" * at + piece + tail, repr(piece))
                assert_same(b"\n" * (at % 3) + b"w" * at + piece + b"\n" + piece + tail,
                             repr(piece))


def test_random_mixtures_of_edge_pieces():
    rng = random.Random(15)
    for _ in range(1500):
        data = b"".join(rng.choice(EDGE_BYTES) for _ in range(rng.randint(0, 60)))
        assert_same(data)
    for _ in range(200):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        assert_same(data)


# -- the shared corpora -------------------------------------------------------------------

CORPUS_FILES = sorted(p for p in (DATA / "corpus").rglob("*") if p.is_file())


def test_corpora_are_there():
    assert CORPUS_FILES, f"no corpus files under {DATA / 'corpus'}"


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_line_of_every_corpus(path):
    data = path.read_bytes()
    assert_same(data, path.name)
    # the corpus as one file of several copies, and cut at an odd place (a partition's
    # range ends anywhere a file does)
    assert_same(data * 3 + data[: len(data) // 3], path.name)


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_line_of_every_corpus_with_bad_bytes_spliced_in(path):
    """Adversarial pieces inserted at random places (inside multi-byte characters too)."""
    data = bytearray(path.read_bytes())
    rng = random.Random(path.name)
    for _ in range(max(50, len(data) // 2000)):
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.choice(EDGE_BYTES)
    data = bytes(data)
    assert_same(data, path.name)
    # the kernel and count_invalid_utf8 (Arrow validation, then NumPy) agree
    lines = inputs.lines_to_arrow(data)
    _, per = reference(data)
    assert inputs.count_invalid_utf8(lines) == (sum(per), sum(1 for n in per if n))


def test_count_newlines_equals_bytes_count():
    """Every start offset and length around the 16-byte blocks and 255-block sums."""
    data = b"".join(p.read_bytes() for p in CORPUS_FILES)
    assert _ext.count_newlines(np.frombuffer(data, np.uint8)) == data.count(b"\n")
    nl = b"\n" * 5000
    for base in (data[:5000], nl, b"\xff\n" * 2500):
        for start in range(17):
            for length in (0, 1, 15, 16, 17, 255 * 16 - 1, 255 * 16, 255 * 16 + 17, 4983):
                piece = base[start:start + length]
                assert _ext.count_newlines(np.frombuffer(piece, np.uint8)) == \
                    piece.count(b"\n"), (start, length)


# -- hypothesis ---------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_bytes = st.lists(st.one_of(st.binary(max_size=20), st.sampled_from(EDGE_BYTES),
                            st.text(max_size=8).map(lambda s: s.encode("utf-8"))),
                  max_size=40).map(b"".join)


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_bytes)
def test_fuzz_equals_the_reference(data):
    assert_same(data)


def test_default_width_is_the_widest():
    """Width 0 (the default, what the read stage uses) is the widest this CPU has."""
    data = (b"one\n\xff two\n" * 50)
    src = np.frombuffer(data, dtype=np.uint8)
    assert WIDTHS in ((64, 16, 8, 1), (16, 8, 1))
    for width in (None, 0):
        out = np.zeros(len(src), np.uint8)
        args = (src, out) if width is None else (src, out, width)
        got = _ext.split_lines(*args)
        want = _ext.split_lines(src, np.zeros(len(src), np.uint8), WIDTHS[-1])
        assert all(np.array_equal(a, b) for a, b in zip(got, want))


# -- the binding's checks -----------------------------------------------------------------

def test_split_lines_refuses_bad_buffers():
    src = np.frombuffer(b"abc\ndef\n", dtype=np.uint8)
    with pytest.raises(ValueError, match="fewer than the 8 bytes"):
        _ext.split_lines(src, np.empty(7, np.uint8))
    buf = np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="overlaps"):
        _ext.split_lines(buf[2:10], buf[:8])
    with pytest.raises(ValueError, match="width must be 0 .*, 64, 16, 8 or 1"):
        _ext.split_lines(src, np.empty(8, np.uint8), 4)
    if 64 not in WIDTHS:
        with pytest.raises(ValueError, match="width 64 needs AVX-512 VBMI2"):
            _ext.split_lines(src, np.empty(8, np.uint8), 64)
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        _ext.host_bytes(-1)
    with pytest.raises(TypeError):  # a read-only output
        _ext.split_lines(src, src)
    assert len(_ext.host_bytes(0)) == 0


# -- partitions ---------------------------------------------------------------------------

def _text_specs(path, partition_size):
    files = inputs.list_input_files(str(path))
    return inputs.plan_partitions(files, "text", partition_size, warn=lambda m: None)


def _spliced_corpus() -> bytes:
    rng = random.Random(1)
    parts = []
    for p in sorted((DATA / "corpus" / "multi").glob("*.txt")) + [DATA / "corpus" / "en_ewt.txt"]:
        data = bytearray(p.read_bytes())
        for _ in range(40):
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.choice(EDGE_BYTES)
        parts.append(bytes(data))
    return b"".join(parts) + b"a last line without a newline \xe2\x82"


def _page_cached_lines(tmp_path, size: int = 64 << 20):
    """``(path, size, lines)``: a text file of ``size`` bytes of 100-byte lines, its pages
    in the page cache (a read of it maps resident pages, as a job's recent input)."""
    big = tmp_path / "big.txt"
    line = b"x" * 99 + b"\n"
    big.write_bytes(line * (size // len(line)))
    fd = os.open(big, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    os.close(fd)
    return big, size, size // len(line)


def _peak_growth(fn):
    """``(fn(), bytes)``: what ``fn`` returns and how far it raised this process's peak
    RSS (VmHWM, reset first through /proc/self/clear_refs)."""
    def hwm():
        with open("/proc/self/status") as fh:
            return next(int(x.split()[1]) << 10 for x in fh if x.startswith("VmHWM"))
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = hwm()
    out = fn()
    return out, hwm() - before


@pytest.mark.parametrize("partition_size", [1 << 12, 1 << 17, 1 << 30])
def test_partitions_equal_the_reference(tmp_path, partition_size):
    data = _spliced_corpus()
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    specs = _text_specs(path, partition_size)
    assert (len(specs) > 1) == (partition_size < len(data))
    want_lines, want_bad = reference(data)
    lines, bad_bytes, bad_docs = [], 0, 0
    for spec in specs:
        texts, kept, (b, d) = inputs.read_partition_with_counts(spec)
        assert kept is None and texts.type == pa.large_binary()
        texts.validate(full=True)
        assert (b, d) == inputs.count_invalid_utf8(texts)
        assert texts.to_pylist() == inputs.read_partition(spec).to_pylist()
        lines += texts.to_pylist()
        bad_bytes += b
        bad_docs += d
    assert lines == want_lines
    assert (bad_bytes, bad_docs) == (sum(want_bad), sum(1 for n in want_bad if n))
    # the counting pass (pieces of 1 MB, native newline count) agrees with the read
    assert [inputs.count_partition(s) for s in specs] == \
        [len(inputs.read_partition(s)) for s in specs]


def test_text_partition_is_read_without_arrow_allocations(tmp_path):
    """The lines array holds the buffer the file was read into: Arrow allocates nothing."""
    data = (DATA / "corpus" / "en_ewt.txt").read_bytes() * 4
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    spec, = _text_specs(path, 1 << 30)
    before = pa.total_allocated_bytes()
    texts, _, counts = inputs.read_partition_with_counts(spec)
    assert pa.total_allocated_bytes() - before < 4096
    assert texts.buffers()[2].size == len(data) - data.count(b"\n")
    assert counts == (0, 0) and len(texts) == data.count(b"\n")


def test_compressed_text_equals_plain(tmp_path):
    data = _spliced_corpus()
    (tmp_path / "a.txt").write_bytes(data)
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(data))
    got = []
    for name in ("a.txt", "b.txt.gz"):
        spec, = _text_specs(tmp_path / name, 1 << 30)
        texts, _, counts = inputs.read_partition_with_counts(spec)
        got.append((texts.to_pylist(), counts))
    assert got[0] == got[1]
    assert got[0][0] == reference(data)[0]
    for name in ("a.txt", "b.txt.gz"):
        spec, = _text_specs(tmp_path / name, 1 << 30)
        assert inputs.count_partition(spec) == len(got[0][0])


def test_a_file_shorter_than_planned_is_an_error(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\nthree\n" * 100)
    spec, = _text_specs(path, 1 << 30)
    path.write_bytes(b"one\ntwo\n")
    with pytest.raises(InputError, match="shorter than when the job was planned"):
        inputs.read_partition_with_counts(spec)
    with pytest.raises(InputError, match="shorter than when the job was planned"):
        inputs.count_partition(spec)


@pytest.mark.slow
def test_job_over_spliced_corpus_equals_hf(tmp_path, capsys):
    """One whole job: the ids of every line equal HuggingFace's on the line decoded with
    errors='replace', and the summary counts the invalid bytes of the reference."""
    from tokenizers import BertWordPieceTokenizer

    import daskwp
    from daskwp.cli import main
    data = _spliced_corpus()
    inp = tmp_path / "in.txt"
    inp.write_bytes(data)
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "--json",
               "--max-length", "8192", "--no-special-tokens", "--padding", "do_not_pad",
               "--partition-size", "256KB"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads(stdout)
    lines, bad = reference(data)
    assert summary["documents"] == len(lines)
    assert summary["invalid_utf8_bytes"] == sum(bad)
    assert summary["invalid_utf8_documents"] == sum(1 for n in bad if n)
    hf = BertWordPieceTokenizer(str(vocab_path("bert-base-uncased")), lowercase=True)
    want = hf_encode(hf, [line.decode("utf-8", "replace") for line in lines])
    assert max(map(len, want)) < 8192  # one row per line
    table = daskwp.read_tokenized(out).to_table()
    got = [[] for _ in lines]
    for logid, ids in zip(table.column("logID").to_pylist(),
                          table.column("input_ids").to_pylist()):
        assert not got[logid], f"line {logid} has more than one row"
        got[logid] = ids
    assert got == want


@pytest.mark.parametrize("data,lines", [(b"", []), (b"\n", [b""]), (b"\n\n\n", [b""] * 3),
                                        (b"\r\n", [b"\r"]), (b"x", [b"x"])])
def test_degenerate_files(tmp_path, data, lines):
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    specs = _text_specs(path, 1 << 30)
    got = [inputs.read_partition_with_counts(s) for s in specs]
    assert [d for texts, _, _ in got for d in texts.to_pylist()] == lines
    assert all(counts == (0, 0) for _, _, counts in got)
    assert inputs.lines_to_arrow(data).to_pylist() == lines
    assert sum(inputs.count_partition(s) for s in specs) == len(lines)


def test_jsonl_count_equals_its_non_blank_lines(tmp_path):
    """The count pass of JSON Lines (one native pass, no split) gives the documents the
    reader's split gives: every line but those of only spaces, tabs and CRs, a last line
    without a newline included; and count_partition the rows read_partition reads."""
    from daskwp.jobs.inputs.json_format import _blank_lines, count_jsonl_documents
    from daskwp.jobs.inputs.text import lines_to_arrow

    def by_split(data):
        lines = lines_to_arrow(data)
        return len(lines) - int(np.count_nonzero(_blank_lines(lines)))

    rng = random.Random(7)
    cases = [b"", b"\n", b"a", b"a\n", b"\n\n", b" \n", b"\t\r\n{}", b"{}\n \t\r",
             b"{}\r\n{}\r\n", b"  {}\n", b"\r", b"{}\n\n\n{}", b" ", b"x" * 40 + b"\n \n"]
    cases += [bytes(rng.choice(b" \t\r\n{}a\xc3") for _ in range(rng.randint(0, 40)))
              for _ in range(2000)]
    assert [count_jsonl_documents(c) for c in cases] == [by_split(c) for c in cases]
    rows = [json.dumps({"text": f"doc {i}"}) + rng.choice(["", "\r", " "])
            for i in range(3000)]
    blanks = ["", " ", "\t\r", "   "]
    body = "\n".join(r if i % 7 else r + "\n" + rng.choice(blanks)
                     for i, r in enumerate(rows))
    path = tmp_path / "d.jsonl"
    path.write_text("\n \n" + body)
    specs = inputs.plan_partitions(inputs.list_input_files(str(path)), "text", 4096)
    assert len(specs) > 5
    assert [inputs.count_partition(s) for s in specs] == \
        [len(inputs.read_partition(s)) for s in specs]
    assert sum(inputs.count_partition(s) for s in specs) == len(rows)


def test_jsonl_count_in_pieces_equals_whole():
    """Counted piece by piece (a line may span pieces, blank or not, and a piece may end
    inside a line's leading blanks), the JSON Lines documents are those of the whole."""
    from daskwp.jobs.inputs.json_format import count_jsonl_documents
    rng = random.Random(11)
    for _ in range(3000):
        data = bytes(rng.choice(b"  \t\r\n\n{}a") for _ in range(rng.randint(0, 60)))
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 6))))
        pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
        got = count_jsonl_documents(np.frombuffer(p, np.uint8) for p in pieces)
        assert got == count_jsonl_documents(data), (pieces, got)


def test_jsonl_count_of_long_lines_in_blocks():
    """The count's 16-byte blocks (a newline followed by a non-blank byte counted there,
    by a blank or newline its line looked at byte by byte) give the split's documents on
    lines of up to 200 bytes: blank lines, leading blanks and runs of newlines at every
    position of a block and across blocks, whole and in pieces."""
    from daskwp.jobs.inputs.json_format import _blank_lines, count_jsonl_documents
    from daskwp.jobs.inputs.text import lines_to_arrow
    rng = random.Random(13)
    for _ in range(400):
        lines = []
        for _ in range(rng.randint(0, 30)):
            lead = "".join(rng.choice(" \t\r") for _ in range(rng.choice([0, 0, 0, 1, 17])))
            body = "".join(rng.choice("ab {}\t") for _ in range(rng.randint(0, 200)))
            lines.append(lead + rng.choice([body, "", " " * rng.randint(1, 40)]))
        data = ("\n".join(lines) + rng.choice(["", "\n", "\n\n", " "])).encode()
        split = lines_to_arrow(data)
        expected = len(split) - int(np.count_nonzero(_blank_lines(split)))
        assert count_jsonl_documents(data) == expected, data
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 5))))
        pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
        assert count_jsonl_documents(np.frombuffer(p, np.uint8) for p in pieces) == \
            expected, (pieces, data)


@pytest.mark.parametrize("piece", [1, 7, 64])
def test_count_pass_in_small_pieces_equals_read(tmp_path, monkeypatch, piece):
    """The count pass reads each partition in pieces into one buffer of the thread (here
    pieces of a few bytes, so that lines span many): plain and compressed, text and JSON
    Lines, it counts the documents the read stage reads."""
    from daskwp.jobs.inputs import byte_ranges, text
    monkeypatch.setattr(byte_ranges, "PIECE", piece)
    monkeypatch.setattr(text, "MAPPED_PIECE", piece)   # a local text range's count
    rng = random.Random(piece)
    lines = [rng.choice(["", " ", "\t\r", "x y", "ab\r"]) for _ in range(300)]
    docs = [json.dumps({"text": f"doc {i}"}) + rng.choice(["", " \r"]) for i in range(300)]
    blank = ["", " ", "\t\r"]
    files = {"a.txt": "\n".join(lines), "b.txt": "\n".join(lines) + "\n",
             "c.jsonl": "\n".join(d if i % 5 else d + "\n" + rng.choice(blank)
                                  for i, d in enumerate(docs)),
             "d.jsonl": " \n".join(docs) + "\n \t"}
    for name, text in list(files.items()):
        files[name + ".gz"] = text
    for name, text in files.items():
        data = text.encode()
        (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        specs = inputs.plan_partitions(inputs.list_input_files(str(tmp_path / name)),
                                       "text", 200, warn=lambda m: None)
        assert (len(specs) == 1) == name.endswith(".gz"), name
        got = [inputs.count_partition(s) for s in specs]
        assert got == [len(inputs.read_partition(s)) for s in specs], name
        assert sum(got) == (len(docs) if ".jsonl" in name else
                            data.count(b"\n") + (not data.endswith(b"\n"))), name


def test_text_partitions_are_split_from_a_map_of_the_file(tmp_path):
    """A local text partition is split from a memory map of its range (map_range: a
    read-only view at the range's bytes, also where the range starts off a page), and the
    lines hold a copy, not the map: rewriting the file afterwards changes no line read."""
    from daskwp.jobs.inputs import byte_ranges
    data = _spliced_corpus()
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    specs = [byte_ranges.exact_range(s) for s in _text_specs(path, 50_000)]
    assert len(specs) > 3 and any(s.byte_start % 4096 for s in specs)
    for spec in specs:
        view = byte_ranges.map_range(spec)
        assert not view.flags.writeable
        assert view.tobytes() == data[spec.byte_start:spec.byte_end]
    read = [inputs.read_partition_with_counts(s) for s in specs]
    with open(path, "r+b") as fh:            # the same inode, every byte changed
        fh.write(bytes(b ^ 0x55 for b in data))
    want_lines, want_bad = reference(data)
    assert [x for texts, _, _ in read for x in texts.to_pylist()] == want_lines
    assert sum(b for _, _, (b, _) in read) == sum(want_bad)


def _check_mapped_counts(tmp_path, monkeypatch, tiny_on) -> None:
    """The count of each 50 KB partition of the spliced corpus (three kinds of end), from
    its memory map in pieces of 4096 bytes and 1 MB (every partition) and of 1 and 7 bytes
    (the partitions ``i`` of ``n`` where ``tiny_on(i, n)``: ~9 CPU s per pass over all of
    them at 1 byte), equals the read stage's."""
    from daskwp.jobs.inputs import byte_ranges, text

    def no_read(spec):
        raise AssertionError(f"read_pieces({spec.describe()})")
    monkeypatch.setattr(text, "read_pieces", no_read)   # counted from the map only
    data = _spliced_corpus()
    path = tmp_path / "in.txt"
    for tail in (b"", b"\n", b"last line"):
        path.write_bytes(data + tail)
        specs = [byte_ranges.exact_range(s) for s in _text_specs(path, 50_000)]
        want = [len(inputs.read_partition(s)) for s in specs]
        assert sum(want) == len(reference(data + tail)[0])
        tiny = [i for i in range(len(specs)) if tiny_on(i, len(specs))]
        assert tiny, "no partition in tiny pieces"
        for piece in (1, 7, 4096, 1 << 20):
            monkeypatch.setattr(text, "MAPPED_PIECE", piece)
            at = tiny if piece < 8 else range(len(specs))
            assert [inputs.count_partition(specs[i]) for i in at] == [want[i] for i in at], \
                (tail, piece)


@pytest.mark.slow   # ~30 CPU s: 1-byte pieces over 3.9 MB, three times
def test_text_count_in_tiny_pieces_on_every_partition(tmp_path, monkeypatch):
    """test_text_count_reads_a_local_range_from_its_map_in_pieces's counts in pieces of 1
    and 7 bytes on every partition, not only the first and last two."""
    _check_mapped_counts(tmp_path, monkeypatch, tiny_on=lambda i, n: True)


def test_text_count_reads_a_local_range_from_its_map_in_pieces(tmp_path, monkeypatch,
                                                                 request):
    """A local text partition is counted from a memory map of its range (no read() of its
    bytes into a buffer), in pieces whose pages leave the process once counted: the counts
    are the read stage's however the pieces fall, and counting a 64 MB partition raises
    the peak RSS by about a piece, not the partition."""
    from daskwp.jobs.inputs import text

    # pieces of 1 and 7 bytes on the first and the last two partitions (the tail's);
    # test_text_count_in_tiny_pieces_on_every_partition (slow) runs them on all
    _check_mapped_counts(tmp_path, monkeypatch, tiny_on=lambda i, n: i < 2 or i >= n - 2)
    monkeypatch.undo()

    big, size, lines = _page_cached_lines(tmp_path)
    (spec,) = _text_specs(big, size + 1)
    count, grew = _peak_growth(lambda: inputs.count_partition(spec))
    assert count == lines
    # a piece's pages (8 MB) at most; mapped whole, the partition's 64 MB
    assert grew < text.MAPPED_PIECE + (8 << 20), grew


def test_map_range_leaves_what_it_cannot_map_to_the_reader(tmp_path):
    """map_range gives None for an empty range, a compressed file and a URL (read as
    before), and an InputError for a file shorter than the planned range."""
    import dataclasses
    from daskwp.jobs.inputs import byte_ranges
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\nthree\n")
    (spec,) = _text_specs(path, 1 << 20)
    spec = byte_ranges.exact_range(spec)
    assert byte_ranges.map_range(spec).tobytes() == b"one\ntwo\nthree\n"
    assert byte_ranges.map_range(dataclasses.replace(spec, byte_end=spec.byte_start)) is None
    assert byte_ranges.map_range(dataclasses.replace(spec, compression="gzip")) is None
    assert byte_ranges.map_range(dataclasses.replace(spec, path="s3://bucket/in.txt")) is None
    path.write_bytes(b"one\n")              # shorter than planned: the job's error
    with pytest.raises(InputError, match="shorter than when the job was planned"):
        byte_ranges.map_range(spec)
    with pytest.raises(InputError, match="shorter than when the job was planned"):
        inputs.read_partition(spec)


def test_jsonl_partitions_read_into_reused_pool_buffers(tmp_path, monkeypatch):
    """The read stage of JSON Lines reads a local partition through a memory map of the
    file (no copy, no buffer), and one it cannot map (a URL's) into a buffer of the host
    memory pool, which the next partition's read gets back once freed (no fresh allocation
    per partition); what it returns holds no view of either: the documents (native reader)
    and the kept columns (Arrow's reader) of a partition stay as they were while the next
    partitions are read over the same block, and after the file is rewritten."""
    from daskwp.jobs.inputs import byte_ranges
    rows = [{"text": f"document {i} " + "w" * (400 + i % 300), "id": i} for i in range(30_000)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    specs = inputs.plan_partitions(inputs.list_input_files(str(path)), "text", 6 << 20,
                                   keep_columns=["id"], warn=lambda m: None)
    assert len(specs) >= 3
    from daskwp.backends import memory
    live = memory.host_pool_info()["live"]
    exact = byte_ranges.exact_range(specs[1])
    view = byte_ranges.read_partition_bytes(exact)       # a map of the file: no pool block
    assert not view.flags.writeable and memory.host_pool_info()["live"] == live
    assert view.tobytes() == path.read_bytes()[exact.byte_start:exact.byte_end]
    del view
    limit = memory.host_pool_info()["limit"]
    memory.set_host_pool_limit(256 << 20)     # whatever DASKWP_HOST_POOL_MB says
    try:
        with monkeypatch.context() as m:      # a range that is not mapped (a URL's)
            m.setattr(byte_ranges, "map_range", lambda spec: None)
            buf = byte_ranges.read_partition_bytes(specs[0])
            assert memory.host_pool_info()["live"] >= len(buf)   # a pool block ...
            address = buf.ctypes.data
            del buf
            cached = memory.host_pool_info()["cached"]           # ... back in the pool ...
            buf = byte_ranges.read_partition_bytes(specs[1])     # (same size; the last is shorter)
            assert buf.ctypes.data == address                    # ... and the next read's
            assert memory.host_pool_info()["cached"] < cached
            del buf
    finally:
        memory.set_host_pool_limit(limit)
    got = [inputs.read_partition(s) for s in specs]
    kept = [inputs.read_partition_with_columns(s) for s in specs]

    def text(x):
        return x if isinstance(x, str) else x.decode()
    assert [text(d) for a in got for d in a.to_pylist()] == [r["text"] for r in rows]
    assert [text(x) for texts, _ in kept for x in texts.to_pylist()] == \
        [r["text"] for r in rows]
    assert [x for _, k in kept for x in k.column("id").to_pylist()] == \
        [r["id"] for r in rows]
    with open(path, "r+b") as fh:           # the same inode: what a map would show
        fh.write(b" " * path.stat().st_size)
    assert [text(d) for a in got for d in a.to_pylist()] == [r["text"] for r in rows]


def test_a_mapped_range_is_split_in_pieces_whose_pages_leave_the_process(tmp_path,
                                                                          monkeypatch,
                                                                          request):
    """A mapped text range is split in pieces cut after a newline (lines, invalid UTF-8
    and offsets the whole split's, however the pieces fall), each piece's pages dropped
    from the process once split: the peak RSS of reading a partition stays about its
    output buffer, not the output plus the file's pages."""
    from daskwp.jobs.inputs import byte_ranges, text
    data = _spliced_corpus()
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    (spec,) = _text_specs(path, len(data) + 1)
    spec = byte_ranges.exact_range(spec)
    want_lines, want_bad = reference(data)
    for piece in (1, 7, 4096, 65_536, len(data)):
        monkeypatch.setattr(text, "MAPPED_PIECE", piece)
        lines, (bad_bytes, bad_docs) = text.read_text_lines(spec)
        assert lines.to_pylist() == want_lines, piece
        assert bad_bytes == sum(want_bad), piece
        assert bad_docs == sum(1 for b in want_bad if b), piece
    monkeypatch.undo()

    big, size, n_lines = _page_cached_lines(tmp_path)
    (spec,) = _text_specs(big, size + 1)
    spec = byte_ranges.exact_range(spec)
    from daskwp.backends import memory
    limit = memory.host_pool_info()["limit"]
    memory.set_host_pool_limit(0)        # a fresh output buffer, not a resident pool block
    request.addfinalizer(lambda: memory.set_host_pool_limit(limit))
    (lines, _), grew = _peak_growth(lambda: text.read_text_lines(spec))
    assert len(lines) == n_lines
    # the output buffer (64 MB) and its offsets (5 MB), a piece's pages at most besides;
    # split whole, the 64 MB of file pages came on top
    assert grew < size + (24 << 20), grew
