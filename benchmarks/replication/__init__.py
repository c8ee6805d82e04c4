"""Seed replications: one module per paper, each returning :class:`common.Claim` rows (see ``benchmarks/replicate.py``)."""
