"""The ``anchors`` section: one English input through daskwp's CPU (all threads and one), HF
``tokenizers``, nanotoken when it imports, and the GPU; the ratios of the GPU to each.
"""

from __future__ import annotations

import os
import time

from daskwp.backends import cuda

from .compare import diff_encoding
from .data import DEFAULT_VOCAB, GB, MB, VOCAB_CONFIGS, arrow_nbytes, log, tiled
from .device import best, to_host


class AnchorsSection:
    """Mixin of :class:`gpu_check.Check`: anchors."""

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
