"""daskwp — Dask-distributed, multi-GPU WordPiece tokenization for BERT-family models.

HuggingFace-exact token ids from one fused normalize+WordPiece kernel (CPU and CUDA),
strided windows with (logID, start, stop) metadata, and global logIDs across a cluster.
"""

from .tokenizer import Encoding, WordPieceTokenizer
from .vocab import Vocabulary
from . import accessor  # noqa: F401  (registers the .wordpiece accessor: pandas, Dask, cudf)
from .cluster import connect
from .windows import BatchWindows, RaggedRows, merge_wordpieces, stitch, stitch_flat

__version__ = "0.1.0"

__all__ = ["BatchWindows", "Encoding", "RaggedRows", "Vocabulary", "WordPieceTokenizer",
           "__version__", "connect", "merge_wordpieces", "stitch", "stitch_flat"]
