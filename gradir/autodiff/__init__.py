"""Reverse-mode differentiation: the driver, the gradient rules and GraphBuilder."""
