"""Moved to benchmarks/fixtures/digits.py and models.py.

Benchmarks import it from there; this re-export keeps the tests' old imports working until they move.
"""

from __future__ import annotations

from benchmarks.fixtures.digits import SHAPE as SHAPE
from benchmarks.fixtures.digits import context as context
from benchmarks.fixtures.digits import write_manifest as write_manifest
from benchmarks.fixtures.models import TinyCNN as TinyCNN
from benchmarks.fixtures.models import fit as fit
from benchmarks.fixtures.models import mlp as mlp
