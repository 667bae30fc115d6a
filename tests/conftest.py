"""Shared test configuration and helpers for daskwp.

Data location
-------------
The real vocabularies and corpora live outside the repository. ``DATA`` is, in order:

1. the folder named by the environment variable ``DASKWP_SHARED_DATA`` (``bundled``: skip
   the next two and use the bundled set);
2. ``<repo>/../shared/data``;
3. ``<repo>/shared/data``;
4. ``tests/data``: the small test set bundled with the repository (``tests/data/MANIFEST.md``:
   the bundled vocabulary, a public-domain book, the naughty-strings list), so that parity,
   windows and the CLI run on any clone. ``DATA_IS_BUNDLED`` is then True, ``VOCAB_CONFIGS``
   lists only the bundled vocabularies, and a test that reads a file the bundled set does not
   have skips with that reason (``requires_full_data`` marks tests that need the full set).

With the shared data, nothing is skipped: a missing file inside it is a failure, not a skip.

Helpers
-------
``read_lines`` splits corpus files on ``"\\n"`` only (never ``str.splitlines``: some lines contain
U+2028, U+0085, VT or FF). ``hf_tokenizer`` is the HuggingFace oracle for a real vocabulary,
``hf_from_tokens`` the same pipeline for a tiny hand-written vocabulary.

Test modules import these helpers with ``from conftest import ...``.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

# Make ``from conftest import ...`` work under any pytest import mode.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# (vocabulary folder under DATA/vocab, lowercase flag HF uses for it)
VOCAB_CONFIGS = [
    ("bert-base-uncased", True),
    ("bert-base-cased", False),
    ("bert-base-multilingual-cased", False),
    ("bert-base-chinese", False),
]
VOCAB_LOWERCASE = dict(VOCAB_CONFIGS)

# The special tokens HF's BertWordPieceTokenizer registers when present in the vocabulary.
BERT_SPECIAL_TOKENS = ("[UNK]", "[SEP]", "[CLS]", "[PAD]", "[MASK]")


def _find_data() -> Path | None:
    env = os.environ.get("DASKWP_SHARED_DATA")
    if env == "bundled":  # run on the bundled set even where the shared data exists
        return None
    candidates = [Path(env)] if env else []
    candidates += [REPO_ROOT.parent / "shared" / "data", REPO_ROOT / "shared" / "data"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    return None


BUNDLED_DATA = TESTS_DIR / "data"
_SHARED_DATA: Path | None = _find_data()
#: The data the suite runs on: the shared set, else the bundled one (never None).
DATA: Path = _SHARED_DATA if _SHARED_DATA is not None else BUNDLED_DATA
DATA_IS_BUNDLED = _SHARED_DATA is None
DATA_SKIP_REASON = (
    "not in the bundled test set (tests/data); the full shared data has it: set "
    "DASKWP_SHARED_DATA, or provide <repo>/../shared/data or <repo>/shared/data"
)
if DATA_IS_BUNDLED:
    VOCAB_CONFIGS = [(n, lc) for n, lc in VOCAB_CONFIGS
                     if (DATA / "vocab" / n / "vocab.txt").is_file()]

#: Marker for tests (or modules: ``pytestmark = requires_data``) that need ``DATA`` (the
#: shared or the bundled set: always there).
requires_data = pytest.mark.skipif(False, reason="the test data is always there")
#: Marker for tests that need the full shared data (peer test data, every vocabulary).
requires_full_data = pytest.mark.skipif(DATA_IS_BUNDLED, reason=DATA_SKIP_REASON)


#: The corpora a corpus-parametrized table keeps in the fast tier (``pytest -m "not slow"``):
#: the naughty strings, one script without spaces and one machine log. The full suite runs
#: every corpus.
FAST_CORPORA = ("edge/blns.txt", "multi/ja.txt", "logs/Apache_2k.log")


def slow_unless(values, fast, ids=None) -> list:
    """``pytest.param`` for each of ``values``, marked ``slow`` unless its id is in ``fast``:
    the fast tier runs the ``fast`` ones, the full suite all of them. ``ids`` (a function of
    the value, default ``str``) names each."""
    ids = ids or str
    fast = set(fast)
    out = []
    for value in values:
        name = ids(value)
        out.append(pytest.param(value, id=name, marks=() if name in fast else pytest.mark.slow))
    return out


def data_file(rel) -> Path:
    """``DATA / rel``; with the bundled set, a file it does not have skips the test."""
    path = DATA / rel
    if DATA_IS_BUNDLED and not path.exists():
        pytest.skip(f"{rel}: {DATA_SKIP_REASON}")
    return path


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers",
                            "slow: the full suite only (pytest -m \"not slow\" skips it)")


@functools.lru_cache(maxsize=None)
def gpu_skip_reason() -> str | None:
    """None when CuPy and a CUDA device are usable, else why not."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a broken CUDA install
        return f"CuPy not importable ({type(e).__name__}: {e})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as e:
        return f"no usable CUDA device ({type(e).__name__}: {e})"
    return None


