"""daskwp — Dask-distributed, multi-GPU WordPiece tokenization for BERT-family models.

HuggingFace-exact token ids from one fused normalize+WordPiece kernel (CPU and CUDA),
strided windows with (logID, start, stop) metadata, and global logIDs across a cluster.
The package is layered (docs/design.md §8): core → backends → frames → distributed →
accessors, jobs → cli; this module is the public face and re-exports the API.
"""

from .core import config as _config  # noqa: F401  (registers daskwp's dask.config defaults)
from .core.cache import cache_info, clear_caches
from .core.decode import decode, merge_wordpieces
from .core.labels import align_labels, labels_to_spans, spans_to_labels
from .core.ragged import BatchWindows, Encoding, RaggedRows
from .core.stitch import stitch, stitch_flat
from .core.version import __version__
from .core.vocab import Vocabulary
from .core.windows import OutputSizeError
from .backends.cpu import windows_from_encoding, word_cache_info
from .backends.memory import host_pool_info, release_host_memory, set_host_pool_limit
from .backends.tokenizer import WordPieceTokenizer
from .backends.transformers_compat import TransformersTokenizer
from .distributed.cluster import connect
from .accessors.register import register_accessors
from .io.tokenized import read_tokenized

register_accessors()  # .wordpiece on pandas, Dask and (when it imports) cudf Series

__all__ = ["BatchWindows", "Encoding", "OutputSizeError", "RaggedRows", "TransformersTokenizer", "Vocabulary", "WordPieceTokenizer",
           "__version__", "align_labels", "cache_info", "clear_caches", "connect", "decode",
           "host_pool_info", "labels_to_spans", "merge_wordpieces", "read_tokenized",
           "register_accessors", "release_host_memory", "set_host_pool_limit", "spans_to_labels",
           "stitch", "stitch_flat", "windows_from_encoding", "word_cache_info"]
