"""Benchmarks of the oracle runtime; run them with ``make bench``."""
