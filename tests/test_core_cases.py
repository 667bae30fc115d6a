"""Table-driven WordPiece / normalizer cases on tiny hand-written vocabularies (docs/design.md §1, §5).

Every case states the expected tokens worked out by hand (greedy longest-match-first WordPiece
after BertNormalizer + BertPreTokenizer), and is checked twice: daskwp against that list, and HF
tokenizers (same dict vocabulary, same flags) against that list, so a wrong hand expectation is
caught as surely as a wrong implementation.

The second half covers reading vocabulary files: BOM + CRLF, duplicates, empty lines, trailing
whitespace, and the errors for missing / empty / [UNK]-less files.
"""

from __future__ import annotations

import pytest

import daskwp
from conftest import (
    DATA,
    hf_encode,
    hf_from_tokens,
    hf_tokenizer,
    read_lines,
    requires_data,
    vocab_path,
)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

VOCABS = {
    # Song et al. 2021, "Fast WordPiece Tokenization", running example.
    "paper": SPECIALS + ["a", "abcdx", "##b", "##c", "##cdy", "##dz"],
    # One failure transition pops seven tokens at once ("abcdefg" + "i").
    "pops": ["[UNK]", "[CLS]", "[SEP]", "abcdefgh", "a"] + ["##" + c for c in "bcdefghi"],
    # Greedy longest-match-first is not "fewest pieces": abc + ##d + ##e, not a + ##bcde.
    "greedy": ["[UNK]", "a", "abc", "##bcde", "##d", "##e"],
    # "##" itself is a token; "#" is a punctuation character.
    "hashes": ["[UNK]", "[CLS]", "[SEP]", "##", "#", "a", "##a"],
    "hashes_no_hash": ["[UNK]", "[CLS]", "[SEP]", "##", "a"],
    "punct": ["[UNK]", "[CLS]", "[SEP]", "hello", "world", "!"],
    "length": ["[UNK]", "[CLS]", "[SEP]", "a", "##a", "e", "##e", "é", "##é", "i", "##i", "##\u0307", "中"],
    "accents": ["[UNK]", "[CLS]", "[SEP]", "cafe", "caf", "##é", "Cafe", "naive", "na", "##ï", "##ve"],
    "cjk": ["[UNK]", "[CLS]", "[SEP]", "中", "文", "##文", "ab", "##cd", "cd", "ひらがな", "。", "\U00020000", "a"],
    "control": ["[UNK]", "[CLS]", "[SEP]", "a", "##b", "b"],
    "special": SPECIALS + ["foo", "bar", "##bar", "[", "]", "cl", "##s", "cls", "mask"],
    # No [PAD] and no [MASK]: "[MASK]" / "[PAD]" in text are plain text.
    "special_partial": ["[UNK]", "[CLS]", "[SEP]", "[", "]", "mask", "x"],
    # [UNK] is id 4, [CLS] 3, [SEP] 2: nothing may assume BERT's 100/101/102.
    "unk4": ["hello", "world", "[SEP]", "[CLS]", "[UNK]", "##s"],
}

U = "[UNK]"
A99, A100, A101 = "a" * 99, "a" * 100, "a" * 101


def _a_run(n):
    return ["a"] + ["##a"] * (n - 1)


