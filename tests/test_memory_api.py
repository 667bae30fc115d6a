"""daskwp.memory: the memory functions grouped (issue 41) — info, release, clear, set_limit,
their Examples, and the six old top-level names kept as deprecated aliases for one release."""
import doctest
import inspect
import pickle

import pytest

import daskwp
from daskwp.core.options import OptionValueError

FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


@pytest.fixture
def tok():
    return daskwp.WordPieceTokenizer()


@pytest.mark.parametrize("name", daskwp.memory.__all__)
def test_examples_run(name):
    fn = getattr(daskwp.memory, name)
    assert "\nExamples\n--------\n" in inspect.getdoc(fn) + "\n"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out = []
    for t in doctest.DocTestFinder().find(fn, name, globs={}):
        runner.run(t, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 2 and result.failed == 0, "".join(out)


def test_info_reports_every_kind(tok):
    tok.encode(["warm the word cache"] * 10, num_threads=1)
    mem = daskwp.memory.info()
    assert set(mem) == {"host_pool", "word_cache", "caches"}
    assert mem["word_cache"]["memos"] >= 1
    assert mem["caches"]["word_cache"]["entries"] == mem["word_cache"]["memos"]
    assert {"limit", "cached", "live"} == set(mem["host_pool"])
    assert pickle.loads(pickle.dumps(mem)) == mem


def test_clear_empties_the_caches_and_release_gives_back_spares(tok):
    tok.encode(["warm the word cache"] * 10, num_threads=1)
    assert daskwp.memory.info()["word_cache"]["memos"] >= 1
    assert daskwp.memory.clear() >= 1
    mem = daskwp.memory.info()
    assert mem["word_cache"]["memos"] == 0
    spare = mem["word_cache"]["spare_bytes"] + mem["host_pool"]["cached"]
    assert daskwp.memory.release() == spare
    mem = daskwp.memory.info()
    assert mem["word_cache"]["spare_bytes"] == 0 and mem["host_pool"]["cached"] == 0


def test_set_limit_sets_each_pool_and_keeps_the_other():
    before = daskwp.memory.info()
    try:
        daskwp.memory.set_limit(host_pool="3MiB")
        mem = daskwp.memory.info()
        assert mem["host_pool"]["limit"] == 3 << 20
        assert mem["word_cache"]["limit"] == before["word_cache"]["limit"]
        daskwp.memory.set_limit(word_cache=0)
        assert daskwp.memory.info()["word_cache"]["limit"] == 0
        daskwp.WordPieceTokenizer().encode(["nothing kept"], num_threads=1)
        assert daskwp.memory.info()["word_cache"]["memos"] == 0
        daskwp.memory.set_limit(word_cache=64 << 20, host_pool=0)
        mem = daskwp.memory.info()
        assert mem["word_cache"]["limit"] == 64 << 20 and mem["host_pool"]["limit"] == 0
    finally:
        daskwp.memory.set_limit(host_pool=before["host_pool"]["limit"],
                                word_cache=before["word_cache"]["limit"])
    assert daskwp.memory.info()["host_pool"]["limit"] == before["host_pool"]["limit"]


@pytest.mark.parametrize("value", [-1, "lots", 1.5, True, "-5MB"])
def test_set_limit_refuses_what_is_not_a_size(value):
    before = daskwp.memory.info()["host_pool"]["limit"]
    with pytest.raises(OptionValueError, match=r"host_pool must be a size .* or 0; got"):
        daskwp.memory.set_limit(host_pool=value)
    assert daskwp.memory.info()["host_pool"]["limit"] == before


# old name -> (a call of it, the same through daskwp.memory, the new name in the warning)
ALIASES = {
    "cache_info": (lambda: daskwp.cache_info(), lambda: daskwp.memory.info()["caches"],
                   'daskwp.memory.info()["caches"]'),
    "word_cache_info": (lambda: daskwp.word_cache_info(),
                        lambda: daskwp.memory.info()["word_cache"],
                        'daskwp.memory.info()["word_cache"]'),
    "host_pool_info": (lambda: daskwp.host_pool_info(),
                       lambda: daskwp.memory.info()["host_pool"],
                       'daskwp.memory.info()["host_pool"]'),
    "clear_caches": (lambda: daskwp.clear_caches(), lambda: daskwp.memory.clear(),
                     "daskwp.memory.clear()"),
    "release_host_memory": (lambda: daskwp.release_host_memory(),
                            lambda: daskwp.memory.info()["host_pool"]["cached"],
                            "daskwp.memory.release()"),
    "set_host_pool_limit": (
        lambda: daskwp.set_host_pool_limit(daskwp.memory.info()["host_pool"]["limit"]),
        lambda: None, "daskwp.memory.set_limit(host_pool=nbytes)"),
}


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_old_names_warn_and_still_work(old):
    call, same, new = ALIASES[old]
    with pytest.warns(DeprecationWarning, match=rf"daskwp\.{old} is deprecated .*use "
                                                 rf"{__import__('re').escape(new)}") as rec:
        got = call()
    assert rec[0].filename == __file__          # the warning points at the caller
    assert old not in daskwp.__all__ and "memory" in daskwp.__all__
    assert pickle.loads(pickle.dumps(getattr(daskwp, old))) is getattr(daskwp, old)
    if old.endswith("_info"):
        assert set(got) == set(same())
    elif old == "release_host_memory":
        assert isinstance(got, int) and same() == 0
    elif old == "clear_caches":
        assert isinstance(got, int)
