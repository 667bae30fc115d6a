#!/usr/bin/env python
"""The transformers drop-in against transformers' BertTokenizerFast and nanotoken's as_hf().

One command, the same batches for every tokenizer::

    python benchmarks/dropin_bench.py [--quick] [--repeats 5] [--data DIR]
        [--out benchmarks/results/dropin_bench.md]

Batches of 32, 256 and 4,096 lines of the shared English corpora (bert-base-uncased), called
as existing code calls a tokenizer: ``tok(batch, padding=True, truncation=True,
max_length=128, return_tensors=...)`` with ``"pt"`` when PyTorch is installed (else
``"np"``), ``padding="max_length"``, and token classification's label alignment
(``return_offsets_mapping=True`` and ``word_ids(i)`` of every row, as transformers' NER
examples call it). Every tokenizer's ``input_ids`` and ``attention_mask`` (and word ids) are
checked equal to transformers' before any timing (a mismatch stops the run; a tokenizer
without the method is left out of that row). Figures: the best (minimum) of ``--repeats`` calls per batch, in milliseconds, and
lines per second; ``--quick`` runs one repeat of smaller batch counts (a smoke test, no
meaningful figures).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import find_data

BATCH_SIZES = (32, 256, 4096)


def corpus(data: Path) -> list[str]:
    lines = []
    for f in sorted((data / "corpus").rglob("*.txt")):
        if f.name.upper().startswith("LICENSE"):
            continue
        text = f.read_text(encoding="utf-8").split("\n")
        lines.extend(t for t in text if t)
    return lines


def as_numpy(x):
    if hasattr(x, "numpy"):
        return x.numpy()
    return np.asarray(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, a smoke test")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=None, help="write the Markdown report here")
    args = ap.parse_args(argv)
    repeats = 1 if args.quick else args.repeats

    import daskwp
    from transformers import BertTokenizerFast

    try:
        import torch  # noqa: F401
        tensors = "pt"
    except ImportError:
        tensors = "np"
    data = find_data(args.data, ("vocab/bert-base-uncased/vocab.txt",))
    vocab = str(data / "vocab" / "bert-base-uncased" / "vocab.txt")
    lines = corpus(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=512)
    runners = {"transformers BertTokenizerFast": hf,
               "daskwp as_transformers()": daskwp.WordPieceTokenizer(vocab).as_transformers(
                   model_max_length=512)}
    try:
        import nanotoken
        runners["nanotoken as_hf()"] = nanotoken.Tokenizer.from_vocab(
            vocab, lowercase=True).as_hf()
        from importlib.metadata import version

        nt_version = version("nanotoken")
    except ImportError:
        nt_version = None
    def word_ids(enc, n):
        return [enc.word_ids(i) for i in range(n)]

    calls = [("padding=True", dict(padding=True, truncation=True, max_length=128,
                                   return_tensors=tensors), None),
             ("padding='max_length'", dict(padding="max_length", truncation=True,
                                           max_length=128, return_tensors=tensors), None),
             ("offsets + word_ids(i)", dict(padding=True, truncation=True, max_length=128,
                                            return_offsets_mapping=True), word_ids)]
    rows = []
    for size in BATCH_SIZES:
        n_batches = 1 if args.quick else max(1, min(8, 8192 // size))
        batches = [lines[(k * size) % max(1, len(lines) - size):][:size]
                   for k in range(n_batches)]
        for label, kw, post in calls:
            # ids checked first: every tokenizer against transformers on every batch
            active = dict(runners)
            for b in batches:
                want = hf(b, **kw)
                for name, tok in list(active.items()):
                    try:
                        got = tok(b, **kw)
                        if post is not None and post(got, len(b)) != post(want, len(b)):
                            sys.exit(f"{name}: word ids differ from transformers on a batch "
                                     f"of {size} ({label})")
                    except (NotImplementedError, AttributeError, TypeError) as e:
                        print(f"{name}: left out of {label!r} ({type(e).__name__}: "
                              f"{str(e)[:80]})")
                        del active[name]
                        continue
                    for key in ("input_ids", "attention_mask"):
                        if not np.array_equal(as_numpy(got[key]), as_numpy(want[key])):
                            sys.exit(f"{name}: {key} differs from transformers on a batch of "
                                     f"{size} ({label})")
            result = {}
            for name, tok in active.items():
                best = float("inf")
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    for b in batches:
                        enc = tok(b, **kw)
                        if post is not None:
                            post(enc, len(b))
                    best = min(best, (time.perf_counter() - t0) / len(batches))
                result[name] = best
            rows.append((size, label, result))
            print(f"batch {size:5d} {label:22s} " + "  ".join(
                f"{n}: {t * 1e3:8.2f} ms" for n, t in result.items()), flush=True)
    names = list(runners)
    out = [f"# transformers drop-in benchmark ({datetime.date.today()})", "",
           "Earlier runs: [HISTORY.md](HISTORY.md).", "",
           f"{platform.platform()}, Python {platform.python_version()}, return_tensors="
           f"{tensors!r}, max_length=128, truncation=True; best of {repeats}; "
           f"nanotoken {nt_version}" + (" (quick: not a measurement)" if args.quick else ""),
           "", "| batch | call | " + " | ".join(f"{n} ms" for n in names) +
           " | daskwp / transformers |", "|" + "---|" * (len(names) + 3)]
    for size, label, res in rows:
        ratio = res["transformers BertTokenizerFast"] / res["daskwp as_transformers()"]
        out.append(f"| {size} | {label} | " + " | ".join(
            f"{res[n] * 1e3:.2f}" if n in res else "n/a" for n in names)
                   + f" | {ratio:.2f}x |")
    report = "\n".join(out) + "\n"
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
