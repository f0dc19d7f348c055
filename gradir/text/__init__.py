"""The .gir text language: the grammar (gradir.lark, package data), the parsers and names."""
