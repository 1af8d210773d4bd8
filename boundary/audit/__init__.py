"""The round-trip audit: run a trace through a family (``runner``), summarize it, and write it
as JSON (``records``), Markdown (``markdown``) and a PNG plot (``plot``); ``what_if`` re-runs
with template options and client habits; ``regress`` checks a golden corpus for template drift."""
