"""Accent stripping runs NFD over the whole string, and NFD's canonical reordering moves
combining marks that survive stripping across code points. The core buffers such marks;
these cases fail if it does not (each expected list is HF's output, checked below too)."""

import pytest

import daskwp

TOKENS = ["[UNK]", "[SEP]", "[CLS]", "[PAD]", "[MASK]", "a", "b", "##b",
          "##\u1b44", "##\u302e", "##\u1b44\u302e"]

CASES = [
    # (text, lowercase, expected tokens)
    ("a\u302e\u1b44", True, ["a", "##\u1b44\u302e"]),          # reordered (ccc 9 < 224)
    ("a\u1b44\u302e", True, ["a", "##\u1b44\u302e"]),          # already in order
    ("a\u302e\u0301\u1b44", True, ["a", "##\u1b44\u302e"]),    # a stripped mark stays in the run
    ("a\u302e\u034f\u1b44", True, ["a", "##\u302e", "##\u1b44"]),  # CGJ is a starter: breaks
    ("a\u302e\u1b44b", True, ["a", "##\u1b44\u302e", "##b"]),
    ("a\u302e\x00\u1b44", True, ["a", "##\u1b44\u302e"]),      # clean_text removal: no break
    ("a\u302e[UNK]\u1b44", True, ["a", "##\u302e", "[UNK]", "[UNK]"]),  # a special breaks
    ("a\u302e\u1b44", False, ["a", "##\u302e", "##\u1b44"]),   # no stripping: no NFD
]


@pytest.mark.parametrize("text,lowercase,expected", CASES)
def test_reordering(text, lowercase, expected):
    tok = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(TOKENS), lowercase=lowercase)
    got = [TOKENS[i] for i in tok.encode([text]).to_list()[0]]
    assert got == expected


@pytest.mark.parametrize("text,lowercase,expected", CASES)
def test_reordering_matches_hf(text, lowercase, expected):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.BertWordPieceTokenizer({t: i for i, t in enumerate(TOKENS)},
                                           lowercase=lowercase)
    assert hf.encode(text, add_special_tokens=False).tokens == expected


def test_runs_longer_than_the_buffer_are_reordered_in_groups():
    """docs/differences-hf.md: the core holds at most 32 surviving marks;
    a longer out-of-order run is sorted 32 at a time, where HF sorts the whole run."""
    tok = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(TOKENS), lowercase=True)
    text = "a" + "\u302e" * 33 + "\u1b44"
    got = [TOKENS[i] for i in tok.encode([text]).to_list()[0]]
    assert got == ["a"] + ["##\u302e"] * 32 + ["##\u1b44\u302e"]
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.BertWordPieceTokenizer({t: i for i, t in enumerate(TOKENS)}, lowercase=True)
    assert hf.encode(text, add_special_tokens=False).tokens == \
        ["a", "##\u1b44\u302e"] + ["##\u302e"] * 32
