"""Floor 3, finding by meaning: embedders, the vector store and hybrid (lexical + vector) search.

Embedders load models and call services, so this floor sits above the pure floors it reads and
below the storage that keeps its vectors. The public names are exported from `statefuse`; this
``__init__`` imports nothing (a model library is imported only when an embedder needs it).
"""
