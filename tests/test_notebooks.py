"""The notebooks in ``notebooks/`` run top to bottom on a fresh kernel, without errors.

Each notebook is executed with nbclient in a new kernel of the Python running the tests
(a temporary kernelspec points at ``sys.executable``, so a user-level "python3" kernel of
another environment is never picked up), with the working directory set to ``notebooks/``,
as a reader who opens it in Jupyter would have. Any exception in any cell fails the test and
shows the cell's traceback. The notebooks assert their own results (stitched ids equal
``tok.encode``, no lost token, ...), so running them is the check.

A second, static test keeps outputs out of git: committed notebooks have no outputs and no
execution counts.

Needs ``nbclient``, ``nbformat``, ``ipykernel`` and ``matplotlib`` (the ``test`` extra);
skipped when one of them is missing. A notebook may declare more in its metadata::

    "daskwp": {"requires": ["torch", ...], "slow": true}

``requires``: modules it imports beyond those (the notebook is skipped when one is missing);
``slow``: it takes more than a minute (marked ``slow``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))

#: Seconds one cell may run before the test fails (the whole notebooks take well under that).
CELL_TIMEOUT = 300

KERNEL_NAME = "daskwp-notebook-test"


def _settings(path: Path) -> dict:
    """The notebook's ``metadata["daskwp"]`` (``requires``, ``slow``), read without nbformat."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("daskwp", {})
    except (OSError, ValueError):
        return {}  # the static test reports an unreadable notebook


def _run_params():
    for path in NOTEBOOKS:
        marks = [pytest.mark.slow] if _settings(path).get("slow") else []
        yield pytest.param(path, marks=marks, id=path.stem)


def _require_packages():
    for name in ("nbformat", "nbclient", "ipykernel", "matplotlib"):
        pytest.importorskip(name, reason=f"{name} is needed to run the notebooks "
                                         f"(pip install -e .[test])")


@pytest.fixture
def kernel_here(tmp_path, monkeypatch) -> str:
    """A kernelspec, found first on JUPYTER_PATH, that runs ipykernel in this interpreter."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return KERNEL_NAME


def test_notebooks_present():
    names = {p.name for p in NOTEBOOKS}
    assert {"01-quickstart.ipynb", "02-log-parsing.ipynb", "03-scaling.ipynb"} <= names, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_committed_without_outputs(path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, (f"{path.name}: cells {dirty} carry outputs; clear them before "
                       f"committing (jupyter nbconvert --clear-output --inplace {path.name})")


@pytest.mark.slow   # a kernel and a local cluster each: 7-20 s a notebook
@pytest.mark.parametrize("path", list(_run_params()))
def test_notebook_runs(path, kernel_here):
    _require_packages()
    for name in _settings(path).get("requires", []):
        pytest.importorskip(name, reason=f"{path.name} needs {name} (optional)")
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name=kernel_here,
                            resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
    t0 = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as e:
        pytest.fail(f"{path.name} failed:\n{e}", pytrace=False)
    elapsed = time.perf_counter() - t0
    errors = [o for cell in nb.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs {errors}"
    print(f"{path.name}: {elapsed:.1f} s")
