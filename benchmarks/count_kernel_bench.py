"""The count-only kernel (``_ext.count32``) against encode (``_ext.encode32``) on one batch:
the shared English (UD EWT), English books and loghub lines repeated to ``MB`` MB (as
pretraining_bench.py's input), bert-base-uncased, the word memo warmed by one call first.

    python benchmarks/count_kernel_bench.py count|encode|both [MB] [THREADS]

``count`` warms the memo with an encode call and times count calls, ``encode`` the other
way round, ``both`` warms with count and alternates them (``REPS`` rounds, default 1); each
line gives the call's wall and process CPU seconds, [UNK] and tokens. Under callgrind (one
thread, the measured call only) it gives the instruction counts of read_count.md:

    valgrind --tool=callgrind --toggle-collect='*tokenize_range<int, daskwp::(anonymous namespace)::Scratch*' \\
        python benchmarks/count_kernel_bench.py count 16 1
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import daskwp
from daskwp import _ext
from daskwp.backends.cpu import _cache_key

FILES = ["en_ewt.txt", "en_book_moby_dick.txt", "en_book_pride_and_prejudice.txt", "logs/*.log"]


def main() -> None:
    mode = sys.argv[1]
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 16
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    data = Path(os.environ.get("DASKWP_SHARED_DATA", Path(__file__).resolve().parents[2]
                               / "shared" / "data"))
    lines = []
    for pat in FILES:
        for f in sorted((data / "corpus").glob(pat)):
            lines += [x for x in f.read_text(encoding="utf-8").split("\n") if x.strip()]
    docs, n = [], 0
    while n < mb * 1e6:
        for line in lines:
            docs.append(line)
            n += len(line.encode())
            if n >= mb * 1e6:
                break
    arr = pa.array(docs, type=pa.string())
    tok = daskwp.WordPieceTokenizer(str(data / "vocab/bert-base-uncased/vocab.txt"),
                                    lowercase=True)
    m = tok.kernel_model
    key = _cache_key(m)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[: len(arr) + 1]
    text = np.frombuffer(bufs[2], dtype=np.uint8)

    def count():
        _, tokens, unknown = _ext.count32(m.vocab_blob, m.norm_blob,
                                          m.max_input_chars_per_word, offsets, text, None, 0,
                                          threads, key)
        return tokens, unknown

    def encode():
        out = _ext.encode32(m.vocab_blob, m.norm_blob, m.max_input_chars_per_word, offsets,
                            text, None, 0, threads, key, 0, False)
        return len(out[0]), out[-1]

    calls = {"count": [count], "encode": [encode], "both": [count, encode]}[mode]
    (encode if mode == "count" else count)()   # warms the memo
    for _ in range(int(os.environ.get("REPS", "1"))):
        for f in calls:
            t0, c0 = time.perf_counter(), time.process_time()
            tokens, unknown = f()
            print(f"{f.__name__} {time.perf_counter() - t0:.4f}s wall "
                  f"{time.process_time() - c0:.4f}s cpu {unknown} {tokens}", flush=True)


if __name__ == "__main__":
    main()
