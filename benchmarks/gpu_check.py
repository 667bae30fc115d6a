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

This file assembles and runs the check; each section is a mixin in its own module of
``benchmarks/gpucheck/`` (with the inputs, the device side, the comparisons and the cases
beside them).
"""

from __future__ import annotations

import os

# HF tokenizers must use all cores: rayon reads this when its pool starts (first use).
os.environ.pop("RAYON_NUM_THREADS", None)
os.environ["TOKENIZERS_PARALLELISM"] = "true"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))   # _common and gpucheck, from a file path

import daskwp  # noqa: E402
from gpucheck.anchors import AnchorsSection  # noqa: E402
from gpucheck.cluster import ClusterSection  # noqa: E402
from gpucheck.compare import diff_encoding, diff_windows  # noqa: E402,F401 (tests use them)
from gpucheck.data import (DEFAULT_VOCAB, VOCAB_CONFIGS, arrow_nbytes, corpora,  # noqa: E402,F401
                           find_data, large_string, log, one_document, read_documents, tiled,
                           vocab_for)
from gpucheck.device import Backend  # noqa: E402
from gpucheck.environment import EnvironmentSections  # noqa: E402
from gpucheck.parity import ParitySection  # noqa: E402
from gpucheck.report import ReportSections  # noqa: E402
from gpucheck.throughput import ThroughputSections  # noqa: E402


# ---------------------------------------------------------------------------------------
# The run: each section is a mixin of its own module (benchmarks/gpucheck/)
# ---------------------------------------------------------------------------------------
class Check(EnvironmentSections, ParitySection, ThroughputSections, AnchorsSection,
            ClusterSection, ReportSections):
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

    # -- nvrtc ----------------------------------------------------------------------------

    # -- parity ---------------------------------------------------------------------------

    # -- throughput -----------------------------------------------------------------------

    # -- variants -------------------------------------------------------------------------

    # -- anchors --------------------------------------------------------------------------

    # -- cluster --------------------------------------------------------------------------

    # -- findings -------------------------------------------------------------------------

    # -- report ---------------------------------------------------------------------------


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
