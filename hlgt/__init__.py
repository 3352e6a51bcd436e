"""HLGT: a math-word-problem solver (a heterogeneous line graph transformer over semantic-role
graphs, with GTS's tree decoder) and the system that trains it at cluster scale.

The path, one stage per module: raw files → numbers → SRL → graph → shards (``hlgt.data``) →
batches → encoder → decoder → loss (``hlgt.model``) → training, Ray Train, evaluation
(``hlgt.train``) → Ray Tune sweeps (``hlgt.sweep``) → W&B (``hlgt.train.tracking``); solving new
problems (``hlgt.solve``, ``hlgt.inference``) and seeing them as the model does (``hlgt.explain``).
Configuration: ``hlgt.config``; files and what may be deleted: ``hlgt.storage``; the commands a
user types: ``hlgt.commands``.
"""
