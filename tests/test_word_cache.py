"""The CPU word cache: word memos that outlive an encode call (cpu_batch.cpp's pool).

Each thread of an encode takes a memo from a process-wide pool and gives it back, keyed by
a hash of the vocabulary blob, the normalization blob and max_input_chars_per_word
(backends/cpu.py). These tests show that a second call hits, that tokenizers with other
vocabularies or settings never share entries (interleaved calls equal a fresh process's),
that the memory limit holds, that clear_caches empties it, that several threads equal
one, and that a forked child tokenizes correctly with the memos its parent warmed (and
with a parent thread busy in encode at the fork)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading

import dask
import numpy as np
import pytest

import daskwp
from daskwp import _ext
from conftest import REPO_ROOT, corpus_files, read_documents, requires_data, vocab_path

pytestmark = requires_data

UNCASED, CASED, MULTI = "bert-base-uncased", "bert-base-cased", "bert-base-multilingual-cased"

# (name, vocabulary, tokenizer options): one vocabulary with several normalizer settings,
# and several vocabularies.
CONFIGS = [
    ("uncased", UNCASED, {"lowercase": True}),
    ("uncased-nolower", UNCASED, {"lowercase": False}),
    ("uncased-lower-keep-accents", UNCASED, {"lowercase": True, "strip_accents": False}),
    ("uncased-noclean", UNCASED, {"lowercase": True, "clean_text": False}),
    ("uncased-nochinese", UNCASED, {"lowercase": True, "handle_chinese_chars": False}),
    ("uncased-max5", UNCASED, {"lowercase": True, "max_input_chars_per_word": 5}),
    ("cased", CASED, {"lowercase": False}),
    ("cased-strip", CASED, {"lowercase": False, "strip_accents": True}),
    ("multi", MULTI, {"lowercase": False}),
    ("multi-lower", MULTI, {"lowercase": True}),
]


def _docs() -> list[str]:
    return [d for f in corpus_files() for d in read_documents(f)]


def _tok(vocab_name, **opts):
    return daskwp.WordPieceTokenizer(vocab_path(vocab_name), **opts)


@pytest.fixture(autouse=True)
def _fresh_pool():
    # (no bound on the process's own threads: an earlier test's in-process cluster may have
    # been lent a thread, backends.cpu.set_own_threads)
    from daskwp.backends.cpu import set_own_threads
    set_own_threads(0)
    daskwp.memory.clear()
    yield
    daskwp.memory.clear()


def _same(a, b):
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.token_ids, b.token_ids)


def _walked(tok, docs, threads=1):
    """The ids without any memo: the pool keeps nothing and the batches are small."""
    with dask.config.set({"daskwp.word_cache_mb": 0}):
        parts = [tok.encode(docs[i:i + 500], num_threads=threads)
                 for i in range(0, len(docs), 500)]
    return (np.concatenate([p.token_ids for p in parts]),
            np.concatenate([p.lengths for p in parts]))


def _english() -> list[str]:
    return [d for f in corpus_files() if f.name.startswith("en_") for d in read_documents(f)]


def test_second_call_hits_and_ids_stay_exact():
    tok = _tok(UNCASED, lowercase=True)
    docs = _english()
    first = tok.encode(docs, num_threads=1)
    i1 = daskwp.memory.info()["word_cache"]
    assert i1["memos"] == 1 and i1["idle"] == 1 and i1["keys"] == 1
    assert i1["misses"] > 0 and i1["bytes"] > 0
    second = tok.encode(docs, num_threads=1)
    i2 = daskwp.memory.info()["word_cache"]
    assert i2["reused"] == i1["reused"] + 1 and i2["created"] == i1["created"]
    hits, misses = i2["hits"] - i1["hits"], i2["misses"] - i1["misses"]
    assert hits > 20 * max(misses, 1), (hits, misses)  # warm: nearly everything hits
    _same(first, second)
    ids, lengths = _walked(tok, docs)
    np.testing.assert_array_equal(second.token_ids, ids)
    np.testing.assert_array_equal(second.lengths, lengths)


def test_small_calls_share_the_warm_memo():
    # Batch after batch of small calls: the memo persists between them.
    tok = _tok(UNCASED, lowercase=True)
    docs = read_documents(corpus_files()[0])[:2000]
    tok.encode(docs, num_threads=1)
    before = daskwp.memory.info()["word_cache"]
    for k in range(0, len(docs), 100):
        tok.encode(docs[k:k + 100], num_threads=1)
    after = daskwp.memory.info()["word_cache"]
    assert after["created"] == before["created"]
    assert after["hits"] - before["hits"] > 10 * max(1, after["misses"] - before["misses"])


def _fresh_process_ids(names) -> dict:
    """Each configuration's ids of the documents, each in a fresh process with the pool off
    (nothing memoized: the plain walk)."""
    code = f"""
