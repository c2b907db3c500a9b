"""Sweeps: the sweep summary, the best configuration, exporting a tuned retriever (``python -m viking_eval.sweep.export``)."""
