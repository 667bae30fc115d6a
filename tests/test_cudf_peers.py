"""The cuDF (nvtext::subword_tokenize / cudf SubwordTokenizer) and CLX (cyBERT) peer cases of
``shared/data/peers``, reproduced — except where daskwp differs on purpose
(docs/differences-cudf.md):

1. odd overlaps: cuDF's metadata duplicates one token at every window boundary;
2. full last window: cuDF's last-row ``stop`` loses tokens when ``(n - max_len) % step == 0``;
3. empty/whitespace documents: cuDF's metadata claims one (padding) token, ``stop = 0``;
   daskwp gives an empty slice, ``stop = start - 1`` (docs/design.md §2);
4. all-null input: cuDF returns 0 rows; daskwp gives one empty row per null (no logID is
   ever missing);
5. token ids follow HuggingFace (special tokens are matched case-sensitively; ids never
   constants, so padding uses the vocabulary's [PAD]);
6. ``truncation=False`` with special tokens is supported (cuDF raised NotImplementedError);
7. parameters: cuDF's ``stride`` (libcudf) is the step; daskwp's is the overlap
   (``stride = max_len - step``); no int32 limit on ``rows x max_length``.

The hashed vocabularies are not read (daskwp reads vocab.txt): the tiny cuDF tables map
this/is/a/test/. to the bert-base-uncased ids, so that vocabulary stands in for them.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import daskwp
from conftest import DATA, hf_from_tokens, read_lines, requires_full_data, vocab_path

pytestmark = requires_full_data

PEERS = DATA / "peers"


def cudf_cases(group):
    cases = json.loads((PEERS / "cudf" / "expected_cases.json").read_text(encoding="utf-8"))
    return {c["name"]: c for c in cases[group]}


def clx_cases():
    return json.loads((PEERS / "clx" / "expected_cases.json").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def uncased():
    return daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)


def run_libcudf(tok, case, **extra):
    """A libcudf case in daskwp terms: no special tokens, overlap = max_len - step."""
    return tok(case["input"], max_length=case["max_len"], stride=case["max_len"] - case["step"],
               truncation=case["do_truncate"], add_special_tokens=False, **extra)


def flat(a):
    return np.asarray(a).reshape(-1).tolist()


# ---------------------------------------------------------------------------------------
# libcudf nvtext::subword_tokenize (cpp/tests/text/subword_tests.cpp)
# ---------------------------------------------------------------------------------------
def test_tokenize_100_rows():
    case = cudf_cases("libcudf_subword_tokenize")["Tokenize"]
    out = run_libcudf(uncased(), case)
    assert out.num_rows == case["nrows"] == 100
    assert out.input_ids.tolist() == [case["row_tokens"]] * 100
    assert out.attention_mask.tolist() == [case["row_mask"]] * 100
    assert out.metadata.tolist() == [[i, 0, 9] for i in range(100)]  # "row i -> [i,0,9]"


@pytest.mark.parametrize("name", ["TokenizeMultiRow", "TokenizeMaxEqualsTokens",
                                  "TokenizeFromVocabStruct", "EmptyStrings"])
def test_libcudf_cases_reproduced_exactly(name):
    case = cudf_cases("libcudf_subword_tokenize")[name]
    out = run_libcudf(uncased(), case)
    assert out.num_rows == case["nrows"]
    assert flat(out.input_ids) == case["tokens"]
    assert flat(out.attention_mask) == case["mask"]
    assert flat(out.metadata) == case["metadata"]


@pytest.mark.parametrize("name", ["TokenizeWithEmptyRow", "NoTokens"])
def test_empty_documents_own_an_empty_slice(name):
    """Ids and masks as cuDF; the empty document's metadata is (logID, 0, -1) where cuDF
    wrote (logID, 0, 0), which claims a padding token (difference 3)."""
    case = cudf_cases("libcudf_subword_tokenize")[name]
    tok = uncased()
    out = run_libcudf(tok, case)
    assert out.num_rows == case["nrows"]
    assert flat(out.input_ids) == case["tokens"]
    assert flat(out.attention_mask) == case["mask"]
    expected = np.asarray(case["metadata"]).reshape(-1, 3)
    empty_docs = [i for i, n in enumerate(tok.encode(case["input"]).lengths) if n == 0]
    assert empty_docs
    for row in np.nonzero(np.isin(expected[:, 0], empty_docs))[0]:
        assert expected[row, 1:].tolist() == [0, 0]  # cuDF
        expected[row, 2] = -1                         # daskwp: empty slice
    assert out.metadata.tolist() == expected.tolist()
    stitched = daskwp.stitch(out.input_ids, out.metadata)
    assert all(len(stitched[i]) == 0 for i in empty_docs)


def test_all_null_strings_give_one_row_each():
    """cuDF returns no rows for an all-null column; daskwp one empty row per null, so every
    input row keeps its logID (difference 4)."""
    case = cudf_cases("libcudf_subword_tokenize")["AllNullStrings"]
    assert case["nrows"] == 0
    out = run_libcudf(uncased(), case)
    assert out.num_rows == 3
    assert out.metadata.tolist() == [[0, 0, -1], [1, 0, -1], [2, 0, -1]]
    assert not out.attention_mask.any()


def test_parameter_errors():
    case = cudf_cases("libcudf_subword_tokenize")["ParameterErrors"]
    tok = uncased()
    bad_step, overflow = case["expect_errors"]
    # a step larger than max_len is a negative overlap
    with pytest.raises(ValueError, match=r"stride must be in \[0, 12\).*got -1"):
        tok(case["input"], max_length=bad_step["max_len"],
            stride=bad_step["max_len"] - bad_step["step"], add_special_tokens=False)
    # no int32 limit on rows x max_length: ragged output of a huge max_length is fine
    out = tok(case["input"], max_length=overflow["max_len"],
              stride=overflow["max_len"] - overflow["step"], add_special_tokens=False,
              padding=False)
    assert out.metadata.tolist() == [[0, 0, 4], [1, 0, 9], [2, 0, -1], [3, 0, -1]]


def test_missing_vocabulary_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-vocab.txt"
    with pytest.raises(FileNotFoundError, match="no-such-vocab.txt"):
        daskwp.WordPieceTokenizer(missing)


SPECIAL_TABLE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]", "this", "is",
                 "a", "test", "tést", "."]


def test_tokenize_with_special_tokens():
    """Rows 1-4 as cuDF. Row 0 ends in "[eos]": cuDF matched special tokens in any case,
    HuggingFace (and daskwp) only as written, so "[eos]" is [ eos ] -> three [UNK]
    (difference 5); that row equals HF instead."""
    case = cudf_cases("libcudf_subword_tokenize")["TokenizeWithSpecialTokens"]
    specials = [t for t in SPECIAL_TABLE if t.startswith("[")]
    v = daskwp.Vocabulary.from_tokens(SPECIAL_TABLE, special_tokens=specials)
    tok = daskwp.WordPieceTokenizer(v, lowercase=True)
    out = run_libcudf(tok, case)
    ids = np.asarray(case["tokens"]).reshape(-1, 8)
    mask = np.asarray(case["mask"]).reshape(-1, 8)
    meta = np.asarray(case["metadata"]).reshape(-1, 3)
    assert out.input_ids[1:].tolist() == ids[1:].tolist()
    assert out.attention_mask[1:].tolist() == mask[1:].tolist()
    assert out.metadata[1:].tolist() == meta[1:].tolist()
    hf = hf_from_tokens(SPECIAL_TABLE)
    hf.add_special_tokens(["[BOS]", "[EOS]"])
    hf.enable_truncation(8)
    want = hf.encode(case["input"][0], add_special_tokens=False).ids
    assert want == [5, 7, 8, 9, 10, 12, 1, 1]
    assert out.input_ids[0].tolist() == want
    assert ids[0].tolist() == [5, 7, 8, 9, 10, 12, 6, 0]  # cuDF: "[eos]" -> [EOS]
    assert out.metadata[0].tolist() == [0, 0, 7]


def test_zero_hash_bin_coefficient():
    """".zzzz" -> [., UNK] with [UNK] = 0 and "." = 7. The padding id comes from the
    vocabulary ([PAD] = 8 here) where cuDF always wrote 0 (difference 5)."""
    case = cudf_cases("libcudf_subword_tokenize")["ZeroHashBinCoefficient"]
    v = daskwp.Vocabulary.from_tokens(["[UNK]", "a", "b", "c", "d", "e", "f", ".", "[PAD]"])
    out = run_libcudf(daskwp.WordPieceTokenizer(v), case)
    assert flat(out.attention_mask) == case["mask"]
    assert flat(out.metadata) == case["metadata"]
    real = np.asarray(case["mask"]) == 1
    assert flat(out.input_ids)[:2] == np.asarray(case["tokens"])[real].tolist() == [7, 0]
    assert flat(out.input_ids)[2:] == [8] * 6


# ---------------------------------------------------------------------------------------
# The two defects: odd overlaps and full last windows
# ---------------------------------------------------------------------------------------
def cudf_metadata(n_tokens, max_len, step):
    """cuDF's (start, stop) per row (libcudf at c73b95e, no special tokens), for contrast."""
    rows = 1 if n_tokens <= max_len else 1 + -(-(n_tokens - max_len) // step)
    out = []
    for k in range(rows):
        start = 0 if k == 0 else (max_len - step) // 2
        if k < rows - 1:
            stop = max_len - (max_len - step) // 2 - 1
        elif n_tokens <= max_len:
            stop = max(n_tokens - 1, 0)
        else:
            stop = max((max_len - step) + (n_tokens - max_len) % step - 1, 0)
        out.append((start, stop))
    return out


def owned_tokens(ids_rows, slices):
    return [t for row, (s, e) in zip(ids_rows, slices) for t in row[s:e + 1]]


@pytest.mark.parametrize("max_len,step,n", [(8, 5, 20), (8, 7, 24), (16, 13, 50)])
def test_odd_overlap_no_duplicates(max_len, step, n):
    """cuDF's odd overlap: floor((max_len - step)/2) on both sides duplicates a token at each
    boundary. daskwp's split (ceil on the stop side) owns every token once."""
    tok = uncased()
    words = "the of and to in is was he for it with as his on be at by".split()
    text = " ".join(words[i % len(words)] for i in range(n))
    enc = tok.encode([text])
    assert len(enc[0]) == n
    out = tok([text], max_length=max_len, stride=max_len - step, add_special_tokens=False)
    rows = out.input_ids.tolist()
    theirs = owned_tokens(rows, cudf_metadata(n, max_len, step))
    assert len(theirs) > n  # cuDF duplicates
    ours = owned_tokens(rows, [tuple(m[1:]) for m in out.metadata.tolist()])
    assert ours == enc[0].tolist()


@pytest.mark.parametrize("max_len,step,extra_rows", [(8, 6, 1), (8, 6, 3), (10, 10, 2),
                                                    (16, 12, 1)])
def test_full_last_window_keeps_its_tokens(max_len, step, extra_rows):
    """n = max_len + m*step: cuDF's last-row stop is overlap - 1, dropping the window's
    last `step` tokens (or all of them with overlap 0)."""
    tok = uncased()
    n = max_len + extra_rows * step
    text = " ".join(["test"] * n)
    out = tok([text], max_length=max_len, stride=max_len - step, add_special_tokens=False)
    rows = out.input_ids.tolist()
    theirs = owned_tokens(rows, cudf_metadata(n, max_len, step))
    assert len(theirs) < n  # cuDF loses tokens
    assert out.metadata[-1].tolist()[1:] == [(max_len - step) // 2, max_len - 1]
    ours = owned_tokens(rows, [tuple(m[1:]) for m in out.metadata.tolist()])
    assert len(ours) == n


# ---------------------------------------------------------------------------------------
# cudf SubwordTokenizer (python/cudf/cudf/tests/text/test_subword_tokenizer.py)
# ---------------------------------------------------------------------------------------
def test_text_subword_tokenize():
    case = cudf_cases("python_SubwordTokenizer")["test_text_subword_tokenize"]
    out = uncased()(case["input"], max_length=case["max_length"],
                    truncation=case["truncation"],
                    add_special_tokens=case["add_special_tokens"])
    assert out.input_ids.tolist() == case["input_ids"]
    assert out.attention_mask.tolist() == case["attention_mask"]
    assert out.metadata.tolist() == case["metadata"]


def test_truncation_false_with_special_tokens_is_supported():
    """cuDF raised NotImplementedError; daskwp frames every window (difference 6)."""
    case = cudf_cases("python_SubwordTokenizer")["test_subword_tokenize_with_truncation"]
    tok = daskwp.WordPieceTokenizer(
        PEERS / "cudf" / "subword_tokenizer_data" / "bert_base_cased_sampled",
        lowercase=False)
    text = " ".join(case["input"] * 40)
    out = tok([text], max_length=case["max_length"], truncation=False,
              add_special_tokens=True, stride=7)
    assert out.num_rows > 1
    assert (out.input_ids[:, 0] == tok.vocab.cls_id).all()
    [stitched] = daskwp.stitch(out.input_ids, out.metadata)
    assert stitched.tolist() == tok.encode([text])[0].tolist()


def test_docstring_example():
    case = cudf_cases("python_SubwordTokenizer")["docstring example (SubwordTokenizer.__call__)"]
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-cased"), lowercase=True)
    out = tok(case["input"], max_length=case["max_length"], truncation=case["truncation"],
              add_special_tokens=case["add_special_tokens"])
    assert out.input_ids.tolist() == case["input_ids"]
    assert out.attention_mask.tolist() == case["attention_mask"]
    assert out.metadata.tolist() == case["metadata"]


@pytest.mark.parametrize("lowercase", [True, False])
def test_hf_parity_grid_on_test_sentences(lowercase):
    """cuDF's HF-parity grid (skipped upstream since 2024-02), re-created with a CPU oracle:
    max_length {32, 64} x stride {0, 15, 30} x special tokens, truncation, padding to
    max_length. Also with truncation=False (every overflow window). stride 30 with
    max_length 32 and special tokens leaves L = 30 <= stride: an error, as in HF."""
    from tokenizers import BertWordPieceTokenizer, Tokenizer

    case = cudf_cases("python_SubwordTokenizer")[
        "test_subword_tokenize (HF parity, skipped upstream since 2024-02)"]
    folder = PEERS / "cudf" / "subword_tokenizer_data" / "bert_base_cased_sampled"
    texts = read_lines(PEERS / "cudf" / "subword_tokenizer_data" / "test_sentences.txt")
    tok = daskwp.WordPieceTokenizer(folder / "vocab.txt", lowercase=lowercase)
    hf_sp = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=lowercase)._tokenizer
    hf_raw = Tokenizer.from_str(hf_sp.to_str())
    hf_raw.post_processor = None
    grid = case["grid"]
    for max_length in grid["max_length"]:
        for stride in grid["stride"]:
            for sp in grid["add_special_tokens"]:
                if stride >= max_length - (2 if sp else 0):
                    with pytest.raises(ValueError, match="stride must be in"):
                        tok(texts, max_length=max_length, stride=stride,
                            add_special_tokens=sp)
                    continue
                hf = hf_sp if sp else hf_raw
                hf.enable_truncation(max_length, stride=stride)
                hf.enable_padding(length=max_length, pad_id=tok.vocab.pad_id)
                encs = hf.encode_batch(texts, add_special_tokens=sp)
                for truncation in (True, False):
                    out = tok(texts, max_length=max_length, stride=stride,
                              add_special_tokens=sp, truncation=truncation)
                    if truncation:
                        ids = [e.ids for e in encs]
                        mask = [e.attention_mask for e in encs]
                    else:
                        ids = [w.ids for e in encs for w in [e] + e.overflowing]
                        mask = [w.attention_mask for e in encs for w in [e] + e.overflowing]
                    key = (max_length, stride, sp, truncation)
                    assert out.input_ids.tolist() == ids, key
                    assert out.attention_mask.tolist() == mask, key


def test_pylibcudf_all_unknown_words():
    """A vocabulary where only "." is known: every word is [UNK] (id 100) for every
    max_len / step / lowercase / truncation."""
    case = cudf_cases("pylibcudf_subword_tokenize")["test_subword_tokenize"]
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)] + ["[UNK]"]
    tokens += [f"[filler{i}]" for i in range(101, 1012)] + ["."]
    v = daskwp.Vocabulary.from_tokens(tokens)
    assert (v.unk_id, v.token_to_id("."), v.pad_id) == (100, 1012, 0)
    grid = case["grid"]
    for max_len in grid["max_len"]:
        for step in grid["step"]:
            for lower in grid["do_lower"]:
                for trunc in grid["do_truncate"]:
                    tok = daskwp.WordPieceTokenizer(v, lowercase=lower)
                    out = tok(case["input"], max_length=max_len, stride=max_len - step,
                              truncation=trunc, add_special_tokens=False)
                    assert out.input_ids.tolist() == [[100] * 4 + [0] * (max_len - 4)]
                    assert out.attention_mask.tolist() == [[1] * 4 + [0] * (max_len - 4)]
                    assert flat(out.metadata) == case["metadata"]


