"""The reference backend: the same kernels one after another, no pool, no reuse."""
