"""The CUDA kernels (``daskwp/kernels/wordpiece.cu``) and their launcher (``daskwp/backends/cuda.py``).

Four groups:

* **compile**: every ``.cu`` of ``daskwp/kernels`` compiles with ``nvcc`` for sm_80 and sm_90
  with no warning at all (skipped only when ``nvcc`` is not on PATH); the NVRTC source and
  options that CuPy is given compile through NVRTC with an empty log (where an NVRTC library
  is found: CuPy's, the toolkit's, or ``DASKWP_NVRTC_LIBRARY``).
* **one core**: the CPU extension and the kernels include the same core and window headers,
  and no other file re-implements them.
* **emulated**: the kernel file compiled by the host C++ compiler with a small shim (grids,
  blocks, ``__syncthreads`` as a real barrier between OS threads) and launched through
  ``daskwp.backends.cuda`` with a NumPy stand-in for CuPy. This runs the real launcher and the real
  kernel code paths (chunking, count / scan / write, windows) on any machine with ``c++``.
* **gpu** (marker ``gpu``; skipped without CuPy and a CUDA device): the same checks on the
  device, plus device-only ones (DLPack, device caches, device input buffers).

The emulated and GPU backends share one harness: ids, offsets, windows, masks and metadata
must equal the CPU extension's on every corpus and vocabulary of the shared data.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import daskwp
from daskwp.backends import cuda
from conftest import VOCAB_CONFIGS, corpus_files, read_documents, slow_unless, vocab_path

KERNELS = Path(daskwp.__file__).resolve().parent / "kernels"
CU_FILES = sorted(KERNELS.glob("*.cu"))
LOWERCASE = dict(VOCAB_CONFIGS)


# ---------------------------------------------------------------------------------------
# GPU tests: the gpu marker skips them where CuPy or a device is missing (conftest)
# ---------------------------------------------------------------------------------------
requires_gpu = [pytest.mark.gpu]


# ---------------------------------------------------------------------------------------
# Compile checks
# ---------------------------------------------------------------------------------------
def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    return found


def test_kernel_sources_exist():
    assert CU_FILES, "no .cu file in daskwp/kernels"


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("cu", CU_FILES, ids=[p.name for p in CU_FILES])
@pytest.mark.slow   # nvcc: 25 s
def test_nvcc_compiles_without_warnings(cu, tmp_path):
    cmd = [_nvcc(), "-std=c++17", f"-I{KERNELS}",
           "-gencode", "arch=compute_80,code=sm_80",
           "-gencode", "arch=compute_90,code=sm_90",
           "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra", "--threads", "2",
           "-c", str(cu), "-o", str(tmp_path / (cu.stem + ".o"))]
    # The core is large once inlined: minutes on a small, busy machine.
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip() == "" and r.stderr.strip() == "", \
        f"nvcc printed something for {cu.name}:\n{r.stdout}\n{r.stderr}"


def _nvrtc_library() -> str | None:
    env = os.environ.get("DASKWP_NVRTC_LIBRARY")
    if env:
        return env
    candidates = []
    for base in sys.path:
        candidates += glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*"))
        candidates += glob.glob(os.path.join(base, "nvidia", "cu*", "lib", "libnvrtc.so*"))
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            candidates += glob.glob(os.path.join(root, "lib64", "libnvrtc.so*"))
            candidates += glob.glob(os.path.join(root, "targets", "*", "lib", "libnvrtc.so*"))
    candidates = [c for c in candidates if "builtins" not in c and ".alt." not in c]
    if candidates:
        return sorted(candidates)[0]
    return ctypes.util.find_library("nvrtc")


@pytest.mark.skipif(_nvrtc_library() is None,
                    reason="no NVRTC library (set DASKWP_NVRTC_LIBRARY to one)")
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_nvrtc_compiles_cupy_source_without_warnings(arch):
    """What CuPy compiles at run time (kernel_source()) compiles through NVRTC, empty log."""
    lib = ctypes.CDLL(_nvrtc_library())
    code, options = cuda.kernel_source()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"wordpiece.cu", 0,
                                None, None)
    assert rc == 0, f"nvrtcCreateProgram returned {rc}"
    try:
        opts = [o.encode() for o in options] + [f"--gpu-architecture={arch}".encode()]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        text = log.value.decode(errors="replace").strip()
        assert rc == 0, f"NVRTC failed ({rc}):\n{text}"
        assert text == "", f"NVRTC log is not empty:\n{text}"
        ptx_size = ctypes.c_size_t()
        lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx_size))
        ptx = ctypes.create_string_buffer(ptx_size.value)
        lib.nvrtcGetPTX(prog, ptx)
        for name in ("dwp_chunk_tokenize", "dwp_chunk_starts", "dwp_window_fill_mask32"):
            assert f".entry {name}(".encode() in ptx.raw, name
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def test_kernel_source_digest_covers_headers():
    code, options = cuda.kernel_source()
    assert f"-I{KERNELS}" in options and "-std=c++17" in options
    h = hashlib.sha256()
    for p in sorted(KERNELS.iterdir()):
        if p.suffix in (".cu", ".cuh", ".hpp"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    assert code.splitlines()[0].endswith(h.hexdigest())


# ---------------------------------------------------------------------------------------
# One core: the CPU build and the kernels include the same headers
# ---------------------------------------------------------------------------------------
def _includes(path: Path) -> list[str]:
    return re.findall(r'^\s*#\s*include\s*"([^"]+)"', path.read_text(), flags=re.M)


def _closure(path: Path) -> set[str]:
    """Every local header reachable from path through #include "..."."""
    seen, todo = set(), [path]
    while todo:
        for inc in _includes(todo.pop()):
            if inc not in seen and (KERNELS / inc).is_file():
                seen.add(inc)
                todo.append(KERNELS / inc)
    return seen


