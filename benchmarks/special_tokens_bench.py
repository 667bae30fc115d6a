#!/usr/bin/env python
"""Registered special tokens: throughput with 0, 1 and 10,000 of them, and the time to
register 10,000 (docs/design.md §7, "Registered special tokens").

    python benchmarks/special_tokens_bench.py [--size-mb 8] [--repeats 7] [--threads 1] \
        [--count 10000] [--data DIR] [--out benchmarks/results/special_tokens_bench.md]

For each corpus (English: UD EWT and the two books; logs: loghub ``*.log``) and each token
family, it tokenizes the same Arrow array with the bert-base-uncased tokenizer as it is
(none), with one registered token and with ``--count`` registered tokens, in interleaved
rounds (none, one, many; one, many, none; ...), and reports MB/s of input bytes for the best
(minimum time) round of each and the throughput ratios as the median over the rounds of the
ratio of the two measured in the same round. The families differ in their first byte, which is what the
literal match costs per input byte: ``<|tok_00042|>`` (``<`` is rare in both corpora),
``[tok_00042]`` (``[`` starts BERT's own special tokens and is common in logs) and
``tok_00042`` (a letter: every ``t`` of the text leaves the fast path, with one token as
with 10,000). The last table puts one registered token into the text every ~100 bytes
(spliced between words), so the match itself runs often; "none" is then the tokenizer
without them (the tokens' characters are punctuation and words there).

One thread and CPU time by default (``--clock wall`` for elapsed time): on a shared machine
all-core and wall-clock timings are mostly the neighbours' noise. Registration is wall time.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import platform
import sys
import time
from pathlib import Path

import pyarrow as pa
from _common import default_data_dir, read_lines, repeat_to

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import daskwp  # noqa: E402

MB = 1e6
CORPORA = [
    ("English (EWT + books)", ["en_ewt.txt", "en_book_moby_dick.txt",
                               "en_book_pride_and_prejudice.txt"]),
    ("Logs (loghub *.log)", ["logs/*.log"]),
]
FAMILIES = [
    ("<|tok_NNNNN|>", lambda i: f"<|tok_{i:05d}|>"),
    ("[tok_NNNNN]", lambda i: f"[tok_{i:05d}]"),
    ("tok_NNNNN", lambda i: f"tok_{i:05d}"),
]


def splice(lines: list[str], token, every: int = 100) -> list[str]:
    """One token (``token(k)``) between two words about every ``every`` bytes."""
    out, k, since = [], 0, 0
    for line in lines:
        words = line.split(" ")
        for j in range(len(words)):
            since += len(words[j]) + 1
            if since >= every:
                words[j] = words[j] + " " + token(k)
                k, since = k + 1, 0
        out.append(" ".join(words))
    return out


def interleaved(fns: dict, repeats: int, clock) -> dict:
    """The times of each function in ``repeats`` interleaved rounds, on ``clock`` (the
    order rotates from round to round)."""
    times = {k: [] for k in fns}
    keys = list(fns)
    for r in range(repeats):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            gc.collect()
            t = clock()
            fns[k]()
            times[k].append(clock() - t)
    return times


def paired_ratio(slow: list, fast: list) -> float:
    """Median over the rounds of fast[r] / slow[r]: the throughput ratio of ``slow``'s
    function to ``fast``'s, measured back to back in each round (drifts cancel)."""
    return statistics.median(f / s for s, f in zip(slow, fast))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=8.0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: this process's CPU time (robust on a shared machine; with "
                         "--threads 1 it is the tokenizing thread's); wall: elapsed time")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    vocab = args.data / "vocab" / "bert-base-uncased" / "vocab.txt"
    base = daskwp.WordPieceTokenizer(vocab, num_threads=args.threads)
    report = [f"# Registered special tokens ({time.strftime('%Y-%m-%d')}, "
              f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
              f"{args.threads} thread(s), {args.size_mb:g} MB per corpus, best of "
              f"{args.repeats} interleaved rounds, MB per {args.clock} second)", "",
              "Earlier runs, and what changed between them: [HISTORY.md](HISTORY.md).", "",
              "MB/s: the best round of each; ratios: the median over the rounds of the ratio "
              "measured within the round.", ""]

    # Registration time.
    reg = {}
    times = []
    for name, make in FAMILIES:
        toks = [make(i) for i in range(args.count)]
        one = daskwp.WordPieceTokenizer(vocab, num_threads=args.threads)
        one.add_special_tokens(toks[:1])
        many = daskwp.WordPieceTokenizer(vocab, num_threads=args.threads)
        t = time.perf_counter()
        ids = many.add_special_tokens(toks)
        times.append((name, time.perf_counter() - t, ids[0], ids[-1]))
        reg[name] = (one, many)
    report += ["## Registering", "",
               f"| family | registering {args.count:,} tokens | ids |", "|---|---|---|"]
    report += [f"| `{n}` | {t:.3f} s | {a}..{b} |" for n, t, a, b in times]
    report.append("")

    def table(title, corpus_texts, tokenizers_of):
        rows = [f"## {title}", "",
                "| corpus | family | none MB/s | 1 token MB/s | "
                f"{args.count:,} tokens MB/s | {args.count:,} / none | {args.count:,} / 1 |",
                "|---|---|---|---|---|---|---|"]
        for cname, texts_of in corpus_texts:
            for fname, _ in FAMILIES:
                texts = texts_of(fname)
                arr = pa.array(texts, type=pa.large_string())
                nbytes = sum(len(x.encode("utf-8")) for x in texts)
                none, one, many = tokenizers_of(fname)
                t = interleaved({"none": lambda: none.encode(arr),
                                 "one": lambda: one.encode(arr),
                                 "many": lambda: many.encode(arr)}, args.repeats, clock)
                mbs = {k: nbytes / min(v) / MB for k, v in t.items()}
                rows.append(f"| {cname} | `{fname}` | {mbs['none']:.1f} | {mbs['one']:.1f} | "
                            f"{mbs['many']:.1f} | {paired_ratio(t['many'], t['none']):.3f} | "
                            f"{paired_ratio(t['many'], t['one']):.3f} |")
                print(rows[-1], file=sys.stderr, flush=True)
        return rows + [""]

    corpora = []
    for cname, pats in CORPORA:
        # whitespace-only lines are no documents here
        base = [x for x in read_lines(args.data, pats) if x.strip()]
        texts = repeat_to(base, int(args.size_mb * MB))[0]
        corpora.append((cname, texts))
    report += table("Plain corpora (no registered token in the text)",
                    [(c, (lambda f, t=t: t)) for c, t in corpora],
                    lambda f: (base, *reg[f]))
    fam = dict(FAMILIES)
    # The same text for the three: tokens 0, 1, 2, ... in turn; with one registered, the
    # others are near misses (the walk goes down to their number, then falls back).
    report += table("One of the registered tokens every ~100 bytes of text (\"1 token\": only "
                    "the first is registered, the others are near misses)",
                    [(c, (lambda f, t=t: splice(t, lambda k: fam[f](k % args.count))))
                     for c, t in corpora], lambda f: (base, *reg[f]))
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
