"""The report: the summary line and dict, and the Markdown of every section.
"""

from __future__ import annotations

import os


class ReportSections:
    """Mixin of :class:`gpu_check.Check`: summary, markdown."""

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
