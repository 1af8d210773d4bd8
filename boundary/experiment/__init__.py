"""The policy experiment harness: which recurrent-state checkpoints pay off, measured without a GPU.

Data flows one way: a workload (real conversations, or synthetic sessions) is rendered with a
family's real template into a request stream (``workloads``, ``stream``, ``arrivals``); every
retention policy (``policies``) replays it through the vLLM align-mode cache model
(``boundary.cache``) under both budget modes (``replay``, ``harness``); the runs become metrics
(``metrics``, with the prefill cost model in ``cost``) and a report (``report``).
"""