# ---------------------------------------------------------------------------------------
# The newer cuDF WordPiece API (ids only, no windows): where HF semantics coincide
# ---------------------------------------------------------------------------------------
def test_wordpiece_new_api_ids():
    cases = cudf_cases("wordpiece_new_api")
    # cpp WordPiece, max_words_per_row = 0 (unlimited)
    c = cases["cpp WordPiece"]
    tok = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(c["vocab"]))
    assert tok.encode(c["input"]).to_list() == c["expected"]["0"]
    # with subwords; the vocabulary's first line is empty (it still takes id 0)
    c = cases["cpp WordPieceWithSubwords"]
    tok = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(c["vocab"]), lowercase=False)
    assert tok.encode(c["input"]).to_list() == c["expected"]["0"]
    # pylibcudf: the unknown token is spelled "[unk]"
    c = cases["pylibcudf test_wordpiece_tokenize"]
    tok = daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_tokens(c["vocab"], unk_token="[unk]"))
    assert tok.encode(c["input"]).to_list() == c["expected"]["0"]
    # python: pre-spaced sentences against the sampled cased vocabulary
    c = cases["python test_text_wordpiece_tokenize"]
    tok = daskwp.WordPieceTokenizer(
        PEERS / "cudf" / "subword_tokenizer_data" / "bert_base_cased_sampled" / "vocab.txt",
        lowercase=False)
    assert tok.encode(c["input"]).to_list() == c["expected"]["0"]


