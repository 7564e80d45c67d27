"""One module per CLI subcommand (see mpisgd.cli)."""
