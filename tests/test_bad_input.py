"""Bad input and faults (docs/design.md §5): no crash, clear errors, nothing lost.

Documented behaviour (docs/differences-hf.md, docs/bad-input.md):

* None / NaN / empty / whitespace-only / control-only documents: no tokens, one row each.
* Bytes that are not valid UTF-8 (binary Arrow columns, or a string column whose producer
  did not validate) decode to U+FFFD, one per maximal ill-formed subpart (Python's
  ``errors="replace"``); lone surrogates in Python strings are encoded with
  ``surrogatepass`` and decode the same way. The ids always equal HuggingFace's on
  ``raw.decode("utf-8", "replace")``, for any clean_text (clean_text=True removes U+FFFD).
* Malformed buffers reaching the native binding are refused with ValueError.
* Vocabulary and parameter problems: a clear error naming the file / value and what is
  allowed; never a wrong id.

Not repeated here (see the named modules): HF parity for valid text (test_hypothesis.py,
test_parity.py), BOM / CRLF / duplicates / empty / missing / no-[UNK] vocab.txt
(test_core_cases.py), window parameter errors of ``tok(...)`` (test_windows.py), the
killed worker and resume (test_cli.py), the Dask partition error (test_dask.py), linear
time on 40 MB inputs (test_linear_time.py).
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from daskwp import _ext

from conftest import hf_encode, hf_from_tokens, run_killing_a_worker

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BUNDLED_VOCAB = REPO / "daskwp" / "data" / "bert-base-uncased-vocab.txt"
FUZZ = settings(max_examples=250, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@functools.lru_cache(maxsize=None)
def tok():
    return daskwp.WordPieceTokenizer()


@functools.lru_cache(maxsize=None)
def hf_uncased():
    from tokenizers import BertWordPieceTokenizer
    return BertWordPieceTokenizer(str(BUNDLED_VOCAB), lowercase=True)


def hf_ids_of_bytes(hf, docs) -> list[list[int]]:
    """HF's ids of byte strings decoded like daskwp: errors='replace' (None: empty)."""
    return hf_encode(hf, [None if d is None else d.decode("utf-8", "replace") for d in docs])


def as_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------------------
# Degenerate documents, through every input type
# ---------------------------------------------------------------------------------------
DEGENERATE = [None, float("nan"), "", " ", "\t\n\r \u3000\u2028\u00a0", "\x00", "\x00\x01\x7f",
              "\u200b\u200d\ufeff", "\ufffd", "\x00 \ufffd \u200b", "\U000E0001"]


def _input_variants(texts):
    """The same documents as every accepted input type (None/NaN are nulls)."""
    nulls = [t is None or (isinstance(t, float) and math.isnan(t)) for t in texts]
    clean = [None if n else t for t, n in zip(texts, nulls)]
    yield "list", list(texts)
    yield "tuple", tuple(texts)
    yield "numpy-object", np.array(texts, dtype=object)
    yield "series-object", pd.Series(texts, dtype=object)
    yield "series-string", pd.Series(clean, dtype="string")
    yield "series-arrow", pd.Series(pa.array(clean, pa.string()), dtype=pd.ArrowDtype(pa.string()))
    yield "arrow-string", pa.array(clean, pa.string())
    yield "arrow-large-string", pa.array(clean, pa.large_string())
    yield "arrow-binary", pa.array([None if t is None else as_bytes(t) for t in clean],
                                   pa.binary())
    yield "arrow-large-binary", pa.array([None if t is None else as_bytes(t) for t in clean],
                                         pa.large_binary())
    yield "arrow-chunked", pa.chunked_array([pa.array(clean[:3], pa.string()),
                                             pa.array([], pa.string()),
                                             pa.array(clean[3:], pa.string())])
    yield "arrow-dictionary", pa.array(clean, pa.string()).dictionary_encode()


def test_degenerate_documents_give_no_tokens_and_one_row_each():
    texts = DEGENERATE + ["hello"]
    for name, texts_in in _input_variants(texts):
        enc = tok().encode(texts_in)
        assert len(enc) == len(texts), name
        assert enc.lengths[:-1].tolist() == [0] * len(DEGENERATE), name
        assert enc[-1].tolist() == [7592], name
        out = tok()(texts_in, max_length=5)
        assert out.metadata[:, 0].tolist() == list(range(len(texts))), name
        assert out.input_ids[:-1].tolist() == [[101, 102, 0, 0, 0]] * len(DEGENERATE), name
        assert out.attention_mask[:-1].sum() == 2 * len(DEGENERATE), name
        assert out.metadata[:-1, 1:].tolist() == [[1, 0]] * len(DEGENERATE), name
    # HF agrees that these are empty
    strs = [t if isinstance(t, str) else "" for t in DEGENERATE]
    assert all(ids == [] for ids in hf_encode(hf_uncased(), strs))


def test_all_null_and_nan_only_inputs():
    for texts in ([None] * 5, [float("nan")] * 3, pa.nulls(4), pa.nulls(4, pa.large_string()),
                  pd.Series([None, None]), pd.Series([None, np.nan], dtype=object)):
        enc = tok().encode(texts)
        assert len(enc) == len(texts) and len(enc.token_ids) == 0
        out = tok()(texts, max_length=4, stride=1)
        assert out.metadata[:, 0].tolist() == list(range(len(texts)))


