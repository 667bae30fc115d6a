"""The ``throughput`` and ``variants`` sections: kernel, end-to-end and windows GB/s by
partition size and chunk size with the per-stage breakdown, every corpus against the CPU,
one huge document, lane balance; and the count pass under other register limits and block
sizes.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from daskwp.backends import cuda

from .compare import diff_encoding
from .data import (DEFAULT_VOCAB, GB, MB, arrow_nbytes, corpora, large_string, log,
                   one_document, tiled, vocab_for)
from .device import nvidia_smi, best, timed_encode, to_host


class ThroughputSections:
    """Mixin of :class:`gpu_check.Check`: throughput, variants."""

    def throughput(self):
        args, be = self.args, self.be
        if be is None:
            self.R["throughput"] = "skipped (no device backend)"
            return
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
        T["clocks_after"] = nvidia_smi()

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