def pytest_runtest_setup(item):
    """Tests marked ``gpu`` skip, with the reason, where CuPy or a device is missing."""
    if item.get_closest_marker("gpu") is not None and gpu_skip_reason() is not None:
        pytest.skip(gpu_skip_reason())


# ---------------------------------------------------------------------------------------
# Backends: the one harness of every backend-parametrized test (docs/design.md §8.3)
# ---------------------------------------------------------------------------------------
#: Every backend, as a test parameter (and test id):
#:
#: * ``cpu``: the native extension, through the front (``WordPieceTokenizer(device="cpu")``);
#: * ``emulated-cuda``: the CUDA kernel file compiled by the host C++ compiler, launched by
#:   the real ``daskwp.backends.cuda`` with a NumPy stand-in for CuPy
#:   (``daskwp/testing/emulated_cuda.py``), through the front with ``device="gpu"``; skips
#:   without a C++ compiler;
#: * ``reference``: the pure-Python tokenizer (``daskwp.backends.reference``); encode only;
#: * ``gpu``: the same launcher on a real device with CuPy (marker ``gpu``: skips, with the
#:   reason, without CuPy or a device).
BACKEND_NAMES = ("cpu", "emulated-cuda", "reference", "gpu")


def _backend_param(name: str):
    from daskwp.testing.emulated_cuda import cxx

    if name == "emulated-cuda":
        return pytest.param(name, marks=pytest.mark.skipif(cxx() is None,
                                                           reason="no C++ compiler"))
    if name == "gpu":
        return pytest.param(name, marks=pytest.mark.gpu)
    return pytest.param(name)


def backend_params(fast=BACKEND_NAMES) -> list:
    """The parameters of ``any_backend`` (every backend, with its skip marks), those not in
    ``fast`` marked slow. A test narrows the fast tier with
    ``@pytest.mark.parametrize("any_backend", backend_params(fast={"cpu"}), indirect=True)``."""
    out = []
    for name in BACKEND_NAMES:
        marks = list(_backend_param(name).marks)
        if name not in fast:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@functools.lru_cache(maxsize=None)
def _routed(tok, device: str):
    """``tok``'s vocabulary and settings on ``device`` (the front dispatches by it)."""
    import daskwp

    return daskwp.WordPieceTokenizer(tok.vocab, device=device, **tok.settings)


@functools.lru_cache(maxsize=16)
def _reference_vocab(vocab) -> dict:
    return {t: vocab.token_to_id(t) for t in set(vocab.tokens)}


def windows_dict(bw) -> dict:
    """A :class:`BatchWindows` as host arrays (ragged rows as values + ``.offsets``)."""
    from daskwp.core.ragged import RaggedRows, to_host

    out = {}
    for key in ("input_ids", "attention_mask", "metadata"):
        v = bw[key]
        if isinstance(v, RaggedRows):
            out[key] = to_host(v.values)
            out[key + ".offsets"] = to_host(v.offsets)
        else:
            out[key] = to_host(v)
    out["doc_row_offsets"] = to_host(bw.doc_row_offsets)
    return out


