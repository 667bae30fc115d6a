"""Golden parity with HuggingFace tokenizers on the real vocabularies and corpora (docs/design.md §1, §3, §5).

Every document of every corpus file under ``DATA/corpus`` (recursive: *.txt, *.log, and the JSON
array ``edge/blns.json``), with every shared vocabulary, must give exactly HF's ids (without
special tokens). Each (vocabulary, corpus file) pair is its own test. A second group feeds the
same documents through every supported container type (pandas object / str / string[pyarrow]
Series, pyarrow string / large_string arrays, sliced arrays, ChunkedArray) with nulls inserted.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import daskwp
from conftest import (
    DATA,
    FAST_CORPORA,
    DATA_SKIP_REASON,
    VOCAB_CONFIGS,
    corpus_files,
    describe_mismatches,
    hf_encode,
    hf_tokenizer,
    read_documents,
    read_lines,
    requires_data,
    slow_unless,
    vocab_path,
)

pytestmark = requires_data

_NO_DATA = pytest.param(None, id="no-shared-data", marks=pytest.mark.skip(reason=DATA_SKIP_REASON))
# The fast tier keeps FAST_CORPORA with every vocabulary; the full suite every corpus.
CORPUS_PARAMS = slow_unless(corpus_files(), fast=FAST_CORPORA,
                            ids=lambda p: str(p.relative_to(DATA / "corpus"))) or [_NO_DATA]
VOCAB_PARAMS = [pytest.param(name, id=name) for name, _ in VOCAB_CONFIGS]
LOWERCASE = dict(VOCAB_CONFIGS)


@functools.lru_cache(maxsize=None)
def dwp_tokenizer(vocab_name: str):
    vocab = daskwp.Vocabulary.from_file(str(vocab_path(vocab_name)))
    return daskwp.WordPieceTokenizer(vocab, lowercase=LOWERCASE[vocab_name])


def _id_to_token(hf):
    def name(i):
        try:
            return hf.id_to_token(int(i))
        except Exception:  # an out-of-range id is reported, not raised
            return f"<bad id {i}>"

    return name


def split_encoding(enc, n_docs: int) -> list[list[int]]:
    """Check the ragged result's layout and split it into per-document id lists."""
    token_ids = np.asarray(enc.token_ids)
    offsets = np.asarray(enc.offsets)
    assert len(enc) == n_docs
    assert token_ids.dtype == np.int32, token_ids.dtype
    assert offsets.dtype == np.int64, offsets.dtype
    assert token_ids.ndim == 1 and offsets.ndim == 1
    assert offsets.shape == (n_docs + 1,), offsets.shape
    assert offsets[0] == 0 and offsets[-1] == token_ids.shape[0]
    assert np.all(np.diff(offsets) >= 0), "offsets must be non-decreasing"
    flat = token_ids.tolist()
    offs = offsets.tolist()
    return [flat[offs[i] : offs[i + 1]] for i in range(n_docs)]


@pytest.mark.parametrize("corpus", CORPUS_PARAMS)
@pytest.mark.parametrize("vocab_name", VOCAB_PARAMS)
def test_corpus_parity(vocab_name, corpus):
    docs = read_documents(corpus)
    assert docs, f"{corpus} has no documents"
    hf = hf_tokenizer(vocab_name)
    expected = hf_encode(hf, docs)

    enc = dwp_tokenizer(vocab_name).encode(docs)
    got = split_encoding(enc, len(docs))

    report = describe_mismatches(docs, got, expected, _id_to_token(hf))
    assert not report, f"{vocab_name} x {corpus.name}: {report}"
    # to_list() must agree with the flat buffers.
    assert enc.to_list() == got


# --------------------------------------------------------------------------------------------
# Container types and nulls


def _mixed_documents() -> list[str]:
    """A few thousand real documents including the adversarial ones (blns, logs, CJK, RTL)."""
    root = DATA / "corpus"
    docs = read_lines(root / "edge" / "blns.txt")
    docs += read_documents(root / "edge" / "blns.json")
    docs += read_lines(root / "en_ewt.txt")[:1500]
    for name in ("zh.txt", "ar.txt", "th.txt", "ja.txt"):
        docs += read_lines(root / "multi" / name)[:150]
    docs += read_lines(root / "logs" / "Windows_2k.log")[:200]
    return docs


def _with_nulls(docs, every=7, null=None):
    """Insert ``null`` before every ``every``-th document (and at both ends)."""
    out = [null]
    for i, d in enumerate(docs):
        if i % every == 0:
            out.append(null)
        out.append(d)
    out.append(null)
    return out


