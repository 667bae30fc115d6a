"""GPU check: parity, throughput, stages, anchors and the distributed path, in one run.

Run by ``benchmarks/gpu_check.sh`` (which builds daskwp and runs the GPU tests first); it
can also run alone. Sections, each timed and recorded in ``gpu_check.json`` (a failing
section is recorded and the next one still runs):

``env``        versions, the device (SMs, L2, clocks), CPU cores
``nvrtc``      NVRTC compile time through CuPy (fresh cache), cache-load time, and the
               kernels' registers / local memory / occupancy as the driver reports them
``parity``     GPU == CPU on every corpus x vocabulary: ``encode`` and ``tok(...)`` windows
               for every window option (padding max_length / longest / do_not_pad /
               bucket with auto and explicit bucket_widths, truncation, stride,
               add_special_tokens, mask_dtype int8, logid_offset, return_tensors), the
               tokenizer settings (strip_accents, clean_text, handle_chinese_chars,
               max_input_chars_per_word), chunk sizes; CPU == HF tokenizers; a mismatch
               prints the first differing document
``throughput`` English partitions of ``--sizes-mb`` x ``--chunks``: the kernel on
               device-resident text, windows on the device, end to end from host Arrow;
               a per-stage breakdown (upload, checks, plan, count, scan, write, windows,
               download): the launcher's own stages through its timing hook
               (``cuda.stage_timing``), timed with synchronize + perf_counter and CUDA
               events around each stage; every corpus
               repeated to ``--corpus-mb`` against the CPU on all threads; one huge document
               at every chunk size; the largest partition with its documents sorted by
               length (lane balance, docs/gpu.md 3.2)
``variants``   the count pass of the same source compiled here under other NVRTC register
               limits (--maxrregcount) and launched with other block sizes (the counts
               must not change): what occupancy buys, measured
``anchors``    on one English input: daskwp CPU (all threads and one), HF ``tokenizers``
               (all threads, RAYON_NUM_THREADS unset), nanotoken (when it imports), the GPU;
               ratios GPU / each
``cluster``    Parquet -> pandas partitions with Arrow strings -> the lazy accessor with a
               ``WordPieceTokenizer(device="gpu")`` on a ``dask_cuda.LocalCUDACluster``
               (a plain LocalCluster when dask-cuda is missing) -> to_parquet (global
               logIDs) -> ``daskwp.read_tokenized``, compared with the same job run by the
               CPU backend on a CPU LocalCluster
``findings``   facts about daskwp the check relies on or tripped over (dask tokens and
               the per-worker tokenizer cache ignore ``device``, ...)

Each section has a time budget with ``--fast`` (``--budget``); the JSON and Markdown are
rewritten after every section, so a run cut short keeps what it measured.

``--cpu-only`` (the dry run, ``GPU_CHECK_CPU_ONLY=1``): every step that needs no device
runs; the device steps run on the *emulated* CUDA backend of the test suite
(``daskwp/testing/emulated_cuda.py``: the real kernel file compiled by the host compiler, launched
by the real ``daskwp.backends.cuda`` with a NumPy stand-in for CuPy) on small inputs, so
the check's own code (comparisons, the stage-timing hook) is exercised; their timings
mean nothing. The cluster step then runs the CPU backend on both sides.

Throughput is in GB/s = 10^9 input UTF-8 bytes per second (MB = 10^6 bytes).
"""

from __future__ import annotations

import os

# HF tokenizers must use all cores: rayon reads this when its pool starts (first use).
os.environ.pop("RAYON_NUM_THREADS", None)
os.environ["TOKENIZERS_PARALLELISM"] = "true"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))   # _common, when loaded from a file path

import daskwp  # noqa: E402
from _common import best as best_time  # noqa: E402
from daskwp.backends import cuda  # noqa: E402

MB = 1e6
GB = 1e9
# corpus stem or folder -> (vocabulary folder, lowercase): the vocabulary a corpus is
# "naturally" tokenized with (HF parity, per-corpus throughput).
VOCAB_FOR = {"zh": ("bert-base-chinese", False), "multi": ("bert-base-multilingual-cased", False),
             "edge": ("bert-base-multilingual-cased", False)}
DEFAULT_VOCAB = ("bert-base-uncased", True)
VOCAB_CONFIGS = [("bert-base-uncased", True), ("bert-base-cased", False),
                 ("bert-base-multilingual-cased", False), ("bert-base-chinese", False)]

# Window options: together they take every value of every window option at least once.
WINDOW_CASES = [
    ("ml128", dict(max_length=128)),
    ("ml128-s32-longest", dict(max_length=128, stride=32, padding="longest")),
    ("ml64-s13-ragged-logid", dict(max_length=64, stride=13, padding="do_not_pad",
                                   logid_offset=1000)),
    ("ml128-s32-bucket-auto", dict(max_length=128, stride=32, padding="bucket")),
    ("ml128-bucket-16-32-64", dict(max_length=128, padding="bucket",
                                   bucket_widths=(16, 32, 64))),
    ("ml32-trunc-int8", dict(max_length=32, truncation=True, mask_dtype="int8")),
    ("ml16-s5-nospecial-ragged-int8", dict(max_length=16, stride=5, add_special_tokens=False,
                                           padding=False, mask_dtype="int8")),
    ("ml9-s6-nospecial-padTrue", dict(max_length=9, stride=6, add_special_tokens=False,
                                      padding=True)),
    ("ml512-s128-trunc-longest", dict(max_length=512, stride=128, truncation=True,
                                      padding="longest")),
]
# Tokenizer settings beyond each vocabulary's own lowercase flag (they change the
# normalization blob or the word limit the kernel reads).
TOKENIZER_CASES = [
    ("uncased-no-strip", "bert-base-uncased", dict(lowercase=True, strip_accents=False)),
    ("cased-strip", "bert-base-multilingual-cased", dict(lowercase=False, strip_accents=True)),
    ("no-clean-text", "bert-base-multilingual-cased", dict(lowercase=False, clean_text=False)),
    ("no-chinese-chars", "bert-base-multilingual-cased",
     dict(lowercase=False, handle_chinese_chars=False)),
    ("word-limit-5", "bert-base-uncased", dict(lowercase=True, max_input_chars_per_word=5)),
]
CHUNK_CASES = [1, 7, 64, 4096]
#: Options the parity section covers (the rest of the option table's output-changing
#: tokenizer and window options are listed as "not covered").
COVERED_OPTIONS = {"vocab", "lowercase", "strip_accents", "clean_text", "handle_chinese_chars",
                   "max_input_chars_per_word", "max_length", "stride", "truncation",
                   "add_special_tokens", "padding", "bucket_widths", "mask_dtype",
                   "return_tensors", "logid_offset"}


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------
def find_data(arg: str | None) -> Path:
    cands = [arg] if arg else []
    cands += [os.environ.get("DASKWP_SHARED_DATA"), str(REPO / ".gpudata"),
              str(REPO.parent / "shared" / "data"), str(REPO / "shared" / "data"),
              str(REPO / "tests" / "data")]
    for c in cands:
        if c and (Path(c) / "corpus").is_dir() and (Path(c) / "vocab").is_dir():
            return Path(c)
    sys.exit(f"no data folder with corpus/ and vocab/ found (tried {[c for c in cands if c]})")


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


# ---------------------------------------------------------------------------------------
# The device side: real CuPy, or the test suite's emulated backend
# ---------------------------------------------------------------------------------------
class Backend:
    """Where the "GPU" steps run: ``gpu`` (CuPy on a device) or ``emulated`` (the kernel
    file compiled for the host, NumPy arrays; daskwp/testing/emulated_cuda.py)."""

    def __init__(self, name: str, cp):
        self.name, self.cp = name, cp
        self.real = name == "gpu"

    def sync(self):
        if self.real:
            self.cp.cuda.Device().synchronize()

    def free(self):
        if self.real:
            self.cp.get_default_memory_pool().free_all_blocks()

    def event(self):
        if not self.real:
            return None
        e = self.cp.cuda.Event()
        e.record()
        return e

    def elapsed_ms(self, e0, e1) -> float | None:
        if e0 is None:
            return None
        e1.synchronize()
        return float(self.cp.cuda.get_elapsed_time(e0, e1))


def make_backend(cpu_only: bool) -> tuple[Backend | None, str]:
    if not cpu_only:
        import cupy

        return Backend("gpu", cupy), "CuPy on the device"
    from daskwp.testing.emulated_cuda import cxx, fake_cupy, use_fake_cupy

    if cxx() is None:
        return None, "no C++ compiler for the emulated backend"
    fake = fake_cupy()
    use_fake_cupy(fake)   # the launcher's one way to CuPy, for the rest of the process
    return Backend("emulated", fake), ("emulated (daskwp/testing/emulated_cuda.py), timings "
                                       "meaningless")


def to_host(a):
    if a is None:
        return None
    if hasattr(a, "get") and not isinstance(a, np.ndarray):
        return a.get()
    if type(a).__module__.split(".")[0] == "torch":
        return a.cpu().numpy()
    if hasattr(a, "get"):   # the emulated DevArray
        return np.asarray(a.get())
    return np.asarray(a)