class Backend:
    """One backend as the tests drive it.

    ``name`` (one of ``BACKEND_NAMES``), ``device`` (the ``WordPieceTokenizer`` device that
    reaches it), ``xp`` (its array module: NumPy, the CuPy stand-in, or CuPy);
    ``route(tok)``: the tokenizer whose ``encode`` / ``__call__`` run on this backend;
    ``make(vocab, **settings)``: a tokenizer built for it; ``encode(tok, texts)``: ids of
    every document (no special tokens), as lists; ``windows(tok, texts, **opts)``:
    ``tok(texts, **opts)`` as a dict of NumPy arrays; ``fill(token_ids, offsets, *args)``:
    its native window fill on raw arrays (the arguments of ``_ext.build_windows``), as host
    arrays; ``to_device(a)`` / ``host(a)``: an array onto / back from its memory.
    """

    name: str
    device: str
    has_windows = True

    def __init__(self, xp=np):
        self.xp = xp

    def route(self, tok):
        return _routed(tok, self.device)

    def make(self, vocab, **settings):
        import daskwp

        return daskwp.WordPieceTokenizer(vocab, device=self.device, **settings)

    def encode(self, tok, texts) -> list:
        return self.route(tok).encode(texts).to_list()

    def windows(self, tok, texts, **opts) -> dict:
        opts.setdefault("return_tensors", "np")
        return windows_dict(self.route(tok)(texts, **opts))

    def to_device(self, a):
        return self.xp.asarray(a)

    def host(self, a):
        from daskwp.core.ragged import to_host

        return None if a is None else to_host(a)

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


class CPUBackend(Backend):
    name, device = "cpu", "cpu"

    def fill(self, token_ids, offsets, *args):
        from daskwp import _ext

        return tuple(_ext.build_windows(token_ids, offsets, *args))


class CUDABackend(Backend):
    """The CUDA launcher, emulated (``xp`` the NumPy stand-in) or on a device (CuPy)."""

    device = "gpu"

    def __init__(self, name, xp):
        super().__init__(xp)
        self.name = name

    def fill(self, token_ids, offsets, *args):
        from daskwp.backends import cuda

        out = cuda.build_windows_cuda(self.xp.asarray(token_ids), self.xp.asarray(offsets),
                                      *args)
        return tuple(self.host(a) for a in out)


class ReferenceBackend(Backend):
    """The pure-Python reference (``reference_encode``, one document at a time).

    It reads the vocabulary and settings of ``tok`` and the input as the other backends do:
    through ``core.strings.to_arrow`` (so the input types and their errors are the same),
    then each value as Python: None is an empty document, bytes decode with
    ``errors="replace"`` (lone surrogates reach it as their surrogate-pass bytes, as they
    reach the kernels). **It has no window fill**: ``windows`` and ``fill`` skip, so windows
    are compared on cpu, emulated-cuda and gpu only.
    """

    name, device = "reference", "cpu"
    has_windows = False

    def route(self, tok):
        return tok

    def encode(self, tok, texts) -> list:
        from daskwp.backends.reference import reference_encode
        from daskwp.core.strings import to_arrow

        vocab = _reference_vocab(tok.vocab)
        kw = dict(tok.settings, unk_token=tok.vocab.unk_token,
                  special_tokens=tok.vocab.special_tokens,
                  continuing_subword_prefix=tok.vocab.continuing_subword_prefix)
        out = []
        for chunk in to_arrow(texts).chunks:
            for value in chunk.to_pylist():
                if value is None:
                    out.append([])
                    continue
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "replace")
                out.append(reference_encode(value, vocab, **kw))
        return out

    def windows(self, tok, texts, **opts):
        pytest.skip("the reference backend has no window fill (windows: cpu, emulated-cuda, gpu)")

    def fill(self, token_ids, offsets, *args):
        pytest.skip("the reference backend has no window fill (windows: cpu, emulated-cuda, gpu)")


def open_backend(name: str, monkeypatch):
    """A generator fixture's body: yields the :class:`Backend` called ``name``. For the CUDA
    ones, the launcher's caches are cleared before and after, and ``emulated-cuda`` routes
    the launcher to the CuPy stand-in for the test (``monkeypatch``)."""
    if name == "cpu":
        yield CPUBackend()
        return
    if name == "reference":
        yield ReferenceBackend()
        return
    from daskwp.backends import cuda

    if name == "emulated-cuda":
        from daskwp.testing.emulated_cuda import cxx, fake_cupy, use_fake_cupy

        if cxx() is None:
            pytest.skip("no C++ compiler")
        xp = fake_cupy()
        use_fake_cupy(xp, monkeypatch)
    elif name == "gpu":   # marker gpu: pytest_runtest_setup skipped it without CuPy
        import cupy as xp

        cuda.clear_caches()
    else:
        raise ValueError(f"backend {name!r}: expected one of {BACKEND_NAMES}")
    try:
        yield CUDABackend(name, xp)
    finally:
        cuda.clear_caches()


