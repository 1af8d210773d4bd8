"""Tool-call syntaxes, one module per family of syntax (JSON arguments, XML parameters).

Where it sits: in outputs, below ``codec`` and ``reading``, which choose a syntax by the
family's spec.
"""
