"""Build and benchmark kernel packages on a GPU node (no Django: runs in the engine's Python)."""
