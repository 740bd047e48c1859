"""Floor 1, the pure core: ops and their canonical encoding, the op-set, the materializer, State.

Nothing here does I/O, reads a clock or uses randomness (tests/test_layering.py checks it), and
nothing here imports a floor above (`statefuse.reading`, `statefuse.retrieval`,
`statefuse.storage`, `statefuse.sync`, `statefuse.entry`). The public names are exported from
`statefuse`; this package's ``__init__`` imports nothing, so importing one module of the floor
costs only that module.
"""
