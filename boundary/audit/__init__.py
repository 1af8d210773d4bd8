"""The round-trip audit: run a trace through a family (``runner``), summarize it, and write it
as JSON (``records``), Markdown (``markdown``) and a PNG plot (``plot``); ``what_if`` re-runs
with template options and client habits; ``regress`` checks a golden corpus for template drift.

Where it sits: after the round trip and the horizon (which it runs per turn) and before the CLI
that prints it.
"""