def test_cpu_and_gpu_include_the_same_core():
    assert [p.name for p in CU_FILES] == ["wordpiece.cu"]
    cpu_core = _closure(KERNELS / "cpu_batch.cpp")
    cpu_windows = _closure(KERNELS / "windows_cpu.cpp")
    gpu = _closure(KERNELS / "wordpiece.cu")
    assert "wordpiece_core.hpp" in cpu_core and "wordpiece_core.hpp" in gpu
    assert "windows.hpp" in cpu_windows and "windows.hpp" in gpu
    # The kernels pull in nothing host-only (no extension, builder or STL headers).
    assert gpu <= {"wordpiece_core.hpp", "windows.hpp", "model.hpp", "common.hpp"}, gpu
    assert not re.search(r"#\s*include\s*<", (KERNELS / "wordpiece.cu").read_text())


# Definitions of the algorithm: each must exist exactly once, in its header.
_DEFINITIONS = {
    r"\bstruct\s+WordPieceE2E\b": "wordpiece_core.hpp",
    r"\bdecode_utf8\s*\([^;{]*\)\s*\{": "wordpiece_core.hpp",
    r"\btrie_child\s*\([^;{]*\)\s*\{": "wordpiece_core.hpp",
    r"\btokenize_document\s*\([^;{]*\)\s*\{": "wordpiece_core.hpp",
    r"\bwindow_count\s*\([^;{]*\)\s*\{": "windows.hpp",
    r"\bwindow_row\s*\([^;{]*\)\s*\{": "windows.hpp",
    r"\bfill_window_row\s*\([^;{]*\)\s*\{": "windows.hpp",
}


def test_no_second_implementation():
    sources = [p for p in KERNELS.iterdir() if p.suffix in (".cu", ".cuh", ".hpp", ".cpp", ".h")]
    for pattern, home in _DEFINITIONS.items():
        where = [p.name for p in sources if re.search(pattern, p.read_text())]
        assert where == [home], f"{pattern} defined in {where}, expected only in {home}"
    cu = (KERNELS / "wordpiece.cu").read_text()
    # The kernels call the shared entry points.
    for name in ("tokenize_document(sh.ctx", "init_context(", "fill_window_row<", "window_count(", "window_tokens(",
                 "make_window_params(", "find_document("):
        assert name in cu, name


