"""Tool-call syntaxes, one module per family of syntax (JSON arguments, XML parameters)."""
