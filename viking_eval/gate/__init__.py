"""The regression gate: baseline files, checks, verdicts (``python -m viking_eval.gate``)."""