def test_all_nan_float_series_is_null_documents():
    texts = pd.Series([np.nan, np.nan, np.nan])
    assert texts.dtype == np.float64
    assert tok().encode(texts).to_list() == [[], [], []]
    with pytest.raises(TypeError, match="dtype float64"):  # real numbers stay an error
        tok().encode(pd.Series([1.5, np.nan]))


def test_non_text_documents_are_type_errors_naming_the_value():
    for bad, pattern in ([["ok", 3]], r"texts\[1\] is a int"), \
                        ([["ok", ["nested"]]], r"texts\[1\] is a list"), \
                        ((5,), r"got int"), \
                        ((np.arange(3),), r"numpy array of dtype int64"), \
                        ((pd.Series([1.5, 2.0]),), r"dtype float64"), \
                        ((pa.array([1, 2]),), r"Arrow type int64"), \
                        ((pd.DataFrame({"text": ["a"]}),), r"DataFrame"):
        with pytest.raises(TypeError, match=pattern):
            tok().encode(*bad)


# ---------------------------------------------------------------------------------------
# Lone surrogates and noncharacters in Python strings
# ---------------------------------------------------------------------------------------
SURROGATE_CASES = ["a\ud800b", "\udfff", "x\udc80 y", "\ud83d\ude00 split pair",
                   "\ud800\ud800\udfff", "hello\udbffworld", "[CLS]\ud800[SEP]", "caf\udce9"]
NONCHARACTERS = ["a\ufdd0b", "\ufdef", "x\ufffe y", "\uffff", "\U0001fffe", "\U0010ffff",
                 "\U000effff z", "Z\U0010fffeZ", "\uffff\ufffd\ufffe"]


@pytest.mark.parametrize("text", SURROGATE_CASES + NONCHARACTERS)
def test_surrogates_and_noncharacters_equal_hf_on_replacement(text):
    raw = as_bytes(text)
    expected = hf_ids_of_bytes(hf_uncased(), [raw])
    assert tok().encode([text]).to_list() == expected
    assert tok().encode(np.array([text, None], dtype=object)).to_list() == expected + [[]]
    assert tok().encode(pa.array([raw], pa.binary())).to_list() == expected
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert tok().encode(pd.Series([text, None])).to_list() == expected + [[]]


def test_lone_surrogates_in_a_pandas_series():
    texts = pd.Series(["a\ud800b", None, "ok"], dtype=object)
    expected = hf_ids_of_bytes(hf_uncased(), [as_bytes("a\ud800b"), None, b"ok"])
    assert tok().encode(texts).to_list() == expected
    assert texts.wordpiece.tokenize(max_length=8).metadata["logID"].tolist() == [0, 1, 2]


def test_lone_surrogate_is_one_replacement_per_byte():
    """Surrogate-pass bytes ED A0 80 are not a valid sequence: each byte is its own maximal
    ill-formed subpart, so three U+FFFD (seen with clean_text=False, where U+FFFD stays)."""
    vocab = ["[UNK]", "a", "##a", "b", "##b", "\ufffd", "##\ufffd"]
    hf = hf_from_tokens(vocab, clean_text=False)
    t = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(vocab), clean_text=False)
    assert t.encode(["a\ud800b"]).to_list() == [[1, 6, 6, 6, 4]]
    assert hf_ids_of_bytes(hf, [as_bytes("a\ud800b")]) == [[1, 6, 6, 6, 4]]


_surrogate = st.integers(0xD800, 0xDFFF).map(chr)
_nonchar = st.sampled_from([chr(c) for c in range(0xFDD0, 0xFDF0)] +
                           [chr((p << 16) | lo) for p in range(17) for lo in (0xFFFE, 0xFFFF)])
_text_with_surrogates = st.lists(
    st.one_of(st.text(max_size=6), _surrogate, _nonchar, st.sampled_from([" ", "a", "##", "中"])),
    max_size=20).map("".join)


@pytest.mark.slow
@FUZZ
@given(st.lists(_text_with_surrogates, max_size=8))
def test_fuzz_surrogates_equal_hf_on_replacement(texts):
    expected = hf_ids_of_bytes(hf_uncased(), [as_bytes(t) for t in texts])
    assert tok().encode(texts).to_list() == expected


# ---------------------------------------------------------------------------------------
# Invalid UTF-8 through the binary path
# ---------------------------------------------------------------------------------------
_EDGE_BYTES = [b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xc0\xaf", b"\xc2", b"\xdf", b"\xe0",
               b"\xe0\xa0", b"\xe0\x80\x80", b"\xed", b"\xed\xa0\x80", b"\xed\xbf\xbf",
               b"\xed\x9f\xbf", b"\xef\xbf\xbd", b"\xef\xbf\xbf", b"\xef\xbb\xbf", b"\xf0",
               b"\xf0\x90", b"\xf0\x90\x80", b"\xf0\x8f\xbf\xbf", b"\xf0\x9f\x98\x80",
               b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xf8\x88\x80\x80\x80",
               b"\xfe", b"\xff", b" ", b"\t", b"\n", b"\x00", b"\x7f", b"a", b"hello", b"##",
               b"[CLS]", b"[CL", b"[SEP]", b"\xe4\xb8\xad", b"e\xcc\x81", b"\xcc\x81", b"\xc3\xa9",
               b"\xe2\x80\x8b", b"\xc2\x85", b".", b"'", b"0"]
_raw_doc = st.lists(st.one_of(st.binary(max_size=6), st.sampled_from(_EDGE_BYTES),
                              st.text(max_size=4).map(lambda s: s.encode("utf-8"))),
                    max_size=24).map(b"".join)