@pytest.fixture(scope="module", params=["bert-base-uncased", "bert-base-multilingual-cased"])
def container_case(request):
    vocab_name = request.param
    docs = _mixed_documents()
    with_nulls = _with_nulls(docs)
    null_rows = [i for i, d in enumerate(with_nulls) if d is None]
    hf = hf_tokenizer(vocab_name)
    expected = hf_encode(hf, with_nulls)  # None -> "" -> []
    for i in null_rows:
        assert expected[i] == []
    return vocab_name, with_nulls, null_rows, expected


def _containers(with_nulls):
    """(label, container) pairs holding ``with_nulls`` (None = missing) in every supported form."""
    import pandas as pd
    import pyarrow as pa

    nan_mixed = [(math.nan if (i % 2) else None) if d is None else d for i, d in enumerate(with_nulls)]
    n = len(with_nulls)
    cut1, cut2 = n // 3, (2 * n) // 3
    padded = ["PADDING BEFORE", "more padding"] + list(with_nulls) + ["PADDING AFTER"]
    yield "list[str|None|nan]", nan_mixed
    yield "pandas object (None and NaN)", pd.Series(nan_mixed, dtype=object)
    yield "pandas default str dtype", pd.Series(with_nulls)
    yield "pandas string[pyarrow]", pd.Series(with_nulls, dtype="string[pyarrow]")
    yield "pandas string[python]", pd.Series(with_nulls, dtype="string[python]")
    yield (
        "pandas object, non-range index",
        pd.Series(nan_mixed, dtype=object, index=np.arange(n)[::-1] * 3 + 5),
    )
    yield "pyarrow StringArray", pa.array(with_nulls, type=pa.string())
    yield "pyarrow LargeStringArray", pa.array(with_nulls, type=pa.large_string())
    yield (
        "pyarrow LargeStringArray sliced (non-zero offset)",
        pa.array(padded, type=pa.large_string()).slice(2, n),
    )
    yield (
        "pyarrow StringArray sliced (non-zero offset)",
        pa.array(padded, type=pa.string()).slice(2, n),
    )
    yield (
        "pyarrow ChunkedArray large_string (3 chunks + empty chunk)",
        pa.chunked_array(
            [
                pa.array(with_nulls[:cut1], type=pa.large_string()),
                pa.array([], type=pa.large_string()),
                pa.array(with_nulls[cut1:cut2], type=pa.large_string()),
                pa.array(padded, type=pa.large_string()).slice(2 + cut2, n - cut2),
            ]
        ),
    )
    yield (
        "pyarrow ChunkedArray string",
        pa.chunked_array(
            [pa.array(with_nulls[:cut2], type=pa.string()), pa.array(with_nulls[cut2:], type=pa.string())]
        ),
    )


def test_container_types_and_nulls(container_case):
    vocab_name, with_nulls, null_rows, expected = container_case
    tok = dwp_tokenizer(vocab_name)
    hf = hf_tokenizer(vocab_name)
    n = len(with_nulls)
    failures = []
    for label, container in _containers(with_nulls):
        try:
            enc = tok.encode(container)
            got = split_encoding(enc, n)
        except Exception as exc:  # report every container, not only the first failing one
            failures.append(f"--- {label}: raised {type(exc).__name__}: {exc}")
            continue
        non_empty_nulls = [i for i in null_rows if got[i] != []]
        if non_empty_nulls:
            failures.append(f"--- {label}: null rows not empty: {non_empty_nulls[:10]}")
        report = describe_mismatches(
            ["<null>" if d is None else d for d in with_nulls], got, expected, _id_to_token(hf), limit=3
        )
        if report:
            failures.append(f"--- {label}: {report}")
    assert not failures, f"{vocab_name}:\n" + "\n".join(failures)


def test_single_string_is_one_document():
    tok = dwp_tokenizer("bert-base-uncased")
    hf = hf_tokenizer("bert-base-uncased")
    text = "Hello world, this is ONE document. Not 34 characters."
    enc = tok.encode(text)
    assert len(enc) == 1
    assert enc.to_list() == hf_encode(hf, [text])
    assert split_encoding(enc, 1) == hf_encode(hf, [text])


def test_empty_inputs():
    tok = dwp_tokenizer("bert-base-uncased")
    enc = tok.encode([])
    assert len(enc) == 0
    assert enc.to_list() == []
    assert split_encoding(enc, 0) == []
    enc = tok.encode(["", None, " ", "\t\n\u3000", "\x00"])
    assert enc.to_list() == [[], [], [], [], []]
    assert split_encoding(enc, 5) == [[], [], [], [], []]
