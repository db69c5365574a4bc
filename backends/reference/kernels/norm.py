"""Reference kernels of the norm family (being written)."""
