"""Reference kernels of the movement family (being written)."""
