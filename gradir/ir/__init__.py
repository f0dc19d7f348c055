"""The IR: types, attributes, the Op base and its traits, graphs, type inference, verification."""
