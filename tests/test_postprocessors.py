"""A ``tokenizer.json``'s post-processor (issue 37.1; docs/design.md §1.7, §2.1, §2.8).

The oracle is HF ``tokenizers`` itself: ``Tokenizer.from_file`` of the same file, with
``enable_truncation(max_length, stride=..., strategy=...)`` and each encoding followed by its
``overflowing``. Every supported post-processor (none, ``BertProcessing``,
``TemplateProcessing`` with special tokens and type ids on either side, several specials,
specials of several ids, a ``Sequence`` that holds one of them or none) must give HF's ids,
type ids and windows for single texts and pairs:

* on a few hundred corpus lines, every output (ids, mask, type ids, sequence ids, special
  tokens mask, offsets, word ids, padded, ragged, bucketed, without special tokens) — fast;
* on every line of the shared corpora with two vocabularies (ids, type ids, logIDs) — slow;
* through every route that names a file: ``WordPieceTokenizer(path)``, ``from_pretrained``,
  the accessor's ``vocab=`` and a batch job's ``--vocab``;
* on the CUDA source through the emulated build, equal to the CPU extension;

and the rest is refused by name when the tokenizer is built.
"""

from __future__ import annotations

import functools
import json
import pickle

import numpy as np
import pytest

import daskwp
from conftest import DATA, every_corpus_line, read_documents, slow_unless, vocab_path

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import BertWordPieceTokenizer, Tokenizer, processors  # noqa: E402


def base_tokenizer(vocab_name: str = "bert-base-uncased") -> Tokenizer:
    """HF's BERT pipeline for a shared vocabulary, as a plain Tokenizer (a fresh copy)."""
    hf = BertWordPieceTokenizer(str(vocab_path(vocab_name)),
                                lowercase=vocab_name != "bert-base-cased")
    return Tokenizer.from_str(hf._tokenizer.to_str())


