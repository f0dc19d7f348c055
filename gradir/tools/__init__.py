"""Tools over graphs: dot rendering, gradient checks, output comparison, op docs."""
