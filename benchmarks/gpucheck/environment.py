"""The ``env``, ``nvrtc`` and ``findings`` sections: versions and the device, NVRTC compile
and cache-load times with the kernels' resources, and facts about daskwp the check relies
on or tripped over.
"""

from __future__ import annotations

import os
import platform
import sys
import time

import numpy as np
import pyarrow as pa

from daskwp.backends import cuda
import daskwp

from .data import DEFAULT_VOCAB, corpora, log
from .device import make_backend


class EnvironmentSections:
    """Mixin of :class:`gpu_check.Check`: env, nvrtc, findings."""

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
