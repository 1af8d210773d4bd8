"""Deployments users run, on vLLM's real classes (scheduler, KV-cache manager, the connectors'
scheduler sides, ``KVTransferConfig``, ``CacheConfig``):

- MooncakeStore with ``save_decode_cache`` rewrites the retention interval the KV-cache
  coordinator applies (to the block size) after ``cache_config`` was read: the plugin reads the
  applied value, logs the rewrite, and still serves U_end's sub-block state (before: one forced
  split, nothing kept, the next request missed it);
- with ``decode_to_prefill`` a connector is offered the decode states as they are cached, D_end's
  among them (before: withheld like tentative states, so a store never saw D_end);
- FlashInfer ReplaySSM and KDA RecoverSSM are refused unless ``allow_unverified_state_export``;
- a ``MultiConnector``'s roles are read through its children.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.compat import DIFF
from boundary_vllm.decode_end import decode_end_availability
from boundary_vllm.engine_checks import ConfigurationError
from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from boundary_vllm.settings import IntegrationSettings
from boundary_vllm.state_export import check_state_export, unverified_state_exports
from vllm.config import CacheConfig, KVTransferConfig

from boundary.checkpoints.retention import Variant
from tests.vllm.streams import BLOCK, turn

pytestmark = pytest.mark.vllm


@pytest.fixture
def replays():
    """Replays whose connector's lookup client (a ZMQ socket, an executor) is closed after the test,
    so no socket outlives it."""
    made: list[Replay] = []

    def make(shape: EngineShape) -> Replay:
        made.append(Replay(shape))
        return made[-1]

    yield make
    for run in made:
        sched = getattr(run.scheduler.connector, "connector_scheduler", None)
        client = getattr(sched, "client", None)
        if client is not None:
            client.close()
            client.ctx.term()


def mooncake(role: str = "kv_both", **extra) -> dict:
    # enable_lookup off: no store process answers here (the scheduler side still runs)
    return {
        "kv_connector": "MooncakeStoreConnector",
        "kv_role": role,
        "kv_connector_extra_config": {"enable_lookup": False, **extra},
    }


def test_a_retention_interval_a_connector_rewrote_is_read_where_vllm_applies_it_and_u_end_is_kept(replays):
    a, b = turn(11, 2), turn(11, 4)
    shape = EngineShape(
        policy=Variant.INPUT_END, prefix_match_unit=4, kv_transfer=mooncake(save_decode_cache=True)
    )
    run = replays(shape)
    scheduler = run.scheduler
    assert scheduler.cache_config.prefix_cache_retention_interval == 0  # what the user configured
    applied = BLOCK if DIFF.store_rewrites_retention_interval else 0  # 0.34.0 rewrites it
    assert scheduler.kv_cache_manager.coordinator.retention_interval == applied  # what vLLM applies
    assert scheduler.boundary_retention_interval == applied
    outcomes = run.run_all([ReplayRequest.from_turn(a), ReplayRequest.from_turn(b)])
    u_end = a.prompt.u_end // 4 * 4
    assert u_end % BLOCK
    assert outcomes[1].hit_tokens == u_end and outcomes[1].hit_kind == "input_end"
    assert run.counters.forced_splits == 1 and run.counters.created["input_end"] >= 1


def _offers(run: Replay) -> list[tuple[str, int]]:
    """Record the boundary states the KV-cache manager hands the connector each step."""
    seen: list[tuple[str, int]] = []
    manager = run.scheduler.kv_cache_manager
    take = manager.take_boundary_state_offloads

    def recording():
        offloads = take()
        seen.extend((rid, tokens) for rid, entries in offloads.items() for _, _, tokens in entries)
        return offloads

    manager.take_boundary_state_offloads = recording
    return seen


@pytest.mark.parametrize("decode_to_prefill", [True, False])
def test_with_decode_to_prefill_d_end_is_offered_to_the_store(decode_to_prefill, replays):
    a = turn(11, 4)  # a tool call whose decode crosses a block boundary past P_end
    d_end = (len(a.tokens) - 1) // BLOCK * BLOCK
    assert d_end > a.prompt.p_end
    shape = EngineShape(
        policy=Variant.DECODE_END,
        kv_transfer=mooncake(),
        settings={"decode_to_prefill": decode_to_prefill},
    )
    run = replays(shape)
    assert run.scheduler.decode_end.consumable is decode_to_prefill
    offers = _offers(run)
    run.run(ReplayRequest.from_turn(a))
    offered = {tokens for _, tokens in offers}
    assert (d_end in offered) is decode_to_prefill  # not consumable: not kept, so not offered
    assert all(tokens <= a.prompt.p_end for tokens in offered) is not decode_to_prefill


@pytest.mark.parametrize("mode", ["use_replayssm", "use_kda_recoverssm"])
def test_an_unverified_state_export_mode_is_refused_unless_opted_in(mode):
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=True, mamba_cache_mode="align")
    assert unverified_state_exports(cache) == []
    object.__setattr__(cache, mode, True)  # use_kda_recoverssm is set by vLLM for KDA models only
    with pytest.raises(ConfigurationError, match="allow_unverified_state_export"):
        check_state_export(cache, IntegrationSettings())
    warnings = check_state_export(cache, IntegrationSettings(allow_unverified_state_export=True))
    assert len(warnings) == 1 and "unverified" in warnings[0]


def test_the_scheduler_refuses_replayssm_at_construction():
    shape = EngineShape(policy=Variant.BOTH)
    run = Replay(shape)
    cache = run.vllm_config.cache_config
    object.__setattr__(cache, "use_replayssm", True)  # vLLM accepts it only for ReplaySSM-capable models
    cls = type(run.scheduler)
    with pytest.raises(ConfigurationError, match="ReplaySSM"):
        cls(
            vllm_config=run.vllm_config,
            kv_cache_config=run.kv_cache_config,
            structured_output_manager=run.scheduler.structured_output_manager,
            block_size=BLOCK,
            log_stats=False,
        )


def test_a_multiconnectors_roles_are_read_through_its_children():
    producer = {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    config = KVTransferConfig(
        kv_connector="MultiConnector",
        kv_role="kv_both",  # vLLM requires a role here; the children move the KV
        kv_connector_extra_config={
            "connectors": [producer, {**producer, "kv_connector": "LMCacheConnectorV1"}]
        },
    )
    availability = decode_end_availability(config, decode_to_prefill=True)
    assert not availability.consumable  # before: "kv_both: ... decode_to_prefill": consumable
    assert "kv_producer" in availability.reason
    mixed = KVTransferConfig(
        kv_connector="MultiConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"connectors": [producer, {"kv_connector": "X", "kv_role": "kv_both"}]},
    )
    assert decode_end_availability(mixed, decode_to_prefill=True).consumable
    assert not decode_end_availability(mixed, decode_to_prefill=False).consumable
