"""The tokenize stage: vocabularies, encoding a rendered text into ids with its boundaries as
token positions (``encode``), and the ``Rendering`` that comes out.

Where it sits: after ``boundary.render`` (text and character marks) and ``boundary.checkpoints``
(the kinds a ``Rendering`` carries); ``boundary.renderer`` drives it.
"""
