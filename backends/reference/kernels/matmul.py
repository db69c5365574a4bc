"""Reference kernels of the matmul family (being written)."""
