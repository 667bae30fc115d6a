"""Every README example runs as written (issue 37 item 4).

The blocks are read from README.md itself, whatever it holds:

* each ```python block is one test: it runs in a fresh namespace in which only the reader's
  own things are given (:data:`READER`: ``texts``, ``questions`` and ``contexts``, lists of
  sample documents; ``model`` and ``device``, a stand-in for a PyTorch model that checks the
  tensors it is called with, and ``"cpu"``), in a scratch folder holding the placeholder
  paths the README names (:func:`_scratch`: ``path/to/vocab.txt``, ``model-folder/``,
  ``path/to/model/``, ``corpus/`` with several Parquet files of a ``text`` column and other
  columns, and ``en_ewt.txt``; a copy of ``conf/``). Everything else a block uses, it imports
  or defines itself. A block that needs a package that is not installed (transformers,
  torch, CuPy, cudf, dask-cuda) is skipped with that reason. Dask clients a block leaves
  open are closed after it;
* each ``daskwp`` command of a ```bash block (a line, or a part of a line between ``&&``)
  is one test (``slow``: each starts a local cluster), run with this environment's
  ``daskwp`` in its own scratch folder; the environment setup around them (``python3 -m
  venv``, ``pip install``, ``pytest``: the suite itself) and commands other than ``daskwp``
  are not run.

A failure names the README line: that of the block's failing statement, or the command's.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import BUNDLED_DATA, DATA, REPO_ROOT, read_lines

README = REPO_ROOT / "README.md"
SAMPLE = REPO_ROOT / "daskwp" / "data" / "sample.txt"
#: Packages a README block may need that the test environment may lack.
OPTIONAL = ("transformers", "torch", "cupy", "cudf", "dask_cudf", "dask_cuda", "megatron")
#: Parts of a bash command line that set up the environment rather than use daskwp.
SETUP = re.compile(r"(^|\s)(python3? -m venv|\S*pip install|\S*pytest)(\s|$)")
DASKWP = re.compile(r"^(\S*/)?daskwp(\s|$)")


# -- reading the README --------------------------------------------------------------------

def fenced_blocks(text: str) -> list[tuple[str, int, str]]:
    """``(language, line of the first code line (1-based), code)`` of every fenced block."""
    blocks, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", line)
        if lang is None and fence:
            lang, start, body, marker = fence.group(2).lower(), n + 1, [], fence.group(1)
        elif lang is not None and line.strip().startswith(marker) and \
                line.strip().strip(marker[0]) == "":
            blocks.append((lang, start, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def python_blocks(text: str) -> list[tuple[int, str]]:
    return [(line, code) for lang, line, code in fenced_blocks(text)
            if lang in ("python", "py", "python3")]


def daskwp_commands(text: str) -> list[tuple[int, str]]:
    """``(line, command)`` of every daskwp command in the shell blocks of ``text``."""
    out = []
    for lang, line, code in fenced_blocks(text):
        if lang not in ("bash", "sh", "shell", "console"):
            continue
        for k, raw in enumerate(code.splitlines()):
            words = shlex.split(re.sub(r"^\s*\$\s+", "", raw), comments=True)
            parts, part = [], []
            for w in words + ["&&"]:
                if w == "&&":
                    parts.append(shlex.join(part))
                    part = []
                else:
                    part.append(w)
            out += [(line + k, p) for p in parts
                    if p and not SETUP.search(p) and DASKWP.match(p)]
    return out


PYTHON = python_blocks(README.read_text("utf-8"))
COMMANDS = daskwp_commands(README.read_text("utf-8"))


# -- what the reader brings ----------------------------------------------------------------

def _model(**tensors):
    """A stand-in for a PyTorch model: checks it gets a batch of tensors and returns them."""
    torch = pytest.importorskip("torch")
    assert tensors and all(isinstance(t, torch.Tensor) for t in tensors.values()), tensors
    return tensors


def _reader() -> dict:
    lines = read_lines(SAMPLE)
    return {"texts": lines[:40] + [" ".join(lines[40:80])],
            "questions": [ln.split(",")[0] + "?" for ln in lines[80:100]],
            "contexts": [" ".join(lines[100 + 5 * i:105 + 5 * i]) for i in range(20)],
            "model": _model, "device": "cpu"}


def _scratch(folder: Path) -> Path:
    """A folder with the paths the README uses as placeholders."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "path" / "to").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "daskwp" / "data" / "bert-base-uncased-vocab.txt",
                folder / "path" / "to" / "vocab.txt")
    model = BUNDLED_DATA / "vocab" / "bert-base-uncased"
    for name in ("model-folder", "path/to/model"):
        shutil.copytree(model, folder / name, dirs_exist_ok=True)
    shutil.copytree(REPO_ROOT / "conf", folder / "conf", dirs_exist_ok=True)
    corpus = folder / "corpus"
    corpus.mkdir(exist_ok=True)
    lines = read_lines(SAMPLE)
    # several files, with columns beside the text (a read of one column fuses them)
    for i in range(6):
        part = lines[i * 150:(i + 1) * 150]
        pd.DataFrame({"id": np.arange(i * 150, i * 150 + len(part)), "text": part,
                      "source": "sample", "length": [len(t) for t in part]}
                     ).to_parquet(corpus / f"part.{i}.parquet")
    ewt = DATA / "corpus" / "en_ewt.txt"
    en = read_lines(ewt)[:2000] if ewt.exists() else lines
    (corpus / "en_ewt.txt").write_text("\n".join(en) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return _scratch(tmp_path_factory.mktemp("readme-python"))


@pytest.fixture(scope="module")
def shell_scratch(tmp_path_factory):
    return _scratch(tmp_path_factory.mktemp("readme-shell"))


# -- running -------------------------------------------------------------------------------

def _readme_line(exc: BaseException, first: int) -> int:
    """The README line of the innermost frame of ``exc`` that ran README code."""
    line = first
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == str(README):
            line = frame.lineno
    return line


def _close_clients(namespace: dict) -> None:
    for value in namespace.values():
        if type(value).__name__ == "Client" and hasattr(value, "close"):
            cluster = getattr(value, "cluster", None)
            value.close()
            if cluster is not None:
                cluster.close()


def _missing_optional(exc: BaseException) -> str | None:
    if isinstance(exc, ImportError):
        text = f"{getattr(exc, 'name', '') or ''} {exc}"
        for name in OPTIONAL:
            if re.search(rf"\b{name}\b", text, re.IGNORECASE) or \
                    (name == "cupy" and "CuPy" in text):
                return name
    return None


def test_the_readme_has_examples():
    assert PYTHON, "README.md has no ```python block"
    # the Dask example reads several Parquet files (issue 37 item 4)
    assert any("read_parquet" in code and ".stitch(" in code for _, code in PYTHON)


@pytest.mark.parametrize("line,code", PYTHON, ids=[f"README.md:{n}" for n, _ in PYTHON])
def test_python_block_runs(line, code, scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    namespace = {"__name__": "__readme__", **_reader()}
    program = compile("\n" * (line - 1) + code, str(README), "exec")
    try:
        exec(program, namespace)
    except Exception as e:
        missing = _missing_optional(e)
        if missing:
            pytest.skip(f"README.md line {line}: the block needs {missing}, not installed")
        where = _readme_line(e, line)
        pytest.fail(f"README.md line {where} (block at line {line}): {type(e).__name__}: {e}\n"
                    + "".join(traceback.format_exception(e)[-6:]), pytrace=False)
    finally:
        _close_clients(namespace)


@pytest.mark.slow   # each command starts a local Dask cluster
@pytest.mark.parametrize("line,command", COMMANDS, ids=[f"README.md:{n}" for n, _ in COMMANDS])
def test_shell_command_runs(line, command, shell_scratch):
    words = shlex.split(command)
    words[0] = str(Path(sys.executable).parent / "daskwp")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(words, cwd=shell_scratch, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"README.md line {line}: `{command}` exited {proc.returncode}\n"
                    f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}", pytrace=False)


def test_fenced_blocks_are_read_with_their_lines():
    text = "intro\n```python\na = 1\n\nb = 2\n```\ntext\n```bash\n$ daskwp run x.yaml  # c\n" \
           "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/daskwp run y\n" \
           "ls -l\n```\n"
    blocks = fenced_blocks(text)
    assert blocks == [("python", 3, "a = 1\n\nb = 2\n"),
                      ("bash", 9, "$ daskwp run x.yaml  # c\npython3 -m venv .venv && "
                                  ".venv/bin/pip install -e . && .venv/bin/daskwp run y\n"
                                  "ls -l\n")]
    assert python_blocks(text) == [(3, "a = 1\n\nb = 2\n")]
    assert daskwp_commands(text) == [(9, "daskwp run x.yaml"), (10, ".venv/bin/daskwp run y")]
