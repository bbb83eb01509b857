"""Scripts that measure specmoe, grouped by family (README.md); not part of the installed package.

Run one from the repository root as a module: `python -m benchmarks.<family>.<script> ...`.
"""
