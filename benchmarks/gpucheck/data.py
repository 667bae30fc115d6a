"""The check's inputs: where the data is, the corpora and the vocabulary each is tokenized
with, and Arrow inputs of a chosen size (tiled from the corpora without a Python string
per document, or one huge document).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
from _common import find_data as common_find_data


REPO = Path(__file__).resolve().parents[2]
MB = 1e6


GB = 1e9


# corpus stem or folder -> (vocabulary folder, lowercase): the vocabulary a corpus is
# "naturally" tokenized with (HF parity, per-corpus throughput).
VOCAB_FOR = {"zh": ("bert-base-chinese", False), "multi": ("bert-base-multilingual-cased", False),
             "edge": ("bert-base-multilingual-cased", False)}


DEFAULT_VOCAB = ("bert-base-uncased", True)


VOCAB_CONFIGS = [("bert-base-uncased", True), ("bert-base-cased", False),
                 ("bert-base-multilingual-cased", False), ("bert-base-chinese", False)]


def log(*a):
    print(*a, flush=True)


def find_data(arg: str | None) -> Path:
    """The data folder (``_common.find_data``; ``.gpudata``, where gpu_check.sh unpacks it,
    after ``DASKWP_SHARED_DATA``)."""
    return common_find_data(arg, ("corpus", "vocab"), extra=(REPO / ".gpudata",))


def read_documents(path: Path) -> list[str]:
    """One document per line (split on "\\n" only), or a JSON array of strings."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def corpora(data: Path) -> list[Path]:
    return sorted(p for p in (data / "corpus").rglob("*")
                  if p.is_file() and p.suffix in (".txt", ".log", ".json")
                  and not p.name.upper().startswith("LICENSE"))


def vocab_for(path: Path) -> tuple[str, bool]:
    if path.stem in VOCAB_FOR:
        return VOCAB_FOR[path.stem]
    for part in path.parts:
        if part in VOCAB_FOR:
            return VOCAB_FOR[part]
    return DEFAULT_VOCAB


def nbytes(docs) -> int:
    return sum(len(d.encode("utf-8")) for d in docs if d is not None)


def subsample(docs: list[str], max_bytes: int) -> list[str]:
    """At most about max_bytes of documents spread over the whole list (every k-th),
    keeping the longest document too (long documents exercise chunking)."""
    total = nbytes(docs)
    if max_bytes <= 0 or total <= max_bytes:
        return docs
    k = max(1, int(total / max_bytes + 0.999))
    out = docs[::k]
    longest = max(docs, key=len)
    if len(longest.encode()) <= max_bytes // 2 and longest not in out:
        out.append(longest)
    return out


def large_string(docs) -> pa.Array:
    return pa.array(docs, type=pa.large_string())


def tiled(base: pa.Array, mb: float) -> pa.Array:
    """``base`` (a large_string array without nulls) repeated to at least ``mb`` MB, built
    from its buffers with NumPy (no Python string per document)."""
    base = base.cast(pa.large_string())
    off = np.frombuffer(base.buffers()[1], dtype=np.int64)[base.offset:base.offset + len(base) + 1]
    data = np.frombuffer(base.buffers()[2], dtype=np.uint8)[off[0]:off[-1]]
    off = off - off[0]
    size = int(off[-1])
    if mb * MB < size:   # a prefix of the documents is enough
        return base.slice(0, max(1, int(np.searchsorted(off, mb * MB, side="left"))))
    reps = max(1, int(np.ceil(mb * MB / max(size, 1))))
    n = len(base)
    offsets = np.empty(n * reps + 1, dtype=np.int64)
    offsets[0] = 0
    body = off[1:]
    for r in range(reps):
        offsets[1 + r * n:1 + (r + 1) * n] = body + r * size
    return pa.LargeStringArray.from_buffers(n * reps, pa.py_buffer(offsets),
                                            pa.py_buffer(np.tile(data, reps)))


def one_document(base: pa.Array, mb: float) -> pa.Array:
    """One document of about ``mb`` MB: the base documents joined by spaces, repeated."""
    text = " ".join(s for s in tiled(base, mb).to_pylist() if s)
    reps = max(1, int(np.ceil(mb * MB / max(len(text.encode()), 1))))
    return large_string([" ".join([text] * reps)])


def arrow_nbytes(arr: pa.Array) -> int:
    arr = arr.cast(pa.large_string())
    off = np.frombuffer(arr.buffers()[1], dtype=np.int64)
    return int(off[arr.offset + len(arr)] - off[arr.offset])
