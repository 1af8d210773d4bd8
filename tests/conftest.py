"""pytest configuration; shared helpers live in tests/support.py."""