# (case id, vocab, options, text, expected tokens)
CASES = [
    # --- LinMaxMatch paper example -----------------------------------------------------------
    ("paper-abcdx-whole", "paper", {}, "abcdx", ["abcdx"]),
    ("paper-abcdy", "paper", {}, "abcdy", ["a", "##b", "##cdy"]),
    ("paper-abcdz-3pops", "paper", {}, "abcdz", ["a", "##b", "##c", "##dz"]),
    ("paper-abccdy", "paper", {}, "abccdy", ["a", "##b", "##c", "##cdy"]),
    ("paper-ab", "paper", {}, "ab", ["a", "##b"]),
    ("paper-a", "paper", {}, "a", ["a"]),
    ("paper-suffix-only-b", "paper", {}, "b", [U]),
    ("paper-abcd-fails-at-end", "paper", {}, "abcd", [U]),
    ("paper-abcdxy-fails-after-whole", "paper", {}, "abcdxy", [U]),
    ("paper-abcdzz", "paper", {}, "abcdzz", [U]),
    ("paper-abcdx-abcdz-joined", "paper", {}, "abcdxabcdz", [U]),
    ("paper-fail-midway-then-ok", "paper", {}, "abcq ab", [U, "a", "##b"]),
    ("paper-sentence", "paper", {}, "abcdy abcdz abcdx", ["a", "##b", "##cdy", "a", "##b", "##c", "##dz", "abcdx"]),
    ("paper-upper-uncased", "paper", {}, "ABCDZ", ["a", "##b", "##c", "##dz"]),
    ("paper-upper-cased", "paper", {"lowercase": False}, "ABCDZ", [U]),
    # --- failure pops emitting many tokens ---------------------------------------------------
    ("pops-7-at-once", "pops", {}, "abcdefgi", ["a", "##b", "##c", "##d", "##e", "##f", "##g", "##i"]),
    ("pops-whole", "pops", {}, "abcdefgh", ["abcdefgh"]),
    ("pops-whole-plus-suffix", "pops", {}, "abcdefghi", ["abcdefgh", "##i"]),
    ("pops-end-inside-long-token", "pops", {}, "abcdefg", ["a", "##b", "##c", "##d", "##e", "##f", "##g"]),
    ("pops-fail-midway", "pops", {}, "abcdefgz", [U]),
    ("greedy-not-optimal", "greedy", {}, "abcde", ["abc", "##d", "##e"]),
    ("greedy-unk", "greedy", {}, "abde", [U]),
    # --- "##" in the vocabulary, "#" in text -------------------------------------------------
    ("hashes-one", "hashes", {}, "#", ["#"]),
    ("hashes-two", "hashes", {}, "##", ["#", "#"]),
    ("hashes-inside-word", "hashes", {}, "a##a", ["a", "#", "#", "a"]),
    ("hashes-aa", "hashes", {}, "aa", ["a", "##a"]),
    ("hashes-ab-unk", "hashes", {}, "ab", [U]),
    ("hashes-leading", "hashes", {}, "#a", ["#", "a"]),
    ("hashes-no-hash-token", "hashes_no_hash", {}, "#", [U]),
    ("hashes-no-hash-token-2", "hashes_no_hash", {}, "a## aa", ["a", U, U, U]),
    # --- punctuation missing from the vocabulary ---------------------------------------------
    ("punct-missing", "punct", {}, "hello, world!", ["hello", U, "world", "!"]),
    ("punct-missing-glued", "punct", {}, "hello;world?!", ["hello", U, "world", U, "!"]),
    ("punct-nonascii", "punct", {}, "hello\u00bfworld\u3001", ["hello", U, "world", U]),
    # --- max_input_chars_per_word (characters after normalization) ---------------------------
    ("len-99", "length", {}, A99, _a_run(99)),
    ("len-100", "length", {}, A100, _a_run(100)),
    ("len-101", "length", {}, A101, [U]),
    ("len-101-cased", "length", {"lowercase": False}, A101, [U]),
    ("len-100-between-punct", "length", {}, A100 + "." + A100, _a_run(100) + [U] + _a_run(100)),
    ("len-101-then-cjk", "length", {}, A100 + "中" + A101, _a_run(100) + ["中", U]),
    ("len-e-acute-100-uncased", "length", {}, "é" * 100, ["e"] + ["##e"] * 99),
    ("len-e-acute-101-uncased", "length", {}, "é" * 101, [U]),
    ("len-E-acute-100-uncased", "length", {}, "É" * 100, ["e"] + ["##e"] * 99),
    # 200 raw characters, 100 after accent stripping
    ("len-decomposed-100-uncased", "length", {}, "e\u0301" * 100, ["e"] + ["##e"] * 99),
    ("len-decomposed-101-uncased", "length", {}, "e\u0301" * 101, [U]),
    ("len-e-acute-100-cased", "length", {"lowercase": False}, "é" * 100, ["é"] + ["##é"] * 99),
    ("len-e-acute-101-cased", "length", {"lowercase": False}, "é" * 101, [U]),
    # lowercase without accent stripping: "İ" -> "i" + U+0307, two characters each
    ("len-dotted-I-50", "length", {"strip_accents": False}, "İ" * 50, ["i", "##\u0307"] + ["##i", "##\u0307"] * 49),
    ("len-dotted-I-51", "length", {"strip_accents": False}, "İ" * 51, [U]),
    ("len-dotted-I-51-stripped", "length", {}, "İ" * 51, ["i"] + ["##i"] * 50),
    ("len-custom-5", "length", {"max_input_chars_per_word": 5}, "aaaaa aaaaaa", _a_run(5) + [U]),
    ("len-custom-1", "length", {"max_input_chars_per_word": 1}, "a aa", ["a", U]),
    # --- accents -----------------------------------------------------------------------------
    ("accent-uncased", "accents", {}, "café", ["cafe"]),
    ("accent-uncased-upper", "accents", {}, "Café", ["cafe"]),
    ("accent-uncased-decomposed", "accents", {}, "cafe\u0301", ["cafe"]),
    ("accent-uncased-diaeresis", "accents", {}, "NAÏVE", ["naive"]),
    ("accent-cased-kept", "accents", {"lowercase": False}, "café", ["caf", "##é"]),
    ("accent-cased-capital", "accents", {"lowercase": False}, "Café", [U]),
    ("accent-cased-decomposed", "accents", {"lowercase": False}, "cafe\u0301", [U]),
    ("accent-cased-diaeresis", "accents", {"lowercase": False}, "naïve", ["na", "##ï", "##ve"]),
    ("accent-cased-strip", "accents", {"lowercase": False, "strip_accents": True}, "Café", ["Cafe"]),
    ("accent-lower-nostrip", "accents", {"strip_accents": False}, "Café", ["caf", "##é"]),
    ("accent-lower-nostrip-decomposed", "accents", {"strip_accents": False}, "cafe\u0301", [U]),
    # --- CJK -----------------------------------------------------------------------------------
    ("cjk-split", "cjk", {"lowercase": False}, "ab中文cd", ["ab", "中", "文", "cd"]),
    ("cjk-two", "cjk", {"lowercase": False}, "中文", ["中", "文"]),
    ("cjk-punct", "cjk", {"lowercase": False}, "中。文", ["中", "。", "文"]),
    ("cjk-ext-b", "cjk", {"lowercase": False}, "中\U00020000文", ["中", "\U00020000", "文"]),
    ("cjk-hiragana-not-split", "cjk", {"lowercase": False}, "ひらがな", ["ひらがな"]),
    ("cjk-ideographic-space", "cjk", {"lowercase": False}, "a\u3000中", ["a", "中"]),
    ("cjk-off-joined", "cjk", {"lowercase": False, "handle_chinese_chars": False}, "中文", ["中", "##文"]),
    ("cjk-off-unk", "cjk", {"lowercase": False, "handle_chinese_chars": False}, "ab中文cd", [U]),
    # --- control / format characters and whitespace ------------------------------------------
    ("ctl-nul-joins", "control", {}, "a\x00b", ["a", "##b"]),
    ("ctl-vt-joins", "control", {}, "a\x0bb", ["a", "##b"]),
    ("ctl-ff-joins", "control", {}, "a\x0cb", ["a", "##b"]),
    ("ctl-nel-joins", "control", {}, "a\x85b", ["a", "##b"]),
    ("ctl-us-joins", "control", {}, "a\x1fb", ["a", "##b"]),
    ("ctl-del-joins", "control", {}, "a\x7fb", ["a", "##b"]),
    ("ctl-zwsp-joins", "control", {}, "a\u200bb", ["a", "##b"]),
    ("ctl-zwj-joins", "control", {}, "a\u200db", ["a", "##b"]),
    ("ctl-shy-joins", "control", {}, "a\u00adb", ["a", "##b"]),
    ("ctl-bom-joins", "control", {}, "a\ufeffb", ["a", "##b"]),
    ("ctl-fffd-joins", "control", {}, "a\ufffdb", ["a", "##b"]),
    ("ctl-private-use-joins", "control", {}, "a\ue000b", ["a", "##b"]),
    ("ctl-unassigned-kept", "control", {}, "a\u0378b", [U]),
    ("ctl-only", "control", {}, "\x00\u200b\ufffd", []),
    ("ctl-between-spaces", "control", {}, "a \x00 b", ["a", "b"]),
    ("ws-tab", "control", {}, "a\tb", ["a", "b"]),
    ("ws-newline", "control", {}, "a\nb", ["a", "b"]),
    ("ws-cr", "control", {}, "a\rb", ["a", "b"]),
    ("ws-ideographic", "control", {}, "a\u3000b", ["a", "b"]),
    ("ws-nbsp", "control", {}, "a\u00a0b", ["a", "b"]),
    ("ws-line-separator", "control", {}, "a\u2028b", ["a", "b"]),
    ("ws-paragraph-separator", "control", {}, "a\u2029b", ["a", "b"]),
    ("ws-only", "control", {}, " \t\n\u3000 ", []),
    ("noclean-nul-kept", "control", {"clean_text": False}, "a\x00b", [U]),
    ("noclean-zwsp-kept", "control", {"clean_text": False}, "a\u200bb", [U]),
    ("noclean-tab-still-splits", "control", {"clean_text": False}, "a\tb", ["a", "b"]),
    # --- vocabulary special tokens in raw text -----------------------------------------------
    ("special-inside-word", "special", {}, "foo[CLS]bar", ["foo", "[CLS]", "bar"]),
    ("special-lowercase-not-special", "special", {}, "foo[cls]bar", ["foo", "[", "cls", "]", "bar"]),
    ("special-mixedcase-not-special", "special", {}, "[Cls]", ["[", "cls", "]"]),
    ("special-all-five", "special", {}, "[CLS][SEP][MASK][PAD][UNK]", ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]),
    ("special-all-five-cased", "special", {"lowercase": False}, "[CLS][SEP][MASK][PAD][UNK]", ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]),
    ("special-uppercase-text-around", "special", {}, "FOO[SEP]BAR", ["foo", "[SEP]", "bar"]),
    ("special-matched-before-clean", "special", {}, "[CL\x00S]", ["[", "cls", "]"]),
    ("special-spaced-not-special", "special", {}, "[ CLS ]", ["[", "cls", "]"]),
    ("special-nested-brackets", "special", {}, "[[CLS]]", ["[", "[CLS]", "]"]),
    ("special-unclosed", "special", {}, "[CLS", ["[", "cls"]),
    ("special-unk-literal", "special", {}, "foo [UNK] bar", ["foo", "[UNK]", "bar"]),
    ("special-then-word-no-prefix", "special", {}, "[CLS]bar", ["[CLS]", "bar"]),
    ("special-controls-around", "special", {}, "foo\x00[CLS]\x00bar", ["foo", "[CLS]", "bar"]),
    ("special-then-combining-mark", "special", {}, "[CLS]\u0301", ["[CLS]"]),
    ("special-plain-word-suffix", "special", {}, "foobar", ["foo", "##bar"]),
    ("special-cased-word-unk", "special", {"lowercase": False}, "Foo[MASK]", [U, "[MASK]"]),
    ("special-absent-mask", "special_partial", {}, "[MASK]", ["[", "mask", "]"]),
    ("special-absent-pad", "special_partial", {}, "[PAD]x[CLS]", ["[", U, "]", "x", "[CLS]"]),
    # --- [UNK] id not 100 ----------------------------------------------------------------------
    ("unk-id-4", "unk4", {}, "hello worlds xyz", ["hello", "world", "##s", U]),
    ("unk-id-4-literal", "unk4", {}, "HELLO [UNK]", ["hello", U]),
]


