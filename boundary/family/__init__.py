"""Families: the shipped registry and the ``Family`` facade frontends call.

Where it sits: the end of the library's flow: ``facade`` wraps a ``boundary.renderer.Renderer``
with sessions and the round trip; ``registry`` loads a shipped family's spec, template and
vocabulary.
"""
