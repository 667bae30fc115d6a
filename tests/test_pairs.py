"""Sentence pairs and question-answering windows (docs/design.md §2.8).

* rows of pairs built from the shared corpora (short sentences first, long documents glued
  from book lines second, and the reverse for ``only_first``) equal HuggingFace
  ``tokenizers`` (``enable_truncation(max_length, stride, strategy)`` + ``encode_batch`` of
  pairs + each encoding's ``overflowing``): ids, type ids, sequence ids, attention mask and
  the overflow-to-sample mapping, for every strategy x several (max_length, stride), odd
  and even, with and without padding and special tokens;
* ``longest_first`` with overflow is refused (HF's cross product is no windowing); a fixed
  side that leaves no room is refused where HF refuses (or panics), naming both lengths;
* the owned slices rebuild the windowed sequence of every pair exactly once (stitch);
* null / empty sides; single texts' token_type_ids / sequence_ids;
* extractive QA with the public API: answer character spans -> token positions per window
  (HF's run_qa rule), equal to the positions computed from HF's offsets;
* emulated CUDA == CPU; Dask (LocalCluster, processes) and the CLI end to end.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import daskwp
from conftest import DATA, VOCAB_LOWERCASE, read_documents, vocab_path

VOCAB = "bert-base-uncased"


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer(vocab_path(VOCAB), lowercase=VOCAB_LOWERCASE[VOCAB])


@pytest.fixture(scope="module")
def hf():
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(str(vocab_path(VOCAB)), lowercase=VOCAB_LOWERCASE[VOCAB])


def short_sentences(n=40):
    lines = [x for x in read_documents(DATA / "corpus" / "en_ewt.txt") if x.strip()]
    return lines[:n] + ["", "   "]


def long_documents(n=42):
    lines = read_documents(DATA / "corpus" / "en_book_moby_dick.txt")
    docs, at = [], 0
    for size in itertools.islice(itertools.cycle([1, 3, 8, 20]), n - 2):
        docs.append(" ".join(lines[at:at + size]))
        at += size
    return docs + ["", "\x00\x01"]


def hf_rows(hf, pairs, max_length, stride, strategy, overflow, special, pad_to=None):
    """HF rows of ``pairs``: dict of lists (ids, type ids, sequence ids with -1 for None,
    mask) and the overflow-to-sample mapping."""
    hf.enable_truncation(max_length, stride=stride, strategy=strategy)
    if pad_to is not None:
        hf.enable_padding(length=pad_to, pad_id=hf.token_to_id("[PAD]"))
    try:
        encs = hf.encode_batch(pairs, add_special_tokens=special)
    finally:
        hf.no_truncation()
        hf.no_padding()
    out = {"input_ids": [], "token_type_ids": [], "sequence_ids": [], "attention_mask": []}
    mapping = []
    for i, e in enumerate(encs):
        for w in [e] + (list(e.overflowing) if overflow else []):
            assert w is e or not w.overflowing
            out["input_ids"].append(w.ids)
            out["token_type_ids"].append(w.type_ids)
            out["sequence_ids"].append([-1 if s is None else s for s in w.sequence_ids])
            out["attention_mask"].append(w.attention_mask)
            mapping.append(i)
    return out, mapping


def fits(tok, firsts, seconds, max_length, stride, special, fixed):
    """Pairs whose fixed side leaves room for windows (HF refuses the others)."""
    n_special = 3 if special else 0
    n = min(len(firsts), len(seconds))
    firsts, seconds = firsts[:n], seconds[:n]
    na = tok.encode(firsts).offsets
    nb = tok.encode(seconds).offsets
    la, lb = np.diff(na), np.diff(nb)
    nf = la if fixed == 0 else lb
    keep = max_length - n_special - nf > stride
    return [f for f, k in zip(firsts, keep) if k], [s for s, k in zip(seconds, keep) if k]


def pad_rows(rows, width, value):
    return [r + [value] * (width - len(r)) for r in rows]


# (max_length, stride, add_special_tokens)
GRID = [(32, 0, True), (32, 5, True), (33, 4, True), (64, 16, True), (64, 15, True),
        (17, 2, True), (128, 32, True), (20, 3, False), (21, 0, False)]
# (truncation given to daskwp, HF strategy, return_overflowing_tokens, fixed side)
MODES = [
    (False, "only_second", None, 0),
    ("only_second", "only_second", True, 0),
    ("only_first", "only_first", True, 1),
    ("only_second", "only_second", False, 0),
    ("only_first", "only_first", False, 1),
    ("longest_first", "longest_first", False, None),
    (True, "longest_first", None, None),
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{m[0]}-{m[2]}")
@pytest.mark.parametrize("padding", ["max_length",
                                     pytest.param("do_not_pad", marks=pytest.mark.slow),
                                     pytest.param("longest", marks=pytest.mark.slow)])
def test_pairs_equal_hf(tok, hf, mode, padding):
    truncation, strategy, rot, fixed = mode
    overflow = truncation is False or bool(rot)
    shorts, longs = short_sentences(), long_documents()
    checked = 0
    for max_length, stride, special in GRID:
        if fixed == 1:      # only_first: the long documents first, the sentences second
            firsts, seconds = longs, shorts
        else:
            firsts, seconds = shorts, longs
        if fixed is None:   # longest_first: both sides may be cut to M // 2 (HF asserts the
            m = max_length - (3 if special else 0)       # stride against every cut)
            if stride >= m // 2:
                continue
        else:
            firsts, seconds = fits(tok, firsts, seconds, max_length, stride, special, fixed)
        if padding != "max_length" and max_length < 60:
            firsts, seconds = firsts[:15], seconds[:15]
        pairs = list(zip(firsts, seconds))
        opts = dict(max_length=max_length, stride=stride, truncation=truncation,
                    add_special_tokens=special, padding=padding,
                    return_overflowing_tokens=rot, return_token_type_ids=True,
                    return_sequence_ids=True, logid_offset=5)
        out = tok(firsts, text_pair=seconds, **opts)
        pad_to = max_length if padding == "max_length" else None
        exp, mapping = hf_rows(hf, pairs, max_length, stride, strategy, overflow, special,
                               pad_to)
        key = (mode, padding, max_length, stride, special)
        assert out.num_rows == len(mapping), key
        assert (out.metadata[:, 0] - 5).tolist() == mapping, key
        for name, rows in exp.items():
            got = out[name]
            if padding == "do_not_pad":
                assert got.to_list() == rows, (key, name)
                continue
            if padding == "longest":
                width = max(map(len, exp["input_ids"]))
                fill = {"input_ids": tok.vocab.pad_id, "sequence_ids": -1}.get(name, 0)
                rows = pad_rows(rows, width, fill)
            assert got.tolist() == rows, (key, name)
        assert out.sequence_ids.dtype == np.int8 if padding != "do_not_pad" else True
        checked += 1
    assert checked >= 5


def stitched(out, n):
    got = [[] for _ in range(n)]
    ids = out.input_ids
    for r, (logid, start, stop) in enumerate(out.metadata.tolist()):
        assert stop >= start - 1
        got[logid].extend(ids[r][start:stop + 1].tolist())
    return got


@pytest.mark.parametrize("truncation,side", [(False, 1), ("only_second", 1),
                                             ("only_first", 0)])
@pytest.mark.parametrize("max_length,stride", [(24, 0), (24, 5), (25, 6), (40, 11)])
@pytest.mark.parametrize("padding", ["max_length", False])
def test_owned_slices_rebuild_the_windowed_sequence(tok, truncation, side, max_length, stride,
                                                    padding):
    shorts, longs = short_sentences(30), long_documents(30)
    firsts, seconds = (shorts, longs) if side == 1 else (longs, shorts)
    firsts, seconds = fits(tok, firsts, seconds, max_length, stride, True, 1 - side)
    out = tok(firsts, text_pair=seconds, max_length=max_length, stride=stride,
              truncation=truncation, return_overflowing_tokens=True, padding=padding)
    windowed = seconds if side == 1 else firsts
    assert stitched(out, len(firsts)) == tok.encode(windowed).to_list()
    # daskwp.stitch: the same, through the public function
    if padding == "max_length":
        res = daskwp.stitch(out.input_ids, out.metadata)
        assert [list(x) for x in res] == tok.encode(windowed).to_list()


def test_longest_first_with_overflow_is_refused(tok):
    for kw in (dict(truncation=True, return_overflowing_tokens=True),
               dict(truncation="longest_first", return_overflowing_tokens=True)):
        with pytest.raises(ValueError, match="only_second.*only_first"):
            tok(["a b"], text_pair=["c d"], max_length=8, **kw)


def test_fixed_side_without_room_is_refused_as_hf(tok, hf):
    long = " ".join(["word"] * 40)
    for max_length, stride in ((20, 0), (47, 4)):
        hf.enable_truncation(max_length, stride=stride, strategy="only_second")
        with pytest.raises(BaseException):     # HF: an error (no room) or a panic (stride)
            hf.encode(long, "a question " * 5)
        hf.no_truncation()
        with pytest.raises(ValueError, match=r"pair 0 \(logID 0\): the first sequence has "
                                             r"40 tokens and the second 10"):
            tok([long], text_pair=["a question " * 5], max_length=max_length, stride=stride)
    with pytest.raises(ValueError, match="the second sequence leaves"):
        tok(["x"], text_pair=[long], max_length=20, truncation="only_first",
            return_overflowing_tokens=True)
    # no truncation needed: fine, as in HF
    out = tok([long], text_pair=[""], max_length=43)
    assert out.num_rows == 1


def test_text_pair_length_and_only_second_without_pair(tok):
    with pytest.raises(ValueError, match="one entry per text"):
        tok(["a", "b"], text_pair=["c"])
    with pytest.raises(ValueError, match="only_second.*no text_pair"):
        tok(["a"], truncation="only_second")


def test_null_and_empty_sides(tok, hf):
    firsts = [None, "", "a question", None, "   ", "q"]
    seconds = ["some context here", None, "", None, float("nan"), "word " * 30]
    out = tok(firsts, text_pair=seconds, max_length=16, stride=3, return_sequence_ids=True,
              return_token_type_ids=True)
    clean = lambda x: "" if x is None or x != x else x    # noqa: E731
    pairs = [(clean(a), clean(b)) for a, b in zip(firsts, seconds)]
    exp, mapping = hf_rows(hf, pairs, 16, 3, "only_second", True, True, 16)
    assert (out.metadata[:, 0]).tolist() == mapping
    assert sorted(set(mapping)) == list(range(len(firsts)))
    for name, rows in exp.items():
        assert out[name].tolist() == rows, name
    # an empty windowed side: one row, an empty owned slice right after the first [SEP]
    meta = out.metadata.tolist()
    rows = out.doc_row_offsets
    assert meta[rows[1]] == [1, 2, 1]        # [CLS] [SEP] [SEP]: the second would start at 2
    assert meta[rows[3]] == [3, 2, 1]
    assert meta[rows[2]] == [2, 4, 3]        # "a question" then an empty second


def test_single_texts_type_and_sequence_ids(tok):
    texts = ["hello world", "", "a b c d e f g h i j k l"]
    for padding in ("max_length", False):
        out = tok(texts, max_length=8, stride=2, padding=padding, return_token_type_ids=True,
                  return_sequence_ids=True)
        plain = tok(texts, max_length=8, stride=2, padding=padding)
        if padding is False:
            ids, tt, sq = (out[k].to_list() for k in ("input_ids", "token_type_ids",
                                                     "sequence_ids"))
            assert ids == plain.input_ids.to_list()
            for r, row in enumerate(ids):
                assert tt[r] == [0] * len(row)
                assert sq[r] == [-1] + [0] * (len(row) - 2) + [-1]
            continue
        assert (out.token_type_ids == 0).all()
        mask = out.attention_mask
        for r in range(out.num_rows):
            n = int(mask[r].sum())
            assert out.sequence_ids[r].tolist() == [-1] + [0] * (n - 2) + [-1] * (9 - n)
    # truncation=True with overflow: the windows of truncation=False
    a = tok(texts, max_length=6, stride=1, truncation=True, return_overflowing_tokens=True)
    b = tok(texts, max_length=6, stride=1)
    assert a.input_ids.tolist() == b.input_ids.tolist()


# ---------------------------------------------------------------------------------------
# Extractive QA (HF run_qa's rule), with the public API only
# ---------------------------------------------------------------------------------------
def qa_examples():
    lines = [x for x in read_documents(DATA / "corpus" / "en_book_pride_and_prejudice.txt")
             if len(x.split()) > 6]
    contexts = [" ".join(lines[i:i + 12]) for i in range(0, 240, 12)]
    out = []
    rng = np.random.default_rng(0)
    for c in contexts:
        words = c.split(" ")
        i = int(rng.integers(0, len(words) - 3))
        start = len(" ".join(words[:i])) + (1 if i else 0)
        answer = " ".join(words[i:i + 3])
        assert c[start:start + len(answer)] == answer
        out.append(("who said " + words[min(i + 5, len(words) - 1)] + "?", c, start, answer))
    return out


def qa_positions(tok, questions, contexts, starts, answers, max_length, stride):
    """start/end token positions per window; [CLS] (0, 0) when the window misses the
    answer. The answer's tokens: the context prefix up to the answer (its token count is
    the answer's first token) and the answer itself (valid because answers start and end on
    word boundaries here, so WordPiece splits the same way)."""
    out = tok(questions, text_pair=contexts, max_length=max_length, stride=stride,
              truncation="only_second", return_overflowing_tokens=True,
              return_sequence_ids=True)
    first = np.diff(tok.encode([c[:s] for c, s in zip(contexts, starts)]).offsets)
    n_ans = np.diff(tok.encode(answers).offsets)
    positions = []
    for r in range(out.num_rows):
        i = int(out.metadata[r, 0])
        seq = out.sequence_ids[r]
        cols = np.flatnonzero(seq == 1)
        # the context token in column cols[0]: from the owned slice of row 0 onwards
        k = r - int(out.doc_row_offsets[i])
        room = len(cols) if k == 0 else None
        positions.append((i, cols, k))
    # context token index of each row's first context column: k * step
    res = []
    for (i, cols, k), r in zip(positions, range(out.num_rows)):
        na = int(np.diff(tok.encode([questions[i]]).offsets)[0])
        room = max_length - 3 - na
        off = k * (room - stride)
        a0, a1 = int(first[i]), int(first[i] + n_ans[i] - 1)
        lo, hi = off, off + len(cols) - 1
        if a0 >= lo and a1 <= hi:
            res.append((int(cols[0] + a0 - off), int(cols[0] + a1 - off)))
        else:
            res.append((0, 0))
    return res


def hf_qa_positions(hf, questions, contexts, starts, answers, max_length, stride):
    hf.enable_truncation(max_length, stride=stride, strategy="only_second")
    try:
        encs = hf.encode_batch(list(zip(questions, contexts)))
    finally:
        hf.no_truncation()
    res = []
    for i, e in enumerate(encs):
        s_char, e_char = starts[i], starts[i] + len(answers[i])
        for w in [e] + list(e.overflowing):
            seq = w.sequence_ids
            ctx = [j for j, s in enumerate(seq) if s == 1]
            o = w.offsets
            if not ctx or not (o[ctx[0]][0] <= s_char and o[ctx[-1]][1] >= e_char):
                res.append((0, 0))
                continue
            ts = next(j for j in ctx if o[j][0] <= s_char < o[j][1] or o[j][0] >= s_char)
            te = max(j for j in ctx if o[j][0] < e_char)
            res.append((ts, te))
    return res


@pytest.mark.parametrize("max_length,stride", [(64, 16), (48, 7), (128, 32)])
def test_extractive_qa_positions_equal_hf(tok, hf, max_length, stride):
    ex = qa_examples()
    q, c, s, a = (list(x) for x in zip(*ex))
    got = qa_positions(tok, q, c, s, a, max_length, stride)
    exp = hf_qa_positions(hf, q, c, s, a, max_length, stride)
    assert got == exp
    assert any(x != (0, 0) for x in got) and any(x == (0, 0) for x in got)


def run_qa_rule(input_ids, offsets, sequence_ids, cls_id, s_char, e_char):
    """HF run_qa.py's prepare_train_features rule on one row, as written there: the answer's
    start/end token positions, or the [CLS] position when the row's context misses it."""
    cls_index = input_ids.index(cls_id)
    ts = 0
    while sequence_ids[ts] != 1:
        ts += 1
    te = len(input_ids) - 1
    while sequence_ids[te] != 1:
        te -= 1
    if not (offsets[ts][0] <= s_char and offsets[te][1] >= e_char):
        return cls_index, cls_index
    while ts < len(offsets) and offsets[ts][0] <= s_char:
        ts += 1
    while offsets[te][1] >= e_char:
        te -= 1
    return ts - 1, te + 1


