"""Floor 4, the edges that keep memory: the writer (it reads the clock), the Store contract, the
SQLite store whose derived state is the index, and the test helpers built on them.

It imports the floors below; the replica that signs and syncs lives one floor up, in
`statefuse.sync`. The public names are exported from `statefuse`; this ``__init__`` imports
nothing.
"""
