"""GPU check: throughput and parity of the CUDA path against the CPU build and HuggingFace.

For every corpus file of the data folder (and two large inputs built from them: a big
partition of many documents, and one huge document) it prints one row:

    corpus | MB | GPU MB/s kernel | GPU MB/s e2e | GPU windows MB/s | CPU MB/s/core |
    HF MB/s (all cores) | parity

* GPU kernel: device-resident input (DeviceStrings) -> device-resident ragged ids, best of
  ``--repeat`` runs (count, scan, write; includes the two small read-backs it needs);
* GPU e2e: host Arrow buffers -> device -> ids and offsets back on the host;
* GPU windows: device-resident input -> input_ids / attention_mask / metadata on the device
  (max_length=128, stride=32);
* CPU: the native extension on one thread (``num_threads=1``);
* HF: ``tokenizers.BertWordPieceTokenizer.encode_batch`` on all cores;
* parity: GPU ids == CPU ids and GPU windows == CPU windows (``gpu==cpu``), and CPU ids ==
  HF ids (``cpu==hf``), on every document of the row.

Large rows measure CPU and HF on a sample (``--sample-mb``) to bound the run time; their
parity compares GPU and CPU on the whole input with the CPU on all cores.

``--cpu-only`` skips everything that needs CuPy (to dry-run the script without a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import daskwp  # noqa: E402

VOCAB_FOR = {  # corpus stem (or folder) -> (vocabulary folder, lowercase)
    "zh": ("bert-base-chinese", False),
    "multi": ("bert-base-multilingual-cased", False),
    "edge": ("bert-base-multilingual-cased", False),
}
DEFAULT_VOCAB = ("bert-base-uncased", True)
MB = 1e6


def find_data(arg: str | None) -> Path:
    cands = [arg] if arg else []
    cands += [os.environ.get("DASKWP_SHARED_DATA"), str(REPO / ".gpudata"),
              str(REPO.parent / "shared" / "data"), str(REPO / "shared" / "data")]
    for c in cands:
        if c and (Path(c) / "corpus").is_dir():
            return Path(c)
    sys.exit(f"no data folder with corpus/ found (tried {[c for c in cands if c]})")


def read_documents(path: Path) -> list[str]:
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


def best(fn, repeat: int, sync=None) -> float:
    """Best wall time of `repeat` calls (after one warm-up call)."""
    if repeat < 1:
        return float("inf")
    fn()
    if sync:
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def nbytes(docs) -> int:
    return sum(len(d.encode("utf-8")) for d in docs)


def sample(docs: list[str], mb: float) -> list[str]:
    out, size = [], 0
    for d in docs:
        out.append(d)
        size += len(d.encode("utf-8"))
        if size >= mb * MB:
            break
    if len(docs) == 1 and size > mb * MB:   # one huge document: cut it
        out = [docs[0][: int(mb * MB)]]
    return out


class Row:
    def __init__(self, name, mb):
        self.name, self.mb = name, mb
        self.gpu_kernel = self.gpu_e2e = self.gpu_windows = self.cpu = self.hf = None
        self.parity = []

    def cells(self):
        def f(x):
            return "-" if x is None else f"{x:,.1f}"
        return [self.name, f"{self.mb:.2f}", f(self.gpu_kernel), f(self.gpu_e2e),
                f(self.gpu_windows), f(self.cpu), f(self.hf), " ".join(self.parity) or "-"]


HEAD = ["corpus", "MB", "GPU MB/s kernel", "GPU MB/s e2e", "GPU win MB/s", "CPU MB/s/core",
        "HF MB/s all", "parity"]
WIDTHS = [44, 8, 15, 12, 12, 13, 11, 16]


def print_line(cells):
    print("  ".join(c.ljust(w) if i in (0, 7) else c.rjust(w)
                    for i, (c, w) in enumerate(zip(cells, WIDTHS))))
    sys.stdout.flush()


def print_head():
    print_line(HEAD)
    print_line(["-" * w for w in WIDTHS])


def windows_equal(g, e) -> bool:
    return all(np.array_equal(g[k].get() if hasattr(g[k], "get") else np.asarray(g[k]),
                              np.asarray(e[k]))
               for k in ("input_ids", "attention_mask", "metadata"))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_row(name, docs, tok, hf, args, whole: bool):
    """One table row. whole: CPU and HF on every document (and HF parity); else on a
    sample of --sample-mb, and GPU == CPU checked with the CPU on all cores."""
    import pyarrow as pa

    from daskwp.backends import cuda

    arrow = pa.array(docs, type=pa.large_string())
    row = Row(name, nbytes(docs) / MB)
    win_kw = dict(max_length=128, stride=32)
    part = docs if whole else sample(docs, args.sample_mb)
    part_arrow = arrow if whole else pa.array(part, type=pa.large_string())
    part_mb = nbytes(part) / MB
    part_enc, t = timed(lambda: tok.encode(part_arrow, num_threads=1))
    if whole:   # small: best of --repeat
        t = min(t, best(lambda: tok.encode(part_arrow, num_threads=1), args.repeat - 1))
    row.cpu = part_mb / t
    cpu_enc = part_enc if whole else tok.encode(arrow, num_threads=0)
    if hf is not None:
        out, t = timed(lambda: hf.encode_batch(part, add_special_tokens=False))
        row.hf = part_mb / t
        if whole:
            ok = [e.ids for e in out] == cpu_enc.to_list()
            row.parity.append("cpu==hf" if ok else "CPU!=HF")
    if not args.cpu_only:
        import cupy as cp

        sync = cp.cuda.Device().synchronize
        dev = cuda.device_strings(arrow)              # resident on the device
        row.gpu_kernel = row.mb / best(lambda: cuda.encode_cuda(tok, dev), args.repeat, sync)

        def e2e():
            ids, off = cuda.encode_cuda(tok, arrow)
            return ids.get(), off.get()

        row.gpu_e2e = row.mb / best(e2e, args.repeat, sync)
        row.gpu_windows = row.mb / best(lambda: cuda.windows_cuda(tok, dev, **win_kw),
                                        args.repeat, sync)
        ids, off = e2e()
        ok = np.array_equal(ids, cpu_enc.token_ids) and np.array_equal(off, cpu_enc.offsets)
        if ok:
            ok = windows_equal(cuda.windows_cuda(tok, dev, **win_kw),
                               daskwp.windows_from_encoding(cpu_enc, tok.vocab,
                                                                    **win_kw))
        row.parity.insert(0, "gpu==cpu" if ok else "GPU!=CPU")
        del dev
        cp.get_default_memory_pool().free_all_blocks()
    print_line(row.cells())
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="data folder with corpus/ and vocab/ (default: "
                    "$DASKWP_SHARED_DATA, .gpudata, ../shared/data)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big-mb", type=float, default=256.0,
                    help="size of the large many-document input (0: skip)")
    ap.add_argument("--huge-doc-mb", type=float, default=64.0,
                    help="size of the single huge document (0: skip)")
    ap.add_argument("--sample-mb", type=float, default=8.0,
                    help="CPU/HF sample size for the large inputs")
    ap.add_argument("--cpu-only", action="store_true", help="skip the GPU (dry run)")
    ap.add_argument("--no-hf", action="store_true", help="skip HuggingFace")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)

    data = find_data(args.data)
    files = corpora(data)
    print(f"data: {data} ({len(files)} corpus files)")
    if not args.cpu_only:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        print(f"GPU: {props['name'].decode()}, CuPy {cp.__version__}, "
              f"CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}")
        t0 = time.perf_counter()
        from daskwp.backends import cuda

        cuda.encode_cuda(daskwp.WordPieceTokenizer(), ["compile the kernels"])
        print(f"first call (NVRTC compile or CuPy cache load + upload): "
              f"{time.perf_counter() - t0:.1f} s")
        for name in ("dwp_chunk_tokenize", "dwp_chunk_starts", "dwp_window_fill_mask32"):
            a = cuda._module().get_function(name).attributes
            print(f"  {name}: {a.get('num_regs')} registers, {a.get('local_size_bytes')} B "
                  f"local, {a.get('shared_size_bytes')} B shared, max "
                  f"{a.get('max_threads_per_block')} threads/block")
    print(f"CPU: {os.cpu_count()} cores")

    toks, hfs = {}, {}

    def get_tok(vocab_name, lower):
        key = (vocab_name, lower)
        if key not in toks:
            vpath = data / "vocab" / vocab_name / "vocab.txt"
            toks[key] = daskwp.WordPieceTokenizer(str(vpath), lowercase=lower)
            hfs[key] = None
            if not args.no_hf:
                try:
                    from tokenizers import BertWordPieceTokenizer

                    hfs[key] = BertWordPieceTokenizer(str(vpath), lowercase=lower)
                except ImportError:
                    pass
        return toks[key], hfs[key]

    rows, all_docs = [], []
    print()
    print_head()
    for path in files:
        docs = read_documents(path)
        vocab_name, lower = vocab_for(path)
        tok, hf = get_tok(vocab_name, lower)
        name = f"{path.relative_to(data / 'corpus')} [{vocab_name.replace('bert-base-', '')}]"
        rows.append(run_row(name, docs, tok, hf, args, True))
        if vocab_name == "bert-base-uncased":
            all_docs += docs
    tok, hf = get_tok(*DEFAULT_VOCAB)
    base_mb = nbytes(all_docs) / MB
    if args.big_mb > 0 and all_docs:
        reps = max(1, int(args.big_mb / base_mb))
        rows.append(run_row(f"english x{reps} (many docs) [uncased]", all_docs * reps, tok,
                            hf, args, False))
    if args.huge_doc_mb > 0 and all_docs:
        one = " ".join(all_docs)
        reps = max(1, int(args.huge_doc_mb / (len(one.encode()) / MB)))
        rows.append(run_row("one huge document [uncased]", [" ".join([one] * reps)], tok,
                            hf, args, False))
    print()
    print_head()
    for r in rows:
        print_line(r.cells())
    bad = [r.name for r in rows if any(p.isupper() for p in r.parity)]
    if args.json:
        Path(args.json).write_text(json.dumps(
            [dict(zip(HEAD, r.cells())) for r in rows], indent=1))
    if bad:
        print(f"PARITY FAILURES: {bad}")
        return 1
    print("parity: all rows equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
