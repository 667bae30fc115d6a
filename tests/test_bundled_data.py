"""The small test set bundled in tests/data: described by its MANIFEST, and enough for the
parity, windows and stitching suites to run on a clone without the shared data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUNDLED_DATA, REPO_ROOT


def test_manifest_lists_every_bundled_file():
    manifest = (BUNDLED_DATA / "MANIFEST.md").read_text(encoding="utf-8")
    files = [p.relative_to(BUNDLED_DATA).as_posix() for p in BUNDLED_DATA.rglob("*")
             if p.is_file() and p.name != "MANIFEST.md"]
    assert files
    for f in files:
        assert f"`{f}`" in manifest or f"`{Path(f).name}`" in manifest, f
    assert "licence" in manifest and "Public domain" in manifest and "MIT" in manifest


def test_bundled_vocabulary_is_the_package_default():
    import daskwp
    bundled = daskwp.Vocabulary.from_file(BUNDLED_DATA / "vocab" / "bert-base-uncased")
    assert bundled.hash == daskwp.Vocabulary.default().hash


@pytest.mark.slow
def test_parity_windows_and_stitching_run_on_the_bundled_set(tmp_path):
    env = dict(os.environ, DASKWP_SHARED_DATA="bundled")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-rA", "tests/test_parity.py", "tests/test_stitch.py",
                        "tests/test_windows.py"],
                       cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert " passed" in out and " failed" not in out, out[-2000:]
    # parity ran on every bundled corpus file with the bundled vocabulary
    passed = [line for line in out.splitlines() if line.startswith("PASSED tests/test_parity")]
    for name in ("en_book_pride_and_prejudice_2k.txt", "edge/blns.txt", "edge/blns.json"):
        assert any(name in line and "bert-base-uncased" in line for line in passed), \
            (name, passed[:5])
    assert "no-shared-data" not in out
