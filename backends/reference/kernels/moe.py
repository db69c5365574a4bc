"""Reference kernels of the moe family (being written)."""
