"""The ``head_rewrite`` client: every request's system block carries a note for that request,
so consecutive requests of a session share only what precedes the note."""

from __future__ import annotations

import pytest

from boundary.experiment.workloads import WorkloadOptions, rendered_sessions
from boundary.prefixes import common_prefix_length
from tests.support import family


def _session(mode: str):
    options = WorkloadOptions(family="qwen3_5", sessions=1, reasoning=False, system_prompt=mode)
    (requests,) = rendered_sessions("tau_bench", options, use_cache=False).sessions().values()
    return requests


def test_each_request_parts_from_the_previous_one_inside_the_system_block():
    kept, rewritten = _session("shared"), _session("head_rewrite")
    assert len(kept) == len(rewritten) >= 3
    tok = family("qwen3_5").tokenizer
    for k in range(1, len(rewritten)):
        before, now = rewritten[k - 1], rewritten[k]
        shared = common_prefix_length(list(before.tokens), list(now.tokens))
        head = tok.decode(list(now.tokens[: now.num_prompt_tokens])).index("<|im_start|>user")
        assert len(tok.decode(list(now.tokens[:shared]))) < head  # parted before the first user turn
        assert f"Workspace status for request {k}:" in tok.decode(list(now.tokens[: now.num_prompt_tokens]))
        # the same session without the note keeps its previous request's prompt
        assert common_prefix_length(list(kept[k - 1].tokens), list(kept[k].tokens)) > shared


def test_the_synthetic_workload_refuses_head_rewrite():
    with pytest.raises(ValueError, match="head_rewrite"):
        rendered_sessions("synthetic", WorkloadOptions(system_prompt="head_rewrite"))
