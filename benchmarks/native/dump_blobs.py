"""Write a vocabulary's compiled blob and a normalization blob for core_bench.cpp."""
import sys
from pathlib import Path

import daskwp
from daskwp.core.normalizer import norm_blob

out, vocab = Path(sys.argv[1]), sys.argv[2]
lowercase = "--no-lowercase" not in sys.argv
out.mkdir(parents=True, exist_ok=True)
(out / "vocab.blob").write_bytes(daskwp.Vocabulary.from_file(vocab).blob)
(out / "norm.blob").write_bytes(norm_blob(True, True, lowercase, lowercase))
