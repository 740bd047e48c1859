"""Floor 2, what a planner reads: lenses, resolvers, projection, the View and context assembly.

Pure like the core below it (tests/test_layering.py checks it); it imports only the core and the
registry. The public names are exported from `statefuse`; this ``__init__`` imports nothing.
"""
