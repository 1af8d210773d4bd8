"""Configuration cross-checks when vLLM builds a boundary scheduler, and what the plugin logs:
vLLM's real scheduler classes, built as ``--scheduler-cls`` builds them."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.engine_checks import AUTO_SCHEDULER, ConfigurationError, EngineFacts, check_engine
from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from boundary_vllm.scheduler import AsyncBoundaryScheduler, AutoBoundaryScheduler, BoundaryScheduler
from boundary_vllm.settings import read_settings
from vllm.config import SpeculativeConfig
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.structured_output import StructuredOutputManager

from boundary.checkpoints.retention import Variant
from tests.vllm.streams import turn

pytestmark = pytest.mark.vllm


def build(cls: type, run: Replay):
    """Another scheduler of class ``cls`` over ``run``'s configuration."""
    return cls(
        vllm_config=run.vllm_config,
        kv_cache_config=run.kv_cache_config,
        structured_output_manager=StructuredOutputManager(run.vllm_config),
        block_size=run.shape.block_size,
        hash_block_size=run.hash_block_size,
        log_stats=True,
    )


def test_the_async_class_without_async_scheduling_is_refused_and_the_reverse():
    sync = Replay(EngineShape(async_scheduling=False))
    with pytest.raises(
        ConfigurationError,
        match=r"needs async scheduling, but .*: use boundary_vllm\.scheduler\.AutoBoundaryScheduler",
    ):
        build(AsyncBoundaryScheduler, sync)
    asynchronous = Replay(EngineShape(async_scheduling=True))
    with pytest.raises(ConfigurationError, match=r"schedules asynchronously: use .*AutoBoundaryScheduler"):
        build(BoundaryScheduler, asynchronous)


def test_a_refusal_on_the_cpu_build_names_the_platform_not_a_flag_the_user_never_passed():
    facts = EngineFacts("boundary_vllm.scheduler.AsyncBoundaryScheduler", True, False, platform="cpu")
    with pytest.raises(ConfigurationError) as refused:
        check_engine(facts, read_settings({}))
    assert "vLLM's CPU platform turns async scheduling off itself" in str(refused.value)
    assert "--no-async-scheduling" not in str(refused.value)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_one_documented_class_builds_the_scheduler_the_engine_resolved(asynchronous):
    """vLLM resolves ``--scheduler-cls`` by name and builds it as its engine core does; the
    object is the matching boundary scheduler, active, and passes every check."""
    run = Replay(EngineShape(async_scheduling=asynchronous))
    run.vllm_config.scheduler_config.scheduler_cls = AUTO_SCHEDULER
    cls = run.vllm_config.scheduler_config.get_scheduler_cls()
    assert cls is AutoBoundaryScheduler
    scheduler = build(cls, run)
    assert type(scheduler) is (AsyncBoundaryScheduler if asynchronous else BoundaryScheduler)
    assert scheduler.boundary_retention is not None
    assert isinstance(scheduler, AsyncScheduler) is asynchronous


def test_the_documented_class_without_a_vllm_config_says_what_it_needs():
    with pytest.raises(TypeError, match="needs vLLM's vllm_config"):
        AutoBoundaryScheduler()


def ngram(run: Replay) -> SpeculativeConfig:
    config = run.vllm_config
    return SpeculativeConfig(
        method="ngram",
        num_speculative_tokens=2,
        prompt_lookup_max=3,
        prompt_lookup_min=2,
        target_model_config=config.model_config,
        target_parallel_config=config.parallel_config,
    )


def test_speculative_decoding_is_refused_unless_the_settings_opt_in(warnings):
    run = Replay(EngineShape())
    run.vllm_config.speculative_config = ngram(run)
    with pytest.raises(ConfigurationError, match=r"speculative decoding \(ngram\) .* unverified"):
        build(BoundaryScheduler, run)

    allowed = Replay(EngineShape(settings={"allow_speculative_decoding": True}))
    allowed.vllm_config.speculative_config = ngram(allowed)
    scheduler = build(BoundaryScheduler, allowed)
    assert scheduler.boundary_retention is not None
    assert any("speculative decoding (ngram) is on" in line and "unverified" in line for line in warnings)


def test_a_prefix_match_unit_equal_to_the_block_is_warned_about(warnings):
    Replay(EngineShape(block_size=64))
    (line,) = [line for line in warnings if "prefix_match_unit equals the block size (64)" in line]
    assert line.endswith("set --prefix-match-unit 16 (or another divisor of the block)")
    warnings.clear()
    Replay(EngineShape(block_size=16))  # the advice never names the unit it warns about
    (line,) = [line for line in warnings if "prefix_match_unit equals the block size (16)" in line]
    assert line.endswith("set a --prefix-match-unit that divides the block")
    warnings.clear()
    Replay(EngineShape(block_size=64, prefix_match_unit=16))
    assert not any("prefix_match_unit" in line for line in warnings)


def test_rejected_hints_are_logged_once_per_reason_and_all_counted(warnings):
    run = Replay(EngineShape(policy=Variant.BOTH))
    a = turn(11, 2)
    for shift in (3, 7, 11):  # three re-rendered prompts: one reason, three requests
        request = run.request(ReplayRequest.from_turn(a))
        request.sampling_params.extra_args["boundary_prompt_end"] = a.prompt.p_end + shift
        run.scheduler.add_request(request)
    outside = run.request(ReplayRequest.from_turn(a))
    outside.sampling_params.extra_args["boundary_input_end"] = a.prompt.p_end + 5
    run.scheduler.add_request(outside)
    logged = [line for line in warnings if "boundary hints ignored" in line]
    assert len(logged) == 2
    assert "boundary_prompt_end" in logged[0] and "boundary_input_end" in logged[1]
    assert run.scheduler.boundary_counters.hints["rejected"] == 4


def test_the_metrics_carry_vllms_model_name_and_engine_labels():
    from prometheus_client import REGISTRY

    run = Replay(EngineShape(policy=Variant.INPUT_END))
    run.run_all([ReplayRequest.from_turn(turn(11, 2)), ReplayRequest.from_turn(turn(11, 4))])
    run.counters  # noqa: B018  (a report pushes the latest counts)
    labels = run.scheduler.boundary_metric_labels
    assert labels == {"model_name": run.vllm_config.model_config.served_model_name, "engine": "0"}
    hits = REGISTRY.get_sample_value("boundary_prefix_hits_total", {**labels, "kind": "input_end"})
    assert hits == 1
    assert REGISTRY.get_sample_value("boundary_decode_end_consumable", labels) == 1


def test_a_per_request_policy_the_engine_does_not_allow_is_logged_once_and_its_boundaries_kept(warnings):
    run = Replay(EngineShape(policy=Variant.INPUT_END))  # request_policy off
    a = turn(11, 2)
    requests = []
    for _ in range(3):
        request = run.request(dataclasses.replace(ReplayRequest.from_turn(a), policy=Variant.HORIZON))
        run.scheduler.add_request(request)
        requests.append(request)
    noted = [line for line in warnings if "'horizon' ignored" in line]
    assert len(noted) == 1 and "kept under the engine's policy (logged once)" in noted[0]
    assert run.scheduler.boundary_counters.hints["accepted"] == 3
    plans = [run.scheduler.boundary_retention.plan(r.request_id) for r in requests]
    assert all(p is not None and p.variant is Variant.INPUT_END for p in plans)
