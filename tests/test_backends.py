"""One harness, every backend: equal results and equal error text (docs/design.md §8.3).

The fixture ``any_backend`` (tests/conftest.py, the suite's one backend harness) runs each test
on every backend present:

* ``cpu``: the native extension, through the front (``WordPieceTokenizer(device="cpu")``,
  all cores);
* ``emulated-cuda``: the CUDA kernel file compiled by the host C++ compiler, launched by the
  real ``daskwp.backends.cuda`` with a NumPy stand-in for CuPy
  (``daskwp/testing/emulated_cuda.py``), through the front with ``device="gpu"``; needs a C++
  compiler;
* ``reference``: the pure-Python tokenizer (``daskwp.backends.reference``); encode only;
* ``gpu``: the same launcher on a real device with CuPy (marker ``gpu``; skipped cleanly
  without CuPy or a device).

Every result is compared with the **oracle**: the CPU extension called through the backend
protocol (``CPU.encode`` / ``CPU.build_windows``) on one thread. Since every backend must equal
the oracle, all backends equal each other. The tests cover

1. the hand-worked case table of ``tests/test_core_cases.py`` (imported, not copied): ids
   equal the table and the oracle, alone and among neighbours; windows per table config;
2. hypothesis batches of adversarial Unicode (the strategies of ``tests/test_hypothesis.py``)
   plus invalid UTF-8 bytes and lone surrogates, with few examples and a derandomized,
   database-less profile;
3. bad input (invalid UTF-8 as binary Arrow, lone surrogates, None/NaN, empty and
   whitespace-only documents, a 100,000-character word, control characters): equal output;
4. bad parameters (window options, tokenizer settings, input types, and the arguments of the
   window fill itself): the same exception type and the same message on every backend that
   accepts the call.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import daskwp
from conftest import CPUBackend, backend_params, requires_data, vocab_path, windows_dict
from daskwp.backends.cpu import CPU
from daskwp.core.ragged import to_host
from daskwp.core.windows import window_params
from test_core_cases import CASES, VOCABS as CASE_VOCABS

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import test_hypothesis
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    test_hypothesis = None


# The backends come from tests/conftest.py (``any_backend``: cpu, emulated-cuda, reference,
# gpu); ``CPUBackend`` is also the one whose errors the others must repeat.


# ---------------------------------------------------------------------------------------
# The oracle: the CPU extension through the backend protocol, one thread
# ---------------------------------------------------------------------------------------
def oracle_encode(tok, texts) -> list[list[int]]:
    return CPU.encode(tok.kernel_model, texts, 1).to_list()


def oracle_windows(tok, texts, **opts) -> dict[str, np.ndarray]:
    p = window_params(**dict(opts, return_tensors="np"))
    return windows_dict(CPU.build_windows(CPU.encode(tok.kernel_model, texts, 1), tok.vocab,
                                          p, 1))


def assert_windows_equal(got: dict, expected: dict, what: str = ""):
    assert sorted(got) == sorted(expected), (what, sorted(got), sorted(expected))
    for key, e in expected.items():
        g = got[key]
        assert g.dtype == e.dtype and g.shape == e.shape, \
            (what, key, g.dtype, e.dtype, g.shape, e.shape)
        if not np.array_equal(g, e):
            bad = np.argwhere(g != e)[:5].tolist()
            pytest.fail(f"{what}: {key} differs at {bad}")


def check(backend, tok, texts, window_options=()):
    """The backend's ids equal the oracle's; so do its windows for each option set."""
    expected = oracle_encode(tok, texts)
    got = backend.encode(tok, texts)
    assert len(got) == len(expected), (len(got), len(expected))
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not bad, (f"{backend.name}: {len(bad)} of {len(expected)} documents differ; "
                     f"first {bad[0]}: got {got[bad[0]][:30]} expected "
                     f"{expected[bad[0]][:30]}")
    if backend.has_windows:
        for opts in window_options:
            assert_windows_equal(backend.windows(tok, texts, **opts),
                                 oracle_windows(tok, texts, **opts), f"{backend.name} {opts}")
    return got


def outcome(fn):
    """("ok", result) or (exception type, message)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the type is the result
        return (type(e), str(e))


