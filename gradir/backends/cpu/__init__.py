"""The CPU backend: kernels, the dataflow executor, buffers, the BLAS/threads policy."""
