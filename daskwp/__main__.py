"""``python -m daskwp``: the same as the ``daskwp`` command."""

from .cli import console_main

console_main()
