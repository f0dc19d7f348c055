"""Reverse-mode differentiation: the driver, the gradient rules and GraphBuilder."""

from . import gradrules_elem  # noqa: E402,F401  (registers the rules of the logic family, extremes, ORT losses)
