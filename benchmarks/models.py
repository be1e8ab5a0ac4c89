"""Rows of the benchmarks app (filled by its own issue)."""
