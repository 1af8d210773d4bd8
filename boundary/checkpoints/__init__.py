"""Checkpoints: the one kind enum and rule for where each materializes (``kinds``), and the
retention policy deciding which states a request leaves: its interface and decision types
(``retention``) and the policies by name (``policies``).

Where it sits: after the boundaries are known as token positions; ``boundary.tokenize.rendering``,
the cache model, the experiment and the vLLM plugin all read this one definition.
"""