def processor(name: str, hf: Tokenizer):
    """The post-processors under test, with the vocabulary's own ids (never constants)."""
    cls, sep, mask = (hf.token_to_id(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    specials = [("[CLS]", cls), ("[SEP]", sep), ("[MASK]", mask)]
    T = processors.TemplateProcessing
    if name == "none":
        return None
    if name == "bert_processing":
        return processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    if name == "sep_only":
        return T(single="$A [SEP]", pair="$A [SEP] $B:1 [SEP]:1", special_tokens=specials)
    if name == "pair_type0":
        return T(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:0 [SEP]",
                 special_tokens=specials)
    if name == "several":
        return T(single="[CLS] [MASK] $A:1 [SEP]:1",
                 pair="[CLS]:1 $A:1 [SEP] [SEP] $B:0 [SEP]:1 [MASK]:2",
                 special_tokens=specials)
    if name == "multi_id":
        return T(single="<x> $A [SEP]", pair="<x> $A [SEP]:1 $B:1",
                 special_tokens=[{"id": "<x>", "ids": [cls, mask],
                                  "tokens": ["[CLS]", "[MASK]"]}, ("[SEP]", sep)])
    if name == "sequence_of_one":
        return processors.Sequence([T(single="[CLS] $A", pair="[CLS] $A $B:1",
                                      special_tokens=specials)])
    if name == "empty_sequence":
        return processors.Sequence([])
    raise KeyError(name)


PROCESSORS = ("none", "bert_processing", "sep_only", "pair_type0", "several", "multi_id",
              "sequence_of_one", "empty_sequence")


def write_file(tmp_path, name: str, vocab_name: str = "bert-base-uncased"):
    """A tokenizer.json with post-processor ``name``; (path, HF's Tokenizer.from_file)."""
    hf = base_tokenizer(vocab_name)
    hf.post_processor = processor(name, hf)
    hf.no_padding()
    hf.no_truncation()
    path = tmp_path / f"{vocab_name}-{name}.json"
    hf.save(str(path))
    return path, Tokenizer.from_file(str(path))


def hf_rows(hf, firsts, seconds, max_length, stride, strategy, overflow=True,
            add_special_tokens=True):
    """HF's encodings (each followed by its overflowing) and their sample mapping."""
    hf.enable_truncation(max_length, stride=stride, strategy=strategy)
    try:
        batch = firsts if seconds is None else list(zip(firsts, seconds))
        encs = hf.encode_batch(batch, add_special_tokens=add_special_tokens)
    finally:
        hf.no_truncation()
    rows, mapping = [], []
    for i, e in enumerate(encs):
        for w in [e] + (list(e.overflowing) if overflow else []):
            rows.append(w)
            mapping.append(i)
    return rows, mapping


def assert_rows(out, rows, mapping, what, extras=False, first_sequence_ids=False):
    """The ragged result ``out`` equals HF's ``rows`` (ids, type ids, logIDs; with
    ``extras`` every other output). ``first_sequence_ids``: compare sequence ids on the first
    row of each sample only (with no post-processor HF leaves the overflowing rows' sequence
    ids of a pair's windowed side None; daskwp gives them as on the first row:
    docs/differences-hf.md)."""
    ids = out["input_ids"].to_list()
    want = [r.ids for r in rows]
    if ids != want:
        bad = next(i for i, (g, w) in enumerate(zip(ids + [None] * len(want), want))
                   if g != w)
        pytest.fail(f"{what}: {len(ids)} rows, HF {len(want)}; row {bad} (sample "
                    f"{mapping[bad]}): got {ids[bad] if bad < len(ids) else None}, HF "
                    f"{want[bad]}")
    assert out["token_type_ids"].to_list() == [r.type_ids for r in rows], what
    assert np.asarray(out["metadata"])[:, 0].tolist() == mapping, what
    if extras:
        assert out["special_tokens_mask"].to_list() == [r.special_tokens_mask for r in rows]
        keep = [i for i in range(len(rows)) if not first_sequence_ids or i == 0
                or mapping[i] != mapping[i - 1]]
        got_seq = out["sequence_ids"].to_list()
        assert [got_seq[i] for i in keep] == [
            [-1 if s is None else s for s in rows[i].sequence_ids] for i in keep], what
        assert out["word_ids"].to_list() == [
            [-1 if s is None else s for s in r.word_ids] for r in rows], what
        got = [[tuple(x) for x in np.asarray(v).reshape(-1, 2).tolist()]
               for v in out["offset_mapping"].to_list()]
        assert got == [list(r.offsets) for r in rows], what


def short_and_long(hf, lines, limit: int):
    """Lines HF encodes to at most ``limit`` tokens, and all lines."""
    lens = [len(e.ids) for e in hf.encode_batch(lines, add_special_tokens=False)]
    return [x for x, n in zip(lines, lens) if n <= limit]


SUBSET = None


def subset_lines() -> list[str]:
    global SUBSET
    if SUBSET is None:
        lines = []
        for name in ("en_ewt.txt", "en_book_moby_dick.txt", "logs/HDFS_2k.log",
                     "multi/de.txt", "edge/blns.txt"):
            docs = read_documents(DATA / "corpus" / name)
            lines += docs[:60]
        SUBSET = lines + ["", " ".join(lines[60:90])]
    return SUBSET


EXTRA = dict(return_token_type_ids=True, return_sequence_ids=True,
             return_special_tokens_mask=True, return_offsets_mapping=True,
             return_word_ids=True)


# ---------------------------------------------------------------------------------------
# Every supported post-processor, every output, on a subset (fast)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", slow_unless(PROCESSORS, fast={"bert_processing", "several"}))
def test_file_post_processor_equals_hf(tmp_path, name):
    path, hf = write_file(tmp_path, name)
    tok = daskwp.WordPieceTokenizer(path)
    lines = subset_lines()
    n_single, n_pair = tok.processor.counts(True)
    # single texts: windows (HF's overflow), truncation, no special tokens
    for ml, stride in ((n_single + 1, 0), (16, 5), (40, 0)):
        rows, mapping = hf_rows(hf, lines, None, ml, stride, "longest_first")
        out = tok(lines, max_length=ml, stride=stride, padding=False, **EXTRA)
        assert_rows(out, rows, mapping, f"{name} single {ml}/{stride}", extras=True)
    rows, mapping = hf_rows(hf, lines, None, 20, 0, "longest_first", overflow=False)
    out = tok(lines, max_length=20, truncation=True, padding=False, **EXTRA)
    assert_rows(out, rows, mapping, f"{name} single truncated", extras=True)
    rows, mapping = hf_rows(hf, lines, None, 16, 3, "longest_first",
                            add_special_tokens=False)
    out = tok(lines, max_length=16, stride=3, padding=False, add_special_tokens=False, **EXTRA)
    assert_rows(out, rows, mapping, f"{name} single without special tokens", extras=True)
    # pairs: the context windowed (only_second), the question (only_first), longest_first
    shorts = short_and_long(hf, lines, 12)
    contexts = lines[:len(shorts)]
    for strategy, firsts, seconds, overflow in (
            ("only_second", shorts, contexts, True), ("only_first", contexts, shorts, True),
            ("longest_first", lines[1:], lines[:-1], False)):
        rows, mapping = hf_rows(hf, firsts, seconds, 32, 6, strategy, overflow)
        out = tok(firsts, text_pair=seconds, max_length=32, stride=6, truncation=strategy,
                  return_overflowing_tokens=overflow, padding=False, **EXTRA)
        assert_rows(out, rows, mapping, f"{name} pair {strategy}", extras=True,
                    first_sequence_ids=tok.processor.kind == "none")
    # padded and bucketed rows hold the same
    ragged = tok(lines, max_length=16, stride=5, padding=False, return_token_type_ids=True)
    padded = tok(lines, max_length=16, stride=5, return_token_type_ids=True)
    pad = tok.vocab.pad_id
    for r, (ids, types) in enumerate(zip(ragged["input_ids"].to_list(),
                                         ragged["token_type_ids"].to_list())):
        n = len(ids)
        assert padded["input_ids"][r].tolist() == ids + [pad] * (16 - n)
        assert padded["token_type_ids"][r].tolist() == types + [0] * (16 - n)
        assert padded["attention_mask"][r].tolist() == [1] * n + [0] * (16 - n)
    np.testing.assert_array_equal(padded["metadata"], ragged["metadata"])
    buckets = tok(lines, max_length=16, stride=5, padding="bucket",
                  return_token_type_ids=True)
    got = {}
    for width, bw in buckets:
        for row, ids, types in zip(np.asarray(bw["metadata"]).tolist(), bw["input_ids"],
                                   bw["token_type_ids"]):
            got.setdefault(tuple(row), []).append((ids.tolist(), types.tolist(), width))
    for row, ids, types in zip(np.asarray(ragged["metadata"]).tolist(),
                               ragged["input_ids"].to_list(),
                               ragged["token_type_ids"].to_list()):
        g_ids, g_types, width = got[tuple(row)].pop(0)
        assert g_ids == ids + [pad] * (width - len(ids)) and g_types[:len(ids)] == types
    # stitching the owned slices rebuilds every document once
    assert [list(x) for x in daskwp.stitch(padded["input_ids"], padded["metadata"])] == \
        tok.encode(lines).to_list()


# ---------------------------------------------------------------------------------------
# Every corpus line, two vocabularies (slow)
# ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def corpus_encodings(vocab_name: str):
    """Every corpus line and HF's encoding of each alone, as ``encode`` makes it before
    post-processing (the vocabulary's normalizer, pre-tokenizer and WordPiece; no special
    tokens, no truncation), and the indices of the lines of at most 16 tokens. HF's
    ``encode`` is this step then ``Tokenizer.post_process`` (truncation, the
    post-processor): the cases of one vocabulary share this step and each runs HF's own
    ``post_process`` with its post-processor (``hf_post_processed``). One vocabulary is kept
    (the cases run grouped by vocabulary)."""
    lines = every_corpus_line()
    hf = base_tokenizer(vocab_name)
    hf.post_processor = None
    encodings = hf.encode_batch(lines, add_special_tokens=False)
    return lines, encodings, [i for i, e in enumerate(encodings) if len(e.ids) <= 16]


def hf_post_processed(hf, firsts, seconds, max_length, stride, strategy):
    """As :func:`hf_rows` without windows (``overflow=False``), from encodings of
    ``corpus_encodings``: HF's ``post_process`` of each text or pair with the truncation
    set. Equal to ``hf_rows`` whenever the post-processor sets the type ids
    (``test_post_processed_equals_encode``). Not for windows of pairs, nor without a
    post-processor: ``encode`` gives a pair's second text type id 1 before post-processing,
    which its windows after the first and, with no post-processor, every row keep, and an
    encoding made alone has type id 0."""
    assert hf.post_processor is not None
    hf.enable_truncation(max_length, stride=stride, strategy=strategy)
    try:
        if seconds is None:
            return [hf.post_process(e) for e in firsts]
        return [hf.post_process(a, b) for a, b in zip(firsts, seconds)]
    finally:
        hf.no_truncation()


def with_windows(encodings):
    """Single texts' rows, each encoding followed by its windows, and the sample mapping."""
    rows, mapping = [], []
    for i, e in enumerate(encodings):
        for w in [e] + list(e.overflowing):
            rows.append(w)
            mapping.append(i)
    return rows, mapping


@pytest.mark.parametrize("name", slow_unless(
    ["bert_processing", "sep_only", "pair_type0", "several", "multi_id"],
    fast={"bert_processing", "several"}))
def test_post_processed_equals_encode(tmp_path, name):
    """The slow cases' oracle (``hf_post_processed`` of shared encodings) is HF's
    ``encode_batch``: rows, type ids, sequence ids and mapping equal on a subset, single
    texts windowed and pairs truncated."""
    _, hf = write_file(tmp_path, name)
    lines = subset_lines()
    base = base_tokenizer()
    base.post_processor = None
    encs = base.encode_batch(lines, add_special_tokens=False)
    want, want_map = hf_rows(hf, lines, None, 24, 6, "longest_first")
    got, got_map = with_windows(hf_post_processed(hf, encs, None, 24, 6, "longest_first"))
    assert got_map == want_map and len(got) > len(lines), name
    assert [(r.ids, r.type_ids, r.sequence_ids) for r in got] == \
        [(r.ids, r.type_ids, r.sequence_ids) for r in want], name
    want, _ = hf_rows(hf, lines[1:], lines[:-1], 40, 0, "longest_first", False)
    got = hf_post_processed(hf, encs[1:], encs[:-1], 40, 0, "longest_first")
    assert sum(len(r.overflowing) > 0 for r in got) > 10, name
    assert [(r.ids, r.type_ids, r.sequence_ids) for r in got] == \
        [(r.ids, r.type_ids, r.sequence_ids) for r in want], name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["none", "bert_processing", "sep_only", "pair_type0",
                                  "several", "multi_id"])
@pytest.mark.parametrize("vocab_name", ["bert-base-uncased", "bert-base-cased"])
def test_every_corpus_line_equals_hf(tmp_path, vocab_name, name):
    path, hf = write_file(tmp_path, name, vocab_name)
    tok = daskwp.WordPieceTokenizer(path)
    lines, encs, short = corpus_encodings(vocab_name)
    if name == "none":  # HF's encode itself (see hf_post_processed)
        rows, mapping = hf_rows(hf, lines, None, 24, 6, "longest_first")
    else:
        rows, mapping = with_windows(hf_post_processed(hf, encs, None, 24, 6,
                                                       "longest_first"))
    out = tok(lines, max_length=24, stride=6, padding=False, return_token_type_ids=True)
    assert_rows(out, rows, mapping, f"{vocab_name} {name} single")
    # every line as the context of a short question, windowed (HF's encode: see
    # hf_post_processed); and as pairs, truncated
    firsts = [lines[short[i % len(short)]] for i in range(len(lines))]
    rows, mapping = hf_rows(hf, firsts, lines, 48, 12, "only_second")
    out = tok(firsts, text_pair=lines, max_length=48, stride=12, padding=False)
    assert_rows(out, rows, mapping, f"{vocab_name} {name} pair only_second")
    if name == "none":
        rows, mapping = hf_rows(hf, lines[1:], lines[:-1], 40, 0, "longest_first", False)
    else:
        rows = hf_post_processed(hf, encs[1:], encs[:-1], 40, 0, "longest_first")
        mapping = list(range(len(rows)))
    out = tok(lines[1:], text_pair=lines[:-1], max_length=40, truncation=True, padding=False)
    assert_rows(out, rows, mapping, f"{vocab_name} {name} pair longest_first")


# ---------------------------------------------------------------------------------------
# Every route that names a file
# ---------------------------------------------------------------------------------------
def test_every_route_honours_the_file(tmp_path, capsys):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from daskwp.cli import main

    path, hf = write_file(tmp_path, "sep_only")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(path.read_bytes())
    lines = subset_lines()[:80]
    rows, mapping = hf_rows(hf, lines, None, 16, 4, "longest_first")
    want = [r.ids for r in rows]
    kw = dict(max_length=16, stride=4, padding=False)
    for tok in (daskwp.WordPieceTokenizer(path), daskwp.WordPieceTokenizer(str(path)),
                daskwp.WordPieceTokenizer.from_pretrained(folder),
                daskwp.WordPieceTokenizer(daskwp.Vocabulary.from_file(path)),
                pickle.loads(pickle.dumps(daskwp.WordPieceTokenizer(path)))):
        assert tok(lines, **kw)["input_ids"].to_list() == want
    for vocab in (str(path), str(folder)):
        res = pd.Series(lines).wordpiece.tokenize(vocab=vocab, **kw)
        assert [list(x) for x in res.to_frame()["input_ids"]] == want
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(x.replace("\n", " ") for x in lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q", "--vocab",
               str(path), "--max-length", "16", "--stride", "4", "--padding", "do_not_pad"])
    assert rc == 0, capsys.readouterr().err
    table = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    assert table.column("input_ids").to_pylist() == want


