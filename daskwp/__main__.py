"""``python -m daskwp``: the same as the ``daskwp`` command."""

import sys

from .cli import main

sys.exit(main())