WINDOWS = [
    dict(max_length=16, stride=5),
    dict(max_length=16, stride=5, padding=False),
    dict(max_length=128, stride=32, padding="longest", logid_offset=7, mask_dtype="int8"),
    dict(max_length=12, stride=3, truncation=True),
    dict(max_length=9, stride=6, add_special_tokens=False, padding=False),
]


# ---------------------------------------------------------------------------------------
# 1. The case table of test_core_cases
# ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def case_tokenizer(vocab_name: str, opts: tuple) -> daskwp.WordPieceTokenizer:
    return daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(CASE_VOCABS[vocab_name]),
                                     **dict(opts))


def _case_window_options(vocab_name: str) -> list[dict]:
    """Window options that the case vocabulary can fill ([CLS]/[SEP] framing and [PAD]
    padding only where it has them)."""
    tokens = CASE_VOCABS[vocab_name]
    special = "[CLS]" in tokens and "[SEP]" in tokens
    pad = "[PAD]" in tokens
    out = []
    for opts in WINDOWS:
        opts = dict(opts)
        if not special:
            opts["add_special_tokens"] = False
        if not pad:
            opts["padding"] = False
        if opts["max_length"] - (2 if opts.get("add_special_tokens", True) else 0) \
                <= opts["stride"]:
            continue
        out.append(opts)
    return out


@pytest.mark.parametrize("vocab_name,opts,text,expected_tokens",
                         [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_core_case(any_backend, vocab_name, opts, text, expected_tokens):
    tok = case_tokenizer(vocab_name, tuple(sorted(opts.items())))
    expected = [CASE_VOCABS[vocab_name].index(t) for t in expected_tokens]
    assert check(any_backend, tok, [text]) == [expected]
    # Among neighbours (no state may leak across documents, or across GPU chunks).
    batch = ["abcd" + text, text, "", text + "x", None, text]
    got = check(any_backend, tok, batch)
    assert got[1] == got[5] == expected and got[2] == got[4] == []


def test_core_table_per_config(any_backend):
    """Each (vocabulary, options) group of the table as one batch, ids and windows."""
    groups: dict = {}
    for _, vocab_name, opts, text, expected_tokens in CASES:
        key = (vocab_name, tuple(sorted(opts.items())))
        ids = [CASE_VOCABS[vocab_name].index(t) for t in expected_tokens]
        groups.setdefault(key, []).append((text, ids))
    for (vocab_name, opts), items in groups.items():
        tok = case_tokenizer(vocab_name, opts)
        got = check(any_backend, tok, [t for t, _ in items], _case_window_options(vocab_name))
        assert got == [e for _, e in items], (vocab_name, opts)


@pytest.mark.parametrize("unit", ["chars", "bytes"])
def test_core_table_offsets_equal_cpu(any_backend, unit):
    """Offsets and word ids (docs/design.md §2.9) of each group of the table, and of the
    groups' texts among neighbours, equal the CPU's."""
    if any_backend.name == "reference":
        pytest.skip("the reference backend has no offsets (offsets: cpu, emulated-cuda, gpu)")
    groups: dict = {}
    for _, vocab_name, opts, text, _ in CASES:
        groups.setdefault((vocab_name, tuple(sorted(opts.items()))), []).append(text)
    for (vocab_name, opts), texts in groups.items():
        tok = case_tokenizer(vocab_name, opts)
        batch = texts + ["abcd" + texts[0], "", None, texts[-1] + "x"]
        want = tok.encode(batch, return_offsets_mapping=True, return_word_ids=True,
                          offsets_unit=unit)
        got = any_backend.route(tok).encode(batch, return_offsets_mapping=True,
                                            return_word_ids=True, offsets_unit=unit)
        for name in ("token_ids", "offsets", "offset_mapping", "word_ids"):
            np.testing.assert_array_equal(to_host(getattr(got, name)), getattr(want, name),
                                          err_msg=f"{vocab_name} {opts} {name}")


# ---------------------------------------------------------------------------------------
# 2. Hypothesis: adversarial Unicode
# ---------------------------------------------------------------------------------------
# A tiny vocabulary in which U+FFFD is a token, so that with clean_text=False the number of
# U+FFFD an ill-formed byte sequence decodes to shows in the ids.
FFFD_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##a", "b", "##b", "ab",
              "\ufffd", "##\ufffd", "é", "##é", "中", "[", "]", "#", "x", "##x"]


@functools.lru_cache(maxsize=None)
def fffd_tokenizer(clean_text: bool, max_input_chars_per_word: int = 100):
    return daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(FFFD_VOCAB),
                                     clean_text=clean_text,
                                     max_input_chars_per_word=max_input_chars_per_word)


