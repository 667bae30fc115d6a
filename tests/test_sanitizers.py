"""AddressSanitizer + UBSan over the native core, without Python in the sanitized process.

``tests/native/asan_driver.cpp`` links ``vocab_builder.cpp`` and the header-only core
(``wordpiece_core.hpp``, ``word_memo.hpp``, ``windows.hpp``) with ``-fsanitize=address,undefined`` and runs
every document from an exact-size heap block through the count pass, the write pass, the
word memo, too-small output regions and the window rows (see the driver's header). This
test builds it (cached under ``build/sanitizers/<hash of the sources>``), feeds it the
compiled blobs of the Python package, a sample of every shared corpus and random byte
strings, and checks that

* the build is really instrumented (a deliberate one-byte over-read is reported);
* the sanitized run reports nothing and exits 0;
* the sanitized core produces exactly the ids of the Python extension on the corpus sample.

The full run (every line of every corpus, all vocabularies, four flag combinations) is
``tests/sanitize.sh`` (minutes); see ``docs/bad-input.md``.
Skipped when no C++ compiler with the sanitizer runtimes is present.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import daskwp
from daskwp.core.normalizer import norm_blob

from conftest import DATA, DATA_IS_BUNDLED, corpus_files, read_lines

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "daskwp" / "kernels"
DRIVER = REPO / "tests" / "native" / "asan_driver.cpp"
SOURCES = [DRIVER, KERNELS / "vocab_builder.cpp"]
HEADERS = sorted(KERNELS.glob("*.hpp"))
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
FLAGS = ["-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
SAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}
LINES_PER_CORPUS = 100
RANDOM_DOCS = 1000

pytestmark = [pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++/clang++) found"),
              pytest.mark.slow]  # instrumented builds: a minute


def _build_dir() -> Path:
    h = hashlib.blake2b(digest_size=8)
    for p in SOURCES + HEADERS:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(" ".join([CXX or ""] + FLAGS).encode())
    return REPO / "build" / "sanitizers" / h.hexdigest()


@pytest.fixture(scope="module")
def driver() -> Path:
    out = _build_dir()
    exe = out / "asan_driver"
    if exe.is_file():
        return exe
    out.mkdir(parents=True, exist_ok=True)

    def compile_one(src: Path) -> subprocess.CompletedProcess:
        return subprocess.run([CXX, *FLAGS, f"-I{KERNELS}", "-c", str(src), "-o",
                               str(out / (src.stem + ".o"))],
                              capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(len(SOURCES)) as pool:
        results = list(pool.map(compile_one, SOURCES))
    for src, r in zip(SOURCES, results):
        if r.returncode != 0:
            if "asan" in r.stderr.lower() or "sanitize" in r.stderr.lower():
                pytest.skip(f"the compiler has no sanitizer support: {r.stderr[-400:]}")
            pytest.fail(f"compiling {src.name} with sanitizers failed:\n{r.stderr[-4000:]}")
    tmp = out / "asan_driver.tmp"
    r = subprocess.run([CXX, *FLAGS, *(str(out / (s.stem + ".o")) for s in SOURCES), "-o",
                        str(tmp)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        if "asan" in r.stderr.lower() or "ubsan" in r.stderr.lower():
            pytest.skip(f"no sanitizer runtime libraries: {r.stderr[-400:]}")
        pytest.fail(f"linking the sanitizer driver failed:\n{r.stderr[-4000:]}")
    tmp.replace(exe)
    return exe


def _run(exe: Path, manifest: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, **SAN_ENV}
    env.pop("LD_PRELOAD", None)
    return subprocess.run([str(exe), str(manifest)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_driver_is_instrumented(driver, tmp_path):
    manifest = tmp_path / "manifest.txt"
    manifest.write_text("selftest-overflow\n")
    r = _run(driver, manifest, timeout=60)
    assert r.returncode != 0 and "heap-buffer-overflow" in r.stderr, (
        f"AddressSanitizer did not report a deliberate over-read (rc {r.returncode}):\n"
        f"{r.stdout}\n{r.stderr[-2000:]}")


def _corpus_sample() -> tuple[list[str], list[str]]:
    """(documents in driver order, manifest lines) for the shared corpora."""
    docs: list[str] = []
    lines: list[str] = []
    for p in corpus_files():
        if p.suffix == ".json":
            continue  # a JSON array: its text is covered by blns.txt
        file_lines = read_lines(p)
        if p.name == "blns.txt":
            lines.append(f"corpus {p}")
            docs += file_lines + [p.read_text(encoding="utf-8")]
        else:
            lines.append(f"lines {LINES_PER_CORPUS} {p}")
            docs += file_lines[:LINES_PER_CORPUS]
    return docs, lines


def test_core_under_asan_and_ubsan(driver, tmp_path):
    tok = daskwp.WordPieceTokenizer()  # bundled bert-base-uncased, HF's uncased flags
    (tmp_path / "uncased.blob").write_bytes(tok.vocab.blob)
    flags = [(True, True, True, True),     # uncased (the first: ids are compared below)
             (True, True, False, False),   # cased
             (False, False, True, True)]   # no clean_text: U+FFFD and controls reach WordPiece
    for k, f in enumerate(flags):
        (tmp_path / f"norm{k}.blob").write_bytes(norm_blob(*f))
    manifest = [f"vocab {tmp_path / 'uncased.blob'}"]
    manifest += [f"norm {tmp_path / f'norm{k}.blob'}" for k in range(len(flags))]
    docs: list[str] = []
    if not DATA_IS_BUNDLED:
        docs, corpus_lines = _corpus_sample()
        manifest += corpus_lines
        manifest.append(f"vocabtxt {DATA / 'vocab' / 'bert-base-chinese' / 'vocab.txt'}")
    else:
        sample = REPO / "daskwp" / "data" / "sample.txt"
        manifest.append(f"lines 2000 {sample}")
        docs = read_lines(sample)[:2000]
    manifest += [f"random {RANDOM_DOCS} 20261130", f"ids {tmp_path / 'ids.bin'}"]
    (tmp_path / "manifest.txt").write_text("\n".join(manifest) + "\n")
    r = _run(driver, tmp_path / "manifest.txt")
    assert r.returncode == 0 and r.stdout.startswith("OK"), (
        f"sanitized driver failed (rc {r.returncode}):\n{r.stdout[-2000:]}\n"
        f"{r.stderr[-6000:]}")
    assert "runtime error" not in r.stderr, r.stderr[-4000:]

    # The sanitized core gives the extension's ids, document by document.
    raw = (tmp_path / "ids.bin").read_bytes()
    got, at = [], 0
    while at < len(raw):
        n = int(np.frombuffer(raw, np.int64, 1, at)[0])
        at += 8
        got.append(np.frombuffer(raw, np.int32, n, at).tolist())
        at += 4 * n
    expected = tok.encode(docs).to_list()
    assert len(got) == len(expected)
    bad = [i for i in range(len(got)) if got[i] != expected[i]]
    assert not bad, f"{len(bad)} documents differ, first: {docs[bad[0]][:200]!r}"
