"""daskwp's defaults in ``dask.config``, derived from the option table (core/options.py).

Override them as any Dask setting: ``dask.config.set({"daskwp.max_length": 256})``, a YAML
file in ``~/.config/dask/``, or the environment (``DASK_DASKWP__MAX_LENGTH=256``). Keys have
the names of the Python parameters. A keyword argument left at ``None`` resolves through
``dask.config.get("daskwp.<name>", override_with=value)``.

Importing dask costs ~0.25 s of CPU (``import dask.config`` imports all of ``dask``), which the
in-process command (``daskwp count`` / ``tokenize`` on one machine) has no other use for. So
this module imports it only once something else has: while ``dask.config`` is not imported,
:func:`get` reads the ``daskwp`` section of dask's configuration the way dask would (its YAML
and JSON files, then ``DASK_DASKWP__<KEY>`` variables; :func:`_read_like_dask`), and the
defaults are registered in ``dask.config`` on the first :func:`get` after dask is imported
(or by :func:`dask_config`), before any ``dask.config`` value is read.
"""

from __future__ import annotations

import ast
import importlib
import os
import site
import sys
import threading

from .options import check, config_defaults

_lock = threading.Lock()
#: whether daskwp's defaults are in ``dask.config`` (dask's ``update_defaults``)
_registered = False
#: the ``daskwp`` section read without dask: {name: value}, None until first read
_section: dict | None = None


def dask_config():
    """``dask.config``, imported, with daskwp's defaults registered (once)."""
    global _registered
    config = importlib.import_module("dask.config")   # (also from inside dask's own import)
    if not _registered:
        with _lock:
            if not _registered:
                config.update_defaults(config_defaults())
                _registered = True
    return config


def _dask_paths() -> list:
    """dask.config's ``_get_paths()``: the folders (and files) of its YAML configuration,
    lowest priority first."""
    paths = [os.getenv("DASK_ROOT_CONFIG", "/etc/dask"),
             os.path.join(sys.prefix, "etc", "dask"),
             *[os.path.join(prefix, "etc", "dask") for prefix in site.PREFIXES],
             os.path.join(os.path.expanduser("~"), ".config", "dask")]
    if "DASK_CONFIG" in os.environ:
        paths.append(os.environ["DASK_CONFIG"])
    return list(reversed(list(dict.fromkeys(reversed(paths)))))


def _config_files(paths) -> list:
    """dask.config's ``collect_yaml`` file list: each folder's ``*.json|yaml|yml``, sorted."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            try:
                files.extend(sorted(os.path.join(path, p) for p in os.listdir(path)
                                    if os.path.splitext(p)[1].lower()
                                    in (".json", ".yaml", ".yml")))
            except OSError:
                pass
        elif os.path.exists(path):
            files.append(path)
    return files


def _env_value(value: str):
    """dask.config's ``interpret_value``: a Python literal, else none/null/true/false, else
    the string."""
    try:
        return ast.literal_eval(value)
    except (SyntaxError, ValueError):
        pass
    return {"none": None, "null": None, "false": False, "true": True}.get(value.lower(), value)


def _merge(into: dict, section) -> None:
    """``section`` (a file's or the environment's ``daskwp``) over ``into``, keys in either
    spelling (``max-length`` is ``max_length``, as dask's ``canonical_name`` has it)."""
    if not isinstance(section, dict):
        return
    for key, value in section.items():
        name = str(key).replace("-", "_")
        old = into.get(name)
        if isinstance(old, dict) and isinstance(value, dict):
            old = dict(old)
            _merge_nested(old, value)
            into[name] = old
        else:
            into[name] = value


def _merge_nested(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(into.get(key), dict) and isinstance(value, dict):
            _merge_nested(into[key], value)
        else:
            into[key] = value


def _read_like_dask() -> dict | None:
    """The ``daskwp`` section of dask's configuration as ``dask.config`` would collect it at
    its import: the defaults, then the config files in dask's search path (later ones win),
    then ``DASK_DASKWP__<KEY>`` environment variables. None where only dask can tell
    (``DASK_INTERNAL_INHERIT_CONFIG``: a serialized configuration a dask parent passed on)."""
    env = os.environ
    if "DASK_INTERNAL_INHERIT_CONFIG" in env:
        return None
    section = dict(config_defaults()["daskwp"])
    files = _config_files(_dask_paths())
    if files:
        import yaml  # only when there is a file (what dask's configuration reads it with)
        for path in files:
            try:
                with open(path) as f:
                    data = yaml.safe_load(f.read())
            except OSError:
                continue
            except Exception:  # noqa: BLE001  dask's own error says which file is malformed
                return None
            if isinstance(data, dict):
                for key, value in data.items():
                    if key == "daskwp":
                        _merge(section, value)
    env_section: dict = {}
    for name, value in env.items():
        if name.startswith("DASK_DASKWP__") or (
                name.startswith("DASK_") and name[5:].lower() == "daskwp"):
            parts = name[5:].lower().split("__")
            if len(parts) == 1:                    # DASK_DASKWP={...}: the whole section
                _merge(env_section, _env_value(value))
                continue
            node = env_section
            key = parts[1].replace("-", "_")
            for part in parts[2:]:                 # DASK_DASKWP__KEY__SUB: a nested value
                node = node.setdefault(key, {})
                if not isinstance(node, dict):
                    return None
                key = part
            node[key] = _env_value(value)
    _merge(section, env_section)
    return section


def _own_section() -> dict | None:
    global _section
    if _section is None:
        _section = _read_like_dask()
    return _section


def get(name: str, value=None):
    """``value`` when it is not None, else the configured ``daskwp.<name>``."""
    if value is not None:
        return value
    if "dask.config" not in sys.modules:
        section = _own_section()
        if section is not None and name in section:
            return section[name]
    config = dask_config()                               # a flag test once registered
    section = config.config.get("daskwp")
    if isinstance(section, dict) and name in section:   # the common case: one dict lookup
        return section[name]
    return config.get(f"daskwp.{name}")                 # hyphenated spellings, missing keys


def resolve(name: str, value=None):
    """``get(name, value)`` validated and normalized by the option table."""
    return check(name, get(name, value))


if "dask.config" in sys.modules:   # dask imported first: its config has our defaults now
    dask_config()
