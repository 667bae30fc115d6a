"""daskwp's defaults in ``dask.config`` (``daskwp/config.yaml``), as distributed does.

A keyword argument left at ``None`` resolves through
``dask.config.get("daskwp.<name>", override_with=value)``.
"""

from __future__ import annotations

from pathlib import Path

import dask.config
import yaml

_DEFAULTS_PATH = Path(__file__).with_name("config.yaml")

with open(_DEFAULTS_PATH, encoding="utf-8") as _f:
    DEFAULTS: dict = yaml.safe_load(_f)

dask.config.update_defaults(DEFAULTS)


def get(name: str, value=None):
    """``value`` when it is not None, else the configured ``daskwp.<name>``."""
    return dask.config.get(f"daskwp.{name}", override_with=value)
