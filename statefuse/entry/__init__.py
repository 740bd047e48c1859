"""Floor 6, the entry points: the command line, the demo, the MCP server and the LangGraph store,
with the argument parsing and tables they share.

The top floor: it may import every floor below (the replica of `statefuse.sync` included), and
nothing below imports it. ``statefuse.cli``, ``statefuse.mcp`` and ``statefuse.langgraph`` stay
the public paths of three of its modules (each is the very module object of this floor). This
``__init__`` imports nothing, so the MCP SDK or LangGraph load only with the module that needs
them.
"""
