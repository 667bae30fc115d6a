"""The Megatron path's length arrays: nulls count as empty, and no pandas import.

``pc.fill_null(lengths, 0)`` converted its Python 0 through ``pa.scalar``, which imports pandas
in a process that has not (0.5-2.5 s of CPU in every worker's and every in-process job's
first partition, charged to the write stage)."""
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import daskwp
from daskwp.frames.megatron import document_slices, encode_pieces

from conftest import vocab_path

UNCASED = "bert-base-uncased"


def _large_strings(values):
    """A large_string array built from buffers (``pa.array`` of a list imports pandas)."""
    data = b"".join(v.encode() for v in values if v is not None)
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum([len(v.encode()) if v is not None else 0 for v in values], out=offsets[1:])
    valid = np.packbits(np.array([v is not None for v in values]), bitorder="little")
    return pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets),
                                            pa.py_buffer(data), pa.py_buffer(valid))


def test_null_documents_are_empty_in_slices():
    values = ["abc", None, "de", "", None, "fghij"] * 3
    texts = _large_strings(values)
    slices = document_slices(texts, nbytes=4)
    # the same cuts as with every null an empty string: a null adds no bytes
    empty = document_slices(_large_strings([v or "" for v in values]), nbytes=4)
    assert [len(s) for s in slices] == [len(s) for s in empty] == [3, 3, 1, 5, 3, 3]
    assert document_slices(texts.slice(1, 4), nbytes=100)[0].to_pylist() == [None, "de", "", None]


def test_pieces_per_document_counts_null_as_none():
    tokenizer = daskwp.WordPieceTokenizer(vocab_path(UNCASED), lowercase=True)
    texts = _large_strings(["a b||c", None, "", "d"])
    ids, offsets, per_doc, docs = encode_pieces(tokenizer, texts, {"document_separator": "||"})
    assert docs == 4
    # "a b" and "c"; a null document no piece; "" one (empty) piece; "d" one
    assert per_doc.tolist() == [0, 2, 2, 3, 4]


def test_megatron_slices_do_not_import_pandas():
    code = f"""
import sys
import numpy as np, pyarrow as pa
from daskwp import WordPieceTokenizer
from daskwp.frames.megatron import megatron_slices
words = [b"hello world", b"", b"tokenize this text"] * 1000
offsets = np.zeros(len(words) + 1, dtype=np.int64)
np.cumsum([len(w) for w in words], out=offsets[1:])
texts = pa.LargeStringArray.from_buffers(len(words), pa.py_buffer(offsets), pa.py_buffer(b"".join(words)))
tok = WordPieceTokenizer({str(vocab_path(UNCASED))!r}, lowercase=True)
assert "pandas" not in sys.modules, "imported before the slices"
opts = {{"append_eod": True, "document_separator": " "}}
n = sum(len(t) for t, *_ in megatron_slices(tok, texts, opts))
assert n > 0
print("pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