def _options(opts):
    full = {
        "lowercase": True,
        "strip_accents": None,
        "clean_text": True,
        "handle_chinese_chars": True,
        "max_input_chars_per_word": 100,
    }
    full.update(opts)
    return full


_dwp_cache: dict = {}
_hf_cache: dict = {}


def dwp_for(vocab_name, opts):
    key = (vocab_name, tuple(sorted(opts.items())))
    if key not in _dwp_cache:
        vocab = daskwp.Vocabulary.from_tokens(list(VOCABS[vocab_name]))
        _dwp_cache[key] = daskwp.WordPieceTokenizer(vocab, **opts)
    return _dwp_cache[key]


def hf_for(vocab_name, opts):
    key = (vocab_name, tuple(sorted(opts.items())))
    if key not in _hf_cache:
        _hf_cache[key] = hf_from_tokens(VOCABS[vocab_name], **opts)
    return _hf_cache[key]


def test_case_ids_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    for name, tokens in VOCABS.items():
        assert len(tokens) == len(set(tokens)), name


@pytest.mark.parametrize(
    "vocab_name,opts,text,expected_tokens",
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_case(vocab_name, opts, text, expected_tokens):
    opts = _options(opts)
    tokens = VOCABS[vocab_name]
    expected = [tokens.index(t) for t in expected_tokens]

    # The hand-worked expectation must be what HF does.
    hf_ids = hf_encode(hf_for(vocab_name, opts), [text])[0]
    assert hf_ids == expected, (
        f"hand expectation disagrees with HF: HF tokens {[tokens[i] for i in hf_ids]}, "
        f"expected {expected_tokens}"
    )

    # daskwp, alone and inside a batch with neighbours (state must not leak across documents).
    tok = dwp_for(vocab_name, opts)
    got = tok.encode([text]).to_list()[0]
    assert got == expected, (
        f"daskwp tokens {[tokens[i] if 0 <= i < len(tokens) else i for i in got]}, "
        f"expected {expected_tokens}"
    )
    batch = tok.encode(["abcd" + text, text, "", text + "x", text]).to_list()
    assert batch[1] == expected and batch[4] == expected and batch[2] == []
    assert batch[0] == hf_encode(hf_for(vocab_name, opts), ["abcd" + text])[0]
    assert batch[3] == hf_encode(hf_for(vocab_name, opts), [text + "x"])[0]


def test_whole_table_as_one_batch_per_config():
    """All cases sharing a (vocab, options) go through one encode() call, in table order."""
    groups: dict = {}
    for _, vocab_name, opts, text, expected_tokens in CASES:
        key = (vocab_name, tuple(sorted(_options(opts).items())))
        groups.setdefault(key, []).append((text, [VOCABS[vocab_name].index(t) for t in expected_tokens]))
    for (vocab_name, opts_items), items in groups.items():
        got = dwp_for(vocab_name, dict(opts_items)).encode([t for t, _ in items]).to_list()
        assert got == [e for _, e in items], (vocab_name, dict(opts_items))


@pytest.mark.slow
def test_whole_table_through_the_word_memo():
    """The same, with each group repeated past 1 MB on one thread, so the CPU loop runs its
    word memo and lone-punctuation table (WordCache) over every tiny vocabulary, special
    token and option of the table; each repeat must still give the table's answer."""
    groups: dict = {}
    for _, vocab_name, opts, text, expected_tokens in CASES:
        key = (vocab_name, tuple(sorted(_options(opts).items())))
        groups.setdefault(key, []).append((text, [VOCABS[vocab_name].index(t) for t in expected_tokens]))
    for (vocab_name, opts_items), items in groups.items():
        texts = [t for t, _ in items]
        size = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
        reps = (1 << 20) // max(size, 1) + 2
        assert size * reps >= 1 << 20  # the memo's threshold (cpu_batch.cpp)
        enc = dwp_for(vocab_name, dict(opts_items)).encode(texts * reps, num_threads=1)
        assert enc.to_list() == [e for _, e in items] * reps, (vocab_name, dict(opts_items))


def test_unk_id_from_vocabulary():
    v = daskwp.Vocabulary.from_tokens(VOCABS["unk4"])
    assert v.unk_id == 4
    assert v.cls_id == 3
    assert v.sep_id == 2
    assert len(v) == 6
    assert v.token_to_id("world") == 1
    assert v.token_to_id("nope") is None
    assert v.id_to_token(5) == "##s"


# --------------------------------------------------------------------------------------------
# Vocabulary files

BASE_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "café", "中"]


