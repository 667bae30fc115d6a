"""Sentence pairs: daskwp against HuggingFace ``tokenizers`` on the same pairs (MB/s).

Pairs: short sentences (en_ewt) as questions, long documents glued from book lines
(Moby Dick) as contexts; ``truncation="only_second"`` with overflow (QA windows). Each
library runs on one thread and on all threads; daskwp's ids, type ids and overflow mapping
are checked against HF's before timing.

    .venv/bin/python benchmarks/pairs_bench.py [--data /work/shared/data] [--pairs 2000]
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

from _common import best


def load_pairs(data: Path, n: int):
    qs = [x for x in (data / "corpus/en_ewt.txt").read_text(encoding="utf-8").split("\n")
          if x.strip() and len(x) < 120]
    lines = (data / "corpus/en_book_moby_dick.txt").read_text(encoding="utf-8").split("\n")
    ctx, at = [], 0
    for size in itertools.islice(itertools.cycle([4, 10, 25]), n):
        if at + size > len(lines):
            at = 0
        ctx.append(" ".join(lines[at:at + size]))
        at += size
    return [qs[i % len(qs)] for i in range(n)], ctx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("DASKWP_SHARED_DATA", "/work/shared/data"))
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--max-length", type=int, default=384)
    ap.add_argument("--stride", type=int, default=128)
    args = ap.parse_args()

    import daskwp
    from tokenizers import BertWordPieceTokenizer

    data = Path(args.data)
    vocab = data / "vocab/bert-base-uncased/vocab.txt"
    qs, ctx = load_pairs(data, args.pairs)
    mb = sum(len(q.encode()) + len(c.encode()) for q, c in zip(qs, ctx)) / 1e6
    pairs = list(zip(qs, ctx))
    ml, st = args.max_length, args.stride
    opts = dict(max_length=ml, stride=st, truncation="only_second",
                return_overflowing_tokens=True, return_token_type_ids=True)

    hf = BertWordPieceTokenizer(str(vocab), lowercase=True)
    hf.enable_truncation(ml, stride=st, strategy="only_second")
    hf.enable_padding(length=ml)

    # parity first
    tok = daskwp.WordPieceTokenizer(vocab, num_threads=0)
    out = tok(qs, text_pair=ctx, **opts)
    ids, types, mapping = [], [], []
    for i, e in enumerate(hf.encode_batch(pairs)):
        for w in [e] + list(e.overflowing):
            ids.append(w.ids)
            types.append(w.type_ids)
            mapping.append(i)
    assert out.input_ids.tolist() == ids, "input_ids differ from HF"
    assert out.token_type_ids.tolist() == types, "token_type_ids differ from HF"
    assert out.metadata[:, 0].tolist() == mapping, "overflow mapping differs from HF"
    print(f"{len(pairs)} pairs, {mb:.1f} MB, {out.num_rows} rows (max_length={ml}, "
          f"stride={st}): ids, type ids and mapping equal HF")

    for threads in (1, 0):
        label = "1 thread" if threads == 1 else f"all threads ({os.cpu_count()})"
        tok = daskwp.WordPieceTokenizer(vocab, num_threads=threads)
        t_dw = best(lambda: tok(qs, text_pair=ctx, **opts))
        os.environ["RAYON_NUM_THREADS"] = str(threads or os.cpu_count())
        # HF reads RAYON_NUM_THREADS once per process: all threads unless parallelism is off
        os.environ["TOKENIZERS_PARALLELISM"] = "false" if threads == 1 else "true"
        t_hf = best(lambda: hf.encode_batch(pairs) if threads != 1 else
                    [hf.encode(q, c) for q, c in pairs])
        print(f"{label:>20}: daskwp {mb / t_dw:7.1f} MB/s   HF {mb / t_hf:7.1f} MB/s   "
              f"({t_hf / t_dw:.1f}x)")


if __name__ == "__main__":
    main()