import json, sys
import numpy as np
sys.path.insert(0, {str(REPO_ROOT / 'tests')!r})
import daskwp
from test_word_cache import CONFIGS, _docs, _tok
name = sys.argv[1]
cfg = {{n: (v, o) for n, v, o in CONFIGS}}[name]
enc = _tok(cfg[0], **cfg[1]).encode(_docs(), num_threads=1)
assert daskwp.memory.info()["word_cache"]["memos"] == 0
np.savez(sys.argv[2], ids=enc.token_ids, lengths=enc.lengths)
"""
    out = {}
    env = dict(os.environ, DASKWP_WORD_CACHE_MB="0")
    for name in names:
        path = f"{os.environ.get('TMPDIR', '/tmp')}/dwp-fresh-{os.getpid()}-{name}.npz"
        subprocess.run([sys.executable, "-c", code, name, path], check=True, env=env,
                       timeout=600)
        with np.load(path) as z:
            out[name] = (z["ids"], z["lengths"])
        os.unlink(path)
    return out


@pytest.mark.slow
def test_models_never_share_entries():
    # Interleaved calls of every configuration in one process, twice over (the second round
    # runs on warm memos of all of them), equal each configuration's ids from a fresh
    # process.
    docs = _docs()
    toks = {name: _tok(v, **o) for name, v, o in CONFIGS}
    expected = _fresh_process_ids([name for name, _, _ in CONFIGS])
    with dask.config.set({"daskwp.word_cache_mb": 512}):
        _models_never_share_entries(docs, toks, expected)


def _models_never_share_entries(docs, toks, expected):
    for rnd in range(2):
        for name, tok in toks.items():
            # Halves in turn, so that the memos of the other configurations were used
            # between the two.
            half = len(docs) // 2
            a = tok.encode(docs[:half], num_threads=1)
            b = tok.encode(docs[half:], num_threads=1)
            ids = np.concatenate([a.token_ids, b.token_ids])
            lengths = np.concatenate([a.lengths, b.lengths])
            np.testing.assert_array_equal(lengths, expected[name][1], err_msg=f"{name} {rnd}")
            np.testing.assert_array_equal(ids, expected[name][0], err_msg=f"{name} {rnd}")
    info = daskwp.memory.info()["word_cache"]
    # One memo per configuration (the 512 MB limit holds them all: 10 x 30 MB).
    assert info["keys"] == len(CONFIGS), info
    # Two tokenizer objects of one configuration share a memo (same key).
    again = _tok(UNCASED, lowercase=True)
    again.encode(docs[:100], num_threads=1)
    assert daskwp.memory.info()["word_cache"]["keys"] == len(CONFIGS)


@pytest.mark.slow
def test_memory_limit_is_respected():
    docs = _docs()
    toks = {name: _tok(v, **o) for name, v, o in CONFIGS[:6]}
    walked = {name: _walked(tok, docs)[0] for name, tok in toks.items()}
    limit_mb = 8
    with dask.config.set({"daskwp.word_cache_mb": limit_mb}):
        for rnd in range(2):
            for name, tok in toks.items():
                enc = tok.encode(docs, num_threads=2)
                info = daskwp.memory.info()["word_cache"]
                assert info["limit"] == limit_mb << 20
                assert info["bytes"] <= limit_mb << 20, info
                np.testing.assert_array_equal(enc.token_ids, walked[name], err_msg=name)
        info = daskwp.memory.info()["word_cache"]
        assert info["evictions"] > 0 and info["idle"] >= 1, info
        # A limit too small for any memo: no memo, exact ids all the same.
        _ext.word_cache_set_limit(40_000)
        try:
            before = daskwp.memory.info()["word_cache"]
            assert before["bytes"] == 0  # the idle memos above the new limit were freed
            enc = toks["uncased"].encode(docs, num_threads=1)
            after = _ext.word_cache_info()
            assert after["bytes"] == 0 and after["refused"] > before["refused"]
        finally:
            _ext.word_cache_set_limit(limit_mb << 20)
        np.testing.assert_array_equal(enc.token_ids, walked["uncased"])
    # Back to the initial limit (DASKWP_WORD_CACHE_MB or 256 MB) once the setting is gone.
    from daskwp.backends.cpu import _INITIAL_LIMIT
    assert daskwp.memory.info()["word_cache"]["limit"] == _INITIAL_LIMIT


def test_zero_keeps_nothing_between_calls():
    docs = _docs()
    tok = _tok(UNCASED, lowercase=True)
    with dask.config.set({"daskwp.word_cache_mb": 0}):
        a = tok.encode(docs, num_threads=1)
        info = daskwp.memory.info()["word_cache"]
        assert info["limit"] == 0 and info["memos"] == 0 and info["bytes"] == 0
    _same(a, tok.encode(docs, num_threads=1))


def test_clear_caches_empties_it():
    tok = _tok(MULTI, lowercase=False)
    docs = _docs()
    tok.encode(docs, num_threads=1)
    assert daskwp.memory.info()["caches"]["word_cache"]["entries"] == 1
    assert daskwp.memory.clear(["word_cache"]) == 1
    info = daskwp.memory.info()["word_cache"]
    assert info["memos"] == 0 and info["bytes"] == 0 and info["idle"] == 0
    created = info["created"]
    m0 = info["misses"]
    tok.encode(docs, num_threads=1)
    info = daskwp.memory.info()["word_cache"]
    assert info["created"] == created + 1 and info["misses"] - m0 > 1000  # cold again


@pytest.mark.parametrize("unit", [None, pytest.param("chars", marks=pytest.mark.slow)])
def test_freed_memos_mappings_make_the_next_memos(unit):
    # clear_caches() frees the memos; their mappings stay (within the limit) and the next
    # memos are made in them, tables written empty: a cold call again, with the same ids
    # (and spans), and no fresh pages to fault in (docs/design.md §3.5).
    tok = _tok(MULTI, lowercase=False)
    docs = _docs()
    kw = {} if unit is None else {"return_offsets_mapping": True, "return_word_ids": True,
                                  "offsets_unit": unit}
    with dask.config.set({"daskwp.word_cache_mb": 256}):
        daskwp.memory.clear(["word_cache"])
        _ext.word_cache_set_limit(0)  # (gives every kept mapping back)
        assert daskwp.memory.info()["word_cache"]["spare_bytes"] == 0
        _ext.word_cache_set_limit(256 << 20)
        i0 = daskwp.memory.info()["word_cache"]
        first = tok.encode(docs, num_threads=1, **kw)
        i1 = daskwp.memory.info()["word_cache"]
        assert i1["memos"] == 1 and i1["spare_bytes"] == 0
        daskwp.memory.clear(["word_cache"])
        i2 = daskwp.memory.info()["word_cache"]
        assert i2["memos"] == 0 and i2["bytes"] == 0 and i2["spare_bytes"] == i1["bytes"]
        second = tok.encode(docs, num_threads=1, **kw)
        i3 = daskwp.memory.info()["word_cache"]
        assert i3["recycled"] == i2["recycled"] + 1 and i3["created"] == i2["created"] + 1
        assert i3["spare_bytes"] == 0 and i3["bytes"] == i1["bytes"]
        # cold: every word walked again, as in the first call (the old tables are gone)
        assert i3["misses"] - i2["misses"] == i1["misses"] - i0["misses"] > 1000
        _same(first, second)
        if unit is not None:
            np.testing.assert_array_equal(first.offset_mapping, second.offset_mapping)
            np.testing.assert_array_equal(first.word_ids, second.word_ids)
        # A warm memo copied for a second thread is made in a kept mapping too.
        tok.encode(docs, num_threads=2, **kw)  # a second memo
        daskwp.memory.clear(["word_cache"])
        assert daskwp.memory.info()["word_cache"]["spare_bytes"] == 2 * i1["bytes"]
        tok.encode(docs[:50], num_threads=1, **kw)  # a memo in one of the two mappings
        i4 = daskwp.memory.info()["word_cache"]
        many = tok.encode(docs, num_threads=2, **kw)  # ~4 MB a thread
        i5 = daskwp.memory.info()["word_cache"]
        assert i5["copied"] == i4["copied"] + 1 and i5["recycled"] == i4["recycled"] + 1
        _same(many, first)
        if unit is not None:
            np.testing.assert_array_equal(many.offset_mapping, first.offset_mapping)
        # A lower limit gives back the mappings that no longer fit; 0 gives back all.
        daskwp.memory.clear(["word_cache"])
        assert daskwp.memory.info()["word_cache"]["spare_bytes"] == 2 * i1["bytes"]
        _ext.word_cache_set_limit(i1["bytes"])
        assert daskwp.memory.info()["word_cache"]["spare_bytes"] == i1["bytes"]
        _ext.word_cache_set_limit(0)
        assert daskwp.memory.info()["word_cache"]["spare_bytes"] == 0
        _ext.word_cache_set_limit(256 << 20)


def test_worker_state_close_gives_the_kept_memory_back():
    # clear_caches() keeps freed memos' mappings; a worker's state, closing, gives them
    # back too (word_cache_release).
    from daskwp.backends.cpu import word_cache_release
    from daskwp.distributed.state import WorkerState

    tok = _tok(UNCASED, lowercase=True)
    docs = _docs()[:2000]
    with dask.config.set({"daskwp.word_cache_mb": 256}):
        tok.encode(docs, num_threads=1)
        daskwp.memory.clear(["word_cache"])
        kept = daskwp.memory.info()["word_cache"]["spare_bytes"]
        assert kept > 0
        WorkerState("test_worker_state_close").close()
        assert daskwp.memory.info()["word_cache"]["spare_bytes"] == 0
        tok.encode(docs, num_threads=1)
        daskwp.memory.clear(["word_cache"])
        assert word_cache_release() == kept
        assert daskwp.memory.info()["word_cache"]["spare_bytes"] == 0


@pytest.mark.slow   # a subprocess
def test_environment_variable_sets_the_limit():
    code = ("import daskwp, json; t = daskwp.WordPieceTokenizer(); "
            "t.encode(['hello world'] * 10, num_threads=1); "
            "print(json.dumps(daskwp.memory.info()['word_cache']))")
    for mb, memos in (("0", 0), ("7", 1)):
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True, env=dict(os.environ, DASKWP_WORD_CACHE_MB=mb),
                             timeout=300).stdout
        info = json.loads(out.strip().splitlines()[-1])
        assert info["limit"] == int(mb) << 20 and info["memos"] == memos, info


@pytest.mark.parametrize("vocab_name,lowercase", [
    (UNCASED, True), pytest.param(MULTI, False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("threads", [pytest.param(2, marks=pytest.mark.slow), 3,
                                     pytest.param(7, marks=pytest.mark.slow)])
def test_threads_equal_one_thread_cold_and_warm(vocab_name, lowercase, threads):
    # Several threads each take a memo from the pool (warm ones on the second call, in any
    # order); ids and lengths must equal one thread's, nulls included, on all corpora.
    tok = _tok(vocab_name, lowercase=lowercase)
    docs = _docs()
    docs = [None if i % 997 == 0 else d for i, d in enumerate(docs * 3)]
    assert sum(len(d.encode("utf-8", "surrogatepass")) for d in docs if d) > threads << 20
    one = tok.encode(docs, num_threads=1)
    for _ in range(2):
        _same(tok.encode(docs, num_threads=threads), one)
    assert daskwp.memory.info()["word_cache"]["memos"] >= 2


@pytest.mark.parametrize("unit", [None, "chars"])
def test_other_threads_start_with_copies_of_the_warm_memo(unit):
    # A call on one thread leaves one memo; a later call on three threads copies it for the
    # other two (docs/design.md §3.5) instead of walking every word afresh on them, and its
    # ids (spans, word ids) equal the one thread's.
    tok = _tok(UNCASED, lowercase=True)
    docs = _english() * 2  # (all corpora overflow the offsets layout's arena: misses anyway)
    assert sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) > 3 << 20
    kw = {} if unit is None else {"return_offsets_mapping": True, "return_word_ids": True,
                                  "offsets_unit": unit}
    i0 = daskwp.memory.info()["word_cache"]  # (its counters outlive clear_caches)
    one = tok.encode(docs, num_threads=1, **kw)
    i1 = daskwp.memory.info()["word_cache"]
    assert i1["memos"] == 1
    cold_misses = i1["misses"] - i0["misses"]
    many = tok.encode(docs, num_threads=3, **kw)
    i2 = daskwp.memory.info()["word_cache"]
    assert i2["copied"] == i1["copied"] + 2 and i2["created"] == i1["created"] + 2 and i2["memos"] == 3
    # Without the copies two threads walked about two thirds of the distinct words again.
    assert i2["misses"] - i1["misses"] < cold_misses // 50, (i2["misses"] - i1["misses"],
                                                             cold_misses)
    _same(many, one)
    if unit is not None:
        np.testing.assert_array_equal(many.offset_mapping, one.offset_mapping)
        np.testing.assert_array_equal(many.word_ids, one.word_ids)
    # Three idle memos of the key now: the next call copies nothing.
    tok.encode(docs, num_threads=3, **kw)
    assert daskwp.memory.info()["word_cache"]["copied"] == i2["copied"]


def test_threads_beyond_the_processs_own_take_a_small_memo_of_their_own():
    # A process of one thread of its own (a 1-thread worker process) that a driver lends a
    # second (set_own_threads): the call's second thread takes a lent memo of at most
    # lent_memo_bytes, not a copy of the warm full-size one; the next such call reuses it,
    # the full memo is never replaced by it, and the ids equal one thread's.
    from daskwp.backends.cpu import LENT_MEMO_MB, set_own_threads
    tok = _tok(UNCASED, lowercase=True)
    docs = _english() * 2
    try:
        set_own_threads(1)
        i0 = daskwp.memory.info()["word_cache"]  # (its counters outlive clear_caches)
        one = tok.encode(docs, num_threads=1)
        i1 = daskwp.memory.info()["word_cache"]
        assert i1["memos"] == 1
        full = i1["bytes"]
        two = tok.encode(docs, num_threads=2)
        i2 = daskwp.memory.info()["word_cache"]
        assert i2["copied"] == i1["copied"] and i2["lent"] == i1["lent"] + 1
        assert i2["memos"] == 2 and 0 < i2["bytes"] - full <= LENT_MEMO_MB << 20 < full
        _same(two, one)
        again = tok.encode(docs, num_threads=2)
        i3 = daskwp.memory.info()["word_cache"]
        assert i3["lent"] == i2["lent"] and i3["memos"] == 2 and i3["bytes"] == i2["bytes"]
        _same(again, one)
        # (one thread takes the full memo, not the small one: no thread walks it all again)
        tok.encode(docs, num_threads=1)
        i4 = daskwp.memory.info()["word_cache"]
        assert i4["misses"] - i3["misses"] < (i1["misses"] - i0["misses"]) // 50
        # none at all for a lent thread
        daskwp.memory.clear()
        set_own_threads(1, 0)
        tok.encode(docs, num_threads=1)
        i5 = daskwp.memory.info()["word_cache"]
        none = tok.encode(docs, num_threads=2)
        i6 = daskwp.memory.info()["word_cache"]
        assert i6["memos"] == 1 and i6["refused"] == i5["refused"] + 1 and i6["lent"] == i5["lent"]
        _same(none, one)
        # no bound: the second thread copies the warm memo, as before
        set_own_threads(0)
        tok.encode(docs, num_threads=2)
        assert daskwp.memory.info()["word_cache"]["copied"] == i6["copied"] + 1
        with pytest.raises(ValueError, match="threads"):
            set_own_threads(-1)
    finally:
        set_own_threads(0)


def test_a_process_of_two_workers_is_not_lent_its_own_threads():
    # A LocalCluster(processes=False) on tcp: the driver takes each worker for a process of
    # its own and tells one it has 1 thread (set_task_threads' own_threads), but this
    # process runs both: it counts its workers' threads itself, so a 2-thread call here
    # still copies the warm memo instead of taking a small lent one.
    distributed = pytest.importorskip("distributed")
    from daskwp.backends.cpu import set_own_threads
    from daskwp.distributed.state import set_task_threads
    tok = _tok(UNCASED, lowercase=True)
    docs = _english()
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                      protocol="tcp", dashboard_address=":0"):
            set_task_threads({}, 1)
            tok.encode(docs, num_threads=1)
            i1 = daskwp.memory.info()["word_cache"]
            tok.encode(docs, num_threads=2)
            i2 = daskwp.memory.info()["word_cache"]
        assert i2["copied"] == i1["copied"] + 1 and i2["lent"] == i1["lent"]
    finally:
        set_own_threads(0)


@pytest.mark.parametrize("unit", [None, "chars"])
def test_small_calls_take_one_thread_more_than_the_idle_memos(unit):
    # A call of under 1 MB a thread maps no more than one new memo (docs/design.md §3.5):
    # after clear_caches() a call on three threads runs on one and makes one memo, the next
    # on at most two (one new), the next on at most three; ids (spans, word ids) equal one
    # thread's.
    tok = _tok(UNCASED, lowercase=True)
    docs = _english()
    small, n = [], 0
    for d in docs:  # about 1.5 MB: under 1 MB a thread on two and on three threads
        if n > 3 << 19:
            break
        small.append(d)
        n += len(d.encode("utf-8", "surrogatepass"))
    kw = {} if unit is None else {"return_offsets_mapping": True, "return_word_ids": True,
                                  "offsets_unit": unit}
    one = tok.encode(small, num_threads=1, **kw)
    daskwp.memory.clear()
    made = []
    for _ in range(4):
        before = daskwp.memory.info()["word_cache"]["created"]
        many = tok.encode(small, num_threads=3, **kw)
        made.append(daskwp.memory.info()["word_cache"]["created"] - before)
        _same(many, one)
        if unit is not None:
            np.testing.assert_array_equal(many.offset_mapping, one.offset_mapping)
            np.testing.assert_array_equal(many.word_ids, one.word_ids)
    # The first call (no idle memo) runs on one thread; no call makes more than one memo.
    # (Not an exact sequence such as [1, 1, 1, 0]: a thread may take a memo that another
    # thread of its call has already given back, and then makes none.)
    assert made[0] == 1 and all(m <= 1 for m in made), made
    assert daskwp.memory.info()["word_cache"]["memos"] == sum(made)
    # A call of 1 MB a thread or more takes its threads whatever the pool holds: each takes
    # a memo, a new one, or (a thread started late) the one the other has given back.
    daskwp.memory.clear()
    before = daskwp.memory.info()["word_cache"]
    tok.encode(small * 2, num_threads=2, **kw)
    after = daskwp.memory.info()["word_cache"]
    taken = {k: after[k] - before[k] for k in ("created", "reused")}
    assert taken["created"] >= 1 and taken["created"] + taken["reused"] == 2, taken


@pytest.mark.parametrize("unit", [None, pytest.param("bytes", marks=pytest.mark.slow)])
def test_memos_one_call_made_are_merged_before_a_large_call(unit):
    # A cold call on two threads fills each memo with the words of the chunks its thread
    # got; the next call of 4 MB a thread or more first merges them (docs/design.md §3.5),
    # so that its threads hit on each other's words, with ids (spans, word ids) unchanged.
    tok = _tok(UNCASED, lowercase=True)
    docs = _english()
    big = docs * 4
    assert sum(len(d.encode("utf-8", "surrogatepass")) for d in big) > 8 << 20
    kw = {} if unit is None else {"return_offsets_mapping": True, "return_word_ids": True,
                                  "offsets_unit": unit}
    i0 = daskwp.memory.info()["word_cache"]
    tok.encode(docs, num_threads=2, **kw)        # cold, two threads: two partial memos
    i1 = daskwp.memory.info()["word_cache"]
    assert i1["memos"] == 2 and i1["created"] == i0["created"] + 2
    cold_misses = i1["misses"] - i0["misses"]
    many = tok.encode(big, num_threads=2, **kw)
    i2 = daskwp.memory.info()["word_cache"]
    assert i2["merged"] == i1["merged"] + 2 and i2["created"] == i1["created"]
    # Unmerged, each thread walked the words only the other memo held: about a third of the
    # cold call's misses (35.5K of 120K plain, 42.7K of 123K in bytes). The offsets layout's
    # entries of more than 3 tokens are arena references, which stay in their own memo.
    bound = cold_misses // (20 if unit is None else 6)
    assert i2["misses"] - i1["misses"] < bound, (i2["misses"] - i1["misses"], cold_misses)
    one = tok.encode(big, num_threads=1, **kw)
    _same(many, one)
    if unit is not None:
        np.testing.assert_array_equal(many.offset_mapping, one.offset_mapping)
        np.testing.assert_array_equal(many.word_ids, one.word_ids)
    tok.encode(big, num_threads=2, **kw)          # merged once: not again
    assert daskwp.memory.info()["word_cache"]["merged"] == i2["merged"]


@pytest.mark.slow
def test_python_threads_with_different_models_at_once():
    # Dask worker threads: several encodes of different models at the same moment.
    docs = _docs()
    names = ["uncased", "cased", "multi", "uncased-max5"]
    cfg = {n: (v, o) for n, v, o in CONFIGS}
    toks = {n: _tok(cfg[n][0], **cfg[n][1]) for n in names}
    expected = {n: toks[n].encode(docs, num_threads=1) for n in names}
    errors = []

    def work(n):
        try:
            for _ in range(3):
                _same(toks[n].encode(docs, num_threads=2), expected[n])
        except Exception as e:  # noqa: BLE001
            errors.append((n, e))

    threads = [threading.Thread(target=work, args=(n,)) for n in names * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    info = daskwp.memory.info()["word_cache"]
    assert info["bytes"] <= info["limit"]


def _child_encode(vocab_name, lowercase, docs, conn):
    try:
        tok = daskwp.WordPieceTokenizer(vocab_path(vocab_name), lowercase=lowercase)
        before = daskwp.memory.info()["word_cache"]
        enc = tok.encode(docs, num_threads=1)
        after = daskwp.memory.info()["word_cache"]
        two = tok.encode(docs, num_threads=2)
        assert np.array_equal(two.token_ids, enc.token_ids)
        assert np.array_equal(two.lengths, enc.lengths)
        conn.send((enc.token_ids, enc.lengths, before, after))
    except Exception as e:  # noqa: BLE001
        conn.send(e)
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_uses_the_warm_memos():
    docs = _docs()
    tok = _tok(UNCASED, lowercase=True)
    parent = tok.encode(docs, num_threads=1)  # warms a memo
    other = _tok(MULTI, lowercase=False)
    expected_other = other.encode(docs, num_threads=1)
    # A parent thread keeps encoding (holding memos) while the children are forked.
    stop = threading.Event()
    errors = []

    def busy():
        try:
            while not stop.is_set():
                _same(other.encode(docs, num_threads=2), expected_other)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=busy)
    t.start()
    ctx = multiprocessing.get_context("fork")
    try:
        for _ in range(3):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child_encode, args=(UNCASED, True, docs, send))
            p.start()
            send.close()
            assert recv.poll(300), "the forked child did not answer (deadlock?)"
            res = recv.recv()
            p.join(60)
            assert p.exitcode == 0
            assert not isinstance(res, Exception), res
            ids, lengths, before, after = res
            np.testing.assert_array_equal(lengths, parent.lengths)
            np.testing.assert_array_equal(ids, parent.token_ids)
            # The child found the parent's warm memo and hit it; its accounting holds only
            # what it can use (the busy thread's memos are not the child's).
            assert after["reused"] > before["reused"]
            # (every corpus: its warm misses are long chunks of many scripts that overflow
            # the long table, ~10%)
            assert after["hits"] - before["hits"] > 4 * max(1, after["misses"] - before["misses"])
            assert after["bytes"] <= after["limit"]
    finally:
        stop.set()
        t.join(600)
    assert not errors, errors
    _same(tok.encode(docs, num_threads=1), parent)


def test_zero_bytes_in_words_without_clean_text():
    # Without clean_text, byte 0 may be part of a word; the zero-padded short key would read
    # "a\0" as "a" and "\0" as an empty entry, so such words skip the short table.
    texts = ["\x00", "a\x00", "a", "ab\x00cd ab\x00 ab", "x \x00", "\x00\x00 hello\x00world"]
    for clean in (False, True):
        tok = _tok(UNCASED, lowercase=False, clean_text=clean, handle_chinese_chars=False)
        with dask.config.set({"daskwp.word_cache_mb": 0}):
            expected = tok.encode(texts).to_list()
        for _ in range(2):
            assert tok.encode(texts * 50).to_list() == expected * 50


def test_many_token_short_strings_and_long_table_resets():
    # Strings of up to 16 bytes with more tokens than a short entry holds ("1.2.3.4.5.6.7",
    # timestamps of logs) live in the long table behind a short marker; with a small memo
    # (a 1 MB limit: 2^14 short entries, a 256 KB arena) the arena fills up and is emptied
    # again and again, so markers outlive their records. All must equal the walk.
    rng = np.random.default_rng(5)
    shorts = [".".join(str(x) for x in rng.integers(0, 10, size=7)) for _ in range(3000)]
    shorts += [f"{rng.integers(0, 24):02d}:{rng.integers(0, 60):02d}:{rng.integers(0, 60):02d},"
               f"{rng.integers(0, 1000):03d}" for _ in range(2000)]
    letters = list("abcdefghij-_/.:")
    longs = ["".join(rng.choice(letters, size=int(rng.integers(17, 150)))) for _ in range(3000)]
    pool = shorts + longs
    docs = [" ".join(pool[k] for k in rng.integers(0, len(pool), size=30)) for _ in range(3000)]
    tok = _tok(UNCASED, lowercase=True)
    ids, lengths = _walked(tok, docs)
    with dask.config.set({"daskwp.word_cache_mb": 1}):
        before = daskwp.memory.info()["word_cache"]
        for _ in range(3):
            enc = tok.encode(docs, num_threads=1)
            np.testing.assert_array_equal(enc.lengths, lengths)
            np.testing.assert_array_equal(enc.token_ids, ids)
        after = daskwp.memory.info()["word_cache"]
    assert after["long_resets"] > before["long_resets"], (before, after)
    assert after["hits"] > before["hits"]
