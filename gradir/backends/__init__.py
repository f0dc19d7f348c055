"""What runs a plan: the backend seam (base), the CPU backend, the float64 reference."""