def _write(path, text):
    path.write_bytes(text.encode("utf-8"))
    return path


def _hf_file_vocab(path) -> dict:
    from tokenizers import models

    return models.WordPiece.read_file(str(path))


def _same_vocabulary(a, b, *, check_hash=True):
    assert len(a) == len(b)
    for i in range(len(a)):
        assert a.id_to_token(i) == b.id_to_token(i), i
    assert a.unk_id == b.unk_id and a.cls_id == b.cls_id and a.sep_id == b.sep_id
    if check_hash:
        assert a.hash == b.hash, "same tokens and ids, but a different content hash"


def test_vocab_file_plain_matches_from_tokens(tmp_path):
    p = _write(tmp_path / "vocab.txt", "\n".join(BASE_TOKENS) + "\n")
    v = daskwp.Vocabulary.from_file(str(p))
    _same_vocabulary(v, daskwp.Vocabulary.from_tokens(BASE_TOKENS))
    assert isinstance(v.hash, str) and int(v.hash, 16) >= 0
    assert isinstance(v.blob, bytes) and len(v.blob) > 0
    for i, t in enumerate(BASE_TOKENS):
        assert v.token_to_id(t) == i
    assert _hf_file_vocab(p) == {t: i for i, t in enumerate(BASE_TOKENS)}
    # pathlib.Path is accepted as well as str
    _same_vocabulary(daskwp.Vocabulary.from_file(p), v)