@functools.lru_cache(maxsize=None)
def shared_tokenizer(vocab_name: str, lowercase: bool, **flags):
    return daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_file(str(vocab_path(vocab_name))),
                                     lowercase=lowercase, **flags)


if test_hypothesis is not None:
    _PROFILE = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                        print_blob=True,
                        suppress_health_check=[HealthCheck.function_scoped_fixture,
                                               HealthCheck.too_slow,
                                               HealthCheck.data_too_large])
    _window_opts = st.sampled_from(WINDOWS)

    # The fast tier runs the properties on the CPU extension; the full suite on every backend.
    @requires_data
    @pytest.mark.parametrize("any_backend", backend_params(fast={"cpu"}), indirect=True)
    @_PROFILE
    @given(texts=test_hypothesis.batches("bert-base-uncased"), opts=_window_opts)
    def test_hypothesis_uncased(any_backend, texts, opts):
        check(any_backend, shared_tokenizer("bert-base-uncased", True), texts, [opts])

    @requires_data
    @pytest.mark.slow
    @_PROFILE
    @given(texts=test_hypothesis.batches("bert-base-multilingual-cased"), opts=_window_opts)
    def test_hypothesis_multilingual_cased(any_backend, texts, opts):
        check(any_backend, shared_tokenizer("bert-base-multilingual-cased", False), texts,
              [opts])

    @requires_data
    @pytest.mark.parametrize("any_backend", backend_params(fast={"cpu"}), indirect=True)
    @settings(_PROFILE, max_examples=40)
    @given(texts=test_hypothesis.batches("bert-base-uncased"), lowercase=st.booleans(),
           strip_accents=st.sampled_from([None, True, False]), clean_text=st.booleans(),
           handle_chinese_chars=st.booleans())
    def test_hypothesis_normalizer_flags(any_backend, texts, lowercase, strip_accents,
                                         clean_text, handle_chinese_chars):
        tok = shared_tokenizer("bert-base-uncased", lowercase, strip_accents=strip_accents,
                               clean_text=clean_text, handle_chinese_chars=handle_chinese_chars)
        check(any_backend, tok, texts)

    # Ill-formed UTF-8 and lone surrogates (test_hypothesis draws well-formed text only).
    # Pieces of FFFD_VOCAB words, so that most words tokenize and a wrong U+FFFD count shows.
    _UTF8 = [b"a", b"ab", b"b", b"x", b" ", b"\t", b"\xc3\xa9", b"\xe4\xb8\xad", b"[CLS]",
             b"#", b"\xef\xbf\xbd", b"\xf0\x9f\x98\x80", b"\xcc\x81", b"\x00"]
    _ILL_FORMED = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc0", b"\xc1\xbf", b"\xc3",
                   b"\xe2\x82", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                   b"\xf0\x9f\x98", b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xf8\x88\x80\x80\x80",
                   b"\xf0\x9f", b"\xe1\x80", b"\xf1\x80\x80"]
    _bytes_doc = st.lists(st.one_of(st.sampled_from(_UTF8), st.sampled_from(_UTF8),
                                    st.sampled_from(_ILL_FORMED), st.sampled_from(_ILL_FORMED),
                                    st.binary(min_size=1, max_size=3)),
                          max_size=14).map(b"".join)
    _surrogate_doc = st.lists(st.one_of(st.sampled_from(["a", "b", "ab", " ", "é", "中", "x"]),
                                        st.characters(min_codepoint=0xD800,
                                                      max_codepoint=0xDFFF),
                                        st.text(max_size=2)),
                              max_size=14).map("".join)

    @pytest.mark.parametrize("any_backend", backend_params(fast={"cpu"}), indirect=True)
    @settings(_PROFILE, max_examples=100)
    @given(texts=st.lists(st.one_of(st.none(), _bytes_doc, _surrogate_doc), min_size=1,
                          max_size=6),
           clean_text=st.booleans(), as_arrow=st.booleans(),
           max_chars=st.sampled_from([100, 6]))
    def test_hypothesis_ill_formed_utf8(any_backend, texts, clean_text, as_arrow, max_chars):
        if as_arrow:   # a binary Arrow column of the same bytes
            texts = pa.array([t.encode("utf-8", "surrogatepass") if isinstance(t, str) else t
                              for t in texts], type=pa.binary())
        check(any_backend, fffd_tokenizer(clean_text, max_chars), texts, [WINDOWS[0]])