def test_module_imports_without_cupy():
    """daskwp.backends.cuda never imports CuPy at import time (CPU-only machines import it freely)."""
    code = ("import sys, daskwp.backends.cuda as c; assert 'cupy' not in sys.modules; "
            "assert c.is_device_input(c.DeviceStrings(None, None)); "
            "assert not c.is_device_input(['a']) and not c.is_device_input('a')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=str(KERNELS.parent.parent), timeout=120)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------------
# Backends: tests/conftest.py's ``cuda_backend`` (emulated-cuda: the kernel file on the host,
# CuPy replaced by NumPy, daskwp/testing/emulated_cuda.py; gpu: a real device)
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def tokenizer(vocab_name: str) -> daskwp.WordPieceTokenizer:
    return daskwp.WordPieceTokenizer(str(vocab_path(vocab_name)),
                                     lowercase=LOWERCASE[vocab_name])


@functools.lru_cache(maxsize=None)
def corpus_docs(path: Path) -> list[str]:
    return read_documents(path)


def assert_encoding_equal(bk, got, expected, what: str):
    ids, off = got
    assert ids.dtype == np.int32 and off.dtype == np.int64, (ids.dtype, off.dtype)
    e_ids, e_off = expected.token_ids, expected.offsets
    g_ids, g_off = bk.host(ids), bk.host(off)
    assert g_off.shape == e_off.shape, f"{what}: {g_off.shape} offsets, expected {e_off.shape}"
    if not (np.array_equal(g_off, e_off) and np.array_equal(g_ids, e_ids)):
        bad = np.flatnonzero(g_off != e_off)
        d = int(bad[0]) - 1 if bad.size else -1
        if d < 0:
            for d in range(len(e_off) - 1):
                if not np.array_equal(g_ids[g_off[d]:g_off[d + 1]],
                                      e_ids[e_off[d]:e_off[d + 1]]):
                    break
        pytest.fail(f"{what}: first differing document {d}: "
                    f"got {g_ids[g_off[d]:g_off[d + 1]].tolist()[:40]} "
                    f"expected {e_ids[e_off[d]:e_off[d + 1]].tolist()[:40]}")


CORPORA = corpus_files()
VOCABS = [name for name, _ in VOCAB_CONFIGS]


def _need_data():
    if not CORPORA:
        pytest.skip("shared data not found (DASKWP_SHARED_DATA, <repo>/../shared/data)")


# ---------------------------------------------------------------------------------------
# Parity: every corpus x vocabulary
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab_name",
                         slow_unless(VOCABS, fast={"bert-base-uncased", "bert-base-chinese"}))
def test_encode_matches_cpu_on_every_corpus(cuda_backend, vocab_name):
    _need_data()
    tok = tokenizer(vocab_name)
    for path in CORPORA:
        docs = corpus_docs(path)
        assert_encoding_equal(cuda_backend, cuda.encode_cuda(tok, docs), tok.encode(docs),
                              f"{vocab_name} / {path.name}")


