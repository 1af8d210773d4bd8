"""Comparing generations: ``compare_outputs`` sets a run that reused states against the same
request computed from scratch (``OutputComparison``), and ``batch_noise``/``tolerance_for`` size
the logprob tolerance from this host's own from-scratch noise (at least ``TOLERANCE_FLOOR``).

Where it sits: the engine end, above ``engine_run``: it reads the ``EngineOutcome`` values an
``EngineRun`` returns; ``scenarios``, ``integrations/vllm/gpu_check.py`` (through ``scenarios``)
and the engine test tier judge reused states with it. Plain Python: no vLLM import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from boundary_vllm.engine_run import EngineOutcome


@dataclass(frozen=True, slots=True)
class OutputComparison:
    """A generation with reused state against the same request computed from scratch.

    ``diverged_at``: the first step whose sampled tokens differ (None: identical);
    ``near_tie``: at that step the reference's two best tokens were within ``tolerance`` (a
    reordering that numeric noise can cause); ``max_logprob_diff``: over the steps up to and
    including the divergence, where both runs had the same context."""

    identical: bool
    diverged_at: int | None
    near_tie: bool
    max_logprob_diff: float

    def agrees(self, tolerance: float) -> bool:
        """Identical, or diverged only at a near tie, and logprobs within ``tolerance``."""
        return (self.identical or self.near_tie) and self.max_logprob_diff <= tolerance


# Two bf16 steps of a logit of magnitude 1-2 (2 x 2^-7, rounded up): the least a comparison allows.
TOLERANCE_FLOOR = 0.02


def batch_noise(
    alone: Sequence[Sequence[EngineOutcome]], batched: Sequence[Sequence[EngineOutcome]]
) -> float:
    """The largest top-1 logprob difference between two from-scratch passes over the same
    requests (say, each request alone and the sessions in a batch), over the steps where both
    passes had the same context: what this host's kernels change by reordering bf16 sums,
    with no state reused."""
    return max(
        (
            compare_outputs(a, b, 0.0).max_logprob_diff
            for row_a, row_b in zip(alone, batched, strict=True)
            for a, b in zip(row_a, row_b, strict=True)
        ),
        default=0.0,
    )


def tolerance_for(noise: float) -> float:
    """The logprob tolerance for comparing a run that reused states with its from-scratch
    reference on a host whose from-scratch passes differ by ``noise`` (``batch_noise``):
    twice the noise, since a reused run differs from its reference by chunking (the reused
    prefix is not recomputed) as well as by batching, each a reordering of the same sums; never
    below ``TOLERANCE_FLOOR``. Tokens are compared exactly except where the reference's two
    best were within the tolerance (``OutputComparison.near_tie``)."""
    return max(TOLERANCE_FLOOR, 2 * noise)


def compare_outputs(reused: EngineOutcome, reference: EngineOutcome, tolerance: float) -> OutputComparison:
    """Compare ``reused`` with ``reference`` (see ``OutputComparison``)."""
    pairs = list(zip(reused.output_token_ids, reference.output_token_ids, strict=False))
    diverged = next((k for k, (a, b) in enumerate(pairs) if a != b), None)
    if diverged is None and len(reused.output_token_ids) != len(reference.output_token_ids):
        diverged = len(pairs)
    upto = len(pairs) if diverged is None else min(diverged + 1, len(pairs))
    diffs = [abs(a - b) for a, b in zip(reused.logprobs[:upto], reference.logprobs[:upto], strict=True)]
    near_tie = (
        diverged is not None
        and diverged < len(reference.margins)
        and reference.margins[diverged] <= tolerance
    )
    return OutputComparison(diverged is None, diverged, near_tie, max(diffs, default=0.0))
