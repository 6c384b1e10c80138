"""GraphSAGE: graph store, synthetic graphs, neighbour samplers, model, training, export.

Submodules are imported by name (``servelab.graph.store``, ``.synth``, ``.sampler``); this package
imports nothing heavy so that ``import servelab.graph`` stays cheap.
"""