@pytest.fixture(params=backend_params())
def any_backend(request, monkeypatch):
    """Each backend present (``BACKEND_NAMES``), one test each."""
    yield from open_backend(request.param, monkeypatch)


@pytest.fixture(params=[_backend_param(n) for n in ("emulated-cuda", "gpu")])
def cuda_backend(request, monkeypatch):
    """The CUDA launcher and kernel file: emulated on the host, and on a real device
    (marker ``gpu``)."""
    yield from open_backend(request.param, monkeypatch)


@pytest.fixture
def emulated_cuda(monkeypatch):
    """The CUDA launcher with the emulated kernels (skips without a C++ compiler)."""
    yield from open_backend("emulated-cuda", monkeypatch)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data folder (shared, or the bundled set)."""
    return DATA


def cache_root() -> Path:
    """Where tests keep what they fetch from the package registry at test time (transformers'
    sdist, the transformers 4.x oracle): ``DASKWP_TEST_CACHE``, default
    ``~/.cache/daskwp-tests``."""
    root = os.environ.get("DASKWP_TEST_CACHE") or \
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "daskwp-tests"
    return Path(root)


def vocab_path(vocab_name: str) -> Path:
    """``DATA/vocab/<vocab_name>/vocab.txt`` (skips a vocabulary the bundled set lacks)."""
    return data_file(Path("vocab") / vocab_name / "vocab.txt")


def _bundled_guard(path) -> Path:
    path = Path(path)
    if DATA_IS_BUNDLED and not path.exists():
        try:
            rel = path.resolve().relative_to(DATA.resolve())
        except ValueError:
            return path
        pytest.skip(f"{rel}: {DATA_SKIP_REASON}")
    return path


def read_lines(path) -> list[str]:
    """Lines of a UTF-8 corpus file, split on ``"\\n"`` only; the final empty piece is dropped."""
    text = _bundled_guard(path).read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def corpus_files() -> list[Path]:
    """Every corpus file under ``DATA/corpus`` (recursive): *.txt, *.log and *.json,
    excluding licence notices."""
    root = DATA / "corpus"
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in (".txt", ".log", ".json")
        and not p.name.upper().startswith("LICENSE")
    )


def read_documents(path) -> list[str]:
    """Documents of a corpus file: a JSON array of strings for *.json, else one per line."""
    path = _bundled_guard(path)
    if path.suffix == ".json":
        import json

        docs = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(docs, list) and all(isinstance(d, str) for d in docs), path
        return docs
    return read_lines(path)


def every_corpus_line() -> list[str]:
    """Every line of every shared text and log corpus (the JSON arrays hold the same edge
    strings as blns.txt), then the edge cases of docs/design.md §2.4."""
    docs = []
    for p in corpus_files():
        if p.suffix != ".json":
            docs += read_documents(p)
    return docs + ["", "word " * 300, "[PAD] [PAD] x"]


@functools.lru_cache(maxsize=None)
def hf_tokenizer(vocab_name: str):
    """HF ``BertWordPieceTokenizer`` for a shared vocabulary, with that vocabulary's lowercase flag."""
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(str(vocab_path(vocab_name)), lowercase=VOCAB_LOWERCASE[vocab_name])