def test_post_processor_option(tmp_path):
    """post_processor= (and the job key / CLI flag) replaces the file's: its JSON text,
    or "null"; the tokenizer's settings, pickle and dask token carry it."""
    import dask.base

    from daskwp import jobs

    path, hf = write_file(tmp_path, "several")
    lines = subset_lines()[:50]
    tok = daskwp.WordPieceTokenizer(path, post_processor="null")
    rows, mapping = hf_rows(base_tokenizer(), lines, None, 12, 2, "longest_first",
                            add_special_tokens=False)
    assert tok(lines, max_length=12, stride=2, padding=False)["input_ids"].to_list() == \
        [r.ids for r in rows]
    bert = json.loads(base_tokenizer().to_str())["post_processor"]
    other = daskwp.WordPieceTokenizer(path, post_processor=bert)
    assert other.settings["post_processor"] == json.dumps(bert, sort_keys=True,
                                                          separators=(",", ":"))
    again = pickle.loads(pickle.dumps(other))
    assert again.settings == other.settings
    plain = daskwp.WordPieceTokenizer(path)
    assert dask.base.tokenize(plain) != dask.base.tokenize(other)
    assert dask.base.tokenize(plain) != dask.base.tokenize(tok)
    cfg = jobs.make_config({"input": "x", "output": "y", "vocab": str(path),
                            "post_processor": "null"})
    assert cfg.post_processor == "null"
    with pytest.raises(ValueError, match="post_processor must be a tokenizers JSON object"):
        daskwp.WordPieceTokenizer(path, post_processor="BertProcessing")


