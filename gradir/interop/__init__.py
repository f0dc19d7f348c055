"""Other formats gradir reads and writes (ONNX)."""
