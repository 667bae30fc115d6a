"""Unpickling a vocabulary (and a tokenizer) the process already holds is a lookup by a
digest of the pickled content (issues 39/42: every job's task graph on a running Dask worker
used to rebuild the tokenizer, ~12-31 ms CPU, and ship a 2.6 MB pickle).

The pickle stays self-contained (a fresh interpreter loads it from its bytes alone), carries
no compiled blob (it is rebuilt from the tokens and checked against the vocabulary's hash),
and two vocabularies that differ in anything are never confused.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading

import pytest

import daskwp
from daskwp.core import vocab as vocab_module
from daskwp.core.vocab import Vocabulary

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "wor", "##ld"]


def _fresh(code: str, *blobs: bytes) -> str:
    """Run ``code`` in a new interpreter with ``blobs`` as the list ``B``; its stdout."""
    prog = "import pickle, sys\nB = pickle.loads(sys.stdin.buffer.read())\n" + code
    out = subprocess.run([sys.executable, "-c", prog], input=pickle.dumps(list(blobs)),
                         capture_output=True, check=True, timeout=120)
    return out.stdout.decode()


def test_a_tokenizer_pickle_does_not_carry_the_compiled_blob():
    tok = daskwp.WordPieceTokenizer()
    size = len(pickle.dumps(tok, protocol=5))
    # the tokens are ~0.29 MB; the blob (2.3 MB) is rebuilt on loading
    assert size < len(tok.vocab.blob) / 4, size


def test_loading_a_vocabulary_the_process_holds_returns_it():
    v = Vocabulary.from_tokens(TOKENS)
    b = pickle.dumps(v)
    assert pickle.loads(b) is v
    tok = daskwp.WordPieceTokenizer(v)
    t1, t2 = pickle.loads(pickle.dumps(tok)), pickle.loads(pickle.dumps(tok))
    assert t1 is not t2 and t1.vocab is v and t2.vocab is v
    assert t1.encode(["hello worlds"]).to_list() == [[5, 6, 7]]


def test_vocabularies_differing_in_one_token_are_not_confused():
    a = Vocabulary.from_tokens(TOKENS)
    b = Vocabulary.from_tokens(TOKENS[:-1] + ["##le"])
    ba, bb = pickle.dumps(a), pickle.dumps(b)
    daskwp.memory.clear()
    la, lb = pickle.loads(ba), pickle.loads(bb)
    assert la is not lb and la.hash == a.hash and lb.hash == b.hash
    assert la.tokens[-1] == "##ld" and lb.tokens[-1] == "##le"
    assert pickle.loads(bb) is lb and pickle.loads(ba) is la
    # the same in a fresh interpreter, loading both, twice, in either order
    out = _fresh("b, a = pickle.loads(B[1]), pickle.loads(B[0])\n"
                 "assert pickle.loads(B[0]) is a and pickle.loads(B[1]) is b\n"
                 "print(a.tokens[-1], b.tokens[-1], a.hash, b.hash)", ba, bb)
    assert out.split() == ["##ld", "##le", a.hash, b.hash]


def test_same_tokens_other_settings_are_other_vocabularies():
    # the key covers every field, not only the trie: names, source
    a = Vocabulary.from_tokens(TOKENS)
    b = Vocabulary.from_tokens(TOKENS, source="elsewhere")
    c = Vocabulary.from_tokens(TOKENS, mask_token="wor")
    keys = {v._pickled()[0] for v in (a, b, c)}
    assert len(keys) == 3
    ba, bb, bc = (pickle.dumps(v) for v in (a, b, c))
    daskwp.memory.clear()
    la, lb, lc = (pickle.loads(x) for x in (ba, bb, bc))
    assert (la.source, lb.source) == ("<tokens>", "elsewhere")
    assert lc.mask_token == "wor" and la.mask_token == "[MASK]"


def test_a_fresh_process_loads_a_tokenizer_from_its_bytes_alone():
    v = Vocabulary.from_tokens(TOKENS).with_special_tokens(["<x1>"])
    tok = daskwp.WordPieceTokenizer(v, lowercase=False)
    want = tok.encode(["hello <x1> Worlds worlds"]).to_list()
    out = _fresh("t = pickle.loads(B[0])\n"
                 "print(t.encode(['hello <x1> Worlds worlds']).to_list(), t.vocab.hash)",
                 pickle.dumps(tok))
    assert out.strip() == f"{want} {v.hash}"


def test_a_payload_whose_trie_differs_from_its_hash_is_refused():
    v = Vocabulary.from_tokens(TOKENS)
    key, payload = v._pickled()
    state = pickle.loads(payload)
    state["hash"] = "0" * 32
    forged = pickle.dumps(state)
    with pytest.raises(ValueError, match="compiles to another trie"):
        vocab_module._unpickle_vocabulary(key + "x", forged)


def test_the_cache_is_bounded_listed_and_cleared():
    cache = vocab_module._BY_CONTENT
    vocabs = [Vocabulary.from_tokens(TOKENS + [f"extra{i}"]) for i in range(cache.maxsize + 2)]
    blobs = [pickle.dumps(v) for v in vocabs]
    assert len(cache) == cache.maxsize
    assert "vocabularies_by_content" in daskwp.memory.info()["caches"]
    daskwp.memory.clear()
    assert len(cache) == 0
    back = [pickle.loads(b) for b in blobs]
    assert [b.tokens[-1] for b in back] == [f"extra{i}" for i in range(len(vocabs))]
    assert len(cache) == cache.maxsize


def test_threads_loading_at_once_get_one_vocabulary():
    b = pickle.dumps(Vocabulary.from_tokens(TOKENS + ["threaded"]))
    daskwp.memory.clear()
    got, start = [], threading.Barrier(8)

    def load():
        start.wait()
        got.append(pickle.loads(b))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got)
    assert got[0].tokens[-1] == "threaded"


def test_a_pickle_of_the_former_layout_still_loads():
    # a dict state with the blob (what earlier versions wrote)
    v = Vocabulary.from_tokens(TOKENS)
    old = vocab_module._rebuild_vocabulary(v.__getstate__())
    assert old.hash == v.hash and old.blob == v.blob and old.tokens == v.tokens


def test_unpickled_tokenizers_share_one_kernel_model_per_setting():
    # the model (and the CPU word memo's key, a hash of both blobs) is made once per
    # vocabulary, normalization and word limit, not per unpickled tokenizer
    v = Vocabulary.from_tokens(TOKENS)
    tok = daskwp.WordPieceTokenizer(v)
    b = pickle.dumps(tok)
    t1, t2 = pickle.loads(b), pickle.loads(b)
    assert t1.kernel_model is t2.kernel_model is tok.kernel_model
    short = daskwp.WordPieceTokenizer(v, max_input_chars_per_word=3)
    cased = daskwp.WordPieceTokenizer(v, lowercase=False)
    models = {id(t.kernel_model) for t in (tok, short, cased)}
    assert len(models) == 3
    assert short.encode(["hello"]).to_list() == [[1]]
    assert cased.encode(["Hello hello"]).to_list() == [[1, 5]]
    assert tok.encode(["Hello hello"]).to_list() == [[5, 5]]
    # a vocabulary with more tokens gets a model of its own
    more = daskwp.WordPieceTokenizer(v)
    ids = more.add_special_tokens(["<x1>"])
    assert more.kernel_model is not tok.kernel_model
    assert more.encode(["hello <x1>"]).to_list() == [[5, ids[0]]]
    assert tok.encode(["hello <x1>"]).to_list() == [[5, 1, 1, 1]]


def test_the_kernel_model_key_is_computed_once():
    # the GPU backend's per-model cache asks for it on every call (a digest of the 0.3 MB
    # normalization blob each time before)
    km = pickle.loads(pickle.dumps(daskwp.WordPieceTokenizer(Vocabulary.from_tokens(TOKENS)))
                      ).kernel_model
    assert km.key is km.key and km.key[0] == km.vocab.hash
    other = daskwp.WordPieceTokenizer(Vocabulary.from_tokens(TOKENS),
                                      max_input_chars_per_word=7).kernel_model
    assert other.key[:2] == km.key[:2] and other.key[2] == 7 != km.key[2]