@pytest.mark.parametrize("max_length,stride", [(384, 128), (64, 16), (48, 7)])
def test_extractive_qa_with_offsets_equals_hf(tok, hf, max_length, stride):
    """The canonical QA preprocessing with the public API only: daskwp's offsets, sequence
    ids and logIDs (overflow_to_sample_mapping) through HF run_qa's rule give HF's start and
    end positions on every window."""
    ex = qa_examples()
    q, c, s, a = (list(x) for x in zip(*ex))
    out = tok(q, text_pair=c, max_length=max_length, stride=stride, truncation="only_second",
              return_overflowing_tokens=True, return_offsets_mapping=True,
              return_sequence_ids=True)
    cls_id = tok.vocab.token_to_id("[CLS]")
    got = []
    for r in range(out.num_rows):
        i = int(out.metadata[r, 0])
        ids = out.input_ids[r].tolist()
        seq = [None if x < 0 else int(x) for x in out.sequence_ids[r].tolist()]
        got.append((i, run_qa_rule(ids, out.offset_mapping[r].tolist(), seq, cls_id,
                                   s[i], s[i] + len(a[i]))))
    hf.enable_truncation(max_length, stride=stride, strategy="only_second")
    hf.enable_padding(length=max_length, pad_id=hf.token_to_id("[PAD]"))
    try:
        encs = hf.encode_batch(list(zip(q, c)))
    finally:
        hf.no_truncation()
        hf.no_padding()
    exp = []
    for i, e in enumerate(encs):
        for w in [e] + list(e.overflowing):
            exp.append((i, run_qa_rule(w.ids, w.offsets, w.sequence_ids, cls_id, s[i],
                                       s[i] + len(a[i]))))
    assert got == exp
    assert sum(p != (0, 0) for _, p in got) >= len(ex)    # every answer found at least once


