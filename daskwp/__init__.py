"""daskwp — Dask-distributed, multi-GPU WordPiece tokenization for BERT-family models.

HuggingFace-exact token ids from one fused normalize+WordPiece kernel (CPU and CUDA),
strided windows with (logID, start, stop) metadata, and global logIDs across a cluster.
The package is layered (docs/design.md §8): core → backends → frames → distributed →
accessors, jobs → cli; this module is the public face and re-exports the API.
"""

import os as _os
import sys as _sys
import warnings as _warnings


def _started_as_command(argv, orig_argv, main_file) -> bool:
    """Whether this process is the ``daskwp`` command: its console script (``__main__`` is
    the script ``daskwp``) or ``python -m daskwp`` (``-m daskwp.cli``), which imports this
    package while ``sys.argv[0]`` is still ``"-m"``."""
    if main_file and _os.path.splitext(_os.path.basename(main_file))[0] in (
            "daskwp", "daskwp-script"):
        return True
    if list(argv[:1]) != ["-m"]:
        return False
    orig_argv = list(orig_argv)
    for k, a in enumerate(orig_argv[1:], 1):   # the interpreter's -m, the first one
        if a == "-m":
            return orig_argv[k + 1:k + 2] in (["daskwp"], ["daskwp.cli"])
        if a.startswith("-m"):
            return a[2:] in ("daskwp", "daskwp.cli")
    return False


if _started_as_command(_sys.argv, getattr(_sys, "orig_argv", ()),
                       getattr(_sys.modules.get("__main__"), "__file__", None)):
    # The command does no BLAS work, and OpenBLAS's threads, started when numpy loads it,
    # spin for a while on every core (~0.1 s of CPU: half of `import numpy`'s) before they
    # sleep. One thread unless the environment says otherwise; worker processes inherit it,
    # as a nanny's get OPENBLAS_NUM_THREADS=1 anyway (distributed.nanny.pre-spawn-environ).
    _os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .core import config as _config  # noqa: F401  (registers daskwp's dask.config defaults)
from .core import cache as _cache
from .core.decode import decode, merge_wordpieces
from .core.labels import align_labels, labels_to_spans, spans_to_labels
from .core.ragged import BatchWindows, Encoding, RaggedRows
from .core.stitch import stitch, stitch_flat
from .core.version import __version__
from .core.vocab import Vocabulary
from .core.windows import OutputSizeError
from .backends import cpu as _cpu
from .backends import memory as _host_memory
from .backends.cpu import windows_from_encoding
from .backends.tokenizer import WordPieceTokenizer
from .backends.transformers_compat import TransformersTokenizer
from .distributed.cluster import connect
from .accessors.register import register_accessors
from .io.tokenized import read_tokenized
from . import memory

register_accessors()  # .wordpiece on pandas, Dask and (when it imports) cudf Series

__all__ = ["BatchWindows", "Encoding", "OutputSizeError", "RaggedRows", "TransformersTokenizer", "Vocabulary", "WordPieceTokenizer",
           "__version__", "align_labels", "connect", "decode",
           "labels_to_spans", "memory", "merge_wordpieces", "read_tokenized",
           "register_accessors", "spans_to_labels",
           "stitch", "stitch_flat", "windows_from_encoding"]


# -- the memory functions' old names: deprecated aliases for one release (0.x: removed in the
# next), outside __all__; daskwp.memory holds them now.
def _deprecated(old: str, new: str, fn):
    def alias(*args, **kwargs):
        _warnings.warn(f"daskwp.{old} is deprecated and will be removed in the next release; "
                       f"use {new}", DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)
    alias.__name__ = alias.__qualname__ = old
    alias.__module__ = __name__
    alias.__doc__ = f"Deprecated: use {new}. (Same result as before.)"
    return alias


cache_info = _deprecated("cache_info", 'daskwp.memory.info()["caches"]', _cache.cache_info)
clear_caches = _deprecated("clear_caches", "daskwp.memory.clear()", _cache.clear_caches)
word_cache_info = _deprecated("word_cache_info", 'daskwp.memory.info()["word_cache"]',
                              _cpu.word_cache_info)
host_pool_info = _deprecated("host_pool_info", 'daskwp.memory.info()["host_pool"]',
                             _host_memory.host_pool_info)
release_host_memory = _deprecated(
    "release_host_memory", "daskwp.memory.release() (which also gives back the word cache's "
    "spare mappings)", _host_memory.release_host_memory)
set_host_pool_limit = _deprecated("set_host_pool_limit",
                                  "daskwp.memory.set_limit(host_pool=nbytes)",
                                  _host_memory.set_host_pool_limit)