# ---------------------------------------------------------------------------------------
# The CUDA source (emulated build) equals the CPU extension
# ---------------------------------------------------------------------------------------
def host_arrays(bw) -> dict:
    """Every array of a result on the host (ragged rows: values, and ``KEY.offsets``)."""
    out = {}
    for key, v in bw.items():
        if isinstance(v, daskwp.RaggedRows):
            out[key + ".offsets"] = np.asarray(v.offsets)
            v = v.values
        out[key] = np.asarray(v)
    return out


@pytest.mark.parametrize("name", ["sep_only", "several", "none"])
def test_emulated_cuda_equals_cpu(tmp_path, emulated_cuda, name):
    path, hf = write_file(tmp_path, name)
    tok = daskwp.WordPieceTokenizer(path)
    lines = subset_lines()[:120]
    shorts = short_and_long(hf, lines, 10)
    gpu = daskwp.WordPieceTokenizer(path, device="gpu")
    cases = [(lines, None, dict(max_length=14, stride=3, **EXTRA)),
             (lines, None, dict(max_length=14, stride=3, padding=False,
                                return_token_type_ids=True, mask_dtype="int8")),
             (lines, None, dict(max_length=20, truncation=True, padding="longest",
                                return_token_type_ids=True)),
             (lines, None, dict(max_length=14, padding="bucket", bucket_widths=(8, 14),
                                return_token_type_ids=True)),
             (shorts, lines[:len(shorts)], dict(max_length=30, stride=4, **EXTRA))]
    for firsts, seconds, opts in cases:
        want = tok(firsts, text_pair=seconds, **opts)
        got = gpu(firsts, text_pair=seconds, return_tensors="np", **opts)
        if opts.get("padding") == "bucket":
            assert [w for w, _ in got] == [w for w, _ in want]
            pairs = [(g, w) for (_, g), (_, w) in zip(got, want)]
        else:
            pairs = [(got, want)]
        for g_b, w_b in pairs:
            got_a, want_a = host_arrays(g_b), host_arrays(w_b)
            assert sorted(got_a) == sorted(want_a), opts
            for key, w in want_a.items():
                assert got_a[key].dtype == w.dtype, (key, opts)
                np.testing.assert_array_equal(got_a[key], w, err_msg=f"{key} {opts}")


