# SPDX-License-Identifier: MIT
"""``python3 -m clbuf``: the ``clbuf`` command (clbuf.cli)."""
import sys

from .cli import main

sys.exit(main())
