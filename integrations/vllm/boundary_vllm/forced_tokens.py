# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""Forced tokens for engine checks: ``ForcedTokens``, a per-request logits processor that makes a
request generate exactly the token ids in its ``extra_args[FORCE_KEY]`` (then sample freely),
and ``forced_token``, the token due at a sequence position.

Where it sits: the engine end, under ``engine_run``: ``EngineRequest.sampling_params`` writes
``FORCE_KEY`` and ``FORCE_FROM_KEY`` into a request's ``extra_args`` and ``EngineRun`` hands
``ForcedTokens`` to vLLM as a logits processor, so ``scenarios`` and the GPU check can make the
model commit a known answer; ``tests/vllm/test_vllm_forced_tokens.py`` drives it directly.

Two interfaces, chosen by ``boundary_vllm.compat.DIFF.logits_processor``: Model Runner V2's
(the GPU wheels) and the V1 adapter (the CPU build). Forcing changes which token is sampled,
never the logprobs vLLM reports (raw logits). For checks, not production.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # extends non-public vLLM classes

from collections.abc import Callable, Sequence
from typing import Any

import torch
from vllm.sampling_params import SamplingParams

from boundary_vllm.compat import DIFF

FORCE_KEY = "boundary_forced_tokens"  # extra_args entry: token ids the request must generate
FORCE_FROM_KEY = "boundary_forced_from"  # extra_args entry: the prompt length (output 0's position)


def forced_token(tokens: Sequence[int], forced_from: int, position: int) -> int | None:
    """The token forced at sequence ``position`` (the token sampled there): output
    ``position - forced_from`` of ``tokens``, None once they are written (or before)."""
    k = position - forced_from
    return int(tokens[k]) if 0 <= k < len(tokens) else None


def _force_row(logits: torch.Tensor, token: int) -> None:
    """Every logit of ``logits`` (one row) but ``token``'s becomes -inf; ``token``'s is kept."""
    keep = logits[token].clone()
    logits.fill_(float("-inf"))
    logits[token] = keep


def _forced(params: SamplingParams) -> tuple[list[int], int] | None:
    extra = params.extra_args or {}
    forced = extra.get(FORCE_KEY)
    if not forced:
        return None
    return [int(t) for t in forced], int(extra[FORCE_FROM_KEY])


if DIFF.logits_processor == "v2":
    # Model Runner V2's interface (0.33.0, 0.34.0: vllm.v1.sample.logits_processor is gone in 0.34.0)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcessor

    class ForcedTokens(LogitsProcessor):
        """Makes a request generate exactly ``extra_args[FORCE_KEY]`` (then samples freely):
        every other token's logit becomes -inf while a forced token is due. Model Runner V2's
        custom logits-processor interface; a row's output index is ``ctx.pos + 1`` minus
        ``extra_args[FORCE_FROM_KEY]`` (the prompt length), so a request resumed after
        preemption picks up where it was. For checks, not production."""

        def __init__(self, vllm_config: Any, req_states: Any) -> None:
            self.slots: dict[int, tuple[list[int], int]] = {}  # request slot -> (tokens, prompt length)

        @classmethod
        def validate_params(cls, sampling_params: SamplingParams) -> None:
            extra = sampling_params.extra_args or {}
            if extra.get(FORCE_KEY) and not isinstance(extra.get(FORCE_FROM_KEY), int):
                raise ValueError(f"{FORCE_KEY} needs {FORCE_FROM_KEY} (the prompt length)")

        def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
            forced = _forced(sampling_params)
            if forced is None:
                self.slots.pop(req_idx, None)  # a recycled slot: its previous occupant's tokens go
                return False
            self.slots[req_idx] = forced
            return True

        def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
            if not self.slots:
                return logits
            slots = ctx.expanded_idx_mapping.tolist()  # a device sync: a check harness, not serving
            positions = ctx.pos.tolist()
            for row, (slot, pos) in enumerate(zip(slots, positions, strict=True)):
                entry = self.slots.get(slot)
                token = None if entry is None else forced_token(entry[0], entry[1], pos + 1)
                if token is not None:
                    _force_row(logits[row], token)
            return logits

else:
    # the CPU build's runner (V1 logits processors)
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class ForcedTokens(AdapterLogitsProcessor):  # type: ignore[no-redef]
        """Makes a request generate exactly ``extra_args[FORCE_KEY]`` (then samples freely):
        every other token's logit becomes -inf while a forced token is due (the V1 adapter
        interface, the CPU build's runner). For checks, not production."""

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: SamplingParams) -> Callable[..., torch.Tensor] | None:
            forced = _forced(params)
            if forced is None:
                return None
            tokens, start = forced

            def force(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                token = forced_token(tokens, start, start + len(output_ids))
                if token is not None:
                    _force_row(logits, token)
                return logits

            return force
