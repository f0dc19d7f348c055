"""The ``gradir`` command line: ``main`` and one module per subcommand."""
