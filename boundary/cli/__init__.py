"""Command-line interface: one module per command, heavy imports inside each command."""
