"""Rows of the kernels app (filled by its own issue)."""