def hf_from_tokens(
    tokens,
    *,
    lowercase=True,
    strip_accents=None,
    clean_text=True,
    handle_chinese_chars=True,
    max_input_chars_per_word=100,
):
    """The BertWordPieceTokenizer pipeline on a tiny vocabulary (a list, id = index, or a dict).

    Built by hand rather than through ``BertWordPieceTokenizer`` so that vocabularies without
    [CLS]/[SEP] and a non-default ``max_input_chars_per_word`` work too. Like
    BertWordPieceTokenizer, it registers [UNK] [SEP] [CLS] [PAD] [MASK] as special tokens when
    they are in the vocabulary.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = dict(tokens) if isinstance(tokens, dict) else {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(
        models.WordPiece(
            vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=max_input_chars_per_word
        )
    )
    for special in BERT_SPECIAL_TOKENS:
        if special in vocab:
            tok.add_special_tokens([special])
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=clean_text,
        handle_chinese_chars=handle_chinese_chars,
        strip_accents=strip_accents,
        lowercase=lowercase,
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def hf_encode(hf, texts) -> list[list[int]]:
    """HF ids without special tokens; ``None`` is encoded as the empty string."""
    texts = ["" if t is None else t for t in texts]
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def describe_mismatches(texts, got, expected, id_to_token, limit=5) -> str:
    """A readable report of the lines whose ids differ: count, then the first ``limit``."""
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    if len(got) != len(expected):
        return f"document count differs: got {len(got)}, expected {len(expected)}"
    if not bad:
        return ""
    out = [f"{len(bad)} of {len(texts)} documents differ; first {min(limit, len(bad))}:"]
    for i in bad[:limit]:
        g, e = list(got[i]), list(expected[i])
        k = next((j for j in range(min(len(g), len(e))) if g[j] != e[j]), min(len(g), len(e)))
        lo = max(0, k - 8)
        gw, ew = g[lo : k + 16], e[lo : k + 16]
        text = texts[i]
        shown = text if text is None or len(text) <= 400 else text[:400] + f"... ({len(text)} chars)"
        out.append(f"  [{i}] text={shown!r}")
        out.append(
            f"       got {len(g)} tokens, expected {len(e)}; first difference at token {k}"
            + (f" (showing tokens {lo}..)" if lo or len(g) > k + 16 or len(e) > k + 16 else "")
        )
        out.append(f"       got      ids={gw}")
        out.append(f"       expected ids={ew}")
        out.append(f"       got      tokens={[id_to_token(t) for t in gw]}")
        out.append(f"       expected tokens={[id_to_token(t) for t in ew]}")
    return "\n".join(out)


def run_killing_the_job(cmd, ready, cwd, timeout: float = 120) -> None:
    """Starts the job ``cmd`` (a subprocess) and SIGKILLs it once ``ready()`` is true
    (polled every 5 ms, at most ``timeout`` s); asserts that it was still running."""
    import subprocess
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.005)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert killed, "the job finished before it could be killed"


def rerun_after_killing_the_job(cmd, out: Path, cwd, parts: int = 3) -> dict:
    """Kills the job ``cmd`` (writing to ``out``) once ``parts`` part records are there
    (:func:`run_killing_the_job`), then reruns it with ``--json``; asserts that the rerun
    succeeds, skips at least ``parts`` partitions and writes the rest, leaves every part
    complete before it untouched (same mtime) and no temporary file. Returns the rerun's
    summary."""
    import json
    import subprocess
    run_killing_the_job(cmd, lambda: len(list(out.glob("part-*.json"))) >= parts, cwd)
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")
            if (out / (p.name.split(".")[0] + ".json")).exists()}
    rerun = subprocess.run(cmd + ["--json"], cwd=cwd, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["partitions_skipped"] >= parts and summary["partitions_written"] > 0
    assert all((out / n).stat().st_mtime_ns == t for n, t in kept.items())
    assert not list(out.glob(".tmp*"))
    return summary


def run_killing_a_worker(cluster, fn, ready, timeout: float = 120, settle: float = 0.0,
                         poll: float = 0.005):
    """Runs ``fn()`` in a thread; once ``ready()`` is true (polled every ``poll`` s, at most
    ``timeout`` s)
    and ``settle`` s more, SIGKILLs the first worker's process if ``fn`` still runs. Asserts
    that ``fn`` then finishes (within 240 s) without raising; returns ``(its result, whether
    a worker was killed)``."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - asserted below
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and t.is_alive() and not ready():
        time.sleep(poll)
    time.sleep(settle)
    nanny = next(iter(cluster.workers.values()))
    pid = nanny.process.pid if nanny.process is not None else None
    killed = pid is not None and t.is_alive()
    if killed:
        os.kill(pid, signal.SIGKILL)
    t.join(timeout=240)
    assert not t.is_alive(), "the job did not finish after a worker was killed"
    assert "error" not in box, box.get("error")
    return box.get("value"), killed