def test_vocab_hash_depends_on_content(tmp_path):
    a = daskwp.Vocabulary.from_tokens(BASE_TOKENS)
    b = daskwp.Vocabulary.from_tokens(BASE_TOKENS[:-1] + ["文"])
    c = daskwp.Vocabulary.from_tokens(BASE_TOKENS[:5] + ["world", "hello"] + BASE_TOKENS[7:])
    assert len({a.hash, b.hash, c.hash}) == 3
    assert a.hash == daskwp.Vocabulary.from_tokens(list(BASE_TOKENS)).hash
    assert a.blob == daskwp.Vocabulary.from_tokens(list(BASE_TOKENS)).blob


@pytest.mark.parametrize("bom", [True, False], ids=["bom", "no-bom"])
@pytest.mark.parametrize("eol", ["\r\n", "\n"], ids=["crlf", "lf"])
@pytest.mark.parametrize("final_eol", [True, False], ids=["final-eol", "no-final-eol"])
def test_vocab_file_bom_crlf(tmp_path, bom, eol, final_eol):
    text = ("\ufeff" if bom else "") + eol.join(BASE_TOKENS) + (eol if final_eol else "")
    p = _write(tmp_path / "vocab.txt", text)
    v = daskwp.Vocabulary.from_file(str(p))
    plain = daskwp.Vocabulary.from_tokens(BASE_TOKENS)
    _same_vocabulary(v, plain)
    assert v.token_to_id("[PAD]") == 0 and v.token_to_id("\ufeff[PAD]") is None
    texts = ["hello worlds café 中", "[PAD] [CLS]x", "unknownword"]
    expected = hf_encode(hf_from_tokens(BASE_TOKENS), texts)
    assert daskwp.WordPieceTokenizer(v).encode(texts).to_list() == expected
    assert daskwp.WordPieceTokenizer(str(p)).encode(texts).to_list() == expected


