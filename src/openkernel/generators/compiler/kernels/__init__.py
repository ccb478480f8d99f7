"""One module per kind of kernel the compiler writes (pointwise, reductions, matmul, conv,
scan, pooling windows)."""