else:  # pragma: no cover

    @pytest.mark.skip(reason="hypothesis (or tests/test_hypothesis.py) is not importable")
    def test_hypothesis_suite():
        pass


# ---------------------------------------------------------------------------------------
# 3. Bad input: equal outputs
# ---------------------------------------------------------------------------------------
_INVALID_UTF8 = [b"\xff\xfe abc \xc3", b"\xe2\x82 \xe2\x82\xac\xf0\x9f\x98", None,
                 b"ok \xed\xa0\x80 encoded surrogate", b"\xc0\xaf overlong", b"",
                 b"\xf4\x90\x80\x80 above U+10FFFF", b"caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87",
                 b"a\xffb a\x80\x80b a\xf0\x9f\x98b"]
_SURROGATES = ["a\ud800b", "\udfff", "x\ud83d y", "\ud83d\ude00 two lone halves",
               "\udc80\udcff end", "ok", None]
_CONTROLS = "".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xa0)))


def _bad_inputs():
    binary = pa.array(_INVALID_UTF8, type=pa.binary())
    large = pa.array(_INVALID_UTF8 * 3, type=pa.large_binary())
    return [
        ("invalid-utf8-binary-arrow", binary, "default", {}),
        ("invalid-utf8-large-binary-sliced", large.slice(4, 15), "default", {}),
        ("invalid-utf8-chunked", pa.chunked_array([binary.slice(0, 4), binary.slice(4)]),
         "default", {}),
        ("invalid-utf8-list-of-bytes-and-str", list(_INVALID_UTF8) + ["plain str"],
         "default", {}),
        ("invalid-utf8-fffd-counted", pa.array(_INVALID_UTF8 + [b"a\xffb", b"a\xe2\x82b",
                                                                b"x\xf8\x88\x80\x80\x80x"],
                                               type=pa.binary()), "fffd", {}),
        ("lone-surrogates", _SURROGATES, "default", {}),
        ("lone-surrogates-fffd-counted", _SURROGATES, "fffd", {}),
        ("lone-surrogates-series", pd.Series(_SURROGATES, dtype=object), "default", {}),
        ("none-nan-list", [None, float("nan"), "a b", np.nan, None, "c"], "default", {}),
        ("none-nan-object-series", pd.Series(["a b", None, float("nan"), "c"]), "default",
         {}),
        ("na-string-series", pd.Series(["a b", pd.NA, "c"], dtype="string"), "default", {}),
        ("all-nan-float-series", pd.Series([np.nan, np.nan]), "default", {}),
        ("all-null-arrow", pa.nulls(3, pa.string()), "default", {}),
        ("empty-batch", [], "default", {}),
        ("empty-and-whitespace", ["", " ", "\t\n\r", "\u3000\u00a0\u2028\u2029\u0085",
                                  "\x00\u200b\ufeff", " " * 3000, "", "a"], "default", {}),
        ("only-empty-documents", ["", " ", "\n"], "default", {}),
        ("word-100k-ascii", ["x " + "a" * 100_000 + " y"], "default", {}),
        ("word-100k-accented", ["é" * 50_000 + "e\u0301" * 25_000], "default", {}),
        ("word-100k-cjk", ["中" * 100_000], "default", {}),
        ("word-100k-fffd-noclean", ["a" + "\ufffd" * 100_000], "fffd", {}),
        ("control-characters", [_CONTROLS, "a" + "b".join(_CONTROLS) + "c",
                                "[CLS]" + _CONTROLS + "[SEP]"], "default", {}),
        ("control-characters-noclean", [_CONTROLS, "a" + "b".join(_CONTROLS) + "c"],
         "default", {"clean_text": False}),
    ]


