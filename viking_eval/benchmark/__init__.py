"""Benchmarks over several datasets, their table and the leaderboard (``python -m viking_eval.benchmark.leaderboard``)."""