def test_vocab_file_duplicates_empty_lines_trailing_space(tmp_path):
    lines = [
        "[PAD]",   # 0
        "",        # 1  empty line takes an id
        "[UNK]",   # 2
        "hello \t",  # 3  right-trimmed -> "hello"
        "world",   # 4
        "hello",   # 5  duplicate: the last id wins
        "[CLS]",   # 6
        "[SEP]",   # 7
        "##s",     # 8
        "bar\u2028baz",  # 9  split on "\n" only: one token
        "world\x0b",  # 10 duplicate after trimming VT: last id wins
    ]
    p = _write(tmp_path / "vocab.txt", "\n".join(lines) + "\n")
    hf_vocab = _hf_file_vocab(p)
    assert hf_vocab["hello"] == 5 and hf_vocab[""] == 1 and hf_vocab["world"] == 10
    v = daskwp.Vocabulary.from_file(str(p))
    for token, i in hf_vocab.items():
        assert v.token_to_id(token) == i, (token, v.token_to_id(token), i)
    assert v.unk_id == 2 and v.cls_id == 6 and v.sep_id == 7 and v.pad_id == 0
    assert v.token_to_id("hello \t") is None
    assert v.token_to_id("bar") is None
    texts = ["hello worlds", "HELLO xyz [UNK] [CLS]"]
    expected = hf_encode(hf_from_tokens(hf_vocab), texts)
    assert expected == [[5, 10, 8], [5, 2, 2, 6]]
    assert daskwp.WordPieceTokenizer(v).encode(texts).to_list() == expected