@functools.lru_cache(maxsize=None)
def bad_input_tokenizer(vocab: str, opts: tuple):
    if vocab == "fffd":
        return fffd_tokenizer(**dict(dict(opts), clean_text=False))
    return daskwp.WordPieceTokenizer(**dict(opts))


@pytest.mark.parametrize("texts,vocab,opts",
                         [pytest.param(*c[1:], id=c[0]) for c in _bad_inputs()])
def test_bad_input(any_backend, texts, vocab, opts):
    check(any_backend, bad_input_tokenizer(vocab, tuple(sorted(opts.items()))), texts,
          WINDOWS)


# ---------------------------------------------------------------------------------------
# 4. Bad parameters: the same exception type and message on every backend
# ---------------------------------------------------------------------------------------
_TEXTS = ["a b c d e f g h i j", "", None]
_NO_PAD = ["[UNK]", "[CLS]", "[SEP]", "a", "b"]
_NO_CLS = ["[PAD]", "[UNK]", "a", "b"]

# (id, vocabulary tokens or None for the default, keyword arguments of tok(texts, ...))
WINDOW_ERRORS = [
    ("max_length-2-with-special-tokens", None, dict(max_length=2)),
    ("max_length-0-without-special-tokens", None, dict(max_length=0,
                                                       add_special_tokens=False)),
    ("max_length-2**31", None, dict(max_length=2**31)),
    ("max_length-float", None, dict(max_length=128.0)),
    ("max_length-str", None, dict(max_length="128")),
    ("max_length-bool", None, dict(max_length=True)),
    ("stride-equals-body", None, dict(max_length=8, stride=6)),
    ("stride-equals-body-without-special-tokens", None,
     dict(max_length=9, stride=9, add_special_tokens=False)),
    ("stride-negative", None, dict(stride=-1)),
    ("stride-float", None, dict(stride=2.0)),
    ("truncation-str", None, dict(truncation="sometimes")),
    ("truncation-int", None, dict(truncation=1)),
    ("add_special_tokens-str", None, dict(add_special_tokens="yes")),
    ("padding-str", None, dict(padding="maybe")),
    ("padding-int", None, dict(padding=1)),
    ("return_tensors-tf", None, dict(return_tensors="tf")),
    ("logid_offset-negative", None, dict(logid_offset=-1)),
    ("logid_offset-2**63", None, dict(logid_offset=2**63)),
    ("logid_offset-no-room-for-the-batch", None, dict(logid_offset=2**63 - 1)),
    ("logid_offset-float", None, dict(logid_offset=1.0)),
    ("logid_offset-None", None, dict(logid_offset=None)),
    ("mask_dtype-float32", None, dict(mask_dtype="float32")),
    ("mask_dtype-bogus", None, dict(mask_dtype="bogus")),
    ("unknown-keyword", None, dict(max_len=128)),
    ("padding-without-PAD-token", _NO_PAD, dict(max_length=8)),
    ("special-tokens-without-CLS-token", _NO_CLS, dict(max_length=8)),
]

