"""Reference kernels of the attention family (being written)."""
