"""Reference kernels of the convolution family (being written)."""
