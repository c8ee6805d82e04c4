"""Heavy, on-demand runs behind the numbers in docs/.

A regular package, so that an installed top-level ``benchmarks`` (opacus ships one) cannot shadow it.
"""
