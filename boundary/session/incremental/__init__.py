"""Incremental template runs: a template's message loop rewritten once so that a session renders
each unchanged loop iteration from its last run.

Where it sits: inside ``boundary.session``: ``store`` holds a session's runs, ``plan`` and
``rewrite`` decide and build the rewritten template, ``hooks`` / ``run`` / ``keys`` / ``chain``
serve one render.
"""
