"""daskwp — Dask-distributed, multi-GPU WordPiece tokenization for BERT-family models.

HuggingFace-exact token ids from one fused normalize+WordPiece kernel (CPU and CUDA),
strided windows with (logID, start, stop) metadata, and global logIDs across a cluster.
"""

from .tokenizer import Encoding, WordPieceTokenizer
from .vocab import Vocabulary
from . import accessor  # noqa: F401  (registers the .wordpiece accessor: pandas, Dask, cudf)
from .cluster import connect
from .memory import host_pool_info, release_host_memory, set_host_pool_limit
from .windows import BatchWindows, RaggedRows, merge_wordpieces, stitch, stitch_flat

__version__ = "0.1.0"

__all__ = ["BatchWindows", "Encoding", "RaggedRows", "Vocabulary", "WordPieceTokenizer",
           "__version__", "connect", "host_pool_info", "merge_wordpieces",
           "release_host_memory", "set_host_pool_limit", "stitch", "stitch_flat"]