_raw_docs = st.lists(st.one_of(_raw_doc, st.none()), max_size=10)


def _binary_variants(docs):
    yield "binary", pa.array(docs, pa.binary())
    yield "large_binary", pa.array(docs, pa.large_binary())
    # Neighbours that would change the result if a truncated sequence at the end of a
    # document were completed with the next document's bytes.
    padded = [b"\xf0\x9f"] + docs + [b"\xad\xbf\x80tail"]
    yield "sliced-binary", pa.array(padded, pa.binary()).slice(1, len(docs))
    yield "sliced-large_binary", pa.array(padded, pa.large_binary()).slice(1, len(docs))
    yield "chunked", pa.chunked_array([pa.array(docs[:1], pa.binary()), pa.array([], pa.binary()),
                                       pa.array(docs[1:], pa.binary())], pa.binary())
    # A string column whose producer did not validate UTF-8 (Arrow does not check).
    b = pa.array(docs, pa.binary())
    yield "unvalidated-string", pa.Array.from_buffers(pa.string(), len(b), b.buffers(),
                                                      null_count=b.null_count)
    yield "list-of-bytes", list(docs)


@FUZZ
@given(_raw_docs)
def test_fuzz_random_bytes_equal_hf_on_replacement(docs):
    expected = hf_ids_of_bytes(hf_uncased(), docs)
    for name, arr in _binary_variants(docs):
        assert tok().encode(arr).to_list() == expected, name


_FFFD_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "a", "##a", "b", "##b", "\ufffd", "##\ufffd", "中",
               "hello", "##hello"]


@functools.lru_cache(maxsize=None)
def _fffd_pair():
    """clean_text=False keeps U+FFFD, so the NUMBER of replacement characters is visible."""
    hf = hf_from_tokens(_FFFD_VOCAB, clean_text=False, max_input_chars_per_word=12)
    t = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(_FFFD_VOCAB), clean_text=False,
                                  max_input_chars_per_word=12)
    return hf, t


@pytest.mark.parametrize("raw,replacements", [
    (b"a\xf0\x9f\x98b", 1),          # truncated 4-byte sequence: ONE maximal subpart
    (b"a\xe2\x82b", 1),              # truncated 3-byte sequence
    (b"a\xed\xa0\x80b", 3),          # surrogate: E0..ED rule, three subparts
    (b"a\xc0\xafb", 2),              # overlong: C0 is never valid
    (b"a\xe0\x80\x80b", 3),          # overlong 3-byte
    (b"a\xf4\x90\x80\x80b", 4),      # above U+10FFFF
    (b"a\xf0\x90\x80\xf0\x90\x80b", 2),
    (b"a\xff\xfeb", 2),
    (b"a\x80\x80\x80b", 3),          # lone continuation bytes
])
def test_maximal_subpart_rule(raw, replacements):
    hf, t = _fffd_pair()
    assert raw.decode("utf-8", "replace").count("\ufffd") == replacements
    expected = [3] + [8] * replacements + [6]
    assert hf_ids_of_bytes(hf, [raw]) == [expected]
    assert t.encode(pa.array([raw], pa.binary())).to_list() == [expected]


def test_truncated_sequence_never_borrows_the_next_documents_bytes():
    """E4 B8 | AD: split across two documents it is not U+4E2D; each end is a boundary."""
    docs = [b"a\xe4\xb8", b"\xadb", b"\xf0\x9f\x98", b"\x80", b"\xe4", b"\xb8\xad"]
    expected = hf_ids_of_bytes(hf_uncased(), docs)
    assert 1746 not in sum(expected, [])  # the id of 中 appears nowhere
    for name, arr in _binary_variants(docs):
        assert tok().encode(arr).to_list() == expected, name
    for layout in (pa.binary(), pa.large_binary()):
        full = pa.array(docs, layout)
        for k in range(len(docs)):
            assert tok().encode(full.slice(k, 1)).to_list() == [expected[k]]


