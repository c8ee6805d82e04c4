"""Structural re-parameterisation: fuse training-time blocks and check the two forms agree."""
