"""Runnable examples: demo checkpoints and digits helpers.

A regular package, so that an installed top-level ``examples`` (opacus ships one) cannot shadow it.
"""
