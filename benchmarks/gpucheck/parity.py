"""The ``parity`` section: the GPU against the CPU on every corpus x vocabulary for encode and
every window case, the tokenizer settings and chunk sizes, and the CPU against HF
``tokenizers``.
"""

from __future__ import annotations

import pyarrow as pa

from daskwp.backends import cuda

from .cases import CHUNK_CASES, COVERED_OPTIONS, TOKENIZER_CASES, WINDOW_CASES
from .compare import doc_snippet, diff_encoding, diff_windows
from .data import (DEFAULT_VOCAB, VOCAB_CONFIGS, corpora, large_string, log, nbytes, subsample,
                   vocab_for)


class ParitySection:
    """Mixin of :class:`gpu_check.Check`: parity."""

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
                                     f"document {bad} {doc_snippet(docs, bad)}")
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
