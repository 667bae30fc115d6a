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

from .accessors.register import after_import as _after_import, register_accessors
from .core.version import __version__

register_accessors()  # .wordpiece on pandas, Dask and (when it imports) cudf Series


def _register_config_defaults() -> None:
    from .core.config import dask_config
    dask_config()


# daskwp's dask.config defaults (daskwp.<name>) are there as soon as dask is imported, now
# or later: importing daskwp imports no dask itself (the in-process command needs none of it).
_after_import("dask.config", _register_config_defaults)

#: The public API, imported on first use (PEP 562): ``import daskwp`` imports neither dask
#: nor pandas nor the tokenizer's backends until a name below is used (the ``daskwp``
#: command's start; docs/design.md §8). {name: (module, attribute; None: the module)}
_LAZY = {
    "decode": (".core.decode", "decode"),
    "merge_wordpieces": (".core.decode", "merge_wordpieces"),
    "align_labels": (".core.labels", "align_labels"),
    "labels_to_spans": (".core.labels", "labels_to_spans"),
    "spans_to_labels": (".core.labels", "spans_to_labels"),
    "BatchWindows": (".core.ragged", "BatchWindows"),
    "Encoding": (".core.ragged", "Encoding"),
    "RaggedRows": (".core.ragged", "RaggedRows"),
    "stitch": (".core.stitch", "stitch"),
    "stitch_flat": (".core.stitch", "stitch_flat"),
    "Vocabulary": (".core.vocab", "Vocabulary"),
    "OutputSizeError": (".core.windows", "OutputSizeError"),
    "windows_from_encoding": (".backends.cpu", "windows_from_encoding"),
    "WordPieceTokenizer": (".backends.tokenizer", "WordPieceTokenizer"),
    "TransformersTokenizer": (".backends.transformers_compat", "TransformersTokenizer"),
    "connect": (".distributed.cluster", "connect"),
    "read_tokenized": (".io.tokenized", "read_tokenized"),
    "memory": (".memory", None),
}

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


#: {old name: (new name, module, function)}
_DEPRECATED = {
    "cache_info": ('daskwp.memory.info()["caches"]', ".core.cache", "cache_info"),
    "clear_caches": ("daskwp.memory.clear()", ".core.cache", "clear_caches"),
    "word_cache_info": ('daskwp.memory.info()["word_cache"]', ".backends.cpu",
                        "word_cache_info"),
    "host_pool_info": ('daskwp.memory.info()["host_pool"]', ".backends.memory",
                       "host_pool_info"),
    "release_host_memory": ("daskwp.memory.release() (which also gives back the word "
                            "cache's spare mappings)", ".backends.memory",
                            "release_host_memory"),
    "set_host_pool_limit": ("daskwp.memory.set_limit(host_pool=nbytes)", ".backends.memory",
                            "set_host_pool_limit"),
}


def __getattr__(name: str):
    import importlib
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module, __name__)
        value = mod if attr is None else getattr(mod, attr)
    elif name in _DEPRECATED:
        new, module, attr = _DEPRECATED[name]
        value = _deprecated(name, new, getattr(importlib.import_module(module, __name__), attr))
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value   # once: later lookups find it as any module attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_DEPRECATED))
