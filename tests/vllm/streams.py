"""Request streams for the vLLM tests, from real renderings: boundary's Qwen3.5 template and
vocabulary over tau-bench airline conversations, with the deterministic reasoning of
``boundary_vllm.workload.with_reasoning`` on every assistant turn (tau-bench has none)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from boundary_vllm.workload import Turn, conversation_turns, with_reasoning

from boundary.prefixes import common_prefix_length
from boundary.shipped.datasets import tau_bench_airline
from tests.support import family

BLOCK = 16  # the replays' block size (= prefix_match_unit unless a test says otherwise)


@cache
def turns(conversation: int, messages: int = 14) -> tuple[Turn, ...]:
    """The assistant turns among the first ``messages`` messages of a tau-bench conversation."""
    conv = with_reasoning(tau_bench_airline()[conversation][:messages])
    return tuple(conversation_turns(family("qwen3_5"), conv, enable_thinking=True))


def turn(conversation: int, index: int) -> Turn:
    """The turn generating assistant message ``index``."""
    return next(t for t in turns(conversation) if t.index == index)


def shared(a: Sequence[int], b: Sequence[int]) -> int:
    return common_prefix_length(list(a), list(b))


def validated_prefix(earlier: Sequence[Turn], later: Turn) -> int:
    """The most a hit for ``later`` may reuse: the longest prefix of its prompt that some earlier
    request computed (prompt and committed output), never the prompt's last token."""
    computed = [shared(t.tokens[:-1], later.prompt.token_ids) for t in earlier]
    return min(max(computed, default=0), later.prompt.p_end - 1)
