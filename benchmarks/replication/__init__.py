"""Seed replications: one module per paper returning :class:`common.Claim` rows (see ``benchmarks/replicate.py``)."""
