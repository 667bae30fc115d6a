"""Offsets of added tokens with ``lstrip`` / ``rstrip`` (issue 38, item 4; docs/design.md
§2.9): daskwp's own ``encode`` and windows give HuggingFace tokenizers' spans (the token's
span takes the White_Space next to it), on the CPU extension and the CUDA source (emulated
build), in both offsets units; the GPU windows refuse such tokens by name."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import backend_params, corpus_files, read_documents, requires_data, vocab_path

tokenizers = pytest.importorskip("tokenizers", reason="HF tokenizers is a test dependency")
from tokenizers import AddedToken, Tokenizer  # noqa: E402
from tokenizers import normalizers as N  # noqa: E402
from tokenizers import pre_tokenizers as P  # noqa: E402
from tokenizers.models import WordPiece  # noqa: E402

import daskwp  # noqa: E402
from daskwp.core.added_spans import strip_flags, widen_added_spans  # noqa: E402

FLAGS = [{"lstrip": True, "rstrip": True}, {"lstrip": True}, {"rstrip": True}]
BASE = ["a   <R>   b", "x<R>y", "<R>", "  <R>  <L>\t<R> ", "a\u3000<L>\u00a0b <B>  c",
        "é\u3000 <R>\u2003é", "<L><R><L>", "", "no added token here", "\u2028<R>\u2028"]


@pytest.fixture(scope="module")
def texts():
    lines = [d for d in read_documents(corpus_files()[0]) if d.strip()][:400]
    return BASE + [f"{a[:30]} <R>{b[:20]}  <L> <B>" for a, b in zip(lines[:200], lines[200:])]


def hf_with(flags, tmp_path):
    """An HF tokenizer (BERT's pipeline) with <R> (``flags``), <L> (lstrip) and <B> (none),
    and daskwp's tokenizer read from its tokenizer.json."""
    hf = Tokenizer(WordPiece(WordPiece.read_file(str(vocab_path("bert-base-uncased"))),
                             unk_token="[UNK]"))
    hf.normalizer = N.BertNormalizer()
    hf.pre_tokenizer = P.BertPreTokenizer()
    hf.add_special_tokens(["[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]",
                           AddedToken("<R>", special=True, normalized=False, **flags),
                           AddedToken("<L>", special=True, normalized=False, lstrip=True),
                           AddedToken("<B>", special=True, normalized=False)])
    path = tmp_path / "strips.json"
    hf.save(str(path))
    return hf, daskwp.WordPieceTokenizer(path)


def hf_spans(hf, texts, unit):
    out = []
    for t, e in zip(texts, hf.encode_batch(texts, add_special_tokens=False)):
        if unit == "bytes":
            out.append([(len(t[:a].encode()), len(t[:b].encode())) for a, b in e.offsets])
        else:
            out.append(list(e.offsets))
    return out


def spans_of(enc):
    om, off = np.asarray(enc.offset_mapping).tolist(), np.asarray(enc.offsets).tolist()
    return [[tuple(x) for x in om[off[d]:off[d + 1]]] for d in range(len(off) - 1)]


@requires_data
@pytest.mark.parametrize("any_backend", [p for p in backend_params(fast={"cpu", "emulated-cuda"})
                                         if p.id != "reference"], indirect=True)
@pytest.mark.parametrize("unit", ["chars", "bytes"])
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "+".join(sorted(f)))
def test_encode_offsets_equal_hf(any_backend, unit, flags, texts, tmp_path):
    hf, tok = hf_with(flags, tmp_path)
    enc = any_backend.route(tok).encode(texts, return_offsets_mapping=True, offsets_unit=unit)
    assert enc.to_list() == [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert spans_of(enc) == hf_spans(hf, texts, unit)


@requires_data
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "+".join(sorted(f)))
def test_windows_offsets_equal_hf(flags, texts, tmp_path):
    """``tok(...)``'s offset_mapping (single texts and pairs, padded) on the CPU windows."""
    hf, tok = hf_with(flags, tmp_path)      # the file frames no rows: neither does daskwp
    got = tok(texts, return_offsets_mapping=True, padding=False, return_tensors="np")
    want = [list(e.offsets) for e in hf.encode_batch(texts)]
    om = got["offset_mapping"]
    off = om.offsets.tolist()
    rows = [[tuple(x) for x in om.values[off[r]:off[r + 1]].tolist()]
            for r in range(len(off) - 1)]
    assert rows == want
    a, b = texts[:100], texts[100:200]
    got = tok(a, text_pair=b, return_offsets_mapping=True, padding="longest",
              return_tensors="np")
    hf.enable_padding(pad_id=hf.token_to_id("[PAD]"))
    want = np.array([e.offsets for e in hf.encode_batch(list(zip(a, b)))])
    assert np.array_equal(got["offset_mapping"], want)


@requires_data
def test_gpu_windows_refuse_such_tokens_by_name(emulated_cuda, texts, tmp_path):
    _, tok = hf_with(FLAGS[0], tmp_path)
    gpu = emulated_cuda.route(tok)
    with pytest.raises(NotImplementedError, match="'<[RL]>' has lstrip / rstrip"):
        gpu(texts[:4], return_offsets_mapping=True, return_tensors="np")
    gpu(texts[:4], return_tensors="np")           # ids alone are exact: no refusal


def test_flags_and_widening_helpers():
    vocab = daskwp.WordPieceTokenizer().vocab
    assert strip_flags(vocab) == {}
    enc = daskwp.WordPieceTokenizer().encode(["a b"], return_offsets_mapping=True)
    assert widen_added_spans(enc, ["a b"], {}) is enc
