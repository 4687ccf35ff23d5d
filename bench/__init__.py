"""Benchmarks: ratios measured in one run on the same machine (see docs/BENCHMARKS.md)."""
