"""daskwp's environment variables are options of the table (issue 41): each has one entry in
daskwp/core/options.py (Option.env, documented in docs/options.md), is read in Python by
``env_value`` and nowhere else, and takes effect; the extension reads none."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import daskwp
from daskwp import cli
from daskwp.core.options import OPTIONS, env_value

PACKAGE = Path(daskwp.__file__).resolve().parent
#: variable -> option, as the table must have them
ENV_OPTIONS = {"DASKWP_WORD_CACHE_MB": "word_cache_mb", "DASKWP_HOST_POOL_MB": "host_pool_mb",
               "DASKWP_WORKER_MALLOC": "worker_malloc", "DASKWP_DEBUG": "debug",
               "DASKWP_HUGE_PAGES": "huge_pages"}


def test_the_table_holds_every_variable_and_docs_list_them():
    assert {o.env: n for n, o in OPTIONS.items() if o.env} == ENV_OPTIONS
    docs = (PACKAGE.parent / "docs" / "options.md").read_text()
    for var, name in ENV_OPTIONS.items():
        assert f"| `{var}` | `{name}` |" in docs, var


def test_nothing_else_reads_the_environment_for_a_setting():
    # Python: os.environ / os.getenv of a DASKWP_ name only in the option table
    read = re.compile(r"""(?:environ(?:\.get)?|getenv)\s*[\[(]\s*["'](DASKWP_\w+)""")
    found = {(p.relative_to(PACKAGE).as_posix(), m)
             for p in PACKAGE.rglob("*.py") for m in read.findall(p.read_text())}
    assert found == set(), found
    # C++: no getenv at all
    kernels = [p for p in (PACKAGE / "kernels").iterdir() if p.suffix in (".cpp", ".hpp", ".cu")]
    assert [p.name for p in kernels if "getenv" in p.read_text()] == []


@pytest.mark.parametrize("name,raw,value", [
    ("word_cache_mb", "7", 7), ("word_cache_mb", " 0 ", 0), ("word_cache_mb", "", None),
    ("host_pool_mb", "48", 48), ("worker_malloc", "0", False), ("worker_malloc", "Yes", True),
    ("debug", "1", True), ("debug", "off", False)])
def test_env_value_parses(monkeypatch, name, raw, value):
    monkeypatch.setenv(OPTIONS[name].env, raw)
    assert env_value(name) == value
    monkeypatch.delenv(OPTIONS[name].env)
    assert env_value(name) is None


@pytest.mark.parametrize("name,raw,allowed", [
    ("host_pool_mb", "junk", "an integer >= 0"), ("word_cache_mb", "-3", "an integer >= 0"),
    ("word_cache_mb", "64MB", "an integer >= 0"), ("debug", "maybe", "1/true/yes/on")])
def test_a_bad_value_warns_and_reads_as_unset(monkeypatch, name, raw, allowed):
    var = OPTIONS[name].env
    monkeypatch.setenv(var, raw)
    with pytest.warns(RuntimeWarning, match=rf"{var}={raw!r} ignored: it must be {allowed}"):
        assert env_value(name) is None


def test_debug_raises_instead_of_one_error_line(monkeypatch, tmp_path, capsys):
    argv = ["tokenize", str(tmp_path / "missing.txt"), str(tmp_path / "out")]
    monkeypatch.delenv("DASKWP_DEBUG", raising=False)
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith("daskwp: error: input not found")
    monkeypatch.setenv("DASKWP_DEBUG", "1")
    with pytest.raises(daskwp.jobs.InputError, match="input not found"):
        cli.main(argv)
    monkeypatch.setenv("DASKWP_DEBUG", "0")   # false now means false
    assert cli.main(argv) == 2


_SCRIPT = """
import json, daskwp
from daskwp.backends.memory import tune_worker_malloc
daskwp.WordPieceTokenizer().encode(["hello world"] * 10, num_threads=1)
mem = daskwp.memory.info()
print(json.dumps({"word_cache": mem["word_cache"]["limit"], "memos": mem["word_cache"]["memos"],
                  "host_pool": mem["host_pool"]["limit"], "tuned": tune_worker_malloc()}))
"""


def _run(**env) -> tuple[dict, str]:
    e = {k: v for k, v in os.environ.items() if k not in ENV_OPTIONS}
    e.update(env, MALLOC_TRIM_THRESHOLD_="65536")   # as a Dask nanny sets it
    r = subprocess.run([sys.executable, "-c", _SCRIPT], env=e, capture_output=True, text=True,
                       timeout=300, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.mark.slow   # two fresh processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_each_variable_takes_effect_in_a_fresh_process():
    got, _ = _run(DASKWP_WORD_CACHE_MB="0", DASKWP_HOST_POOL_MB="48", DASKWP_WORKER_MALLOC="0")
    assert got == {"word_cache": 0, "memos": 0, "host_pool": 48 << 20, "tuned": False}, got
    phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    got, err = _run(DASKWP_WORD_CACHE_MB="7", DASKWP_HOST_POOL_MB="junk",
                    DASKWP_WORKER_MALLOC="yes")
    assert got == {"word_cache": 7 << 20, "memos": 1,
                   "host_pool": min(max(phys // 8, 256 << 20), 16 << 30), "tuned": True}, got
    assert "DASKWP_HOST_POOL_MB='junk' ignored" in err
