"""``statefuse.mcp``, the public path of the MCP server; its code lives in `statefuse.entry.mcp`.

Importing this path gives the very module object of the entry floor (``statefuse.mcp is
statefuse.entry.mcp``), so private names and patches behave as before; the star import is what
type checkers read.
"""

import sys

from statefuse.entry import mcp as _module
from statefuse.entry.mcp import *  # noqa: F403

sys.modules[__name__] = _module
