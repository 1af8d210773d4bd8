"""Traces: the one JSONL format of chat requests and production records, its header, arrival times
and sessions chained from prompt ids.

Where it sits: at the report end: ``boundary.audit`` and ``boundary.experiment`` read traces, the
vLLM plugin's recorder writes them.
"""