# ---------------------------------------------------------------------------------------
# GPU == CPU: the CUDA launcher with the emulated kernels and a NumPy stand-in for CuPy
# ---------------------------------------------------------------------------------------
# The CuPy stand-in has the functions of the pair pass too (daskwp/testing/emulated_cuda.py).


CUDA_CASES = [
    dict(max_length=24, stride=5),
    dict(max_length=25, stride=4, padding=False, return_token_type_ids=True,
         return_sequence_ids=True),
    dict(max_length=33, stride=6, padding="longest", truncation="only_first",
         return_overflowing_tokens=True, return_sequence_ids=True, mask_dtype="int8"),
    dict(max_length=40, truncation=True, return_token_type_ids=True, logid_offset=9),
    dict(max_length=20, stride=2, add_special_tokens=False, truncation="only_second",
         return_overflowing_tokens=True, return_token_type_ids=True),
    dict(max_length=40, stride=6, padding="bucket", bucket_widths=(16, 32),
         return_token_type_ids=True, return_sequence_ids=True),
]


@pytest.mark.parametrize("case", range(len(CUDA_CASES)))
def test_emulated_cuda_equals_cpu(tok, emulated_cuda, case):
    opts = dict(CUDA_CASES[case])
    shorts, longs = short_sentences(20), long_documents(20)
    firsts, seconds = (longs, shorts) if opts.get("truncation") == "only_first" else \
        (shorts, longs)
    n = min(len(firsts), len(seconds))
    firsts, seconds = firsts[:n], seconds[:n]
    if opts.get("truncation") is not True:
        fixed = 1 if opts.get("truncation") == "only_first" else 0
        firsts, seconds = fits(tok, firsts, seconds, opts["max_length"], opts.get("stride", 0),
                               opts.get("add_special_tokens", True), fixed)
    gpu = daskwp.WordPieceTokenizer(tok.vocab, device="gpu", **tok.settings)
    for text_pair in (seconds, None):
        if text_pair is None and opts.get("truncation") == "only_second":
            continue
        want = tok(firsts, text_pair=text_pair, **opts)
        got = gpu(firsts, text_pair=text_pair, return_tensors="np", **opts)
        if opts.get("padding") == "bucket":       # (width, windows) per bucket
            assert [wd for wd, _ in got] == [wd for wd, _ in want] and len(want) > 1
            pairs_of = [(g_b, w_b) for (_, g_b), (_, w_b) in zip(got, want)]
        else:
            pairs_of = [(got, want)]
        for got_b, want_b in pairs_of:
            assert sorted(got_b) == sorted(want_b)
            for key, w in want_b.items():
                g = got_b[key]
                if isinstance(w, daskwp.RaggedRows):
                    assert np.array_equal(np.asarray(g.offsets), w.offsets), key
                    g, w = g.values, w.values
                g = np.asarray(g)
                assert g.dtype == w.dtype and g.shape == w.shape, (key, g.dtype, w.dtype)
                assert np.array_equal(g, w), key


