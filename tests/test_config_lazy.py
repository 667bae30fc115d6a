"""The command's start without dask's import (issue 39/42): ``import daskwp`` and the CLI's
modules import no dask (its public names are imported on first use), ``core.config`` reads
``daskwp.<name>`` the way ``dask.config`` would (its YAML/JSON files, ``DASK_DASKWP__<KEY>``)
while dask is not imported, and registers the defaults in ``dask.config`` once it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import daskwp

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("dask", "distributed", "pandas")


def _python(code: str, env: dict | None = None) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update(extra)
    return env


_LOADED = ("print(sorted({m.split('.')[0] for m in sys.modules} & "
           "{'dask', 'distributed', 'pandas'}))\n")


@pytest.mark.parametrize("module", ["daskwp", "daskwp.cli"])
def test_importing_daskwp_and_its_command_imports_no_dask(module):
    out = _python(f"import sys\nimport {module}\n" + _LOADED, env=_clean_env())
    assert out.strip() == "[]"


def test_in_process_count_imports_neither_distributed_nor_pandas(tmp_path):
    """dask's threaded scheduler runs the graph (dask itself is imported then), but neither
    distributed nor pandas is (nor the transformers drop-in or packing's module), and the
    configuration is read without dask until then."""
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": f"Hello world number {i}!"}) + "\n"
                           for i in range(50)))
    code = ("import sys\nfrom daskwp.core import config\nfrom daskwp.cli import main\n"
            f"assert main(['count', {str(inp)!r}, '-q', '--json']) == 0\n"
            "print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & "
            "{'distributed', 'pandas'}))\n"
            "print('UNUSED', sorted(set(sys.modules) & {'daskwp.backends.transformers_compat', "
            "'daskwp.jobs.packing'}))\n"
            "import dask.config\n"
            "print('DEFAULTS', dask.config.get('daskwp.max_length'))\n")
    lines = _python(code, env=_clean_env()).strip().splitlines()
    assert lines[-3] == "LOADED []", lines
    assert lines[-2] == "UNUSED []", lines   # the transformers drop-in, packing: on use
    assert lines[-1] == "DEFAULTS 128", lines


def _config_probe(keys) -> str:
    return ("import json, sys\nfrom daskwp.core import config\n"
            f"keys = {list(keys)!r}\n"
            "own = {k: config.get(k) for k in keys}\n"
            "assert 'dask' not in sys.modules, 'dask imported'\n"
            "import dask.config\n"
            "dask_view = {k: dask.config.get('daskwp.' + k) for k in keys}\n"
            "after = {k: config.get(k) for k in keys}\n"
            "print(json.dumps([own, dask_view, after]))\n")


def test_config_without_dask_reads_dasks_files_and_environment(tmp_path):
    """Files in dask's search path (later ones win, either key spelling), then the
    environment, then the table's default: the same values dask.config gives once imported."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "a.yaml").write_text("daskwp:\n  max-length: 77\n  n_workers: 3\n"
                                 "  stride: 5\nother: {x: 1}\n")
    (conf / "b.json").write_text(json.dumps({"daskwp": {"stride": 9}}))
    keys = ["max_length", "n_workers", "stride", "threads_per_worker", "lowercase"]
    env = _clean_env(DASK_CONFIG=str(conf), DASK_DASKWP__N_WORKERS="5",
                     DASK_DASKWP__LOWERCASE="false")
    own, dask_view, after = json.loads(_python(_config_probe(keys), env=env))
    assert own == {"max_length": 77, "n_workers": 5, "stride": 9,
                   "threads_per_worker": dask_view["threads_per_worker"], "lowercase": False}
    assert own == dask_view == after


def test_config_without_dask_defaults_and_inherited_config(tmp_path):
    keys = ["max_length", "stride", "device"]
    own, dask_view, _ = json.loads(_python(_config_probe(keys), env=_clean_env(
        DASK_CONFIG=str(tmp_path / "none"))))
    assert own == dask_view
    assert own["max_length"] == 128


def test_config_set_wins_once_dask_is_imported():
    import dask.config
    from daskwp.core import config
    with dask.config.set({"daskwp.max_length": 33}):
        assert config.get("max_length") == 33
        assert config.get("max_length", 12) == 12
    assert dask.config.get("daskwp.max_length") == config.get("max_length")


def test_public_names_import_on_first_use():
    for name in daskwp.__all__:
        assert getattr(daskwp, name) is not None, name
    assert set(daskwp.__all__) <= set(dir(daskwp))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        daskwp.nope  # noqa: B018
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = daskwp.cache_info()
    assert info == daskwp.memory.info()["caches"]
    assert "deprecated" in str(caught[0].message)
    assert daskwp.cache_info.__name__ == "cache_info"
