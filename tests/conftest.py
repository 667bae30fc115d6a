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
    config.addinivalue_line("markers", "slow: the full suite only (pytest -m \"not slow\" skips it)")


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


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data folder (shared, or the bundled set)."""
    return DATA


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
