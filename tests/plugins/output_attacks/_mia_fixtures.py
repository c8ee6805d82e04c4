"""Moved to benchmarks/fixtures/mia.py and models.py.

Benchmarks import it from there; this re-export keeps the tests' old imports working until they move.
"""

from __future__ import annotations

from benchmarks.fixtures.mia import ORDER as ORDER
from benchmarks.fixtures.mia import noisy_digits as noisy_digits
from benchmarks.fixtures.mia import train as train
from benchmarks.fixtures.mia import train_dp as train_dp
from benchmarks.fixtures.mia import write_folders as write_folders
from benchmarks.fixtures.models import NoisyMLP as NoisyMLP
