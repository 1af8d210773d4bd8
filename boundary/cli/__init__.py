"""Command-line interface: one module per command, heavy imports inside each command.

Where it sits: the top of the data flow, with the experiment: commands read input, call the
library and print.
"""