@pytest.mark.slow
@FUZZ
@given(_raw_docs)
def test_fuzz_random_bytes_without_clean_text_equal_hf(docs):
    """With U+FFFD kept, its count decides word lengths and ids: the rule is exact."""
    hf, t = _fffd_pair()
    expected = hf_ids_of_bytes(hf, docs)
    assert t.encode(pa.array(docs, pa.large_binary())).to_list() == expected


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=12), st.data())
def test_fuzz_arrow_layouts_never_crash_and_agree(docs, data):
    """Random bytes, random nulls, random slices: every layout gives the ids of the
    documents it holds (checked against the plain list path)."""
    nulls = data.draw(st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    docs = [None if n else d for d, n in zip(docs, nulls)]
    full = pa.array(docs, pa.large_binary())
    lo = data.draw(st.integers(0, len(docs)))
    hi = data.draw(st.integers(lo, len(docs)))
    expected = tok().encode(docs[lo:hi]).to_list()
    for arr in (full.slice(lo, hi - lo), pa.array(docs, pa.binary()).slice(lo, hi - lo)):
        enc = tok().encode(arr)
        assert enc.to_list() == expected
        out = tok()(arr, max_length=6, stride=2)
        assert np.unique(out.metadata[:, 0]).tolist() == list(range(hi - lo))


def test_native_binding_refuses_malformed_buffers():
    """Offsets and bitmaps that would read outside the buffers are ValueErrors."""
    t = tok()
    vb, nb = t.kernel_model.vocab_blob, t.kernel_model.norm_blob
    data = np.frombuffer(b"abcdef", np.uint8)
    ok32 = np.array([0, 3, 6], np.int32)
    cases = [
        (_ext.encode32, np.array([-1, 3], np.int32), data, None, 0, "outside the data"),
        (_ext.encode32, np.array([0, 7], np.int32), data, None, 0, "outside the data"),
        (_ext.encode64, np.array([0, 5, 3], np.int64), data, None, 0, "non-decreasing"),
        (_ext.encode64, np.array([], np.int64), data, None, 0, "must not be empty"),
        (_ext.encode32, np.zeros(100, np.int32), data, np.array([255], np.uint8), 0, "too short"),
        (_ext.encode32, ok32, data, np.array([255], np.uint8), 7, "too short"),
    ]
    for fn, off, d, validity, voff, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn(vb, nb, 100, off, d, validity, voff, 1)
    for blob, msg in ((np.zeros(8, np.uint8), "too small"), (nb, "not a daskwp vocabulary"),
                      (vb[: len(vb) // 2].copy(), "truncated")):
        with pytest.raises(ValueError, match=msg):
            _ext.encode32(blob, nb, 100, ok32, data, None, 0, 1)
    with pytest.raises(ValueError, match="not a daskwp normalization"):
        _ext.encode32(vb, vb, 100, ok32, data, None, 0, 1)


def test_native_binding_refuses_negative_validity_offset():
    code = textwrap.dedent("""
        import numpy as np, daskwp
        from daskwp import _ext
        t = daskwp.WordPieceTokenizer()
        try:
            _ext.encode32(t.kernel_model.vocab_blob, t.kernel_model.norm_blob, 100, np.array([0, 1], np.int32),
                          np.frombuffer(b"a", np.uint8), np.array([255], np.uint8),
                          -(1 << 40), 1)
        except ValueError as e:
            print("ValueError", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ValueError"), (r.returncode, r.stderr)


# ---------------------------------------------------------------------------------------
# Huge inputs: exact output, time and memory bounded (each in a fresh process)
# ---------------------------------------------------------------------------------------
_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import numpy as np, pyarrow as pa, daskwp
    case = sys.argv[1]
    tok = daskwp.WordPieceTokenizer()
    def rss():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res = {}
    if case == "doc100mb":
        unit = json.loads(sys.argv[2]).encode("utf-8", "surrogatepass") + b"\\xff\\xfe "
        reps = 100_000_000 // len(unit)
        arr = pa.array([unit * reps], pa.large_binary())
        res["base"] = rss()
        t0 = time.perf_counter()
        enc = tok.encode(arr)
        res["encode_s"] = time.perf_counter() - t0
        unit_ids = tok.encode(pa.array([unit], pa.binary())).token_ids
        res["exact"] = bool(np.array_equal(enc.token_ids, np.tile(unit_ids, reps)))
        res["n_tokens"] = int(len(enc.token_ids))
        t0 = time.perf_counter()
        out = tok(arr, max_length=128, stride=16)
        res["windows_s"] = time.perf_counter() - t0
        res["rows"] = int(out.input_ids.shape[0])
        res["bytes"] = len(unit) * reps
    elif case == "word40mb":
        word = "ab" * 20_000_000
        arr = pa.array([word, "x " + word + " y"], pa.large_string())
        res["base"] = rss()
        t0 = time.perf_counter()
        res["default"] = [x[:5] for x in tok.encode(arr).to_list()]
        long = daskwp.WordPieceTokenizer(max_input_chars_per_word=2**31 - 1)
        enc = long.encode(arr)
        res["encode_s"] = time.perf_counter() - t0
        first = enc[0]
        res["lengths"] = enc.lengths.tolist()
        res["head"] = first[:3].tolist()
        res["distinct_middle"] = np.unique(first[1:-1]).tolist()
        res["last"] = int(first[-1])
        res["second_ends"] = [enc[1][:2].tolist(), enc[1][-2:].tolist()]
        res["bytes"] = 2 * len(word)
    elif case == "tiny1e6":
        pattern = ["a", "", None, "hi there", "\\x00", " ", "[CLS]", "b\\udc80"]
        texts = pattern * 125_000
        res["base"] = rss()
        t0 = time.perf_counter()
        enc = tok.encode(texts)
        res["encode_s"] = time.perf_counter() - t0
        res["docs"] = len(enc)
        per = tok.encode(pattern).to_list()
        res["exact"] = enc.to_list()[:16] == per + per and bool(
            np.array_equal(enc.lengths, np.tile([len(p) for p in per], 125_000)))
        t0 = time.perf_counter()
        out = tok(texts, max_length=8)
        res["windows_s"] = time.perf_counter() - t0
        res["rows"] = int(out.input_ids.shape[0])
        res["logids_ok"] = bool(np.array_equal(out.metadata[:, 0], np.arange(len(texts))))
        res["bytes"] = sum(len(t.encode("utf-8", "surrogatepass")) for t in pattern if t) * 125_000
    res["peak"] = rss()
    print(json.dumps(res))
""")


def _child(case, *args, timeout=300):
    r = subprocess.run([sys.executable, "-c", _CHILD, case, *args], capture_output=True,
                       text=True, timeout=timeout, cwd=REPO)
    assert r.returncode == 0, f"{case} child failed (rc {r.returncode}):\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_100mb_single_document():
    unit = "Hello, wörld! naïve CAFÉ 中文 [SEP]x \ud800 ok\x00k 12:30 "
    res = _child("doc100mb", json.dumps(unit))
    unit_b = as_bytes(unit) + b"\xff\xfe "
    unit_ids = hf_ids_of_bytes(hf_uncased(), [unit_b])[0]
    assert res["exact"], "the 100 MB document is not its unit's ids repeated"
    assert res["n_tokens"] == len(unit_ids) * (100_000_000 // len(unit_b))
    L, step = 126, 110
    n = res["n_tokens"]
    assert res["rows"] == 1 + -(-(n - L) // step)
    # Memory: input held twice at most (Python bytes + Arrow), ids, and the window rows.
    grown = res["peak"] - res["base"]
    assert grown < 8 * res["bytes"], f"peak grew by {grown / 1e6:.0f} MB for 100 MB of text"
    assert res["encode_s"] < 60 and res["windows_s"] < 60, res


@pytest.mark.slow
def test_40mb_single_word():
    res = _child("word40mb")
    v = tok().vocab
    unk, aba, ba, b = (v.token_to_id(t) for t in ("[UNK]", "aba", "##ba", "##b"))
    x, y = v.token_to_id("x"), v.token_to_id("y")
    # Default limit (100 characters): the whole word is one [UNK].
    assert res["default"] == [[unk], [x, unk, y]]
    # No limit: greedy WordPiece all the way; HF gives the same on a short version.
    assert hf_encode(hf_from_tokens(v.tokens, max_input_chars_per_word=10**6),
                     ["ab" * 1000]) == [[aba] + [ba] * 998 + [b]]
    assert res["lengths"] == [20_000_000, 20_000_002]
    assert res["head"] == [aba, ba, ba] and res["distinct_middle"] == [ba] and res["last"] == b
    assert res["second_ends"] == [[x, aba], [b, y]]
    grown = res["peak"] - res["base"]
    assert grown < 12 * res["bytes"], f"peak grew by {grown / 1e6:.0f} MB for 80 MB of text"


@pytest.mark.slow
def test_a_million_tiny_documents():
    res = _child("tiny1e6")
    assert res["docs"] == 1_000_000 and res["exact"]
    assert res["rows"] == 1_000_000 and res["logids_ok"]
    assert res["encode_s"] < 30 and res["windows_s"] < 30, res
    assert res["peak"] - res["base"] < 1_500_000_000, res


# ---------------------------------------------------------------------------------------
# Vocabularies (what test_core_cases.py does not cover)
# ---------------------------------------------------------------------------------------
def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _names_file(exc_info, path: Path):
    msg = str(exc_info.value)
    assert str(path) in msg or path.name in msg, f"error does not name the file: {msg!r}"


@pytest.mark.parametrize("name,data,pattern", [
    ("invalid_utf8_vocab.txt", b"[UNK]\nhello\nab\xffc\nworld\n", r"line 3: invalid UTF-8"),
    ("latin1_vocab.txt", "[UNK]\ncafé\n".encode("latin-1"), r"line 2: invalid UTF-8"),
    ("utf16_vocab.txt", "[UNK]\nhello\n".encode("utf-16"), r"line 1: invalid UTF-8"),
    ("binary_vocab.txt", bytes(range(256)) * 4, r"invalid UTF-8"),
    ("whitespace_only_vocab.txt", b"  \n\t\n\r\n", r"is empty"),
    ("cr_only_vocab.txt", b"[PAD]\r[UNK]\r[CLS]\rhello\r", r"no unknown token '\[UNK\]'"),
    ("lowercase_unk_vocab.txt", b"[unk]\nhello\n", r"no unknown token '\[UNK\]'"),
])
def test_bad_vocab_txt_is_a_clear_error_naming_the_file(tmp_path, name, data, pattern):
    p = _write(tmp_path / name, data)
    with pytest.raises(ValueError, match=pattern) as e:
        daskwp.WordPieceTokenizer(str(p))
    _names_file(e, p)


def test_vocab_with_nul_and_unusual_tokens_matches_hf(tmp_path):
    """Odd but valid UTF-8 lines are tokens like any other (HF reads them the same way)."""
    from tokenizers import models
    lines = ["[UNK]", "[CLS]", "[SEP]", "hel\x00lo", "hello", "\u00a0x", "##", "[UNK]", "a b",
             "\ufffd", "##s", "trailing   ", "\u200b", "s"]
    p = _write(tmp_path / "vocab.txt", ("\n".join(lines) + "\n").encode("utf-8"))
    hf_vocab = models.WordPiece.read_file(str(p))
    v = daskwp.Vocabulary.from_file(p)
    for token, i in hf_vocab.items():
        assert v.token_to_id(token) == i, token
    assert v.unk_id == 7  # the duplicated [UNK] keeps its last id, as HF
    texts = ["hello hellos trailing a b [UNK] s", "hel\x00lo \ufffd ## x"]
    assert daskwp.WordPieceTokenizer(v).encode(texts).to_list() == \
        hf_encode(hf_from_tokens(hf_vocab), texts)


def test_odd_vocabulary_survives_pickling_to_workers(tmp_path):
    """Duplicates, empty lines and trimmed tokens keep their ids when the vocabulary is
    shipped to Dask workers (pickled)."""
    import pickle
    lines = ["[PAD]", "", "[UNK]", "hello", "world ", "hello", "[CLS]", "[SEP]", "", "##s",
             "[UNK]", "world"]
    p = _write(tmp_path / "vocab.txt", ("\n".join(lines) + "\n").encode("utf-8"))
    v = daskwp.Vocabulary.from_file(p)
    again = pickle.loads(pickle.dumps(v))
    for t in set(lines):
        assert again.token_to_id(t.rstrip()) == v.token_to_id(t.rstrip()), t
    assert (again.unk_id, again.token_to_id("hello"), again.token_to_id("world")) == (10, 5, 11)
    texts = ["hello worlds xyz [UNK]", "", None]
    expected = hf_encode(hf_from_tokens({t.rstrip(): i for i, t in enumerate(lines)}),
                         texts)
    assert daskwp.WordPieceTokenizer(again).encode(texts).to_list() == expected
    t2 = pickle.loads(pickle.dumps(daskwp.WordPieceTokenizer(v)))
    assert t2.encode(texts).to_list() == expected


def _tokenizer_json(tmp_path: Path, model, name="tokenizer.json", top=None) -> Path:
    spec = top if top is not None else {"version": "1.0", "added_tokens": [], "model": model}
    return _write(tmp_path / name, json.dumps(spec).encode("utf-8"))


@pytest.mark.parametrize("model,pattern", [
    ({"type": "BPE", "vocab": {"[UNK]": 0, "a": 1}, "merges": []}, r"'BPE' model"),
    ({"type": "Unigram", "vocab": [["[UNK]", 0.0]], "unk_id": 0}, r"'Unigram' model"),
    ({"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}, r"'WordLevel' model"),
    ({"vocab": {"[UNK]": 0}}, r"WordPiece"),
    ({"type": "WordPiece", "vocab": {}}, r"empty"),
    ({"type": "WordPiece", "vocab": {"a": 0, "##a": 1}}, r"no unknown token"),
])
def test_tokenizer_json_of_another_model_is_a_clear_error(tmp_path, model, pattern):
    p = _tokenizer_json(tmp_path, model)
    with pytest.raises(ValueError, match=pattern) as e:
        daskwp.Vocabulary.from_file(p)
    _names_file(e, p)
    with pytest.raises(ValueError, match=pattern):  # the model folder too
        daskwp.WordPieceTokenizer.from_pretrained(tmp_path)


def test_tokenizer_json_not_json(tmp_path):
    p = _write(tmp_path / "tokenizer.json", b"{\"model\": {\"type\": \"WordPiece\", ")
    with pytest.raises(ValueError, match="not valid JSON") as e:
        daskwp.Vocabulary.from_file(p)
    _names_file(e, p)


def test_tokenizer_json_top_level_not_an_object(tmp_path):
    p = _tokenizer_json(tmp_path, None, top=[1, 2, 3])
    with pytest.raises(ValueError) as e:
        daskwp.Vocabulary.from_file(p)
    _names_file(e, p)


@pytest.mark.parametrize("vocab", [
    {"[UNK]": 0, "a": 1, "b": -1},        # HF: invalid value: integer `-1`, expected u32
    {"[UNK]": 0, "a": "1"},               # HF: invalid type: string "1", expected u32
    {"[UNK]": 0, "a": 1.5},
    {"[UNK]": 0, "a": 10**12},            # HF: expected u32
], ids=["negative", "string", "float", "huge"])
def test_tokenizer_json_bad_ids_are_clear_errors(tmp_path, vocab):
    p = _tokenizer_json(tmp_path, {"type": "WordPiece", "vocab": vocab, "unk_token": "[UNK]"})
    with pytest.raises(ValueError) as e:
        daskwp.Vocabulary.from_file(p)
    _names_file(e, p)


def test_tokenizer_json_two_tokens_with_one_id_match_hf(tmp_path):
    from tokenizers import Tokenizer
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "hi": 3, "world": 4}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": {"type": "BertNormalizer", "clean_text": True,
                           "handle_chinese_chars": True, "strip_accents": None,
                           "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": None,
            "decoder": None,
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                      "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                      "vocab": vocab}}
    p = _write(tmp_path / "tokenizer.json", json.dumps(spec).encode())
    expected = Tokenizer.from_file(str(p)).encode("hello hi world x",
                                                  add_special_tokens=False).ids
    assert expected == [3, 3, 4, 0]
    assert daskwp.WordPieceTokenizer(p).encode(["hello hi world x"]).to_list() == [expected]


def test_vocab_errors_through_the_accessor_and_the_cli(tmp_path, capsys):
    from daskwp.cli import main
    missing = tmp_path / "nope" / "vocab.txt"
    with pytest.raises((FileNotFoundError, ValueError), match="nope"):
        pd.Series(["a"]).wordpiece.tokenize(vocab=str(missing))
    bpe = _tokenizer_json(tmp_path, {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                          name="bpe.json")
    with pytest.raises(ValueError, match="'BPE' model"):
        pd.Series(["a"]).wordpiece.tokenize(vocab=str(bpe))
    inp = _write(tmp_path / "in.txt", b"a b\n")
    for vocab, needle in ((missing, "nope"), (bpe, "bpe.json"),
                          (_write(tmp_path / "bad_vocab.txt", b"[UNK]\n\xff\n"), "bad_vocab.txt")):
        rc = main(["tokenize", str(inp), str(tmp_path / "out"), "--scheduler", "synchronous",
                   "--vocab", str(vocab), "-q"])
        err = capsys.readouterr().err
        assert rc == 2 and needle in err, err
        assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------
# Parameters (the tok(...) window parameters are in test_windows.py)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(max_input_chars_per_word=0), ValueError, r"max_input_chars_per_word.*\[1, .*got 0"),
    (dict(max_input_chars_per_word=-3), ValueError, r"max_input_chars_per_word.*got -3"),
    (dict(max_input_chars_per_word=1.5), ValueError, r"max_input_chars_per_word.*got 1\.5"),
    (dict(max_input_chars_per_word=True), ValueError, r"max_input_chars_per_word.*got True"),
    (dict(max_input_chars_per_word=2**31), ValueError, r"max_input_chars_per_word"),
    (dict(num_threads=-1), ValueError, r"num_threads.*got -1"),
    (dict(num_threads=1.5), ValueError, r"num_threads.*got 1\.5"),
    (dict(lowercase="yes"), TypeError, r"lowercase must be True or False, got 'yes'"),
    (dict(lowercase=None), TypeError, r"lowercase must be True or False, got None"),
    (dict(strip_accents="no"), TypeError, r"strip_accents must be True or False"),
    (dict(clean_text=1), TypeError, r"clean_text must be True or False, got 1"),
    (dict(handle_chinese_chars="n"), TypeError, r"handle_chinese_chars must be True or False"),
])
def test_bad_tokenizer_settings(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        daskwp.WordPieceTokenizer(**kwargs)


@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(max_length=128.0), TypeError, r"max_length must be an integer, got 128\.0"),
    (dict(max_length="128"), TypeError, r"max_length must be an integer, got '128'"),
    (dict(stride=True), TypeError, r"stride must be an integer, got True"),
    (dict(max_length=-5), ValueError, r"max_length.*got -5"),
    (dict(max_length=0, add_special_tokens=False), ValueError, r"max_length.*got 0"),
    (dict(stride=-1), ValueError, r"stride must be in \[0, 126\).*got -1"),
    (dict(max_length=10, stride=8), ValueError, r"stride must be in \[0, 8\).*got 8"),
    (dict(max_length=10, stride=10, add_special_tokens=False), ValueError,
     r"stride must be in \[0, 10\).*got 10"),
    (dict(padding="max"), ValueError, r"padding must be .*got 'max'"),
    (dict(truncation="yes"), (TypeError, ValueError), r"truncation.*'yes'"),
    (dict(max_lenght=8), TypeError, r"unexpected keyword.*max_lenght"),
    (dict(return_tensors="pt"), TypeError, r"unexpected keyword.*return_tensors"),
    (dict(max_input_chars_per_word=0), ValueError, r"max_input_chars_per_word.*got 0"),
    pytest.param(dict(vocab=42), TypeError, r"vocab must be .*got int"),
])
def test_bad_accessor_parameters_fail_when_building(kwargs, exc, pattern):
    import dask.dataframe as dd
    ddf = dd.from_pandas(pd.DataFrame({"text": ["a b", "c", None]}), npartitions=2)
    with pytest.raises(exc, match=pattern):
        ddf["text"].wordpiece.tokenize(**kwargs)
    with pytest.raises(exc, match=pattern):  # eager pandas accessor: the same checks
        pd.Series(["a b"]).wordpiece.tokenize(**kwargs)


@pytest.mark.parametrize("args,needles", [
    (["--max-length", "2"], ["max_length", "[3, ", "got 2"]),
    (["--max-length", "-5"], ["max_length", "-5"]),
    (["--max-length", "0", "--no-special-tokens"], ["max_length", "got 0"]),
    (["--stride", "-1"], ["stride", "-1"]),
    (["--max-length", "4", "--stride", "4", "--no-special-tokens"],
     ["stride must be in [0, 4)", "got 4"]),
    (["--max-length", "1.5"], ["--max-length", "'1.5'"]),
    (["--set", "stride=2.5"], ["stride", "2.5"]),
    (["--max-input-chars-per-word", "0"], ["max_input_chars_per_word", "0"]),
    (["--padding", "longest"], ["--padding", "'longest'"]),
    (["--set", "truncation=maybe"], ["truncation", "'maybe'"]),
    (["--set", "return_tensors=pt"], ["return_tensors"]),
    (["--partition-size=-1MB"], ["partition_size", "'-1MB'"]),
])
def test_bad_cli_parameters(tmp_path, capsys, args, needles):
    inp = _write(tmp_path / "in.txt", b"a b c\n")
    rc = _cli(["tokenize", str(inp), str(tmp_path / "out"), "--scheduler", "synchronous",
               *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "out").exists()


def _cli(argv) -> int:
    """``daskwp`` in process; argparse's own errors exit with status 2 too."""
    from daskwp.cli import main
    try:
        return main([str(a) for a in argv])
    except SystemExit as e:
        return e.code


# ---------------------------------------------------------------------------------------
# Batch jobs: invalid bytes, accounting, a failing partition
# ---------------------------------------------------------------------------------------
def test_cli_text_input_with_invalid_utf8_loses_nothing(tmp_path, capsys):
    from daskwp.cli import main
    docs = [b"hello \xff world", b"\xed\xa0\x80x", b"", b"\xf0\x9f\x98", b"  ", b"\x00\x01",
            b"caf\xc3\xa9 \xc3", b"[CLS] \xe4\xb8\xad\xe6\x96\x87", b"\r", b"last"]
    inp = _write(tmp_path / "in.txt", b"\n".join(docs))  # no final newline: still a document
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "--json",
               "--max-length", "8", "--stride", "2", "--partition-size", "16B"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["documents"] == len(docs)
    assert sorted(out.glob("part-*.parquet"))
    # padded rows are stored trimmed (docs/design.md §3.3): read back as written
    table = daskwp.read_tokenized(out).to_table()
    exp = tok()(pa.array(docs, pa.binary()), max_length=8, stride=2)
    assert table.num_rows == summary["rows"] == exp.input_ids.shape[0]
    np.testing.assert_array_equal(table.column("logID").to_numpy(), exp.metadata[:, 0])
    ids = np.stack(table.column("input_ids").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(ids, exp.input_ids)
    hf = hf_ids_of_bytes(hf_uncased(), docs)
    assert tok().encode(pa.array(docs, pa.binary())).to_list() == hf
    assert summary["tokens"] == sum(len(h) for h in hf)


def test_cli_parquet_binary_column_with_invalid_utf8(tmp_path, capsys):
    docs = [b"\xffhello", None, b"", b"w\xc3rld \xe4\xb8\xad", b"\xed\xa0\x80"] * 30
    pq.write_table(pa.table({"text": pa.array(docs, pa.binary())}), tmp_path / "in.parquet",
                   row_group_size=40)
    out = tmp_path / "out"
    rc = _cli(["tokenize", tmp_path / "in.parquet", out, "--scheduler", "synchronous",
               "--json", "--max-length", "6", "--stride", "1", "--partition-size", "1B"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["documents"] == len(docs) and summary["partitions"] > 1
    assert sorted(out.glob("part-*.parquet"))
    # padded rows are stored trimmed (docs/design.md §3.3): read back as written
    table = daskwp.read_tokenized(out).to_table()
    exp = tok()(pa.array(docs, pa.binary()), max_length=6, stride=1)
    np.testing.assert_array_equal(table.column("logID").to_numpy(), exp.metadata[:, 0])
    np.testing.assert_array_equal(np.stack(table.column("input_ids").to_numpy(
        zero_copy_only=False)), exp.input_ids)


def test_dask_binary_column_with_invalid_utf8():
    """A binary[pyarrow] column (the way to carry undecodable bytes in pandas/Dask) gives the
    same rows through Dask, eagerly and as HF on the replacement-decoded text."""
    import dask.dataframe as dd
    docs = [b"hello \xff world", None, b"\xed\xa0\x80x", b"", b"\xf0\x9f\x98ok", b"a"] * 5
    s = pd.Series(pd.arrays.ArrowExtensionArray(pa.array(docs, pa.binary())), name="text")
    eager = s.wordpiece.tokenize(max_length=6, stride=1)
    lazy = dd.from_pandas(s, npartitions=4).wordpiece.tokenize(max_length=6, stride=1)
    meta = lazy.metadata.compute(scheduler="sync")
    np.testing.assert_array_equal(meta.to_numpy(), eager.metadata.to_numpy())
    np.testing.assert_array_equal(lazy.input_ids.compute(scheduler="sync"), eager.input_ids)
    assert sorted(set(meta["logID"])) == list(range(len(docs)))
    got = daskwp.stitch(eager.input_ids, eager.metadata.to_numpy())
    assert [list(g) for g in got] == hf_ids_of_bytes(hf_uncased(), docs)


def _slow_identity(part):
    import time
    time.sleep(0.2)
    return part


@pytest.mark.slow
def test_dask_accessor_survives_a_killed_worker(tmp_path):
    """Kill a worker process while ``.wordpiece.tokenize(...).to_parquet`` runs on a
    process cluster: Dask reruns the lost tasks; the dataset equals the eager result with
    every logID exactly once. (The CLI's version: test_cli.py.)"""
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    docs = [f"document {i} with some words \xff and {'x' * (i % 7)}" if i % 11 else None
            for i in range(2400)]
    s = pd.Series(docs, dtype=object, name="text")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        ds = dd.from_pandas(s, npartitions=48).map_partitions(_slow_identity, meta=s.iloc[:0])
        res = ds.wordpiece.tokenize(max_length=8, stride=2)
        out = tmp_path / "out"

        def executing():
            return any(w.get("executing") for w in client.run(
                lambda dask_worker: {"executing": len(dask_worker.state.executing)}).values())

        # some partitions done, some running
        _, killed = run_killing_a_worker(cluster, lambda: res.to_parquet(str(out)), executing,
                                         timeout=60, settle=1.0, poll=0.05)
    assert killed, "the job ended before a worker could be killed"
    frame = daskwp.read_tokenized(out).to_pandas().sort_values(["logID", "window"])
    eager = tok()(docs, max_length=8, stride=2)
    np.testing.assert_array_equal(frame[["logID", "start", "stop"]].to_numpy(dtype=np.int64),
                                  eager.metadata)
    ids = np.stack([np.asarray(r) for r in frame["input_ids"]])
    np.testing.assert_array_equal(ids, eager.input_ids)


def test_cli_failing_partition_names_its_number_and_file(tmp_path, capsys):
    from daskwp.cli import main
    d = tmp_path / "in"
    d.mkdir()
    good = "".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(50))
    (d / "a.jsonl").write_text(good)
    (d / "b.jsonl").write_text(good + '{"text": "broken\n' + good)
    # on_bad_row: error (the default rejects the row: tests/test_bad_rows.py)
    rc = main(["tokenize", str(d), str(tmp_path / "out"), "--scheduler", "synchronous", "-q",
               "--on-bad-row", "error"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "b.jsonl" in err, err
    assert "partition 1" in err, err