# ---------------------------------------------------------------------------------------
# CLX / cyBERT
# ---------------------------------------------------------------------------------------
def test_cybert_preprocess():
    case = clx_cases()["cybert_preprocess"]
    args = case["tokenizer_args"]
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-cased"), lowercase=False)
    out = tok(case["input"], max_length=args["max_length"], stride=args["hf_stride_overlap"],
              truncation=args["truncation"], add_special_tokens=args["add_special_tokens"])
    assert out.input_ids.tolist() == case["input_ids"]
    assert out.attention_mask.tolist() == case["attention_mask"]
    assert out.metadata.tolist() == case["metadata"]


def test_cybert_word_view_keeps_the_last_piece():
    """cyBERT's expected parse has "449" for "4494" and "-" for "- -": its exclusive slice
    dropped the last token of each window. stitch + merge_wordpieces keep them."""
    case = clx_cases()["cybert_preprocess"]
    args = case["tokenizer_args"]
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-cased"), lowercase=False)
    out = tok(case["input"], max_length=args["max_length"], stride=args["hf_stride_overlap"],
              add_special_tokens=False)
    docs = daskwp.stitch(out.input_ids, out.metadata)
    words = [daskwp.merge_wordpieces(d, vocab=tok.vocab)[0] for d in docs]
    assert words[0] == ["109", ".", "169", ".", "248", ".", "247", "-", "-"]
    assert words[1][-1] == "4494"
    # what cyBERT did
    lossy = [row[s:e] for row, (_, s, e) in zip(out.input_ids.tolist(), out.metadata.tolist())]
    assert daskwp.merge_wordpieces(lossy[1], vocab=tok.vocab)[0][-1] == "449"


@pytest.mark.parametrize("index", [0, 1])
def test_clx_legacy_tokenizer(index):
    case = clx_cases()["clx_legacy_tokenizer"][index]
    max_len = case["max_sequence_length"]
    out = uncased()(case["input"], max_length=max_len, stride=max_len - case["libcudf_step"],
                    truncation=case["do_truncate"], add_special_tokens=False)
    n = len(case["tokens"]) if isinstance(case["tokens"], list) else None
    assert n == max_len
    assert flat(out.input_ids) == case["tokens"]
    assert flat(out.attention_mask) == case["mask"]
    assert flat(out.metadata) == case["metadata"]
