"""Write a vocabulary's compiled blob and a normalization blob for core_bench.cpp.

    python benchmarks/native/dump_blobs.py OUT_DIR VOCAB [--no-lowercase] [--special N FMT]

--special N FMT: N special tokens registered (add_special_tokens), FMT.format(i) each,
e.g. --special 10000 'tok_{:05d}' (special_tokens_bench.py's letter-first family)."""
import sys
from pathlib import Path

import daskwp
from daskwp.core.normalizer import norm_blob

out, vocab = Path(sys.argv[1]), sys.argv[2]
lowercase = "--no-lowercase" not in sys.argv
out.mkdir(parents=True, exist_ok=True)
vocabulary = daskwp.Vocabulary.from_file(vocab)
if "--special" in sys.argv:
    at = sys.argv.index("--special")
    count, fmt = int(sys.argv[at + 1]), sys.argv[at + 2]
    tok = daskwp.WordPieceTokenizer(vocabulary, lowercase=lowercase)
    tok.add_special_tokens([fmt.format(i) for i in range(count)])
    vocabulary = tok.vocab
(out / "vocab.blob").write_bytes(vocabulary.blob)
(out / "norm.blob").write_bytes(norm_blob(True, True, lowercase, lowercase))