# ---------------------------------------------------------------------------------------
# What the windows cannot express is refused by name; so is too little room
# ---------------------------------------------------------------------------------------
def _refused_cases(hf):
    cls, sep = hf.token_to_id("[CLS]"), hf.token_to_id("[SEP]")
    T = processors.TemplateProcessing
    specials = [("[CLS]", cls), ("[SEP]", sep)]
    return [
        (processors.RobertaProcessing(("[SEP]", sep), ("[CLS]", cls)), "RobertaProcessing"),
        (processors.ByteLevel(trim_offsets=True), "ByteLevel"),
        (processors.Sequence([processors.ByteLevel(), T(single="[CLS] $A", pair="$A $B:1",
                                                         special_tokens=specials)]),
         r"Sequence\[ByteLevel, TemplateProcessing\]"),
        (processors.Sequence([T(single="[CLS] $A", pair="$A $B:1", special_tokens=specials),
                              T(single="$A [SEP]", pair="$A $B:1", special_tokens=specials)]),
         "applies 2 templates"),
        (T(single="[CLS] $A [SEP]", pair="[CLS] $B [SEP] $A", special_tokens=specials),
         r"'pair' template holds \$B \$A"),
        (T(single="$A [SEP] $A", pair="$A $B:1", special_tokens=specials),
         r"'single' template holds \$A \$A"),
        (T(single="$A:200", pair="$A $B:1", special_tokens=specials), "type id 200"),
    ]