def best(fn, repeat: int, sync=None) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (after one untimed warm-up call)."""
    return best_time(fn, repeat, warmup=True, sync=sync)


# ---------------------------------------------------------------------------------------
# Comparisons: the first differing document
# ---------------------------------------------------------------------------------------
def _snippet(docs, d) -> str:
    if docs is None or d is None or d < 0 or d >= len(docs):
        return ""
    t = docs[d]
    return "" if t is None else repr(t[:160])


def diff_encoding(g_ids, g_off, e_ids, e_off, docs=None) -> str | None:
    """None when equal, else a message naming the first differing document."""
    g_ids, g_off = to_host(g_ids), to_host(g_off)
    if g_ids.dtype != np.int32 or g_off.dtype != np.int64:
        return f"dtypes {g_ids.dtype}/{g_off.dtype}, expected int32/int64"
    if g_off.shape != e_off.shape:
        return f"{g_off.shape[0] - 1} documents, expected {e_off.shape[0] - 1}"
    if np.array_equal(g_off, e_off) and np.array_equal(g_ids, e_ids):
        return None
    n = len(e_off) - 1
    d = 0
    bad = np.flatnonzero(g_off != e_off)
    first_off = int(bad[0]) - 1 if bad.size else n
    for d in range(n):
        if d >= first_off or not np.array_equal(g_ids[g_off[d]:g_off[d + 1]],
                                                e_ids[e_off[d]:e_off[d + 1]]):
            break
    return (f"first differing document {d} {_snippet(docs, d)}: got "
            f"{g_ids[g_off[d]:g_off[d + 1]].tolist()[:32]} expected "
            f"{e_ids[e_off[d]:e_off[d + 1]].tolist()[:32]}")


def flatten_windows(w) -> list[tuple[str, np.ndarray]]:
    """A windows result (BatchWindows or BucketedWindows) as named host arrays."""
    if hasattr(w, "buckets"):
        out = [("bucket_widths", np.asarray(w.widths, dtype=np.int64))]
        for width, b in w.buckets:
            out += [(f"bucket{width}.{k}", a) for k, a in flatten_windows(b)]
        return out
    out = []
    for k in sorted(w):
        v = w[k]
        if isinstance(v, daskwp.RaggedRows):
            out += [(f"{k}.values", to_host(v.values)), (f"{k}.offsets", to_host(v.offsets))]
        else:
            out.append((k, to_host(v)))
    if w.doc_row_offsets is not None:
        out.append(("doc_row_offsets", to_host(w.doc_row_offsets)))
    return out


def diff_windows(got, exp, docs=None, logid_offset: int = 0) -> str | None:
    """None when equal (names, dtypes, shapes, values), else the first differing
    document."""
    g, e = dict(flatten_windows(got)), dict(flatten_windows(exp))
    if list(g) != list(e):
        return f"arrays {list(g)}, expected {list(e)}"
    for name, ea in e.items():
        ga = g[name]
        if ga.dtype != ea.dtype:
            return f"{name}: dtype {ga.dtype}, expected {ea.dtype}"
        if ga.shape == ea.shape and np.array_equal(ga, ea):
            continue
        prefix = name.rsplit(".", 1)[0] + "." if name.startswith("bucket") and "." in name \
            else ""
        meta = e.get(prefix + "metadata")
        row = None
        if name.endswith("doc_row_offsets"):
            m = min(len(ga), len(ea))
            bad = np.flatnonzero(ga[:m] != ea[:m])
            d = int(bad[0]) - 1 if bad.size else m - 1
            return (f"{name}: first differing document {max(d, 0)} "
                    f"{_snippet(docs, max(d, 0))}")
        if ga.ndim >= 1 and ea.ndim >= 1:
            m = min(ga.shape[0], ea.shape[0])
            if ga.ndim == 2 and ga.shape[1:] == ea.shape[1:]:
                bad = np.flatnonzero(np.any(ga[:m] != ea[:m], axis=1))
            elif ga.ndim == 1:
                bad = np.flatnonzero(ga[:m] != ea[:m])
            else:
                bad = np.array([0])
            idx = int(bad[0]) if bad.size else m
            row = idx
            if name.endswith(".values"):   # a flat ragged value: its row
                offs = e.get(name[:-len("values")] + "offsets")
                if offs is not None:
                    row = int(np.searchsorted(offs, idx, side="right")) - 1
        d = None
        if meta is not None and row is not None and 0 <= row < len(meta):
            d = int(meta[row, 0]) - logid_offset
        shapes = f" (shape {ga.shape}, expected {ea.shape})" if ga.shape != ea.shape else ""
        return (f"{name}{shapes}: first differing row {row}, document {d} "
                f"{_snippet(docs, d)}")
    return None


# ---------------------------------------------------------------------------------------
# Stages: the launcher's own steps, timed through its hook (daskwp.backends.cuda.stage_timing)
# ---------------------------------------------------------------------------------------
class StageTimer:
    """Per stage: wall ms (synchronize, perf_counter, stage, synchronize) and, on a real
    device, the ms between CUDA events recorded on the stream around it."""

    def __init__(self, be: Backend):
        self.be = be
        self.wall: dict[str, float] = {}
        self.gpu: dict[str, float | None] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        self.be.sync()
        e0 = self.be.event()
        t0 = time.perf_counter()
        yield
        e1 = self.be.event()
        self.be.sync()
        self.wall[name] = self.wall.get(name, 0.0) + (time.perf_counter() - t0) * 1e3
        ms = self.be.elapsed_ms(e0, e1)
        self.gpu[name] = None if ms is None else self.gpu.get(name, 0.0) + ms


def timed_encode(tok, arr, be: Backend, chunk_bytes=None, windows_kw=None,
                 download_windows=True):
    """encode_cuda with each of its stages timed (``cuda.stage_timing``), then, with
    windows_kw, the window fill on its result, and the downloads.

    Returns (host ids, host offsets, StageTimer, info dict)."""
    from daskwp.backends.protocol import kernel_model
    from daskwp.core.windows import fill_plan, window_params

    st = StageTimer(be)
    with cuda.stage_timing(st) as plan:
        ids, offsets = cuda.encode_cuda(tok, arr, chunk_bytes=chunk_bytes)
    out = None
    if windows_kw:
        with st("windows"):
            p = window_params(**windows_kw, return_tensors="cp")
            padded, cls_id, sep_id, pad_id, width = fill_plan(kernel_model(tok).vocab, p,
                                                              offsets)
            out = cuda.build_windows_cuda(ids, offsets, p.max_length, p.stride, p.truncation,
                                          p.add_special_tokens, cls_id, sep_id, pad_id,
                                          p.logid_offset, padded, p.mask_int8, width)
    with st("download"):
        h_ids, h_off = to_host(ids), to_host(offsets)
    out_bytes = 0
    if out is not None:
        out_bytes = sum(int(a.nbytes) for a in out[:3])
        if download_windows:
            with st("download_windows"):
                for a in out[:3]:
                    to_host(a)
    info = dict(plan, windows_bytes=out_bytes)
    del ids, offsets, out
    return h_ids, h_off, st, info


# ---------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------
class Check:
    """The run: arguments, data, backend, tokenizers, and the results dict."""

    def __init__(self, args):
        self.args = args
        self.data = find_data(args.data)
        self.R: dict = {"version": 2, "mode": "cpu-only" if args.cpu_only else "gpu",
                        "fast": bool(args.fast), "sections": {}, "errors": {}}
        self.be: Backend | None = None
        self._toks: dict = {}
        self._hf: dict = {}
        self._docs: dict = {}
        self.vocabs = [(n, lc) for n, lc in VOCAB_CONFIGS
                       if (self.data / "vocab" / n / "vocab.txt").is_file()]

    # -- helpers ------------------------------------------------------------------------
    def tok(self, vocab_name: str, device="cpu", **settings):
        lower = dict(VOCAB_CONFIGS)[vocab_name]
        settings.setdefault("lowercase", lower)
        key = (vocab_name, device, tuple(sorted(settings.items())))
        if key not in self._toks:
            self._toks[key] = daskwp.WordPieceTokenizer(
                str(self.data / "vocab" / vocab_name / "vocab.txt"), device=device, **settings)
        return self._toks[key]

    def hf(self, vocab_name: str):
        if vocab_name not in self._hf:
            try:
                from tokenizers import BertWordPieceTokenizer

                self._hf[vocab_name] = BertWordPieceTokenizer(
                    str(self.data / "vocab" / vocab_name / "vocab.txt"),
                    lowercase=dict(VOCAB_CONFIGS)[vocab_name])
            except ImportError:
                self._hf[vocab_name] = None
        return self._hf[vocab_name]

    def docs(self, path: Path) -> list[str]:
        if path not in self._docs:
            self._docs[path] = read_documents(path)
        return self._docs[path]

    def english(self) -> pa.Array:
        files = [p for p in corpora(self.data) if p.name.startswith("en")] or \
            [p for p in corpora(self.data) if vocab_for(p) == DEFAULT_VOCAB]
        docs = [d for p in files for d in self.docs(p) if d]
        return large_string(docs)

    @contextlib.contextmanager
    def section(self, name: str, budget_s: int = 0):
        """Runs a section: its time and any error are recorded, and the next section runs.
        With budget_s, SIGALRM stops it after that long (a hung cluster start, say)."""
        log(f"\n--- {name} ---")
        t0 = time.perf_counter()
        old = None
        if budget_s and hasattr(signal, "SIGALRM"):
            def _timeout(signum, frame):
                raise TimeoutError(f"section {name} ran past its {budget_s} s budget")
            old = signal.signal(signal.SIGALRM, _timeout)
            signal.alarm(int(budget_s))
        try:
            yield
        except Exception as e:
            self.R["errors"][name] = f"{type(e).__name__}: {e}"
            log(f"SECTION {name} FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
        finally:
            if old is not None:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old)
            self.R["sections"][name] = round(time.perf_counter() - t0, 2)
            log(f"[{name}: {time.perf_counter() - t0:.1f} s]")

    # -- env ------------------------------------------------------------------------------
    def env(self):
        import pandas

        info = {"python": sys.version.split()[0], "machine": platform.machine(),
                "cpu_count": os.cpu_count(), "cpu_affinity": len(os.sched_getaffinity(0)),
                "numpy": np.__version__, "pyarrow": pa.__version__,
                "pandas": pandas.__version__, "daskwp": daskwp.__version__,
                "data": str(self.data), "corpus_files": len(corpora(self.data)),
                "vocabularies": [n for n, _ in self.vocabs]}
        for mod in ("dask", "distributed", "dask_cuda", "tokenizers", "nanotoken", "cupy",
                    "torch"):
            try:
                import importlib.metadata as md

                m = __import__(mod)
                try:
                    info[mod] = md.version(mod.replace("_", "-"))
                except Exception:
                    info[mod] = getattr(m, "__version__", "?")
            except Exception as e:
                info[mod] = f"missing ({type(e).__name__})"
        try:
            with open("/proc/cpuinfo") as f:
                info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f
                                          if ln.startswith("model name")), "?")
        except OSError:
            info["cpu_model"] = "?"
        be, why = make_backend(self.args.cpu_only)
        self.be = be
        info["device_backend"] = why
        if be is not None and be.real:
            cp = be.cp
            dev = cp.cuda.Device()
            props = cp.cuda.runtime.getDeviceProperties(dev.id)
            info["gpu"] = {
                "name": props["name"].decode(), "sms": props["multiProcessorCount"],
                "l2_bytes": props["l2CacheSize"], "clock_khz": props.get("clockRate"),
                "mem_clock_khz": props.get("memoryClockRate"),
                "mem_bus_bits": props.get("memoryBusWidth"),
                "mem_bytes": props["totalGlobalMem"],
                "regs_per_sm": props.get("regsPerMultiprocessor"),
                "max_threads_per_sm": props.get("maxThreadsPerMultiProcessor"),
                "smem_per_sm": props.get("sharedMemPerMultiprocessor"),
                "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
                "driver": cp.cuda.runtime.driverGetVersion(),
                "gpus": cp.cuda.runtime.getDeviceCount()}
        self.R["env"] = info
        for k, v in info.items():
            log(f"  {k}: {v}")

    # -- nvrtc ----------------------------------------------------------------------------
    def nvrtc(self):
        be = self.be
        out: dict = {}
        tok = self.tok(DEFAULT_VOCAB[0])
        cuda.clear_caches()
        t0 = time.perf_counter()
        cuda._module()
        out["compile_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        cuda._device_model(tok)
        out["model_upload_s"] = round(time.perf_counter() - t0, 4)
        cuda.clear_caches()
        t0 = time.perf_counter()
        cuda._module()
        out["cache_load_s"] = round(time.perf_counter() - t0, 3)
        out["cache_dir"] = os.environ.get("CUPY_CACHE_DIR", "(default)")
        if be.real:
            cp = be.cp
            kernels = {}
            for name in ("dwp_chunk_tokenize", "dwp_chunk_starts", "dwp_chunk_ends",
                         "dwp_piece_counts", "dwp_window_counts", "dwp_window_fill_mask32"):
                f = cuda._module().get_function(name)
                a = f.attributes
                k = {"registers": a.get("num_regs"), "local_bytes": a.get("local_size_bytes"),
                     "shared_bytes": a.get("shared_size_bytes"),
                     "max_threads_per_block": a.get("max_threads_per_block"),
                     "ptx_version": a.get("ptx_version"), "binary_version": a.get("binary_version")}
                try:
                    fn = getattr(f, "kernel", f)
                    k["blocks_per_sm_at_128"] = int(
                        cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                            fn.ptr, cuda.BLOCK, 0))
                except Exception as e:
                    k["blocks_per_sm_at_128"] = f"? ({type(e).__name__})"
                kernels[name] = k
                log(f"  {name}: {k}")
            out["kernels"] = kernels
        log(f"  compile {out['compile_s']} s, cache load {out['cache_load_s']} s, "
            f"model upload {out['model_upload_s']} s ({be.name})")
        self.R["nvrtc"] = out

    # -- parity ---------------------------------------------------------------------------
    def parity(self):
        args, be = self.args, self.be
        files = corpora(self.data)
        limit = int(args.parity_kb * 1000) if args.parity_kb > 0 else 0
        P: dict = {"backend": be.name if be else None, "sample_bytes_per_corpus": limit,
                   "checks": 0, "failures": [], "cases": [c for c, _ in WINDOW_CASES],
                   "tokenizer_cases": [c for c, _, _ in TOKENIZER_CASES]}
        self.R["parity"] = P

        def record(what, msg):
            P["checks"] += 1
            if msg is not None:
                P["failures"].append(f"{what}: {msg}")
                log(f"  MISMATCH {what}: {msg}")

        def sample(path):
            return subsample(self.docs(path), limit)

        # CPU == HF on every corpus with its own vocabulary (whole corpora)
        hf_rows = []
        for path in files:
            vname, _ = vocab_for(path)
            hf = self.hf(vname) if (vname, dict(VOCAB_CONFIGS)[vname]) in self.vocabs else None
            if hf is None:
                continue
            docs = self.docs(path) if args.hf_parity_whole else sample(path)
            enc = self.tok(vname).encode(large_string(docs), num_threads=0)
            out = hf.encode_batch(docs, add_special_tokens=False)
            got = [e.ids for e in out]
            exp = enc.to_list()
            bad = next((i for i, (a, b) in enumerate(zip(got, exp)) if a != b), None)
            ok = bad is None and len(got) == len(exp)
            hf_rows.append({"corpus": str(path.relative_to(self.data / "corpus")),
                            "vocab": vname, "ok": ok})
            if not ok:
                P["failures"].append(f"cpu!=hf {path.name} [{vname}]: first differing "
                                     f"document {bad} {_snippet(docs, bad)}")
                log(f"  CPU != HF {path.name} [{vname}] document {bad}")
        P["cpu_hf"] = {"corpora": len(hf_rows), "ok": all(r["ok"] for r in hf_rows),
                       "whole_corpora": bool(args.hf_parity_whole), "rows": hf_rows}
        log(f"  cpu == hf: {sum(r['ok'] for r in hf_rows)}/{len(hf_rows)} corpora")
        if be is None:
            P["ok"] = P["cpu_hf"]["ok"]
            return

        # GPU == CPU: every corpus x vocabulary, encode and every window case
        matrix = []
        P["grid"] = args.parity_grid
        for vi, (vname, _) in enumerate(self.vocabs):
            tok = self.tok(vname)
            for path in files:
                docs = sample(path)
                arr = large_string(docs)
                e = tok.encode(arr, num_threads=0)
                g = cuda.encode_cuda(tok, arr)
                name = f"{path.relative_to(self.data / 'corpus')} [{vname}]"
                msg = diff_encoding(g[0], g[1], e.token_ids, e.offsets, docs)
                record(f"encode {name}", msg)
                bad_cases = []
                cases = WINDOW_CASES if args.parity_grid == "full" else \
                    [WINDOW_CASES[(files.index(path) + vi) % len(WINDOW_CASES)]]
                for cname, kw in cases:
                    ew = tok(arr, **kw)
                    gw = cuda.windows_cuda(tok, arr, return_tensors="np", **kw)
                    m = diff_windows(gw, ew, docs, kw.get("logid_offset", 0))
                    record(f"windows {cname} {name}", m)
                    if m:
                        bad_cases.append(cname)
                matrix.append({"corpus": name, "docs": len(docs), "bytes": nbytes(docs),
                               "encode": msg is None, "windows_failed": bad_cases})
            log(f"  {vname}: {len(files)} corpora x (encode + "
                f"{len(WINDOW_CASES) if args.parity_grid == 'full' else 1} window cases), "
                f"failures so far {len(P['failures'])}")
        P["matrix"] = matrix
        # the device front: tok(texts) with device="gpu", return_tensors cp / pt
        tok_gpu = self.tok(DEFAULT_VOCAB[0], device="gpu")
        docs = sample(files[0])
        ew = self.tok(DEFAULT_VOCAB[0])(docs, max_length=64, stride=8)
        for rt in ("cp", "pt"):
            if rt == "pt":
                try:
                    import torch  # noqa: F401
                except ImportError:
                    P["return_tensors_pt"] = "skipped (no torch)"
                    continue
                if not be.real:
                    P["return_tensors_pt"] = "skipped (emulated)"
                    continue
            gw = tok_gpu(docs, max_length=64, stride=8, return_tensors=rt)
            record(f"front device=gpu return_tensors={rt}", diff_windows(gw, ew, docs))
        ge = tok_gpu.encode(docs)
        ee = self.tok(DEFAULT_VOCAB[0]).encode(docs)
        record("front device=gpu encode", diff_encoding(ge.token_ids, ge.offsets,
                                                        ee.token_ids, ee.offsets, docs))
        # tokenizer settings
        for cname, vname, settings in TOKENIZER_CASES:
            if vname not in [n for n, _ in self.vocabs]:
                vname = self.vocabs[0][0]
                settings = {k: v for k, v in settings.items() if k != "lowercase"}
            tok = self.tok(vname, **settings)
            for path in (files if args.parity_grid == "full" else files[::3]):
                docs = sample(path)
                arr = large_string(docs)
                e = tok.encode(arr, num_threads=0)
                g = cuda.encode_cuda(tok, arr)
                record(f"settings {cname} {path.name}",
                       diff_encoding(g[0], g[1], e.token_ids, e.offsets, docs))
        log(f"  tokenizer settings: {len(TOKENIZER_CASES)} x {len(files)} corpora")
        # chunk sizes (the ids must not depend on them)
        mix = [d for p in files for d in sample(p)[:200]]
        mix_arr = large_string(mix)
        for vname, _ in self.vocabs:
            tok = self.tok(vname)
            e = tok.encode(mix_arr, num_threads=0)
            for cb in CHUNK_CASES:
                g = cuda.encode_cuda(tok, mix_arr, chunk_bytes=cb)
                record(f"chunk_bytes={cb} [{vname}]",
                       diff_encoding(g[0], g[1], e.token_ids, e.offsets, mix))
        # nulls, slices, int32 offsets
        base = ["first doc", None, "second, doc!", "", None, "third [SEP] doc x"] * 50
        arr = pa.array(base, type=pa.string())
        tok = self.tok(DEFAULT_VOCAB[0]) if DEFAULT_VOCAB in self.vocabs else \
            self.tok(self.vocabs[0][0])
        for a in (arr, arr.slice(3, 200), pa.chunked_array([arr.slice(0, 5), arr.slice(5)])):
            e = tok.encode(a)
            g = cuda.encode_cuda(tok, a)
            record(f"arrow input {a.type} len {len(a)}",
                   diff_encoding(g[0], g[1], e.token_ids, e.offsets))
        # options of the option table this section does not cover
        try:
            from daskwp.core.options import OPTIONS, TOKENIZER, WINDOWS

            P["options_not_covered"] = sorted(
                n for n, o in OPTIONS.items()
                if (TOKENIZER in o.surfaces or WINDOWS in o.surfaces) and o.affects_output
                and n not in COVERED_OPTIONS)
        except Exception as e:
            P["options_not_covered"] = f"? ({type(e).__name__})"
        P["ok"] = not P["failures"]
        log(f"  gpu == cpu: {P['checks']} checks, {len(P['failures'])} failures "
            f"({be.name}); options not covered: {P['options_not_covered']}")

    # -- throughput -----------------------------------------------------------------------
    def throughput(self):
        args, be = self.args, self.be
        if be is None:
            self.R["throughput"] = "skipped (no device backend)"
            return
        cp = be.cp
        T: dict = {"backend": be.name, "partitions": [], "corpora": [], "huge_document": None}
        self.R["throughput"] = T
        tok = self.tok(DEFAULT_VOCAB[0])
        base = self.english()
        win_kw = dict(max_length=128, stride=32)
        rep = args.repeat
        sync = be.sync
        log(f"  English base: {len(base)} documents, {arrow_nbytes(base) / MB:.1f} MB; "
            f"sizes {args.sizes_mb} MB, chunks {args.chunks}")
        hdr = (f"  {'MB':>7} {'chunk':>6} {'slots':>9} {'kernel GB/s':>11} {'Gtok/s':>7} "
               f"{'e2e GB/s':>8} {'win GB/s':>8} | stages ms: upload checks plan count "
               f"scan write windows download")
        log(hdr)
        for mb in args.sizes_mb:
            arr = tiled(base, mb)
            size = arrow_nbytes(arr)
            dev = cuda.device_strings(arr)
            be.sync()
            e_ids = e_off = None
            for cb in args.chunks:
                cbv = None if cb == 0 else cb
                row = {"mb": round(size / MB, 2), "docs": len(arr), "chunk_arg": cb}
                t = best(lambda: cuda.encode_cuda(tok, dev, chunk_bytes=cbv), rep, sync)
                ids, off = cuda.encode_cuda(tok, dev, chunk_bytes=cbv)
                tokens = int(ids.shape[0])
                row.update(kernel_gbs=size / t / GB, kernel_s=t, tokens=tokens,
                           tokens_per_s=tokens / t)
                h_ids, h_off, st, info = timed_encode(
                    tok, arr, be, cbv, win_kw, download_windows=size <= args.download_windows_mb * MB)
                if e_ids is None:
                    e_ids, e_off = to_host(ids), to_host(off)
                row["timed_matches_untimed"] = bool(np.array_equal(h_ids, e_ids)
                                                      and np.array_equal(h_off, e_off))
                row.update(info)
                row["stages_wall_ms"] = {k: round(v, 3) for k, v in st.wall.items()}
                row["stages_gpu_ms"] = {k: (None if v is None else round(v, 3))
                                        for k, v in st.gpu.items()}
                del ids, off
                if cb == args.chunks[0]:
                    def e2e():
                        i, o = cuda.encode_cuda(tok, arr)
                        return to_host(i), to_host(o)

                    te = best(e2e, rep, sync)
                    tw = best(lambda: cuda.windows_cuda(tok, dev, **win_kw), rep, sync)
                    row.update(e2e_gbs=size / te / GB, windows_gbs=size / tw / GB)
                T["partitions"].append(row)
                w = row["stages_wall_ms"]
                log(f"  {row['mb']:7.1f} {row['chunk_bytes']:6d} {row['n_slots']:9d} "
                    f"{row['kernel_gbs']:11.2f} {row['tokens_per_s'] / 1e9:7.2f} "
                    f"{row.get('e2e_gbs', float('nan')):8.2f} "
                    f"{row.get('windows_gbs', float('nan')):8.2f} | "
                    + " ".join(f"{w.get(k, float('nan')):.2f}" for k in
                               ("upload", "checks", "plan", "count", "scan", "write",
                                "windows", "download"))
                    + ("" if row["timed_matches_untimed"] else "  TIMED != UNTIMED"))
            del dev
            be.free()
        # every corpus, repeated, against the CPU on all threads
        if args.corpus_mb > 0:
            log(f"  per corpus ({args.corpus_mb} MB each, its own vocabulary): kernel GB/s vs "
                f"CPU all threads")
            for path in corpora(self.data):
                vname, _ = vocab_for(path)
                if vname not in [n for n, _ in self.vocabs]:
                    continue
                t_ = self.tok(vname)
                docs = [d for d in self.docs(path) if d]
                if not docs:
                    continue
                arr = tiled(large_string(docs), args.corpus_mb)
                size = arrow_nbytes(arr)
                dev = cuda.device_strings(arr)
                tg = best(lambda: cuda.encode_cuda(t_, dev), rep, sync)
                tc = best(lambda: t_.encode(arr, num_threads=0), max(1, rep - 1))
                n_tok = int(t_.encode(arr, num_threads=0).token_ids.shape[0])
                r = {"corpus": str(path.relative_to(self.data / "corpus")), "vocab": vname,
                     "mb": round(size / MB, 2), "kernel_gbs": size / tg / GB,
                     "cpu_all_gbs": size / tc / GB, "tokens": n_tok,
                     "bytes_per_token": size / max(n_tok, 1)}
                r["ratio"] = r["kernel_gbs"] / r["cpu_all_gbs"]
                T["corpora"].append(r)
                log(f"  {r['corpus']:36s} {r['kernel_gbs']:8.2f} {r['cpu_all_gbs']:8.3f} "
                    f"{r['ratio']:7.1f}x  {r['bytes_per_token']:.2f} B/token")
                del dev
                be.free()
        if args.huge_doc_mb > 0:
            arr = one_document(base, args.huge_doc_mb)
            size = arrow_nbytes(arr)
            dev = cuda.device_strings(arr)
            by_chunk = {}
            for cb in args.chunks:
                cbv = None if cb == 0 else cb
                by_chunk[str(cb or "auto")] = size / best(
                    lambda: cuda.encode_cuda(tok, dev, chunk_bytes=cbv), rep, sync) / GB
            tc = best(lambda: tok.encode(arr, num_threads=0), max(1, rep - 1))
            g = cuda.encode_cuda(tok, dev)
            e = tok.encode(arr, num_threads=0)
            ok = diff_encoding(g[0], g[1], e.token_ids, e.offsets) is None
            first = by_chunk[str(args.chunks[0] or "auto")]
            T["huge_document"] = {"mb": round(size / MB, 2), "kernel_gbs": first,
                                  "kernel_gbs_by_chunk": by_chunk,
                                  "cpu_all_gbs": size / tc / GB, "gpu_equals_cpu": ok}
            log(f"  one {size / MB:.1f} MB document: kernel GB/s by chunk "
                + ", ".join(f"{k}: {v:.2f}" for k, v in by_chunk.items())
                + f"; CPU all threads {size / tc / GB:.3f} GB/s, equal {ok}")
            if not ok:
                self.R.setdefault("parity", {}).setdefault("failures", []).append(
                    "huge document: GPU != CPU")
                self.R["parity"]["ok"] = False
            del dev, g
            be.free()
        # lane balance: the same documents in length order (neighbouring threads then hold
        # chunks of about the same size); docs/gpu.md 3.2 predicts the gain
        mb = max(args.sizes_mb)
        arr = tiled(base, mb)
        lens = np.diff(np.frombuffer(arr.buffers()[1], dtype=np.int64)[
            arr.offset:arr.offset + len(arr) + 1])
        order = np.argsort(lens, kind="stable")
        sorted_arr = arr.take(pa.array(order))
        size = arrow_nbytes(arr)
        res = {}
        for name, a in (("natural", arr), ("length_sorted", sorted_arr)):
            dev = cuda.device_strings(a)
            res[name] = size / best(lambda: cuda.encode_cuda(tok, dev), rep, sync) / GB
            del dev
            be.free()
        res["mb"] = round(size / MB, 2)
        res["gain"] = res["length_sorted"] / res["natural"]
        T["lane_balance"] = res
        log(f"  lane balance, {size / MB:.1f} MB: natural order {res['natural']:.2f} GB/s, "
            f"length-sorted {res['length_sorted']:.2f} GB/s ({res['gain']:.2f}x)")
        T["clocks_after"] = _nvidia_smi()

    # -- variants -------------------------------------------------------------------------
    def variants(self):
        """The count pass of the same kernel source under other NVRTC register limits and
        block sizes (daskwp's launcher is not changed: this section compiles its own
        modules), on one English partition; the counts must not change."""
        args, be = self.args, self.be
        cp = be.cp
        from daskwp.backends.protocol import kernel_model

        tok = self.tok(DEFAULT_VOCAB[0]) if DEFAULT_VOCAB in self.vocabs else \
            self.tok(self.vocabs[0][0])
        arr = tiled(self.english(), args.variant_mb)
        size = arrow_nbytes(arr)
        s = cuda.device_strings(arr)
        n = s.n
        doc_off = cp.ascontiguousarray(s.offsets, dtype=cp.int64)
        validity = cp.zeros(1, dtype=cp.uint8)
        model = cuda._device_model(tok)
        chunk = cuda._auto_chunk_bytes(size, cp)
        n_slots, piece_first, begin, end = cuda._plan_chunks(
            cuda._module(), model, doc_off, s.data, validity, False, 0, n, chunk, cp)
        max_chars = np.int32(kernel_model(tok).max_input_chars_per_word)
        code, options = cuda.kernel_source()
        V = {"mb": round(size / MB, 2), "chunk_bytes": chunk, "rows": []}
        self.R["variants"] = V
        ref = None
        sms = cp.cuda.Device().attributes["MultiProcessorCount"] if be.real else 2
        for extra in args.variant_regs:
            opts = tuple(options) + ((f"--maxrregcount={extra}",) if extra else ())
            t0 = time.perf_counter()
            mod = cp.RawModule(code=code, options=opts, backend="nvrtc")
            f = mod.get_function("dwp_chunk_tokenize")
            compile_s = time.perf_counter() - t0
            attrs = getattr(f, "attributes", {}) if be.real else {}
            for block in args.variant_blocks:
                if extra and block != cuda.BLOCK:
                    continue
                grid = (max(1, min((n_slots + block - 1) // block, sms * 32)),)
                counts = cp.empty(n_slots, dtype=cp.int64)
                d_off, d_ids = cp.zeros(1, dtype=cp.int64), cp.zeros(1, dtype=cp.int32)

                def run():
                    f(grid, (block,), (model.vocab, model.norm, max_chars, s.data, begin, end,
                                       np.int64(n_slots), np.int32(0), counts, d_off, d_ids))
                t = best(run, args.repeat, be.sync)
                c = to_host(counts)
                if ref is None:
                    ref = c
                row = {"maxrregcount": extra or "default", "block": block,
                       "registers": attrs.get("num_regs"),
                       "local_bytes": attrs.get("local_size_bytes"),
                       "compile_s": round(compile_s, 2), "count_pass_gbs": size / t / GB,
                       "counts_equal": bool(np.array_equal(c, ref))}
                V["rows"].append(row)
                log(f"  maxrregcount {row['maxrregcount']!s:>7} block {block:4d}: "
                    f"{row['registers']} regs, count pass {row['count_pass_gbs']:.2f} GB/s, "
                    f"counts equal {row['counts_equal']}")
        V["ok"] = all(r["counts_equal"] for r in V["rows"])
        if not V["ok"]:
            self.R.setdefault("parity", {}).setdefault("failures", []).append(
                "variants: counts differ between builds")
            self.R["parity"]["ok"] = False
        del s, doc_off, begin, end, piece_first
        be.free()

    # -- anchors --------------------------------------------------------------------------
    def anchors(self):
        args, be = self.args, self.be
        A: dict = {"threads": os.cpu_count(), "cpu_affinity": len(os.sched_getaffinity(0)),
                   "rayon_num_threads": os.environ.get("RAYON_NUM_THREADS", "unset")}
        self.R["anchors"] = A
        vname = DEFAULT_VOCAB[0] if DEFAULT_VOCAB in self.vocabs else self.vocabs[0][0]
        tok = self.tok(vname)
        vocab_file = str(self.data / "vocab" / vname / "vocab.txt")
        arr = tiled(self.english(), args.anchor_mb)
        size = arrow_nbytes(arr)
        A.update(input=f"English x tiled, {len(arr)} documents", mb=round(size / MB, 2))
        rep = max(1, args.repeat)
        t = best(lambda: tok.encode(arr, num_threads=0), rep)
        enc = tok.encode(arr, num_threads=0)
        A["daskwp_cpu_all_gbs"] = size / t / GB
        A["tokens"] = int(enc.token_ids.shape[0])
        one = arr.slice(0, max(1, int(len(arr) * min(1.0, args.hf_mb * MB / size))))
        one_size = arrow_nbytes(one)
        t1 = best(lambda: tok.encode(one, num_threads=1), 1)
        A["daskwp_cpu_1thread_gbs"] = one_size / t1 / GB
        log(f"  input {size / MB:.1f} MB: daskwp CPU all threads {A['daskwp_cpu_all_gbs']:.3f} "
            f"GB/s, one thread {A['daskwp_cpu_1thread_gbs']:.3f} GB/s ({one_size / MB:.1f} MB)")
        # HF on the first --hf-mb MB of the same input (it is ~100x slower)
        hf = self.hf(vname)
        hf_docs = one.to_pylist()
        if hf is not None:
            out, th = None, float("inf")
            for _ in range(max(1, min(2, rep))):
                t0 = time.perf_counter()
                out = hf.encode_batch(hf_docs, add_special_tokens=False)
                th = min(th, time.perf_counter() - t0)
            exp = tok.encode(one, num_threads=0).to_list()
            A["hf_mb"] = round(one_size / MB, 2)
            A["hf_all_gbs"] = one_size / th / GB
            A["hf_equals_cpu"] = [e.ids for e in out] == exp
            log(f"  HF tokenizers all threads: {A['hf_all_gbs'] * 1e3:.1f} MB/s on "
                f"{one_size / MB:.1f} MB, ids equal {A['hf_equals_cpu']}")
        else:
            A["hf_all_gbs"] = "skipped (tokenizers not importable)"
        # nanotoken (benchmark only)
        try:
            import nanotoken as nt

            ntok = nt.Tokenizer.from_vocab(vocab_file, lowercase=dict(VOCAB_CONFIGS)[vname])
            docs = arr.to_pylist()
            tn = best(lambda: ntok.encode_batch(docs, add_special_tokens=False,
                                                parallel=True), rep)
            r = ntok.encode_batch(docs[:20000], add_special_tokens=False, parallel=True)
            small = tok.encode(arr.slice(0, min(len(arr), 20000)), num_threads=0)
            try:
                same = [list(map(int, x)) for x in r.to_list()] == small.to_list()
            except Exception:
                same = None
            A["nanotoken_all_gbs"] = size / tn / GB
            A["nanotoken_equals_cpu_first_20000_docs"] = same
            try:
                import importlib.metadata as md

                A["nanotoken_version"] = md.version("nanotoken")
            except Exception:
                A["nanotoken_version"] = getattr(nt, "__version__", "?")
            log(f"  nanotoken {A['nanotoken_version']}: {A['nanotoken_all_gbs']:.3f} GB/s "
                f"(list of str), first 20000 documents equal {same}")
        except ImportError as e:
            A["nanotoken_all_gbs"] = f"skipped (not importable: {e})"
            log(f"  nanotoken skipped ({e})")
        if be is not None:
            dev = cuda.device_strings(arr)
            tg = best(lambda: cuda.encode_cuda(tok, dev), args.repeat, be.sync)

            def e2e():
                i, o = cuda.encode_cuda(tok, arr)
                return to_host(i), to_host(o)

            te = best(e2e, args.repeat, be.sync)
            A["gpu_backend"] = be.name
            A["gpu_kernel_gbs"] = size / tg / GB
            A["gpu_e2e_gbs"] = size / te / GB
            g = cuda.encode_cuda(tok, dev)
            A["gpu_equals_cpu"] = diff_encoding(g[0], g[1], enc.token_ids, enc.offsets) is None
            del dev, g
            be.free()
            for k in ("daskwp_cpu_all_gbs", "hf_all_gbs", "nanotoken_all_gbs"):
                if isinstance(A.get(k), float):
                    A[f"ratio_kernel_over_{k[:-4]}"] = A["gpu_kernel_gbs"] / A[k]
                    A[f"ratio_e2e_over_{k[:-4]}"] = A["gpu_e2e_gbs"] / A[k]
            log(f"  {be.name}: kernel {A['gpu_kernel_gbs']:.2f} GB/s, e2e "
                f"{A['gpu_e2e_gbs']:.2f} GB/s; kernel / daskwp CPU "
                f"{A.get('ratio_kernel_over_daskwp_cpu_all', float('nan')):.1f}x")

    # -- cluster --------------------------------------------------------------------------
    def cluster(self):
        args, be = self.args, self.be
        import dask.dataframe as dd
        import pyarrow.parquet as pq
        from distributed import Client, LocalCluster

        from daskwp.distributed.plugin import register_worker_plugin

        C: dict = {}
        self.R["cluster"] = C
        vname = DEFAULT_VOCAB[0] if DEFAULT_VOCAB in self.vocabs else self.vocabs[0][0]
        real = be is not None and be.real
        tmp = Path(tempfile.mkdtemp(prefix="daskwp-gpucheck-"))
        try:
            # input: English with empty and null documents, as Parquet files
            arr = tiled(self.english(), args.cluster_mb)
            n = len(arr)
            mask = np.zeros(n, dtype=bool)
            mask[::997] = True                       # nulls
            texts = pa.array(np.where(mask, None, np.asarray(arr.to_pylist(), dtype=object)),
                             type=pa.large_string())
            in_dir = tmp / "input"
            in_dir.mkdir()
            per = int(np.ceil(n / args.cluster_files))
            for i in range(args.cluster_files):
                pq.write_table(pa.table({"text": texts.slice(i * per, per)}),
                               in_dir / f"part-{i:03d}.parquet")
            C.update(input_mb=round(arrow_nbytes(arr) / MB, 2), documents=n,
                     files=args.cluster_files, nulls=int(mask.sum()))
            opts = dict(max_length=128, stride=32, padding="do_not_pad")
            C["options"] = opts
            n_gpus = be.cp.cuda.runtime.getDeviceCount() if real else 0
            tok_dev = self.tok(vname, device="gpu") if real else self.tok(vname)
            tok_cpu = self.tok(vname)
            C["device_tokenizer"] = tok_dev.device

            # The CPU job reads its own copy of the input: dask tokens ignore the tokenizer's
            # device (see findings), so with one input both jobs would be the same graph.
            in_cpu = tmp / "input_cpu"
            shutil.copytree(in_dir, in_cpu)

            def job(client, tok, out, src):
                ddf = dd.read_parquet(str(src), dtype_backend="pyarrow")
                C.setdefault("partitions", ddf.npartitions)
                C.setdefault("partition_type", str(ddf._meta["text"].dtype))
                res = ddf["text"].wordpiece.tokenize(vocab=tok, **opts)
                t0 = time.perf_counter()
                res.to_parquet(str(out))
                return time.perf_counter() - t0

            # the device job
            stack = contextlib.ExitStack()
            client = None
            if real:
                try:
                    from dask_cuda import LocalCUDACluster

                    cluster = stack.enter_context(
                        LocalCUDACluster(threads_per_worker=1, dashboard_address=None))
                    client = stack.enter_context(Client(cluster))
                    kind = "dask_cuda.LocalCUDACluster"
                except Exception as e:
                    stack.close()
                    stack = contextlib.ExitStack()
                    why = f"{type(e).__name__}: {e}"
                    log(f"  dask_cuda.LocalCUDACluster unavailable ({why}); plain LocalCluster")
                    kind = f"LocalCluster ({n_gpus} workers; dask_cuda unavailable: {why})"
            else:
                kind = "LocalCluster (dry run: CPU backend on both sides)"
            if client is None:
                cluster = stack.enter_context(LocalCluster(
                    n_workers=max(1, n_gpus) if real else 2, threads_per_worker=1,
                    processes=True, dashboard_address=None))
                client = stack.enter_context(Client(cluster))
            C["device_cluster"] = kind
            log(f"  device job: {kind}, tokenizer device={tok_dev.device}")
            with stack:
                register_worker_plugin(client)
                C["device_cluster_workers"] = len(client.scheduler_info()["workers"])
                client.run(_warm_worker, real)
                t = job(client, tok_dev, tmp / "out_device", in_dir)
                C["device_job_s"] = round(t, 3)
                C["device_job_gbs"] = C["input_mb"] * MB / t / GB
                C["device_workers"] = client.run(_worker_report)
            log(f"  device job {C['device_job_s']} s ({C['device_job_gbs']:.3f} GB/s incl. "
                f"Parquet); workers: {C['device_workers']}")
            # the CPU job
            cpu_workers = max(1, min(8, (os.cpu_count() or 2) // 2))
            threads = max(1, (os.cpu_count() or 2) // cpu_workers)
            t0 = time.perf_counter()
            with LocalCluster(n_workers=cpu_workers, threads_per_worker=threads,
                              processes=True, dashboard_address=None) as lc, \
                    Client(lc) as client:
                register_worker_plugin(client)
                C["cpu_cluster"] = f"LocalCluster({cpu_workers} workers x {threads} threads)"
                C["cpu_cluster_start_s"] = round(time.perf_counter() - t0, 2)
                client.run(_warm_worker, False)
                t = job(client, tok_cpu, tmp / "out_cpu", in_cpu)
                C["cpu_job_s"] = round(t, 3)
                C["cpu_workers"] = client.run(_worker_report)
                C["cpu_job_gbs"] = C["input_mb"] * MB / t / GB
            log(f"  CPU job {C['cpu_job_s']} s ({C['cpu_job_gbs']:.3f} GB/s incl. Parquet) on "
                f"{C['cpu_cluster']}")
            # read both back and compare
            a = daskwp.read_tokenized(tmp / "out_device", tokenizer=tok_cpu)
            b = daskwp.read_tokenized(tmp / "out_cpu", tokenizer=tok_cpu)
            fa, fb = (x.to_dask().compute() for x in (a, b))
            C["rows"] = [len(fa), len(fb)]
            msg = _compare_frames(fa, fb)
            logids = np.unique(fb["logID"].to_numpy())
            global_ok = bool(len(logids) == n and logids[0] == 0 and logids[-1] == n - 1)
            C["logids_global"] = global_ok
            ba = next(iter(a.batches(4096, max_length=128)))
            bb = next(iter(b.batches(4096, max_length=128)))
            batch_ok = all(np.array_equal(ba[k], bb[k]) for k in
                           ("input_ids", "attention_mask", "metadata"))
            C["first_batch_equal"] = batch_ok
            C["files_written"] = [len(a.files), len(b.files)]
            C["ok"] = msg is None and global_ok and batch_ok
            if msg:
                C["mismatch"] = msg
            if real and not any(w.get("device_models") for w in C["device_workers"].values()):
                C["ok"] = False
                C["mismatch"] = "no device model on any worker: the job did not run on the GPU"
            if any("gpu" in w.get("tokenizer_devices", []) or w.get("device_models")
                   for w in C["cpu_workers"].values()):
                C["ok"] = False
                C["mismatch"] = "the CPU job ran on the GPU on some worker"
            if real:
                C["device_over_cpu_job"] = C["device_job_gbs"] / C["cpu_job_gbs"]
            log(f"  read back: rows {C['rows']}, logIDs global {global_ok}, first batch equal "
                f"{batch_ok}, device == cpu {msg is None}" + (f" ({msg})" if msg else ""))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- findings -------------------------------------------------------------------------
    def findings(self):
        import dask.base

        from daskwp.distributed.state import WorkerState

        F: dict = {}
        a = daskwp.WordPieceTokenizer(device="cpu")
        b = daskwp.WordPieceTokenizer(device="gpu")     # no device needed to build it
        F["dask_token_ignores_device"] = dask.base.tokenize(a) == dask.base.tokenize(b)
        st = WorkerState("gpucheck")
        first = st.tokenizer(b)
        F["worker_cache_ignores_device"] = st.tokenizer(a) is first
        try:
            from daskwp.backends.tokenizer import TOKENIZER_OPTIONS

            F["accessor_has_device_keyword"] = "device" in TOKENIZER_OPTIONS
        except Exception as e:
            F["accessor_has_device_keyword"] = f"? ({type(e).__name__})"
        try:
            import inspect

            from daskwp.distributed import cluster as _cl

            F["connect_gpu_needs_cudf"] = '"cudf"' in inspect.getsource(_cl._gpu_stack_missing)
        except Exception as e:
            F["connect_gpu_needs_cudf"] = f"? ({type(e).__name__})"
        self.R["findings"] = F
        for k, v in F.items():
            log(f"  {k}: {v}")

    # -- report ---------------------------------------------------------------------------
    def summary(self) -> dict:
        R = self.R
        def sec(name):
            v = R.get(name)
            return v if isinstance(v, dict) else {}

        P, C, A, T = sec("parity"), sec("cluster"), sec("anchors"), sec("throughput")
        parts = T.get("partitions", [])
        timed_ok = all(p.get("timed_matches_untimed", True) for p in parts)
        cluster_ok = C.get("ok") is True if isinstance(R.get("cluster"), dict) else True
        timed_ok = timed_ok and sec("variants").get("ok", True)
        parity_ok = bool(P.get("ok")) and cluster_ok and timed_ok and not R["errors"]
        gpu = R["mode"] == "gpu"
        best_part = max(parts, key=lambda p: (p["mb"], p["kernel_gbs"])) if parts else None
        x = best_part["kernel_gbs"] if (gpu and best_part) else None
        cpu = A.get("daskwp_cpu_all_gbs")
        y = x / cpu if (x and isinstance(cpu, float)) else None
        S = {"parity_ok": parity_ok, "gpu_kernel_gbs": x, "ratio_over_daskwp_cpu": y,
             "cpu_threads": A.get("threads", os.cpu_count()),
             "largest_partition_mb": best_part["mb"] if best_part else None,
             "sections_failed": sorted(R["errors"]),
             "goal_30_gbs": (x >= 30) if x else None, "goal_20x_cpu": (y >= 20) if y else None}
        xs = f"{x:.1f}" if x else "-"
        ys = f"{y:.1f}" if y else "-"
        S["line"] = (f"gpu_check: parity {'ok' if parity_ok else 'FAILED'}, GPU {xs} GB/s, "
                     f"{ys}x daskwp CPU ({S['cpu_threads']} cores"
                     + ("" if gpu else "; cpu-only dry run: no GPU figures") + ")")
        R["summary"] = S
        return S

    def markdown(self) -> str:
        R = self.R
        E = R.get("env", {})
        L = [f"# daskwp GPU check ({R['mode']}{', fast' if R['fast'] else ''})", "",
             f"- machine: {E.get('cpu_model')} ({E.get('cpu_count')} CPUs); device: "
             f"{(E.get('gpu') or {}).get('name', E.get('device_backend'))}",
             f"- versions: daskwp {E.get('daskwp')}, python {E.get('python')}, cupy "
             f"{E.get('cupy')}, dask {E.get('dask')}, dask_cuda {E.get('dask_cuda')}, "
             f"tokenizers {E.get('tokenizers')}, nanotoken {E.get('nanotoken')}",
             f"- {R['summary']['line']}", ""]
        N = R.get("nvrtc") if isinstance(R.get("nvrtc"), dict) else {}
        if N:
            L += [f"NVRTC: compile {N.get('compile_s')} s, cache load {N.get('cache_load_s')} s",
                  ""]
            if N.get("kernels"):
                L += ["| kernel | registers | local B | shared B | blocks/SM at 128 |",
                      "|---|---|---|---|---|"]
                for k, v in N["kernels"].items():
                    L.append(f"| {k} | {v['registers']} | {v['local_bytes']} | "
                             f"{v['shared_bytes']} | {v['blocks_per_sm_at_128']} |")
                L.append("")
        P = R.get("parity") if isinstance(R.get("parity"), dict) else {}
        if P:
            L += [f"Parity ({P.get('backend')}): {P.get('checks')} GPU == CPU checks, "
                  f"{len(P.get('failures', []))} failures; CPU == HF on "
                  f"{(P.get('cpu_hf') or {}).get('corpora')} corpora: "
                  f"{(P.get('cpu_hf') or {}).get('ok')}; options not covered: "
                  f"{P.get('options_not_covered')}", ""]
            for f in P.get("failures", [])[:20]:
                L.append(f"- {f}")
        T = R.get("throughput")
        if isinstance(T, dict) and T.get("partitions"):
            L += ["", f"Throughput ({T['backend']}), English, GB/s of input:", "",
                  "| MB | chunk | slots | kernel GB/s | tokens/s | e2e GB/s | windows GB/s | "
                  "upload | checks | plan | count | scan | write | windows | download | "
                  "download windows |", "|" + "---|" * 16]
            for p in T["partitions"]:
                w = p["stages_wall_ms"]

                def c(k):
                    return f"{w[k]:.2f}" if k in w else "-"

                def g(k):
                    return f"{p[k]:.2f}" if isinstance(p.get(k), float) else "-"
                L.append(f"| {p['mb']} | {p['chunk_bytes']} | {p['n_slots']} | "
                         f"{p['kernel_gbs']:.2f} | {p['tokens_per_s']:.3g} | {g('e2e_gbs')} | "
                         f"{g('windows_gbs')} | " + " | ".join(
                             c(k) for k in ("upload", "checks", "plan", "count", "scan",
                                            "write", "windows", "download",
                                            "download_windows")) + " |")
            L += ["", "Stage columns: wall ms (synchronize, perf_counter, stage, synchronize); "
                  "the CUDA-event ms are in the JSON (stages_gpu_ms).", ""]
            if T.get("corpora"):
                L += ["| corpus | vocab | MB | kernel GB/s | CPU all threads GB/s | ratio | "
                      "bytes/token |", "|---|---|---|---|---|---|---|"]
                for r in T["corpora"]:
                    L.append(f"| {r['corpus']} | {r['vocab']} | {r['mb']} | "
                             f"{r['kernel_gbs']:.2f} | {r['cpu_all_gbs']:.3f} | "
                             f"{r['ratio']:.1f}x | {r['bytes_per_token']:.2f} |")
                L.append("")
            if T.get("huge_document"):
                h = T["huge_document"]
                L += [f"One {h['mb']} MB document: kernel GB/s by chunk "
                      + ", ".join(f"{k} {v:.2f}" for k, v in
                                  (h.get("kernel_gbs_by_chunk") or {}).items())
                      + f"; CPU {h['cpu_all_gbs']:.3f} GB/s; equal {h['gpu_equals_cpu']}", ""]
            if T.get("lane_balance"):
                b = T["lane_balance"]
                L += [f"Lane balance ({b['mb']} MB English): natural order "
                      f"{b['natural']:.2f} GB/s, sorted by length {b['length_sorted']:.2f} GB/s "
                      f"({b['gain']:.2f}x)", ""]
        V = R.get("variants") if isinstance(R.get("variants"), dict) else {}
        if V.get("rows"):
            L += [f"Build variants (count pass only, {V['mb']} MB English, chunk "
                  f"{V['chunk_bytes']}):", "", "| maxrregcount | block | registers | local B | "
                  "count pass GB/s | counts equal |", "|---|---|---|---|---|---|"]
            for r in V["rows"]:
                L.append(f"| {r['maxrregcount']} | {r['block']} | {r['registers']} | "
                         f"{r['local_bytes']} | {r['count_pass_gbs']:.2f} | {r['counts_equal']} |")
            L.append("")
        A = R.get("anchors") if isinstance(R.get("anchors"), dict) else {}
        if A:
            def f(k, scale=1.0, unit="GB/s"):
                v = A.get(k)
                return f"{v * scale:.3f} {unit}" if isinstance(v, float) else str(v)
            L += ["", f"Anchors on {A.get('mb')} MB of English ({A.get('threads')} CPUs):", "",
                  "| what | throughput | GPU kernel / it | GPU e2e / it |", "|---|---|---|---|",
                  f"| daskwp CPU, all threads | {f('daskwp_cpu_all_gbs')} | "
                  f"{f('ratio_kernel_over_daskwp_cpu_all', unit='x')} | "
                  f"{f('ratio_e2e_over_daskwp_cpu_all', unit='x')} |",
                  f"| daskwp CPU, one thread | {f('daskwp_cpu_1thread_gbs')} | - | - |",
                  f"| HF tokenizers, all threads ({A.get('hf_mb')} MB) | {f('hf_all_gbs')} | "
                  f"{f('ratio_kernel_over_hf_all', unit='x')} | "
                  f"{f('ratio_e2e_over_hf_all', unit='x')} |",
                  f"| nanotoken, all threads | {f('nanotoken_all_gbs')} | "
                  f"{f('ratio_kernel_over_nanotoken_all', unit='x')} | "
                  f"{f('ratio_e2e_over_nanotoken_all', unit='x')} |",
                  f"| GPU ({A.get('gpu_backend')}) kernel / e2e | {f('gpu_kernel_gbs')} / "
                  f"{f('gpu_e2e_gbs')} | - | - |", ""]
        C = R.get("cluster") if isinstance(R.get("cluster"), dict) else {}
        if C:
            L += [f"Cluster: {C.get('device_cluster')} ({C.get('device_cluster_workers')} "
                  f"workers), {C.get('input_mb')} MB in {C.get('files')} Parquet files, "
                  f"{C.get('partitions')} partitions ({C.get('partition_type')}); device job "
                  f"{C.get('device_job_s')} s, CPU job {C.get('cpu_job_s')} s on "
                  f"{C.get('cpu_cluster')}; rows {C.get('rows')}; equal: {C.get('ok')}", ""]
        if R.get("findings"):
            L += ["Findings: " + ", ".join(f"{k}={v}" for k, v in R["findings"].items()), ""]
        if R["errors"]:
            L += ["Failed sections:", ""] + [f"- {k}: {v}" for k, v in R["errors"].items()]
        L.append(f"Section times (s): {R['sections']}")
        return "\n".join(L) + "\n"


def _nvidia_smi() -> str | None:
    """SM clock, its maximum, power and temperature now (None without nvidia-smi)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        import subprocess

        return subprocess.run([exe, "--query-gpu=clocks.sm,clocks.max.sm,power.draw,"
                               "temperature.gpu", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        return f"? ({type(e).__name__})"


def _warm_worker(gpu: bool):
    """Imports, and on a GPU worker the compiled module (from CuPy's cache), outside the
    timed job. No tokenizer is cached and no vocabulary uploaded, so the job's own device
    models are what _worker_report counts."""
    import daskwp  # noqa: F401
    from daskwp.backends import cuda as c

    if gpu:
        c._module()
    return True


def _worker_report(dask_worker=None):
    """What a worker ran: the devices of its cached tokenizers and how many device models
    (vocabulary blobs on a GPU) its process holds."""
    from daskwp.backends import cuda as c

    plugin = getattr(dask_worker, "plugins", {}).get("daskwp") if dask_worker else None
    state = getattr(plugin, "state", None)
    devices = []
    if state is not None:
        devices = [state.tokenizers.get(k).device for k in state.tokenizers.keys()]
    return {"tokenizer_devices": devices, "device_models": len(c._models),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _compare_frames(fa, fb) -> str | None:
    """None when two tokenized frames hold the same rows, else the first differing logID."""
    cols = [c for c in ("logID", "window", "start", "stop", "input_ids", "attention_mask")
            if c in fb.columns]
    if [c for c in cols if c not in fa.columns]:
        return f"columns {list(fa.columns)}, expected {list(fb.columns)}"
    fa = fa.sort_values(["logID", "window"]).reset_index(drop=True)
    fb = fb.sort_values(["logID", "window"]).reset_index(drop=True)
    if len(fa) != len(fb):
        return f"{len(fa)} rows, expected {len(fb)}"
    for c in cols:
        ta = pa.array(fa[c]) if not hasattr(fa[c].array, "_pa_array") else \
            fa[c].array._pa_array.combine_chunks()
        tb = pa.array(fb[c]) if not hasattr(fb[c].array, "_pa_array") else \
            fb[c].array._pa_array.combine_chunks()
        if not ta.equals(tb):
            i = next((i for i in range(len(ta)) if ta[i] != tb[i]), 0)
            return f"column {c}: first differing row {i}, logID {int(fb['logID'].iloc[i])}"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="folder with corpus/ and vocab/ (default: "
                    "$DASKWP_SHARED_DATA, .gpudata, ../shared/data, tests/data)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / ".gpucheck-out"),
                    help="folder for gpu_check.json and gpu_check.md (default $OUT)")
    ap.add_argument("--fast", action="store_true", help="smaller inputs (GPU_CHECK_FAST=1)")
    ap.add_argument("--cpu-only", action="store_true",
                    help="dry run: no device; device steps on the emulated backend")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per figure (best)")
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=None,
                    help="English partition sizes (default 10 100 1000; fast 10 64)")
    ap.add_argument("--chunks", type=int, nargs="+", default=None,
                    help="chunk_bytes values, 0 = the launcher's automatic choice "
                         "(default 0 256 1024 4096)")
    ap.add_argument("--corpus-mb", type=float, default=None,
                    help="each corpus repeated to this size (0: skip; default 64, fast 16)")
    ap.add_argument("--huge-doc-mb", type=float, default=None,
                    help="one document of this size (0: skip; default 64, fast 16)")
    ap.add_argument("--anchor-mb", type=float, default=None,
                    help="anchor input size (default 256, fast 64)")
    ap.add_argument("--hf-mb", type=float, default=None,
                    help="HF and the one-thread CPU run on this prefix (default 32, fast 8)")
    ap.add_argument("--parity-kb", type=float, default=None,
                    help="GPU parity on at most this much of each corpus (0: all; default "
                         "all, cpu-only fast 40)")
    ap.add_argument("--parity-grid", choices=("full", "rotate"), default=None,
                    help="full: every window case on every corpus x vocabulary; rotate: one "
                         "case per corpus x vocabulary, in turn (default full; cpu-only fast "
                         "rotate)")
    ap.add_argument("--cluster-mb", type=float, default=None,
                    help="cluster input size (default 128, fast 32; 0: skip)")
    ap.add_argument("--cluster-files", type=int, default=None)
    ap.add_argument("--variant-mb", type=float, default=None,
                    help="input of the build-variant section (default 256, fast 64)")
    ap.add_argument("--variant-regs", type=int, nargs="+", default=None,
                    help="NVRTC --maxrregcount values to try, 0 = none (default 0 48 40 32; "
                         "fast 0 40 32)")
    ap.add_argument("--variant-blocks", type=int, nargs="+", default=None,
                    help="block sizes to try with the default build (default 64 128 256)")
    ap.add_argument("--download-windows-mb", type=float, default=200.0,
                    help="download the windows in the stage breakdown up to this input size")
    ap.add_argument("--skip", nargs="*", default=[],
                    help="sections to skip (nvrtc parity throughput anchors cluster)")
    ap.add_argument("--budget", action="append", default=[], metavar="SECTION=SECONDS",
                    help="stop a section after this long (default with --fast: parity=150 "
                         "throughput=120 variants=90 anchors=90 cluster=150)")
    ap.add_argument("--extra-json", help="a JSON object to merge into the results (the "
                    "shell script's build and test results)")
    args = ap.parse_args(argv)

    fast, dry = args.fast, args.cpu_only

    def pick(v, full, f, d):
        return v if v is not None else (d if dry else f if fast else full)

    args.repeat = pick(args.repeat, 3, 2, 1)
    args.sizes_mb = pick(args.sizes_mb, [10, 100, 1000], [10, 64], [0.3])
    args.chunks = pick(args.chunks, [0, 256, 1024, 4096], [0, 256, 4096], [0, 1024])
    args.corpus_mb = pick(args.corpus_mb, 64, 16, 0.05)
    args.huge_doc_mb = pick(args.huge_doc_mb, 64, 16, 0.3)
    args.anchor_mb = pick(args.anchor_mb, 256, 64, 8 if not fast else 2)
    args.hf_mb = pick(args.hf_mb, 32, 8, 2 if not fast else 0.5)
    args.hf_parity_whole = not (dry and fast)   # the dry run's HF parity: the samples
    args.parity_kb = pick(args.parity_kb, 0, 0, 0 if not fast else 40)
    args.variant_mb = pick(args.variant_mb, 256, 64, 0.3)
    args.variant_regs = pick(args.variant_regs, [0, 48, 40, 32], [0, 40, 32], [0])
    args.variant_blocks = pick(args.variant_blocks, [64, 128, 256], [64, 128, 256], [64, 128])
    args.parity_grid = pick(args.parity_grid, "full", "full", "full" if not fast else "rotate")
    args.cluster_mb = pick(args.cluster_mb, 128, 32, 4 if not fast else 2)
    args.cluster_files = pick(args.cluster_files, 16, 8, 4)

    args.budgets = dict(parity=150, throughput=120, variants=90, anchors=90, cluster=150) \
        if fast and not dry else {}
    for b in args.budget:
        k, _, v = b.partition("=")
        args.budgets[k] = int(v)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not dry:   # measure a real NVRTC compile: CuPy's kernel cache starts empty
        os.environ.setdefault("CUPY_CACHE_DIR", tempfile.mkdtemp(prefix="daskwp-cupy-cache-"))
    chk = Check(args)
    if args.extra_json:
        try:
            chk.R.update(json.loads(Path(args.extra_json).read_text()))
        except (OSError, ValueError) as e:
            chk.R["errors"]["extra_json"] = str(e)
    t_start = time.perf_counter()

    def write(partial: bool) -> dict:
        chk.R["total_s"] = round(time.perf_counter() - t_start, 1)
        chk.R["complete"] = not partial
        S = chk.summary()
        (out / "gpu_check.json").write_text(json.dumps(chk.R, indent=1, default=str))
        (out / "gpu_check.md").write_text(chk.markdown())
        return S

    with chk.section("env"):
        chk.env()
    steps = [("findings", chk.findings), ("nvrtc", chk.nvrtc), ("parity", chk.parity),
             ("throughput", chk.throughput), ("variants", chk.variants),
             ("anchors", chk.anchors),
             ("cluster", chk.cluster)]
    for name, fn in steps:
        if name in args.skip:
            chk.R[name] = "skipped (--skip)"
            continue
        if name in ("nvrtc", "variants") and chk.be is None:
            chk.R[name] = "skipped (no device backend)"
            continue
        if name == "cluster" and args.cluster_mb <= 0:
            chk.R[name] = "skipped (--cluster-mb 0)"
            continue
        with chk.section(name, args.budgets.get(name, 0)):
            fn()
        write(partial=True)   # a run cut short still leaves what it measured
    S = write(partial=False)
    log(f"\nwrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'} "
        f"({chk.R['total_s']} s)")
    log(S["line"])
    return 0 if S["parity_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
