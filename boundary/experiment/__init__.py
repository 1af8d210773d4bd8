"""The policy experiment harness: which recurrent-state checkpoints pay off, measured without a GPU.

Where it sits: the report end, after checkpoints: it drives the whole flow (request -> render ->
boundaries -> checkpoints) through the cache model; ``boundary.cli.experiment`` and
``benchmarks/replay.py`` call it.

Data flows one way: a workload (real conversations, or synthetic sessions) is rendered with a
family's real template into a request stream (``workloads``, ``stream``, ``arrivals``); every
retention policy (``policies``) replays it through the vLLM align-mode cache model
(``boundary.cache``) under both budget modes (``replay``, ``harness``); the runs become metrics
(``metrics``, with the prefill cost model in ``cost``) and a report (``report``).
"""
