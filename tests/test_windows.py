"""Strided windows, attention mask and (logID, start, stop) metadata (docs/design.md §2).

* the native windows equal a slow pure-Python reference of docs/design.md §2 over an exhaustive
  grid of small (n, max_length, stride, special tokens, truncation);
* rows equal HuggingFace's overflow windows (``enable_truncation(max_length, stride)``,
  ``Encoding.overflowing``) and logIDs its sample mapping, over real corpus documents glued
  into long ones, for many (max_length, stride, add_special_tokens) — odd and even strides,
  stride 0, L = 1, n = L, n = L + 1 and full last windows included;
* a vocabulary whose [PAD]/[UNK]/[CLS]/[SEP] are not 0/100/101/102;
* padding modes, mask dtype, return_tensors, logid_offset, empty/null documents, threads;
* parameter validation (errors name the value and what is allowed);
* windows.hpp compiles with nvcc for sm_80 and sm_90 (skipped without nvcc).
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import daskwp
from conftest import DATA, read_documents, requires_data, vocab_path, VOCAB_LOWERCASE
from daskwp import Encoding
from daskwp import RaggedRows, windows_from_encoding

KERNELS = Path(daskwp.__file__).resolve().parent / "kernels"


# ---------------------------------------------------------------------------------------
# Slow reference of docs/design.md §2 (one document at a time, plain Python)
# ---------------------------------------------------------------------------------------
def reference_windows(docs, max_length, stride, truncation, add_special_tokens,
                      cls_id, sep_id, pad_id, logid_offset=0):
    """(rows of ids, rows of mask, metadata triples), every row padded to max_length."""
    b = 1 if add_special_tokens else 0
    L = max_length - 2 * b
    step = L - stride
    ids, mask, meta = [], [], []
    for d, t in enumerate(docs):
        n = len(t)
        K = 1 if (truncation or n <= L) else 1 + -(-(n - L) // step)
        for k in range(K):
            body = list(t[k * step:k * step + L])
            row = ([cls_id] if b else []) + body + ([sep_id] if b else [])
            ids.append(row + [pad_id] * (max_length - len(row)))
            mask.append([1] * len(row) + [0] * (max_length - len(row)))
            start = b if k == 0 else b + stride // 2
            stop = b + len(body) - 1 if k == K - 1 else b + L - (stride + 1) // 2 - 1
            meta.append([logid_offset + d, start, stop])
    return ids, mask, meta


def encoding_of(docs) -> Encoding:
    lengths = [len(d) for d in docs]
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(docs), dtype=np.int32, count=offsets[-1])
    return Encoding(flat, offsets)


SMALL_VOCAB = daskwp.Vocabulary.from_tokens(
    ["[UNK]", "[SEP]", "x", "[PAD]", "y", "[CLS]", "z", "##q", "[MASK]"])


def synthetic_docs(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1000, 30000, size=n).tolist() for n in lengths]


# ---------------------------------------------------------------------------------------
# Native == reference, exhaustive small grid
# ---------------------------------------------------------------------------------------
def test_native_equals_reference_small_grid():
    docs = synthetic_docs(range(0, 26))
    enc = encoding_of(docs)
    v = SMALL_VOCAB
    checked = 0
    for max_length in range(1, 11):
        for sp in (False, True):
            L = max_length - (2 if sp else 0)
            if L < 1:
                continue
            for stride in range(L):
                for trunc in (False, True):
                    out = windows_from_encoding(enc, v, max_length=max_length, stride=stride,
                                                truncation=trunc, add_special_tokens=sp,
                                                logid_offset=7)
                    ids, mask, meta = reference_windows(docs, max_length, stride, trunc, sp,
                                                        v.cls_id, v.sep_id, v.pad_id, 7)
                    key = (max_length, stride, sp, trunc)
                    assert out.input_ids.tolist() == ids, key
                    assert out.attention_mask.tolist() == mask, key
                    assert out.metadata.tolist() == meta, key
                    checked += 1
    assert checked > 150


def test_owned_slices_rebuild_every_document_exactly_once():
    """The fixed split covers t[0..n) once for every n, L and stride (odd strides and full
    last windows included)."""
    docs = synthetic_docs(range(0, 40), seed=1)
    enc = encoding_of(docs)
    for max_length, sp in itertools.product(range(3, 12), (False, True)):
        L = max_length - (2 if sp else 0)
        for stride in range(L):
            out = windows_from_encoding(enc, SMALL_VOCAB, max_length=max_length, stride=stride,
                                        add_special_tokens=sp)
            got = [[] for _ in docs]
            for row, (logid, start, stop) in zip(out.input_ids.tolist(), out.metadata.tolist()):
                assert stop >= start - 1
                got[logid].extend(row[start:stop + 1])
            assert got == docs, (max_length, stride, sp)


@pytest.mark.parametrize("stride", [0, 1, 2, 3, 4, 5])
def test_row_count_formula_and_full_last_window(stride):
    L, max_length = 6, 8
    step = L - stride
    for n in [0, 1, L - 1, L, L + 1, L + step, L + 2 * step, L + 2 * step + 1]:
        out = windows_from_encoding(encoding_of(synthetic_docs([n])), SMALL_VOCAB,
                                    max_length=max_length, stride=stride)
        K = 1 if n <= L else 1 + -(-(n - L) // step)
        assert out.num_rows == K, (n, stride)
        last = out.metadata[-1]
        # the last row always ends at its last real body token (column 1 + body - 1)
        body = n - (K - 1) * step
        assert last[2] == body, (n, stride)
        assert out.attention_mask[-1].sum() == body + 2


# ---------------------------------------------------------------------------------------
# HuggingFace overflow windows over real documents
# ---------------------------------------------------------------------------------------
def _hf_pair(vocab_name):
    """(with post-processor for special tokens, without it). The second also accepts
    strides up to max_length - 1 when no special tokens are added (HF checks the stride
    against max_length - 2 whenever a BERT post-processor is set)."""
    from tokenizers import BertWordPieceTokenizer, Tokenizer

    sp = BertWordPieceTokenizer(str(vocab_path(vocab_name)),
                                lowercase=VOCAB_LOWERCASE[vocab_name])
    raw = Tokenizer.from_str(sp._tokenizer.to_str())
    raw.post_processor = None
    return sp._tokenizer, raw


def hf_windows(hf_pair, texts, max_length, stride, add_special_tokens, pad_id):
    """HF rows (ids, mask) and their sample mapping, overflow windows flattened in order."""
    t = hf_pair[0] if add_special_tokens else hf_pair[1]
    t.enable_truncation(max_length, stride=stride)
    t.enable_padding(length=max_length, pad_id=pad_id, pad_token="[PAD]")
    try:
        encs = t.encode_batch(texts, add_special_tokens=add_special_tokens)
    finally:
        t.no_truncation()
        t.no_padding()
    ids, mask, mapping = [], [], []
    for i, e in enumerate(encs):
        for w in [e] + list(e.overflowing):
            assert w is e or not w.overflowing  # HF keeps the windows flat
            ids.append(w.ids)
            mask.append(w.attention_mask)
            mapping.append(i)
    return ids, mask, mapping


def glued_documents(max_docs_per_file=60):
    """Real corpus lines glued into documents of 1, 2, 5, 13 and 40 lines, plus a few
    empty ones."""
    files = ["en_ewt.txt", "en_book_moby_dick.txt", "logs/Apache_2k.log", "logs/HDFS_2k.log",
             "multi/de.txt", "edge/blns.txt"]
    docs = ["", "   "]
    for name in files:
        lines = read_documents(DATA / "corpus" / name)
        at = 0
        for size in itertools.islice(itertools.cycle([1, 2, 5, 13, 40]), max_docs_per_file // 5):
            docs.append(" ".join(lines[at:at + size]))
            at += size
    return docs


def single_token_words(hf_raw, limit=2000):
    """Words from a real corpus that HF encodes to exactly one token (for exact lengths)."""
    words = []
    for line in read_documents(DATA / "corpus" / "en_book_pride_and_prejudice.txt")[:400]:
        words.extend(line.split())
    encs = hf_raw.encode_batch(words, add_special_tokens=False)
    return [w for w, e in zip(words, encs) if len(e.ids) == 1][:limit]


# (max_length, stride, add_special_tokens)
HF_GRID = [
    (128, 0, True), (128, 32, True), (128, 31, True), (128, 64, True),
    (64, 15, False), (64, 16, False), (64, 0, False),
    (24, 21, True), (12, 11, False),  # stride = L - 1
    (16, 7, True), (16, 0, False), (17, 5, True),
    (3, 0, True),     # L = 1 with special tokens
    (1, 0, False),    # L = 1 without
    (4, 1, True), (9, 6, True), (10, 3, False), (512, 128, True),
]


@requires_data
@pytest.mark.parametrize("vocab_name", [
    "bert-base-uncased",
    pytest.param("bert-base-multilingual-cased", marks=pytest.mark.slow)])
def test_rows_equal_hf_overflow_windows(vocab_name):
    tok = daskwp.WordPieceTokenizer(vocab_path(vocab_name),
                                    lowercase=VOCAB_LOWERCASE[vocab_name])
    pair = _hf_pair(vocab_name)
    all_texts = glued_documents()
    for max_length, stride, sp in HF_GRID:
        # short rows and small steps make many rows: fewer documents keep the test quick
        texts = all_texts if max_length >= 64 else all_texts[:24]
        out = tok(texts, max_length=max_length, stride=stride, add_special_tokens=sp)
        ids, mask, mapping = hf_windows(pair, texts, max_length, stride, sp, tok.vocab.pad_id)
        key = (vocab_name, max_length, stride, sp)
        assert out.num_rows == len(ids), key
        assert out.input_ids.tolist() == ids, key
        assert out.attention_mask.tolist() == mask, key
        assert out.metadata[:, 0].tolist() == mapping, key


@requires_data
@pytest.mark.parametrize("max_length,stride,sp", [
    (10, 0, True), (10, 3, True), (10, 4, True), (10, 7, True), (7, 0, False),
    (7, 3, False), (7, 6, False), (3, 0, True), (1, 0, False)])
def test_exact_lengths_equal_hf(max_length, stride, sp):
    """n = 0, 1, L - 1, L, L + 1, and full last windows n = L + m*step, on documents made of
    real single-token words."""
    pair = _hf_pair("bert-base-uncased")
    words = single_token_words(pair[1])
    L = max_length - (2 if sp else 0)
    step = L - stride
    lengths = sorted({0, 1, max(L - 1, 0), L, L + 1, L + step, L + 2 * step,
                      L + 3 * step, L + 3 * step + 1, L + 5 * step - 1})
    texts = [" ".join(words[i:i + n]) for i, n in enumerate(lengths)]
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"))
    enc = tok.encode(texts)
    assert enc.lengths.tolist() == lengths
    out = tok(texts, max_length=max_length, stride=stride, add_special_tokens=sp)
    ids, mask, mapping = hf_windows(pair, texts, max_length, stride, sp, tok.vocab.pad_id)
    assert out.input_ids.tolist() == ids
    assert out.attention_mask.tolist() == mask
    assert out.metadata[:, 0].tolist() == mapping
    stitched = daskwp.stitch(out.input_ids, out.metadata)
    assert [s.tolist() for s in stitched] == enc.to_list()


@requires_data
def test_truncation_equals_hf_first_window():
    pair = _hf_pair("bert-base-uncased")
    texts = glued_documents(20)
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"))
    for max_length, stride, sp in [(32, 8, True), (16, 0, False), (3, 0, True)]:
        out = tok(texts, max_length=max_length, stride=stride, truncation=True,
                  add_special_tokens=sp)
        ids, _, mapping = hf_windows(pair, texts, max_length, stride, sp, tok.vocab.pad_id)
        first = [i for i, m in enumerate(mapping) if i == 0 or mapping[i - 1] != m]
        assert out.input_ids.tolist() == [ids[i] for i in first]
        assert out.metadata[:, 0].tolist() == list(range(len(texts)))


# ---------------------------------------------------------------------------------------
# Vocabulary ids are never constants
# ---------------------------------------------------------------------------------------
ODD_TOKENS = ["hello", "world", "[SEP]", "the", "[UNK]", "a", "[MASK]", "##s", "[CLS]", "test",
              "[PAD]", ".", "cat"]


def test_special_ids_come_from_the_vocabulary():
    from conftest import hf_from_tokens
    from tokenizers import processors

    v = daskwp.Vocabulary.from_tokens(ODD_TOKENS)
    assert (v.pad_id, v.unk_id, v.cls_id, v.sep_id) == (10, 4, 8, 2)
    tok = daskwp.WordPieceTokenizer(v)
    texts = ["hello world the cats", "", "a test . zzz hello the world cat cat cat a"]
    out = tok(texts, max_length=6, stride=1)
    hf = hf_from_tokens(ODD_TOKENS)
    hf.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 8))
    ids, mask, mapping = hf_windows((hf, None), texts, 6, 1, True, 10)
    assert out.input_ids.tolist() == ids
    assert out.attention_mask.tolist() == mask
    assert out.metadata[:, 0].tolist() == mapping
    assert out.input_ids[out.doc_row_offsets[1]].tolist() == [8, 2, 10, 10, 10, 10]
    assert (out.input_ids[:, 0] == 8).all()
    assert (out.input_ids[out.attention_mask == 0] == 10).all()
    last_real = out.attention_mask.sum(axis=1) - 1
    assert (out.input_ids[np.arange(out.num_rows), last_real] == 2).all()


def test_missing_special_tokens_are_clear_errors():
    v = daskwp.Vocabulary.from_tokens(["[UNK]", "a", "b"])
    enc = encoding_of([[1, 2, 1]])
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        windows_from_encoding(enc, v, max_length=4)
    with pytest.raises(ValueError, match=r"\[PAD\]"):
        windows_from_encoding(enc, v, max_length=4, add_special_tokens=False)
    # neither is needed for ragged rows without special tokens
    out = windows_from_encoding(enc, v, max_length=2, stride=1, add_special_tokens=False,
                                padding=False)
    assert out.input_ids.to_list() == [[1, 2], [2, 1]]


# ---------------------------------------------------------------------------------------
# Padding modes, dtypes, tensors, offsets, empty input
# ---------------------------------------------------------------------------------------
def test_ragged_rows_equal_padded_rows_without_padding():
    docs = synthetic_docs([0, 1, 5, 17, 40, 3], seed=3)
    enc = encoding_of(docs)
    for max_length, stride, sp in [(8, 3, True), (5, 0, False), (3, 0, True), (6, 5, False)]:
        kw = dict(max_length=max_length, stride=stride, add_special_tokens=sp)
        padded = windows_from_encoding(enc, SMALL_VOCAB, **kw)
        ragged = windows_from_encoding(enc, SMALL_VOCAB, padding=False, **kw)
        assert isinstance(ragged.input_ids, RaggedRows)
        want = [row[:m.sum()].tolist() for row, m in zip(padded.input_ids,
                                                        padded.attention_mask)]
        assert ragged.input_ids.to_list() == want
        assert [list(r) for r in ragged.input_ids] == want
        assert ragged.attention_mask.to_list() == [[1] * len(r) for r in want]
        assert np.array_equal(ragged.metadata, padded.metadata)
        assert ragged.input_ids.lengths.tolist() == [len(r) for r in want]
        assert ragged.input_ids[-1].tolist() == want[-1]
        arrow = ragged.input_ids.to_arrow()
        assert arrow.to_pylist() == want
        assert ragged.input_ids.values.dtype == np.int32
        assert ragged.input_ids.offsets.dtype == np.int64
        assert windows_from_encoding(enc, SMALL_VOCAB, padding="do_not_pad",
                                     **kw).input_ids.to_list() == want


def test_padding_longest_true_and_mask_dtype():
    docs = synthetic_docs([2, 4, 0], seed=4)
    enc = encoding_of(docs)
    longest = windows_from_encoding(enc, SMALL_VOCAB, max_length=16, padding="longest")
    assert longest.input_ids.shape == (3, 6)
    full = windows_from_encoding(enc, SMALL_VOCAB, max_length=16)
    assert np.array_equal(full.input_ids[:, :6], longest.input_ids)
    assert np.array_equal(windows_from_encoding(enc, SMALL_VOCAB, max_length=16,
                                                padding=True).input_ids, full.input_ids)
    # longest never exceeds max_length
    long_docs = encoding_of(synthetic_docs([50, 3]))
    assert windows_from_encoding(long_docs, SMALL_VOCAB, max_length=16,
                                 padding="longest").input_ids.shape[1] == 16
    assert full.input_ids.dtype == np.int32 and full.attention_mask.dtype == np.int32
    assert full.metadata.dtype == np.int64
    small = windows_from_encoding(enc, SMALL_VOCAB, max_length=16, mask_dtype="int8")
    assert small.attention_mask.dtype == np.int8
    assert np.array_equal(small.attention_mask, full.attention_mask)
    ragged8 = windows_from_encoding(enc, SMALL_VOCAB, max_length=16, mask_dtype=np.int8,
                                    padding=False)
    assert ragged8.attention_mask.values.dtype == np.int8


def test_result_is_a_mapping_with_attributes():
    tok = daskwp.WordPieceTokenizer()
    out = tok(["hello world"], max_length=8)
    assert set(out) == {"input_ids", "attention_mask", "metadata"}
    assert out.input_ids is out["input_ids"]
    assert out.metadata.tolist() == [[0, 1, 2]]
    assert out.num_rows == 1
    assert out.doc_row_offsets.tolist() == [0, 1]
    with pytest.raises(AttributeError, match="no attribute"):
        out.token_type_ids
    import pickle

    again = pickle.loads(pickle.dumps(out))
    assert np.array_equal(again.input_ids, out.input_ids)
    assert again.doc_row_offsets.tolist() == [0, 1]


def test_empty_and_null_documents_give_one_empty_row():
    tok = daskwp.WordPieceTokenizer()
    texts = ["", None, float("nan"), "   \t\n", "hello"]
    out = tok(texts, max_length=6)
    assert out.metadata.tolist() == [[0, 1, 0], [1, 1, 0], [2, 1, 0], [3, 1, 0], [4, 1, 1]]
    assert out.input_ids[:4].tolist() == [[101, 102, 0, 0, 0, 0]] * 4
    assert out.attention_mask[:4].tolist() == [[1, 1, 0, 0, 0, 0]] * 4
    no_sp = tok(texts, max_length=4, add_special_tokens=False)
    assert no_sp.metadata[:4].tolist() == [[i, 0, -1] for i in range(4)]
    assert no_sp.attention_mask[:4].sum() == 0
    for t in (False, True):
        empty = tok([], max_length=6, truncation=t)
        assert empty.input_ids.shape == (0, 6) and empty.metadata.shape == (0, 3)
    assert tok([], max_length=6, padding=False).input_ids.to_list() == []


def test_logid_offset_and_doc_row_offsets():
    docs = synthetic_docs([10, 0, 3], seed=5)
    out = windows_from_encoding(encoding_of(docs), SMALL_VOCAB, max_length=5, stride=1,
                                logid_offset=2**40)
    # L = 3, step = 2: 1 + ceil((10 - 3) / 2) = 5 rows for the first document
    assert out.metadata[:, 0].tolist() == [2**40] * 5 + [2**40 + 1, 2**40 + 2]
    assert out.doc_row_offsets.tolist() == [0, 5, 6, 7]


def test_threads_give_the_same_result():
    docs = synthetic_docs(np.random.default_rng(6).integers(0, 700, size=3000).tolist(), 6)
    enc = encoding_of(docs)
    kw = dict(max_length=128, stride=37)
    one = windows_from_encoding(enc, SMALL_VOCAB, num_threads=1, **kw)
    many = windows_from_encoding(enc, SMALL_VOCAB, num_threads=8, **kw)
    assert one.input_ids.size >= 4 << 18  # big enough for several threads
    for k in one:
        assert np.array_equal(one[k], many[k]), k
    r1 = windows_from_encoding(enc, SMALL_VOCAB, num_threads=1, padding=False, **kw)
    r8 = windows_from_encoding(enc, SMALL_VOCAB, num_threads=8, padding=False, **kw)
    assert np.array_equal(r1.input_ids.values, r8.input_ids.values)
    assert np.array_equal(r1.input_ids.offsets, r8.input_ids.offsets)


def test_return_tensors_pt_and_cp():
    tok = daskwp.WordPieceTokenizer()
    for name, module in (("pt", "torch"), ("cp", "cupy")):
        try:
            mod = __import__(module)
        except ImportError:
            with pytest.raises(ImportError, match=f"return_tensors='{name}' needs"):
                tok(["a b"], return_tensors=name)
            continue
        out = tok(["a b c", ""], max_length=4, return_tensors=name)
        assert type(out.input_ids).__module__.split(".")[0] == module
        assert out.metadata.shape == (3, 3)   # "a b c": 2 windows of 2 tokens; "": 1 row
        rag = tok(["a b c", ""], max_length=4, return_tensors=name, padding=False)
        assert type(rag.input_ids.values).__module__.split(".")[0] == module
        del mod


# ---------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------
def test_return_tensors_none_is_the_device_default():
    tok = daskwp.WordPieceTokenizer()
    out = tok(["a b c"], max_length=8, return_tensors=None)
    assert isinstance(out["input_ids"], np.ndarray)


@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(max_length=2), ValueError, r"max_length must be in \[3, .*got 2"),
    (dict(max_length=0, add_special_tokens=False), ValueError, r"max_length.*\[1, .*got 0"),
    (dict(max_length=128.0), TypeError, r"max_length must be an integer, got 128\.0"),
    (dict(max_length=True), TypeError, r"max_length must be an integer, got True"),
    (dict(max_length=8, stride=6), ValueError, r"stride must be in \[0, 6\).*got 6"),
    (dict(max_length=8, stride=-1), ValueError, r"stride must be in \[0, 6\).*got -1"),
    (dict(max_length=8, stride=8, add_special_tokens=False), ValueError,
     r"stride must be in \[0, 8\).*got 8"),
    (dict(stride=2.5), TypeError, r"stride must be an integer, got 2\.5"),
    (dict(stride=False), TypeError, r"stride must be an integer, got False"),
    (dict(truncation=1), TypeError, r"truncation must be True or False, got 1"),
    (dict(truncation="yes"), ValueError, r"truncation must be .*got 'yes'"),
    (dict(add_special_tokens="no"), TypeError, r"add_special_tokens must be True or False"),
    (dict(padding="max"), ValueError, r"padding must be one of .*max_length.*got 'max'"),
    (dict(padding=1), ValueError, r"padding must be one of .*got 1"),
    (dict(return_tensors="tf"), ValueError, r"return_tensors must be one of .*'np'.*got 'tf'"),
    (dict(return_tensors=""), ValueError, r"return_tensors must be one of .*got ''"),
    (dict(logid_offset=-1), ValueError, r"logid_offset must be a non-negative integer, got -1"),
    (dict(logid_offset=1.5), TypeError, r"logid_offset must be an integer"),
])
def test_bad_parameters(kwargs, exc, pattern):
    tok = daskwp.WordPieceTokenizer()
    with pytest.raises(exc, match=pattern):
        tok(["hello world"], **kwargs)


def test_numpy_integers_are_accepted_and_bad_mask_dtype():
    tok = daskwp.WordPieceTokenizer()
    out = tok(["hello world"], max_length=np.int64(6), stride=np.int32(1))
    assert out.input_ids.shape == (1, 6)
    with pytest.raises(ValueError, match="mask_dtype must be int32 or int8, got 'float32'"):
        windows_from_encoding(encoding_of([[1]]), SMALL_VOCAB, mask_dtype="float32")


def test_native_binding_checks_its_inputs():
    ids = np.arange(5, dtype=np.int32)
    args = dict(max_length=4, stride=0, truncation=False, add_special_tokens=True, cls_id=1,
                sep_id=2, pad_id=0, logid_offset=0, padding=True)
    with pytest.raises(ValueError, match="outside token_ids"):
        daskwp._ext.build_windows(ids, np.array([0, 6], dtype=np.int64), **args)
    with pytest.raises(ValueError, match="non-decreasing"):
        daskwp._ext.build_windows(ids, np.array([0, 3, 2, 5], dtype=np.int64), **args)
    with pytest.raises(ValueError, match="stride"):
        daskwp._ext.build_windows(ids, np.array([0, 5], dtype=np.int64),
                                  **{**args, "stride": 2})
    with pytest.raises(ValueError, match="shorter than the longest row"):
        daskwp._ext.build_windows(ids, np.array([0, 5], dtype=np.int64),
                                  **{**args, "pad_width": 3})


# ---------------------------------------------------------------------------------------
# The header is device code too
# ---------------------------------------------------------------------------------------
NVCC_KERNEL = r"""
#include "windows.hpp"
using namespace daskwp;
// One thread per output row.
extern "C" __global__ void fill_windows(const int32_t* tokens, const int64_t* offsets,
                                        const int64_t* doc_rows, int64_t n_docs,
                                        int32_t max_length, int32_t stride, int32_t truncation,
                                        int32_t add_special_tokens, int32_t cls_id,
                                        int32_t sep_id, int32_t pad_id, int32_t* ids,
                                        int32_t* mask, int64_t* meta) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= doc_rows[n_docs]) return;
  const WindowParams p = make_window_params(max_length, stride, truncation != 0,
                                            add_special_tokens != 0, cls_id, sep_id, pad_id);
  const int64_t d = find_document(doc_rows, n_docs, r);
  fill_window_row<int32_t>(tokens + offsets[d], offsets[d + 1] - offsets[d], r - doc_rows[d],
                           d, p, max_length, ids + r * max_length, mask + r * max_length,
                           meta + 3 * r);
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.slow   # nvcc
def test_windows_header_compiles_with_nvcc(tmp_path, arch):
    src = tmp_path / "windows_kernel.cu"
    src.write_text(NVCC_KERNEL)
    res = subprocess.run(["nvcc", "-std=c++17", f"-arch={arch}", "-I", str(KERNELS), "-c",
                          str(src), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr


@pytest.mark.gpu
def test_windows_kernel_on_gpu_equals_cpu():
    import cupy  # the gpu marker skips where CuPy or a device is missing (conftest)
    docs = synthetic_docs([0, 1, 5, 17, 40, 3, 200], seed=7)
    enc = encoding_of(docs)
    max_length, stride = 10, 3
    cpu = windows_from_encoding(enc, SMALL_VOCAB, max_length=max_length, stride=stride)
    module = cupy.RawModule(code=NVCC_KERNEL, options=("-std=c++17", f"-I{KERNELS}"))
    kernel = module.get_function("fill_windows")
    rows = cpu.num_rows
    ids = cupy.empty((rows, max_length), dtype=cupy.int32)
    mask = cupy.empty((rows, max_length), dtype=cupy.int32)
    meta = cupy.empty((rows, 3), dtype=cupy.int64)
    i32 = np.int32
    kernel(((rows + 127) // 128,), (128,),
           (cupy.asarray(enc.token_ids), cupy.asarray(enc.offsets),
            cupy.asarray(cpu.doc_row_offsets), np.int64(len(docs)), i32(max_length),
            i32(stride), i32(0), i32(1), i32(SMALL_VOCAB.cls_id), i32(SMALL_VOCAB.sep_id),
            i32(SMALL_VOCAB.pad_id), ids, mask, meta))
    assert np.array_equal(ids.get(), cpu.input_ids)
    assert np.array_equal(mask.get(), cpu.attention_mask)
    assert np.array_equal(meta.get(), cpu.metadata)


def test_output_size_is_checked_before_allocating(monkeypatch):
    """issue 37.10: max_length=2**31-1 with the default padding would allocate ~16 GB for a
    one-token document; the size is checked first and refused with an OutputSizeError (a
    MemoryError and a ValueError) naming it and the parameters, on the CPU, the pair pass,
    the CUDA source (emulated) and the accessor; the cap is daskwp.max_output_bytes."""
    import resource

    import dask.config
    import pandas as pd

    from daskwp.core.windows import OutputSizeError, max_output_bytes

    tok = daskwp.WordPieceTokenizer()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for kw in (dict(), dict(text_pair=["world"]), dict(max_length=858993459)):
        opts = dict(dict(max_length=2**31 - 1), **kw)
        with pytest.raises(MemoryError, match=r"the padded output would take [\d,]+ bytes "
                                              r"\([\d.]+ GiB\): 1 rows x [\d,]+ columns.*"
                                              rf"max_length={opts['max_length']}") as e:
            tok(["hello"], **opts)
        assert isinstance(e.value, ValueError) and isinstance(e.value, OutputSizeError)
        assert "daskwp.max_output_bytes" in str(e.value)
    with pytest.raises(OutputSizeError):
        pd.Series(["hello", None]).wordpiece.tokenize(max_length=2**31 - 1)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) < (1 << 20)  # KiB
    # nothing padded to max_length: no limit to check
    assert tok(["hello"], max_length=2**31 - 1, padding="longest")["input_ids"].shape == (1, 3)
    assert tok(["hello"], max_length=2**31 - 1, padding=False)["input_ids"].to_list() == \
        [[tok.vocab.cls_id, tok.vocab.token_to_id("hello"), tok.vocab.sep_id]]
    # the cap: exact row counts (100 short documents: 100 rows of 16 x 8 bytes + 24)
    docs = ["a b c d e"] * 100
    with dask.config.set({"daskwp.max_output_bytes": 100 * (16 * 8 + 24)}):
        assert max_output_bytes() == 15200
        assert tok(docs, max_length=16)["input_ids"].shape == (100, 16)
    with dask.config.set({"daskwp.max_output_bytes": 100 * (16 * 8 + 24) - 1}):
        with pytest.raises(OutputSizeError, match=r"15,200 bytes.*100 rows x 16 columns x 8 "
                                                  r"bytes per cell.*max_output_bytes=15,199"):
            tok(docs, max_length=16)
        with pytest.raises(OutputSizeError, match=r"100 rows x 16 columns x 12 bytes"):
            tok(docs, max_length=16, text_pair=docs)   # ids, mask and token type ids
        assert tok(docs, max_length=16, text_pair=docs, mask_dtype="int8",
                   return_token_type_ids=False)["input_ids"].shape == (100, 16)
        assert tok(docs, max_length=16, padding=False)["input_ids"].to_list()[0][0] == \
            tok.vocab.cls_id
        from daskwp.backends import cuda
        from daskwp.testing.emulated_cuda import cxx, fake_cupy, use_fake_cupy
        if cxx() is not None:
            use_fake_cupy(fake_cupy(), monkeypatch)
            gpu = daskwp.WordPieceTokenizer(device="gpu")
            with pytest.raises(OutputSizeError, match="15,200 bytes"):
                gpu(docs, max_length=16)
            cuda.clear_caches()
    with dask.config.set({"daskwp.max_output_bytes": "lots"}):
        with pytest.raises(ValueError, match="max_output_bytes must be a size"):
            tok(docs, max_length=16)