# (id, keyword arguments of WordPieceTokenizer(vocab, ...))
SETTINGS_ERRORS = [
    ("lowercase-str", dict(lowercase="yes")),
    ("strip_accents-str", dict(strip_accents="no")),
    ("clean_text-None", dict(clean_text=None)),
    ("handle_chinese_chars-int", dict(handle_chinese_chars=1)),
    ("max_input_chars_per_word-0", dict(max_input_chars_per_word=0)),
    ("max_input_chars_per_word-2**31", dict(max_input_chars_per_word=2**31)),
    ("max_input_chars_per_word-float", dict(max_input_chars_per_word=1.5)),
    ("num_threads-negative", dict(num_threads=-1)),
    ("num_threads-str", dict(num_threads="2")),
    ("unknown-setting", dict(do_lower_case=True)),
]


def _decreasing_offsets_arrow():
    """A binary Arrow array with decreasing offsets (pyarrow's cheap validation lets it
    through; ``validate(full=True)`` would refuse it)."""
    return pa.Array.from_buffers(pa.large_binary(), 2,
                                 [None, pa.py_buffer(np.array([0, 4, 2], np.int64).tobytes()),
                                  pa.py_buffer(b"abcdef")])


# (id, texts, keyword arguments of tok.encode(texts, ...), reason the device differs or None)
ENCODE_ERRORS = [
    ("texts-int", 123, {}, None),
    ("texts-list-with-int", ["a", 1], {}, None),
    ("texts-dataframe", pd.DataFrame({"text": ["a"]}), {}, None),
    ("texts-float-series", pd.Series([1.0, np.nan]), {}, None),
    ("texts-int-arrow", pa.array([1, 2]), {}, None),
    ("texts-float-ndarray", np.array([1.0, 2.0]), {}, None),
    ("num_threads-negative", ["a"], dict(num_threads=-1), None),
    ("num_threads-float", ["a"], dict(num_threads=1.0), None),
    ("arrow-decreasing-offsets", _decreasing_offsets_arrow, {}, None),
]

# The window fill itself: (id, token_ids, offsets, the other arguments of
# _ext.build_windows / build_windows_cuda, reason the device differs or None)
_IDS = np.arange(3, dtype=np.int32)
_FILL = (8, 0, False, True, 1, 2, 0, 0, True)     # max_length .. padding
FILL_ERRORS = [
    ("max_length-0", [0, 3], (0,) + _FILL[1:], None),
    ("max_length-2-with-special-tokens", [0, 3], (2,) + _FILL[1:], None),
    ("max_length-2**31", [0, 3], (2**31,) + _FILL[1:], None),
    ("stride-equals-body", [0, 3], (8, 6) + _FILL[2:], None),
    ("offsets-empty", [], _FILL, None),
    ("logid_offset-negative", [0, 3], _FILL[:7] + (-1, True), None),
    ("logid_offset-no-room", [0, 1, 3], _FILL[:7] + (2**63 - 1, True), None),
    ("pad_width-above-max_length", [0, 3], _FILL + (False, 9), None),
    ("pad_width-below-longest-row", [0, 3], _FILL + (False, 2), None),
    ("offsets-past-the-end", [0, 4], _FILL, None),
    ("offsets-negative", [-1, 3], _FILL, None),
    ("offsets-decreasing", [0, 2, 1, 3], _FILL, None),
    ("offsets-and-logid_offset-both-bad", [0, 4], _FILL[:7] + (-1, True), None),
]