@pytest.mark.parametrize("chunk_bytes", [1, 3, 16, 100])
def test_chunking_does_not_change_ids(cuda_backend, chunk_bytes):
    """Tiny chunks cut documents at (nearly) every boundary byte: the ids must not move."""
    _need_data()
    tok = tokenizer("bert-base-uncased")
    docs = []
    for path in CORPORA:
        d = corpus_docs(path)
        docs += d[:: max(1, len(d) // 60)]
    expected = tok.encode(docs)
    assert_encoding_equal(cuda_backend, cuda.encode_cuda(tok, docs, chunk_bytes=chunk_bytes),
                          expected, f"chunk_bytes={chunk_bytes}")


@pytest.mark.parametrize("vocab_name", ["bert-base-multilingual-cased", "bert-base-chinese"])
def test_one_huge_document_is_split(cuda_backend, vocab_name):
    """A whole corpus as one document (and a run with no boundary byte at all)."""
    _need_data()
    tok = tokenizer(vocab_name)
    big = " ".join(corpus_docs(CORPORA[0])[:3000]) + "\n".join(
        d for p in CORPORA if "multi" in p.parts for d in corpus_docs(p)[:200])
    texts = [big, "x" * 5000 + "é" * 700, "", "a", big[:100_000]]
    assert_encoding_equal(cuda_backend, cuda.encode_cuda(tok, texts, chunk_bytes=64),
                          tok.encode(texts), "huge documents")


EDGE_TEXTS = [
    "", " ", "\t\n", "[CLS]", "a[CLS]b [SEP][SEP] [MASK].", "[CL S] [cls] [UNK]x",
    "Hello, world! ünïcödé — 你好世界 ﬃ İstanbul", "x" * 250, ("ab " * 2000).strip(),
    "a\u0000b\u200bc\ufffdd", "\u3000\u00a0\u2028end", "....,,,;;;", "e\u0301\u0301",
]


def test_edge_cases_and_invalid_utf8(cuda_backend):
    tok = daskwp.WordPieceTokenizer()
    texts = EDGE_TEXTS + [b"\xff\xfe abc \xc3", b"\xe2\x82 \xe2\x82\xac\xf0\x9f\x98", None]
    for cb in (None, 1, 5):
        assert_encoding_equal(cuda_backend, cuda.encode_cuda(tok, texts, chunk_bytes=cb),
                              tok.encode(texts), f"edge cases, chunk_bytes={cb}")


def test_nulls_slices_and_int32_offsets(cuda_backend):
    tok = daskwp.WordPieceTokenizer()
    base = ["first doc", None, "second, doc!", "", None, "third [SEP] doc x"] * 7
    arr = pa.array(base, type=pa.string())
    for a in (arr, arr.slice(3, 20), pa.chunked_array([arr.slice(0, 5), arr.slice(5)]),
              arr.cast(pa.large_string())):
        assert_encoding_equal(cuda_backend, cuda.encode_cuda(tok, a), tok.encode(a),
                              f"arrow input {a.type}")


def test_device_buffers_are_read_in_place(cuda_backend):
    """DeviceStrings: absolute offsets into a larger buffer, int32, with a validity bitmap."""
    tok = daskwp.WordPieceTokenizer()
    texts = ["zero", "one two", "three", "four five six", "seven"]
    raw = "".join(texts).encode()
    pad = b"##garbage##"
    data = np.frombuffer(pad + raw + pad, dtype=np.uint8)
    lens = np.array([len(t.encode()) for t in texts])
    offsets = (np.concatenate([[0], np.cumsum(lens)]) + len(pad)).astype(np.int32)
    validity = np.array([0b11101], dtype=np.uint8)   # document 1 is null
    s = cuda.DeviceStrings(cuda_backend.to_device(offsets), cuda_backend.to_device(data),
                           cuda_backend.to_device(validity), 0)
    expected = tok.encode(["zero", None, "three", "four five six", "seven"])
    assert_encoding_equal(cuda_backend, cuda.encode_cuda(tok, s), expected, "device buffers")
    s2 = cuda.DeviceStrings(cuda_backend.to_device(offsets[2:]), cuda_backend.to_device(data),
                            cuda_backend.to_device(np.array([0b00011100], np.uint8)), 2)
    assert_encoding_equal(cuda_backend, cuda.encode_cuda(tok, s2), tok.encode(texts[2:]),
                          "validity offset")


def test_bad_offsets_are_refused(cuda_backend):
    tok = daskwp.WordPieceTokenizer()
    data = cuda_backend.to_device(np.frombuffer(b"abcdef", dtype=np.uint8))
    for off in ([0, 4, 2], [0, 7], [-1, 3]):
        s = cuda.DeviceStrings(cuda_backend.to_device(np.array(off, np.int64)), data)
        with pytest.raises(ValueError, match="offsets"):
            cuda.encode_cuda(tok, s)


def test_boundary_bytes(cuda_backend):
    """Chunks may start at ASCII whitespace and punctuation, never at a byte of a special
    token, a letter, a removed control character or a non-ASCII byte."""
    tok = daskwp.WordPieceTokenizer()
    table = cuda_backend.host(cuda._device_model(tok).boundary)
    starts = {chr(c) for c in range(256) if table[c]}
    assert {" ", "\t", "\n", "\r", ",", ".", "!", "#", "(", "-", "~"} <= starts
    assert not starts & {"[", "]", "a", "Z", "0", "\x00", "\x01", "\x7f"}
    assert all(table[c] == 0 for c in range(128, 256))


def test_chunk_plan(cuda_backend):
    """With chunk_bytes=1 a document is cut before every boundary byte, and dead pieces are
    skipped by the live piece before them."""
    tok = daskwp.WordPieceTokenizer()
    text = "ab cd,[CLS]e  " + "x" * 9
    s = cuda.device_strings([text, None, "", "q r"])
    cp = cuda._cupy()
    mod, model = cuda._module(), cuda._device_model(tok)
    doc_off = cp.ascontiguousarray(s.offsets, dtype=cp.int64)
    n_slots, first, begin, end = cuda._plan_chunks(
        mod, model, doc_off, s.data, s.validity, True, s.validity_offset, 4, 1, cp)
    first, begin, end = (cuda_backend.host(a) for a in (first, begin, end))
    assert first.tolist() == [0, len(text), len(text), len(text), len(text) + 3]
    live = [(int(b), int(e)) for b, e in zip(begin, end) if b >= 0]
    cuts = [0, 2, 5, 12, 13, len(text)]     # before " ", ",", " ", " "; not "[" or "]"
    t0 = len(text)
    assert live == list(zip(cuts[:-1], cuts[1:])) + [(t0, t0 + 1), (t0 + 1, t0 + 3)], live
    assert n_slots == 4 + len(text) + 3 + 1 and (begin[len(text) + 3:] == -1).all()


def test_empty_batch(cuda_backend):
    tok = daskwp.WordPieceTokenizer()
    ids, off = cuda.encode_cuda(tok, [])
    assert cuda_backend.host(ids).shape == (0,) and cuda_backend.host(off).tolist() == [0]


def test_stage_timing_hook_sees_every_stage_and_changes_nothing(cuda_backend):
    """``stage_timing``: every launcher stage runs inside the hook, in order, once per
    launch (with offsets too), the plan is reported, and the ids are the untimed ones.
    Without a hook a stage is the one shared no-op context."""
    import contextlib

    tok = daskwp.WordPieceTokenizer()
    texts = ["Hello, world!", None, "", "ünïcödé " * 40, "a b c"]
    plain_ids, plain_off = (cuda_backend.host(a) for a in cuda.encode_cuda(tok, texts))
    seen = []

    @contextlib.contextmanager
    def hook(name):
        seen.append(("enter", name))
        yield
        seen.append(("exit", name))

    with cuda.stage_timing(hook) as plan:
        ids, off = cuda.encode_cuda(tok, texts, chunk_bytes=16)
    assert seen == [(e, n) for n in cuda.STAGES for e in ("enter", "exit")], seen
    assert cuda.STAGES == ("upload", "checks", "plan", "count", "scan", "write")
    assert np.array_equal(cuda_backend.host(ids), plain_ids)
    assert np.array_equal(cuda_backend.host(off), plain_off)
    assert plan["n_docs"] == 5 and plan["chunk_bytes"] == 16
    assert plan["tokens"] == len(plain_ids) and plan["n_slots"] >= 5 and plan["grid"] >= 1

    seen.clear()
    with cuda.stage_timing(hook):
        cuda.encode_cuda(tok, texts, offsets_unit="chars", word_ids=True)
    assert [n for e, n in seen if e == "enter"] == list(cuda.STAGES)

    seen.clear()
    cuda.encode_cuda(tok, texts)      # the hook is gone after its block
    assert seen == [] and not cuda._stage_hook
    assert cuda._stage("count") is cuda._stage("write") is cuda._NO_STAGE


# ---------------------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------------------
WINDOW_CASES = [
    dict(max_length=16, stride=0, truncation=False, add_special_tokens=True),
    dict(max_length=16, stride=5, truncation=False, add_special_tokens=True),
    dict(max_length=9, stride=6, truncation=False, add_special_tokens=False),
    dict(max_length=128, stride=32, truncation=False, add_special_tokens=True),
    dict(max_length=12, stride=3, truncation=True, add_special_tokens=True),
    dict(max_length=3, stride=0, truncation=False, add_special_tokens=True),
]


def _window_inputs():
    docs = ["", "one", None, "   "] + EDGE_TEXTS
    for path in CORPORA[:3]:
        docs += corpus_docs(path)[:300]
    return docs


@pytest.mark.parametrize("case", WINDOW_CASES, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("padding", [True, False])
@pytest.mark.parametrize("mask_int8", [False, True])
def test_build_windows_matches_cpu(cuda_backend, case, padding, mask_int8):
    from daskwp import _ext

    tok = daskwp.WordPieceTokenizer()
    enc = tok.encode(_window_inputs())
    v = tok.vocab
    args = (case["max_length"], case["stride"], case["truncation"],
            case["add_special_tokens"], v.cls_id, v.sep_id, v.pad_id if padding else -1, 7,
            padding, mask_int8)
    expected = _ext.build_windows(enc.token_ids, enc.offsets, *args)
    got = cuda.build_windows_cuda(cuda_backend.to_device(enc.token_ids),
                                  cuda_backend.to_device(enc.offsets),
                                  *args)
    names = ("input_ids", "attention_mask", "metadata", "row_offsets", "doc_row_offsets")
    for name, g, e in zip(names, got, expected):
        if e is None:
            assert g is None, name
            continue
        g = cuda_backend.host(g)
        assert g.dtype == e.dtype and g.shape == e.shape, (name, g.dtype, e.dtype, g.shape,
                                                            e.shape)
        assert np.array_equal(g, e), name


@pytest.mark.parametrize("padding", ["max_length", "longest", False])
@pytest.mark.parametrize("vocab_name", VOCABS)
def test_windows_match_cpu_on_corpora(cuda_backend, vocab_name, padding):
    _need_data()
    tok = tokenizer(vocab_name)
    docs = []
    for path in CORPORA:
        docs += corpus_docs(path)[:150]
    kw = dict(max_length=64, stride=13, padding=padding, logid_offset=1000)
    expected = tok(docs, **kw)
    got = cuda.windows_cuda(tok, docs, return_tensors="np", **kw)
    for key in ("input_ids", "attention_mask", "metadata"):
        g, e = got[key], expected[key]
        if isinstance(e, daskwp.RaggedRows):
            assert np.array_equal(g.values, e.values) and np.array_equal(g.offsets, e.offsets)
        else:
            assert g.dtype == e.dtype and np.array_equal(g, e), key
    assert np.array_equal(cuda_backend.host(got.doc_row_offsets), expected.doc_row_offsets)


def test_window_parameter_errors(cuda_backend):
    tok = daskwp.WordPieceTokenizer()
    ids, off = np.zeros(3, np.int32), np.array([0, 3], np.int64)
    with pytest.raises(ValueError, match="stride"):
        cuda.build_windows_cuda(cuda_backend.to_device(ids), cuda_backend.to_device(off),
                                8, 6, False, True,
                                1, 2, 0, 0, True)
    with pytest.raises(ValueError, match="max_length"):
        cuda.build_windows_cuda(cuda_backend.to_device(ids), cuda_backend.to_device(off),
                                2, 0, False, True,
                                1, 2, 0, 0, True)
    with pytest.raises(ValueError, match="stride"):
        cuda.windows_cuda(tok, ["a b"], max_length=8, stride=6)


# ---------------------------------------------------------------------------------------
# Device-only behaviour
# ---------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_caches_and_dlpack():
    import cupy

    cuda.clear_caches()
    tok = daskwp.WordPieceTokenizer()
    cuda.encode_cuda(tok, ["warm up"])
    m1, mod1 = cuda._device_model(tok), cuda._module()
    tok2 = daskwp.WordPieceTokenizer(tok.vocab)       # same vocabulary and settings
    assert cuda._device_model(tok2) is m1 and cuda._module() is mod1
    tok3 = daskwp.WordPieceTokenizer(tok.vocab, lowercase=False)
    assert cuda._device_model(tok3) is not m1
    out = cuda.windows_cuda(tok, ["a tokenizer on the gpu"] * 3, max_length=16)
    assert isinstance(out["input_ids"], cupy.ndarray)
    try:
        import torch
    except ImportError:
        return
    t = torch.from_dlpack(out["input_ids"])
    assert t.is_cuda and t.data_ptr() == out["input_ids"].data.ptr
    pt = cuda.windows_cuda(tok, ["a tokenizer on the gpu"] * 3, max_length=16,
                           return_tensors="pt")
    assert pt["input_ids"].is_cuda and torch.equal(pt["input_ids"].cpu(),
                                                    torch.from_numpy(out["input_ids"].get()))