def test_vocab_file_empty_lines_count(tmp_path):
    lines = ["[PAD]", "", "[UNK]", "hello", "", "world", "[CLS]", "[SEP]"]
    p = _write(tmp_path / "vocab.txt", "\n".join(lines) + "\n")
    v = daskwp.Vocabulary.from_file(str(p))
    assert v.token_to_id("hello") == 3
    assert v.token_to_id("world") == 5
    assert v.unk_id == 2
    assert daskwp.WordPieceTokenizer(v).encode(["hello world x"]).to_list() == [[3, 5, 2]]


def test_vocab_file_unicode_trailing_whitespace_trimmed(tmp_path):
    """HF trims with Rust's str::trim_end (Unicode White_Space), not only ASCII."""
    lines = ["[UNK]", "[CLS]", "[SEP]", "foo\u3000", "bar\u00a0", "baz"]
    p = _write(tmp_path / "vocab.txt", "\n".join(lines) + "\n")
    hf_vocab = _hf_file_vocab(p)
    assert hf_vocab["foo"] == 3 and hf_vocab["bar"] == 4
    v = daskwp.Vocabulary.from_file(str(p))
    assert v.token_to_id("foo") == 3 and v.token_to_id("bar") == 4


def _assert_error_names_file(exc_info, path):
    msg = str(exc_info.value)
    assert path.name in msg or str(path) in msg, f"error message does not name the file: {msg!r}"


def _load(path):
    """Load the vocabulary and build a tokenizer (an error may come from either step)."""
    v = daskwp.Vocabulary.from_file(str(path))
    daskwp.WordPieceTokenizer(v)
    return v


def test_vocab_file_missing(tmp_path):
    p = tmp_path / "does_not_exist_vocab.txt"
    with pytest.raises((FileNotFoundError, ValueError)) as exc_info:
        _load(p)
    _assert_error_names_file(exc_info, p)


def test_vocab_file_missing_tokenizer_ctor(tmp_path):
    p = tmp_path / "missing_dir" / "vocab.txt"
    with pytest.raises((FileNotFoundError, ValueError)) as exc_info:
        daskwp.WordPieceTokenizer(str(p))
    _assert_error_names_file(exc_info, p)


@pytest.mark.parametrize("content", ["", "\n", "\ufeff"], ids=["zero-bytes", "one-newline", "bom-only"])
def test_vocab_file_empty(tmp_path, content):
    p = _write(tmp_path / "empty_vocab.txt", content)
    with pytest.raises(ValueError) as exc_info:
        _load(p)
    _assert_error_names_file(exc_info, p)


def test_vocab_file_without_unk(tmp_path):
    p = _write(tmp_path / "no_unk_vocab.txt", "[PAD]\n[CLS]\n[SEP]\nhello\n[unk]\nUNK\n")
    with pytest.raises(ValueError) as exc_info:
        _load(p)
    _assert_error_names_file(exc_info, p)


# --------------------------------------------------------------------------------------------
# Real vocabulary files, tokenizer.json and model folders


