"""The ``[UNK]`` of an encoding, counted by the kernel that wrote the ids
(``Encoding.count_id``; the batch jobs' ``unknown_tokens``): the CPU extension counts them
in blocks while the ids are in the cache (``_ext.encode32`` / ``encode64`` return the
count), equal to a count over the ids on every shared corpus line (int32 and int64
offsets, one thread and several, nulls, chunked arrays, blocks of ids past the kernel's
count step), on the emulated CUDA build (counted over the device ids), after slicing,
pickling and replacing the ids."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

import daskwp
from conftest import corpus_files, read_documents, requires_data, vocab_path
from daskwp import _ext
from daskwp.core.strings import chunk_buffers

from test_offsets import emulated_gpu  # noqa: F401  (the emulated CUDA backend)

pytestmark = requires_data


def _tok():
    return daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"), lowercase=True)


def _docs() -> list:
    docs = []
    for f in corpus_files():
        docs += read_documents(f)
    return docs


def _numpy_count(enc, token_id) -> int:
    return int(np.count_nonzero(np.asarray(enc.token_ids) == token_id))


@pytest.mark.parametrize("num_threads", [1, 2, 3])
@pytest.mark.parametrize("large", [False, True])
def test_kernel_counts_unknown_as_the_ids_are_written(num_threads, large):
    tok = _tok()
    unk = tok.vocab.unk_id
    # the corpus (characters the vocabulary lacks) many times over: well past the kernel's
    # count step of 2^15 ids per chunk, with nulls and empty documents between
    docs = (_docs() + [None, ""]) * 6
    arr = pa.array(docs, type=pa.large_string() if large else pa.string())
    enc = tok.encode(arr, num_threads=num_threads)
    assert len(enc.token_ids) > 4 * (1 << 15)
    want = _numpy_count(enc, unk)
    assert want > 0
    assert enc._counted == (unk, want)   # the kernel's count, not a pass made afterwards
    assert enc.count_id(unk) == want


def test_extension_returns_the_count_last():
    tok = _tok()
    km = tok.kernel_model
    b = chunk_buffers(pa.array(["\u2603 snowman \u2603", None, "plain words", "\u2603"]))
    out = _ext.encode32(km.vocab_blob, km.norm_blob, km.max_input_chars_per_word, b.offsets,
                        b.data, b.validity, b.validity_offset, 2)
    assert len(out) == 3 and out[2] == int(np.count_nonzero(out[0] == tok.vocab.unk_id)) == 3
    out = _ext.encode32(km.vocab_blob, km.norm_blob, km.max_input_chars_per_word, b.offsets,
                        b.data, b.validity, b.validity_offset, 1, 0, 2, True)
    assert len(out) == 5 and out[4] == 3


def test_count_with_offsets_word_ids_and_chunked_input():
    tok = _tok()
    unk = tok.vocab.unk_id
    docs = _docs()
    arr = pa.chunked_array([pa.array(docs[:500]), pa.array([None] + docs[500:])])
    enc = tok.encode(arr, return_offsets_mapping=True, return_word_ids=True)
    want = _numpy_count(enc, unk)
    assert want > 0 and enc._counted == (unk, want) and enc.count_id(unk) == want


def test_count_of_other_ids_slices_pickles_and_new_ids():
    tok = _tok()
    unk = tok.vocab.unk_id
    enc = tok.encode(_docs())
    the = tok.vocab.token_to_id("the")
    assert enc.count_id(the) == _numpy_count(enc, the) > 0   # not the kernel's id: counted
    part = enc[3:400]
    assert part._counted is None and part.count_id(unk) == _numpy_count(part, unk)
    back = pickle.loads(pickle.dumps(enc))
    assert back._counted == enc._counted and back.count_id(unk) == enc.count_id(unk)
    enc.token_ids = np.full(len(enc.token_ids), unk, dtype=np.int32)
    assert enc.count_id(unk) == len(enc.token_ids)


def test_emulated_gpu_count_equals_cpu(emulated_gpu):
    cpu = _tok()
    gpu = daskwp.WordPieceTokenizer(cpu.vocab, device="gpu", **cpu.settings)
    docs = read_documents(next(f for f in corpus_files() if f.name == "blns.txt")) + ["", None]
    a, b = cpu.encode(docs), gpu.encode(docs)
    unk = cpu.vocab.unk_id
    assert a.count_id(unk) == b.count_id(unk) == _numpy_count(a, unk) > 0
