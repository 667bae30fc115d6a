"""Job configuration: the job keys of the option table, validated into a :class:`JobConfig`.

Every key is an option of :data:`daskwp.core.options.OPTIONS` on the ``job`` surface, with its
validator, default and help; ``JobConfig``'s fields are generated from the same table. Keys
with a ``dask.config`` default (``daskwp.<name>``) take it when the job does not set them.
Tokenizer keys a job leaves unset stay None, so that a model folder's own settings apply
(:func:`daskwp.backends.tokenizer.resolve_tokenizer`), else the table's defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from typing import Any, Sequence

from ..core import config as dask_defaults
from ..core.options import CONFIG, IN_PROCESS_SCHEDULERS, JOB, OPTIONS, TOKENIZER, names
from ..frames.storage import is_url, local_path
from .errors import ConfigError

__all__ = ["CONFIG_KEYS", "JOB_KEYS", "JobConfig", "LOCAL_SCHEDULERS", "PACKAGE_DATA",
           "PATH_KEYS", "default_value", "load_config", "make_config", "parse_override",
           "resolve_path"]

PACKAGE_PREFIX = "package:"
PACKAGE_DATA = Path(__file__).resolve().parent.parent / "data"
LOCAL_SCHEDULERS = IN_PROCESS_SCHEDULERS   # no cluster: this process

#: Every job key, in the option table's order.
CONFIG_KEYS = names(JOB)
PATH_KEYS = ("input", "output", "vocab")
#: The paths of the ``security`` mapping (resolved and checked as the other paths).
_SECURITY_PATHS = ("ca_file", "cert", "key")
#: Output-affecting keys recorded in _job.json (the vocabulary enters through its hash).
JOB_KEYS = tuple(k for k in CONFIG_KEYS if OPTIONS[k].affects_output)
#: Tokenizer keys: None (unset) lets the model folder's settings apply.
_TOKENIZER_KEYS = tuple(k for k in CONFIG_KEYS if TOKENIZER in OPTIONS[k].surfaces)


def _job_default(key: str):
    if key in _TOKENIZER_KEYS:
        return None
    return OPTIONS[key].default


def _check_key(key: str, value):
    if value is None and key in _TOKENIZER_KEYS:
        return None
    return OPTIONS[key].check(key, value)


def _fields():
    required = [(k, Any) for k in ("input", "output")]
    return required + [(k, Any, dataclasses.field(default=_job_default(k)))
                       for k in CONFIG_KEYS if k not in ("input", "output")]


JobConfig = dataclasses.make_dataclass(
    "JobConfig", _fields(), frozen=True,
    namespace={"__doc__": "A validated job configuration; field names are the config keys "
                          "(``CONFIG_KEYS``, from the option table). Paths are absolute once "
                          "the config is built (``input`` may still hold glob patterns)."})
JobConfig.__module__ = __name__  # pickles by reference to this module


def resolve_path(value: str, base_dir: str | os.PathLike) -> str:
    """``package:NAME`` -> the file bundled in ``daskwp/data``; ``~`` is expanded; a relative
    path is taken relative to ``base_dir``; an fsspec URL stays as it is (``file://``
    becomes its local path)."""
    if value.startswith(PACKAGE_PREFIX):
        name = value[len(PACKAGE_PREFIX):].lstrip("/")
        p = PACKAGE_DATA / name
        if not p.exists():
            found = sorted(x.name for x in PACKAGE_DATA.iterdir() if not x.name.startswith("."))
            raise ConfigError(f"{value!r}: daskwp bundles no file {name!r}; bundled files: "
                              f"{', '.join(found)}")
        return str(p)
    if is_url(value):
        return value   # an fsspec URL (s3://, gs://, memory://, ...): docs/batch-jobs.md
    value = local_path(value)   # file:///x -> /x
    p = Path(os.path.expanduser(value))
    if not p.is_absolute():
        p = Path(base_dir) / p
    return os.path.normpath(str(p))


def make_config(values: dict, *, base_dir: str | os.PathLike | None = None,
                source: str = "config", path_base_dirs: dict | None = None) -> JobConfig:
    """Validate a mapping of config keys into a :class:`JobConfig`.

    ``base_dir`` anchors relative paths (default: the current directory);
    ``path_base_dirs`` may give another anchor per path key (used for ``--set`` values).
    """
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: a job configuration is a mapping of keys to values, "
                          f"got {type(values).__name__}")
    base_dir = Path.cwd() if base_dir is None else Path(base_dir)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in OPTIONS or key not in CONFIG_KEYS:
            close = difflib.get_close_matches(str(key), CONFIG_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{source}: unknown config key {key!r}{hint}; allowed keys: "
                              f"{', '.join(CONFIG_KEYS)}")
        if value is None and key not in _TOKENIZER_KEYS and OPTIONS[key].default is not None:
            continue  # None: the configured default (taken below)
        try:
            out[key] = _check_key(key, value)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{source}: {e}") from None
    for key in ("input", "output"):
        if out.get(key) is None:
            raise ConfigError(f"{source}: the config key {key!r} is required")
    anchors = {k: (path_base_dirs or {}).get(k, base_dir) for k in PATH_KEYS}
    for key in CONFIG_KEYS:
        if key not in out:
            try:
                out[key] = _check_key(key, default_value(key))
            except (ValueError, TypeError) as e:
                raise ConfigError(f"dask config daskwp.{key}: {e}") from None
            anchors[key] = Path.cwd()
    for key in PATH_KEYS:
        v = out.get(key)
        if v is None:
            continue
        if key == "vocab" and isinstance(v, str) and is_url(v):
            raise ConfigError(f"{source}: vocab {v!r}: a vocabulary is read from a local "
                              f"path or a bundled file (package:NAME), not from a URL; "
                              f"copy it to a local file")
        if isinstance(v, list):
            out[key] = [resolve_path(x, anchors[key]) for x in v]
        else:
            out[key] = resolve_path(v, anchors[key])
    if out.get("security") is not None:
        out["security"] = _check_security_files(
            out["security"], (path_base_dirs or {}).get("security", base_dir),
            out.get("scheduler_address"), source)
    return JobConfig(**out)


def _check_security_files(security: dict, base_dir, scheduler_address, source: str) -> dict:
    """``security``'s paths made absolute (relative to ``base_dir``) and checked to be
    readable files; a running scheduler is required (a local cluster is not secured)."""
    if scheduler_address is None or scheduler_address in LOCAL_SCHEDULERS:
        raise ConfigError(f"{source}: security applies to a running scheduler; set "
                          f"scheduler_address to its tls://host:port (got "
                          f"{scheduler_address!r})")
    out = dict(security)
    for key in _SECURITY_PATHS:
        if key not in out:
            continue
        path = resolve_path(out[key], base_dir)
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise ConfigError(f"{source}: security.{key}: cannot read {path!r}: "
                              f"{e.strerror or e}") from None
        if not os.path.isfile(path):
            raise ConfigError(f"{source}: security.{key}: {path!r} is not a file")
        out[key] = path
    return out




def default_value(key: str):
    """The default of a config key: ``dask.config``'s ``daskwp.<key>`` when the option has a
    ``dask.config`` default (~/.config/dask, DASK_DASKWP__<KEY>, ``dask.config.set``), else
    the table's. Tokenizer keys stay None (resolved with the model folder's settings)."""
    if key in _TOKENIZER_KEYS or CONFIG not in OPTIONS[key].surfaces:
        return _job_default(key)
    return dask_defaults.get(key)


def parse_override(item: str) -> tuple[str, Any]:
    """``key=value`` (value read as YAML: ``64``, ``true``, ``null``, ``a string``; a list
    such as ``[a, b]`` only for the list-valued keys: ``input`` and the repeatable options; a
    mapping such as ``{cert: c.pem}`` only for ``security``)."""
    import yaml
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    key, raw = item.split("=", 1)
    key = key.strip().replace("-", "_")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    takes_list = key == "input" or (key in OPTIONS and OPTIONS[key].repeatable)
    if (isinstance(value, dict) and key not in ("security", "storage_options")) or \
            (isinstance(value, list) and not takes_list):
        value = raw
    return key, value


def load_config(path: str | os.PathLike, overrides: Sequence[str] | dict = (),
                *, cwd: str | os.PathLike | None = None) -> JobConfig:
    """Read a job YAML. Relative paths in the file resolve against the file's folder;
    ``overrides`` (``key=value`` strings or a dict) replace keys, their relative paths
    resolving against ``cwd`` (default: the current directory)."""
    import yaml
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read job file {str(path)!r}: {e.strerror or e}") from None
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a job file is a mapping of config keys to values, got "
                          f"{type(values).__name__}")
    values = dict(values)
    if isinstance(overrides, dict):
        items = list(overrides.items())
    else:
        items = [parse_override(s) for s in overrides]
    cwd = Path.cwd() if cwd is None else Path(cwd)
    anchors = {}
    for key, value in items:
        if key == "security" and isinstance(value, dict):
            value = {k: resolve_path(v, cwd) if k in _SECURITY_PATHS and isinstance(v, str)
                     else v for k, v in value.items()}
            if isinstance(values.get(key), dict):
                value = {**values[key], **value}  # --tls-* flags replace single keys
        values[key] = value
        if key in PATH_KEYS:
            anchors[key] = cwd
    return make_config(values, base_dir=path.resolve().parent, source=str(path),
                       path_base_dirs=anchors)