@requires_data
def test_real_vocab_ids():
    v = daskwp.Vocabulary.from_file(str(vocab_path("bert-base-uncased")))
    assert len(v) == 30522
    assert (v.pad_id, v.unk_id, v.cls_id, v.sep_id) == (0, 100, 101, 102)
    assert v.token_to_id("hello") == 7592 and v.token_to_id("world") == 2088
    assert v.id_to_token(7592) == "hello"
    m = daskwp.Vocabulary.from_file(str(vocab_path("bert-base-multilingual-cased")))
    assert len(m) == 119547
    assert (m.unk_id, m.cls_id, m.sep_id) == (100, 101, 102)
    assert m.token_to_id("Hello") == 31178 and m.token_to_id("world") == 11356
    c = daskwp.Vocabulary.from_file(str(vocab_path("bert-base-chinese")))
    assert c.token_to_id("你") == 872 and c.token_to_id("好") == 1962
    assert v.hash != m.hash != c.hash


@requires_data
def test_tokenizer_json_and_folder_read_like_vocab_txt():
    folder = vocab_path("bert-base-uncased").parent
    from_txt = daskwp.Vocabulary.from_file(str(folder / "vocab.txt"))
    from_json = daskwp.Vocabulary.from_file(str(folder / "tokenizer.json"))
    from_folder = daskwp.Vocabulary.from_file(str(folder))
    _same_vocabulary(from_json, from_txt, check_hash=False)
    _same_vocabulary(from_folder, from_txt, check_hash=False)
    lines = read_lines(DATA / "corpus" / "edge" / "blns.txt")
    expected = hf_encode(hf_tokenizer("bert-base-uncased"), lines)
    for v in (from_json, from_folder):
        assert daskwp.WordPieceTokenizer(v, lowercase=True).encode(lines).to_list() == expected


@requires_data
def test_tokenizer_json_and_vocab_txt_share_hash():
    """The same tokens, ids and special tokens are the same vocabulary: one content hash
    (it keys per-worker caches), whichever file it was read from."""
    folder = vocab_path("bert-base-uncased").parent
    from_txt = daskwp.Vocabulary.from_file(str(folder / "vocab.txt"))
    from_json = daskwp.Vocabulary.from_file(str(folder / "tokenizer.json"))
    assert from_json.hash == from_txt.hash


@requires_data
def test_from_pretrained_and_default_match_hf_uncased():
    lines = read_lines(DATA / "corpus" / "en_ewt.txt")[:300] + ["Café NAÏVE [CLS] foo[SEP]bar 中文"]
    expected = hf_encode(hf_tokenizer("bert-base-uncased"), lines)
    folder = vocab_path("bert-base-uncased").parent
    pre = daskwp.WordPieceTokenizer.from_pretrained(str(folder))
    assert pre.encode(lines).to_list() == expected
    # The tokenizer.json has truncation=128 / padding baked in: encode() must not apply them.
    long_line = " ".join(["hello"] * 300)
    assert pre.encode([long_line]).to_list() == [[7592] * 300]
    default = daskwp.WordPieceTokenizer()
    assert default.encode(lines).to_list() == expected


def test_norm_blob_blocks_dedup_equals_numpy_unique():
    """The blob's distinct 256-entry blocks and their index (a hash dedup, for speed) are
    exactly ``np.unique(axis=0, return_inverse=True)``: same blocks, same lexicographic
    order of uint32 values (not of little-endian bytes), same index."""
    import numpy as np

    from daskwp.core.normalizer.blob import _unique_blocks
    rng = np.random.default_rng(7)
    palette = rng.integers(0, 2**32, size=(40, 256), dtype=np.uint32)
    palette[:8, :3] = [[0, 0, 1], [0, 0, 256], [0, 1, 0], [256, 0, 0],
                       [1, 0, 0], [0, 0, 0], [2**32 - 1, 0, 0], [0, 2**31, 0]]
    palette[:8, 3:] = 0
    blocks = palette[rng.integers(0, 40, size=4352)]
    blocks[:5] = palette[6]                      # the first block is not the smallest
    uniq, index = _unique_blocks(blocks)
    want_u, want_i = np.unique(blocks, axis=0, return_inverse=True)
    assert np.array_equal(uniq, want_u)
    assert index.dtype == np.uint16 and np.array_equal(index, want_i.reshape(-1))
    assert np.array_equal(uniq[index], blocks)
