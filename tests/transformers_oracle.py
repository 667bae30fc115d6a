"""A side-by-side oracle for the transformers drop-in: :class:`SideBySide` holds daskwp's
drop-in and transformers' ``BertTokenizerFast`` built from the same model folder; every call
and attribute read goes to both, the results (values and types; errors: both or neither
raise) are compared, and daskwp's is returned. Attribute writes go to both.

Used by tests/test_transformers_mixin.py, which runs transformers' own
``TokenizerTesterMixin`` with this class as the tokenizer under test.
"""

from __future__ import annotations

import copy
import logging
import warnings

import numpy as np

from daskwp.backends.transformers_loader import from_pretrained as daskwp_from_pretrained

try:
    import torch
except ImportError:
    torch = None

#: Reads and calls whose results differ by design (paths written, identity, internals);
#: they go to daskwp only (save_pretrained: both would write the same files).
DASKWP_ONLY = {"save_pretrained", "init_kwargs", "init_inputs", "name_or_path",
               "deprecation_warnings", "__repr__", "tokenizer", "vocab_obj"}


class OracleMismatch(AssertionError):
    """daskwp's drop-in and transformers disagree."""


def same(got, want, where: str) -> None:
    """Equal values of the same types, recursively (BatchEncodings by their data)."""
    if hasattr(want, "data") and hasattr(want, "keys") and hasattr(got, "keys"):
        if list(got.keys()) != list(want.keys()):
            raise OracleMismatch(f"{where}: keys {list(got.keys())} != {list(want.keys())}")
        for k in want.keys():
            same(got[k], want[k], f"{where}[{k!r}]")
        return
    if torch is not None and torch.is_tensor(want):
        if not (torch.is_tensor(got) and got.dtype == want.dtype and
                tuple(got.shape) == tuple(want.shape) and torch.equal(got, want)):
            raise OracleMismatch(f"{where}: {got!r:.200} != {want!r:.200}")
        return
    if isinstance(want, np.ndarray):
        if not (isinstance(got, np.ndarray) and got.dtype == want.dtype and
                got.shape == want.shape):
            raise OracleMismatch(f"{where}: {got!r:.200} != {want!r:.200}")
        if want.dtype == object:
            for k, (g, w) in enumerate(zip(got, want)):
                same(g, w, f"{where}[{k}]")
        elif not np.array_equal(got, want):
            raise OracleMismatch(f"{where}: arrays differ")
        return
    if isinstance(want, (list, tuple)):
        if type(got) is not type(want) or len(got) != len(want):
            raise OracleMismatch(f"{where}: {got!r:.200} != {want!r:.200}")
        for k, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{k}]")
        return
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            raise OracleMismatch(f"{where}: {got!r:.200} != {want!r:.200}")
        for k in want:
            same(got[k], want[k], f"{where}[{k!r}]")
        return
    if type(got) is not type(want) or got != want:
        raise OracleMismatch(f"{where}: {got!r:.200} ({type(got).__name__}) != "
                             f"{want!r:.200} ({type(want).__name__})")


def _both(name, run_daskwp, run_hf):
    # the oracle's own log records are not the tokenizer under test's
    hf_loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
                  if n == "transformers" or n.startswith("transformers.")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for lg in hf_loggers:
                lg.disabled = True
            try:
                want = run_hf()
            finally:
                for lg in hf_loggers:
                    lg.disabled = False
        want_err = None
    except BaseException as e:  # noqa: BLE001 - tokenizers' PanicException included
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        want, want_err = None, e
    try:
        got = run_daskwp()
    except NotImplementedError:
        raise                     # refused by name (docs/design.md §3.6), not a difference
    except Exception as e:
        if want_err is None:
            raise OracleMismatch(f"{name}: daskwp raised {type(e).__name__}: {e}; "
                                 f"transformers returned {want!r:.200}") from e
        raise
    if want_err is not None:
        raise OracleMismatch(f"{name}: transformers raised {type(want_err).__name__}: "
                             f"{str(want_err)[:200]}; daskwp returned {got!r:.200}")
    same(got, want, name)
    return got


class SideBySide:
    """daskwp's drop-in, with every call checked against ``BertTokenizerFast``."""

    @classmethod
    def from_pretrained(cls, folder, *args, **kwargs):
        from transformers import BertTokenizerFast
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf = BertTokenizerFast.from_pretrained(folder, *args, **copy.deepcopy(kwargs))
        return cls(daskwp_from_pretrained(folder, **kwargs), hf)

    def __init__(self, daskwp_tokenizer, hf_tokenizer):
        object.__setattr__(self, "_dt", daskwp_tokenizer)
        object.__setattr__(self, "_hf", hf_tokenizer)

    def __getattr__(self, name):
        d = getattr(self._dt, name)            # AttributeError: the drop-in lacks it
        if name in DASKWP_ONLY:
            return d
        if callable(d) and not isinstance(d, type):
            h = getattr(self._hf, name)

            def call(*args, **kwargs):
                return _both(name, lambda: d(*args, **kwargs),
                             lambda: h(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
            return call
        same(d, getattr(self._hf, name), name)
        return d

    def __setattr__(self, name, value):
        setattr(self._hf, name, copy.deepcopy(value))
        setattr(self._dt, name, value)

    def __call__(self, *args, **kwargs):
        return self.__getattr__("__call__")(*args, **kwargs)

    def __len__(self):
        n = len(self._dt)
        same(n, len(self._hf), "__len__")
        return n

    def __repr__(self):
        return f"SideBySide({self._dt!r})"
