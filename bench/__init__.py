"""Benchmarks: `python -m bench [--quick] [--only NAME[,NAME]]` (see docs/benchmarks.md)."""
