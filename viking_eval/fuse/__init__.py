"""Fusion of run files (``experiment=fuse``): the program (program.py) and the choice of weights and
parameters on the tuning queries (optimise.py). docs/fusion.md."""
