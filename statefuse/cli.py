"""``statefuse.cli``, the public path of the command line; its code lives in `statefuse.entry.cli`.

Importing this path gives the very module object of the entry floor (``statefuse.cli is
statefuse.entry.cli``), so private names and patches behave as before; the star import is what
type checkers read.
"""

import sys

from statefuse.entry import cli as _module
from statefuse.entry.cli import *  # noqa: F403

sys.modules[__name__] = _module
