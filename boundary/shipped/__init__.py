"""What ships with boundary: where its data lives, the ``family.toml`` schema, the shipped
conversations and which template sources are trusted.

Where it sits: the start of the flow, before the request: every later stage reads shipped data
through ``resources`` and family facts through ``spec``.
"""
