"""daskwp's defaults in ``dask.config``, derived from the option table (core/options.py).

Override them as any Dask setting: ``dask.config.set({"daskwp.max_length": 256})``, a YAML
file in ``~/.config/dask/``, or the environment (``DASK_DASKWP__MAX_LENGTH=256``). Keys have
the names of the Python parameters. A keyword argument left at ``None`` resolves through
``dask.config.get("daskwp.<name>", override_with=value)``.
"""

from __future__ import annotations

import dask.config

from .options import check, config_defaults

dask.config.update_defaults(config_defaults())


def get(name: str, value=None):
    """``value`` when it is not None, else the configured ``daskwp.<name>``."""
    if value is not None:
        return value
    section = dask.config.config.get("daskwp")
    if isinstance(section, dict) and name in section:   # the common case: one dict lookup
        return section[name]
    return dask.config.get(f"daskwp.{name}")           # hyphenated spellings, missing keys


def resolve(name: str, value=None):
    """``get(name, value)`` validated and normalized by the option table."""
    return check(name, get(name, value))