def _expect_same_error(backend, call_cpu, call_backend, what):
    expected = outcome(call_cpu)
    assert expected[0] != "ok", f"{what}: the CPU accepted it (not a bad case)"
    got = outcome(call_backend)
    assert got[0] != "ok", f"{what}: {backend.name} accepted it; the CPU raised {expected}"
    assert got == expected, f"{what}: {backend.name} raised {got}, the CPU {expected}"


@pytest.mark.parametrize("tokens,kwargs", [pytest.param(*c[1:], id=c[0])
                                           for c in WINDOW_ERRORS])
def test_window_option_errors(any_backend, tokens, kwargs):
    tok = daskwp.WordPieceTokenizer() if tokens is None else \
        daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(tokens))
    if not any_backend.has_windows:
        pytest.skip("the reference backend has no window fill")
    kw = dict(kwargs)
    kw.setdefault("return_tensors", "np")
    _expect_same_error(any_backend, lambda: CPUBackend().route(tok)(_TEXTS, **kw),
                       lambda: any_backend.route(tok)(_TEXTS, **kw), kwargs)


@pytest.mark.parametrize("kwargs", [pytest.param(c[1], id=c[0]) for c in SETTINGS_ERRORS])
def test_tokenizer_setting_errors(any_backend, kwargs):
    vocab = daskwp.Vocabulary.default()
    _expect_same_error(any_backend, lambda: CPUBackend().make(vocab, **kwargs),
                       lambda: any_backend.make(vocab, **kwargs), kwargs)


@pytest.mark.parametrize("texts,kwargs,reason", [pytest.param(*c[1:], id=c[0])
                                                 for c in ENCODE_ERRORS])
def test_encode_errors(any_backend, request, texts, kwargs, reason):
    # A malformed Arrow array comes from a factory and is never bound to an argument name:
    # pytest prints a failing test's arguments, and printing it aborts the process.
    make = texts if callable(texts) else (lambda: texts)
    if callable(texts) and any_backend.name == "reference":
        pytest.skip("the reference reads Python values, not malformed Arrow buffers")
    if kwargs and any_backend.name == "reference":
        pytest.skip(f"the reference backend takes no {sorted(kwargs)}")
    if reason and any_backend.device == "gpu":
        request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError,
                                              reason=reason))
    tok = daskwp.WordPieceTokenizer()
    if kwargs:
        call = (lambda: any_backend.route(tok).encode(make(), **kwargs))
    else:
        call = (lambda: any_backend.encode(tok, make()))
    _expect_same_error(any_backend, lambda: CPUBackend().route(tok).encode(make(), **kwargs),
                       call, request.node.callspec.id)


@pytest.mark.parametrize("offsets,args,reason", [pytest.param(*c[1:], id=c[0])
                                                 for c in FILL_ERRORS])
def test_window_fill_errors(any_backend, request, offsets, args, reason):
    """The fill is the backends' one shared entry point below the front: the device twin
    takes the arguments of ``_ext.build_windows`` and must refuse what it refuses, alike."""
    if not any_backend.has_windows:
        pytest.skip("the reference backend has no window fill")
    if reason and any_backend.device == "gpu":
        request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError,
                                              reason=reason))
    off = np.array(offsets, dtype=np.int64)
    _expect_same_error(any_backend, lambda: CPUBackend().fill(_IDS, off, *args),
                       lambda: any_backend.fill(_IDS, off, *args), (offsets, args))


def test_logid_offset_may_end_at_int64_max(any_backend):
    tok = daskwp.WordPieceTokenizer()
    if not any_backend.has_windows:
        pytest.skip("the reference backend has no window fill")
    out = any_backend.windows(tok, _TEXTS, max_length=8, logid_offset=2**63 - len(_TEXTS))
    assert out["metadata"][-1, 0] == 2**63 - 1
