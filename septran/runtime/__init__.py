"""Building and calling kernels."""