# ---------------------------------------------------------------------------------------
# Dask: two columns of one DataFrame, global logIDs
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_dask_pairs_on_a_local_cluster(tok):
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster

    import daskwp.accessors  # noqa: F401  (registers .wordpiece)

    shorts, longs = short_sentences(30), long_documents(30)
    firsts, seconds = fits(tok, shorts, longs, 48, 8, True, 0)
    firsts[3] = None
    df = pd.DataFrame({"question": firsts, "context": seconds})
    opts = dict(max_length=48, stride=8, truncation="only_second",
                return_overflowing_tokens=True)
    want = tok(firsts, text_pair=seconds, **opts)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        ddf = dd.from_pandas(df, npartitions=4)
        res = ddf["question"].wordpiece.tokenize(tok, text_pair=ddf["context"], **opts)
        got = res.compute()
        assert np.array_equal(got.metadata.to_numpy(), want.metadata)
        assert np.array_equal(got.input_ids, want.input_ids)
        # the windowed side stitched back, cluster-wide
        st = res.stitch(res.input_ids).compute().sort_values("logID")
        assert [list(x) for x in st["values"]] == tok.encode(seconds).to_list()
        other = dd.from_pandas(pd.DataFrame({"c": seconds}), npartitions=3)
        with pytest.raises(ValueError, match="partitions"):
            ddf["question"].wordpiece.tokenize(tok, text_pair=other["c"])
    # eager pandas accessor: the same rows
    eager = df["question"].wordpiece.tokenize(tok, text_pair=df["context"], **opts)
    assert np.array_equal(eager.input_ids, want.input_ids)
