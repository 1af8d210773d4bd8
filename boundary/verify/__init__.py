"""Verification after a render: the D_end round trip, the cause of a divergence and the stability
horizon.

Where it sits: after ``boundary.renderer`` and ``boundary.outputs`` (a model's turn written and
read back); the facade, the audit and the experiment call it.
"""
