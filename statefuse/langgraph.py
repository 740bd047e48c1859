"""``statefuse.langgraph``, the public path of the LangGraph store; its code lives in
`statefuse.entry.langgraph`.

Importing this path gives the very module object of the entry floor (``statefuse.langgraph is
statefuse.entry.langgraph``), so private names and patches behave as before; the star import is what
type checkers read.
"""

import sys

from statefuse.entry import langgraph as _module
from statefuse.entry.langgraph import *  # noqa: F403

sys.modules[__name__] = _module