def test_unsupported_post_processors_are_refused_by_name(tmp_path):
    hf0 = base_tokenizer()
    for k, (post, match) in enumerate(_refused_cases(hf0)):
        hf = base_tokenizer()
        hf.post_processor = post
        path = tmp_path / f"bad{k}.json"
        hf.save(str(path))
        for make in (lambda: daskwp.WordPieceTokenizer(path),
                     lambda: daskwp.WordPieceTokenizer.from_pretrained(_folder(path))):
            with pytest.raises(ValueError, match=match) as e:
                make()
            assert "post_processor" in str(e.value) and "bad" in str(e.value) or \
                "tokenizer.json" in str(e.value)


def _folder(path):
    folder = path.parent / (path.stem + "_model")
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").write_bytes(path.read_bytes())
    return folder


def test_room_and_renames(tmp_path):
    path, hf = write_file(tmp_path, "several")     # 3 specials per single row, 5 per pair
    tok = daskwp.WordPieceTokenizer(path)
    hf.enable_truncation(4)
    assert tok(["hello world"], max_length=4, truncation=True,
               padding=False)["input_ids"].to_list() == [hf.encode("hello world").ids]
    with pytest.raises(ValueError, match=r"max_length must be in \[4, 2\*\*31-1\].*3 special "
                                         r"tokens of the post-processor TemplateProcessing"):
        tok(["hello"], max_length=3)
    with pytest.raises(ValueError, match=r"max_length must be >= 6 for sentence pairs with special "
                                         r"tokens \(\[CLS\] a \[SEP\] \[SEP\] b "):
        tok(["hello"], text_pair=["world"], max_length=5)
    # the template's ids come from the file: renaming its tokens is refused, not ignored
    with pytest.raises(ValueError, match="sep_token='\\[MASK\\]' would rename '\\[SEP\\]'"):
        daskwp.WordPieceTokenizer(path, sep_token="[MASK]")


def test_transformers_drop_in_refuses_other_frames(tmp_path):
    """The drop-in frames rows as BERT does: a file with another frame is refused, a file
    with BERT's (BertProcessing) is not."""
    path, _ = write_file(tmp_path, "sep_only")
    with pytest.raises(ValueError, match=r"as_transformers.*post_processor "
                                         r"\(TemplateProcessing\)"):
        daskwp.WordPieceTokenizer(path).as_transformers()
    path, hf = write_file(tmp_path, "bert_processing")
    drop_in = daskwp.WordPieceTokenizer(path).as_transformers()
    assert drop_in(["hello world"])["input_ids"] == [hf.encode("hello world").ids]
