"""A real vLLM engine (CPU build) at ``prefix_match_unit`` 16, the unit U_end's value lives at:
reused recurrent states give the outputs of computing from scratch, every hit is the one the
cache model predicts, and U_end's and D_end's states are really served.

One engine for the module: ``EngineRun`` over the tiny Gated DeltaNet model (Qwen3-Next
architecture, bf16, the block vLLM derives on this host), the policy chosen per request, the
prefix cache reset between variants. "From scratch" is the same engine with vLLM's per-request
switch that reads nothing from the prefix cache (``skip_reading_prefix_cache``).
"""

from __future__ import annotations

import pytest

from boundary.checkpoints.retention import Variant
from tests.engine.support import (
    UNIT,
    VARIANTS,
    Runs,
    disagreements,
    engine_shape,
    in_flight_together,
    requests,
    turns,
    with_policy,
)

pytestmark = pytest.mark.engine

IN_FLIGHT = 3  # all three sessions at once


@pytest.fixture(scope="module")
def engine(engine_model):
    from boundary_vllm.engine_run import EngineRun

    run = EngineRun(engine_model, engine_shape(prefix_match_unit=UNIT, max_num_seqs=4))
    yield run
    run.close()


@pytest.fixture(scope="module")
def runs(engine):
    return Runs(engine, IN_FLIGHT)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_reused_states_give_the_outputs_of_computing_from_scratch(runs, variant):
    assert not runs.outputs_disagreeing(variant)
    assert runs.reused_requests(variant) >= 8


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_every_hit_is_the_one_the_cache_model_predicts(engine, runs, variant):
    from boundary_vllm.prediction import ModelShape

    assert not runs.hits_unpredicted(variant, ModelShape(engine.block_size, UNIT))
    assert in_flight_together(runs.served(variant))


def test_u_end_serves_a_continuation_whose_p_end_is_unreachable_and_main_sparse_misses_it(runs):
    first, second = turns(11, 6)[:2]
    u_state = first.prompt.checkpoint(UNIT).position  # the public API's U_end state
    p_state = first.prompt.checkpoint(UNIT, "prompt_end").position
    shared = len(first.prompt.token_ids)
    while first.prompt.token_ids[:shared] != second.prompt.token_ids[:shared]:
        shared -= 1
    assert u_state <= shared < p_state  # P_end's state is not a prefix of the next request
    by_variant = {v: runs.served(v)[1][1] for v in (Variant.INPUT_END, Variant.MAIN_SPARSE)}
    assert by_variant[Variant.INPUT_END].num_cached_tokens == u_state
    assert by_variant[Variant.INPUT_END].logged.kind == "input_end"
    assert by_variant[Variant.MAIN_SPARSE].num_cached_tokens < u_state


def test_an_identical_repeat_is_served_from_where_rendering_checkpoint_places_the_kept_state(engine):
    """``Rendering.checkpoint`` is where the engine keeps each state: the same request sent again
    resumes exactly at ``checkpoint(unit, "prompt_end")`` under ``main_sparse`` (P_end's state,
    the last prompt token recomputed) and at ``checkpoint(unit)`` under ``input_end`` (which keeps
    U_end's state instead of P_end's)."""
    first = turns(11, 6)[0]
    request = requests([first])[0]
    expected = {
        Variant.MAIN_SPARSE: first.prompt.checkpoint(UNIT, "prompt_end").position,
        Variant.INPUT_END: first.prompt.checkpoint(UNIT).position,
    }
    assert expected[Variant.MAIN_SPARSE] > expected[Variant.INPUT_END] > 0
    for variant, position in expected.items():
        engine.reset_prefix_cache()
        ((once, again),) = engine.run_sessions(with_policy([[request, request]], variant))
        assert once.num_cached_tokens == 0
        assert again.num_cached_tokens == position, variant


def test_d_end_serves_a_tool_loop_continuation_whose_output_round_trips(engine, runs):
    """The model is made to write the turn exactly as the template re-renders it (a logits
    processor forces the turn's token ids), so the committed output is a prefix of the request
    that follows the tool result; its state sits at the block boundary the decode crossed."""
    ts = turns(17, 14)
    k = next(k for k, t in enumerate(ts) if t.index == 8)
    call, after = ts[k], ts[k + 1]  # assistant message 8 (a tool call), then the next turn
    assert call.next_role == "tool"
    session = requests([call, after], forced=True)
    p_end = call.prompt.p_end
    d_end = p_end + len(call.output.token_ids) - 1  # the stop token is not committed
    block = engine.block_size
    decode_state = d_end // block * block
    assert p_end < decode_state  # the decode crossed a block boundary before D_end
    by_variant = {}
    for variant in (Variant.DECODE_END, Variant.MAIN_SPARSE):
        engine.reset_prefix_cache()
        by_variant[variant] = engine.run_sessions(with_policy([session], variant))[0]
        assert by_variant[variant][0].output_token_ids == tuple(call.output.token_ids)  # forced as written
    assert by_variant[Variant.DECODE_END][1].num_cached_tokens == decode_state
    assert by_variant[Variant.DECODE_END][1].logged.kind == "decode_end"
    assert by_variant[Variant.MAIN_SPARSE][1].num_cached_tokens <= (p_end - 1) // UNIT * UNIT < decode_state
    reference = engine.run_sessions([session], skip_cache=True)[0]
    from boundary_vllm.output_comparison import tolerance_for

    tolerance = max(runs.tolerance(), tolerance_for(decode_noise(engine, session[0])))
    assert not disagreements([by_variant[Variant.DECODE_END][1:]], [reference[1:]], tolerance)


def decode_noise(engine, call) -> float:
    """How far a state made by decoding a turn lies from one made by prefilling it, with no
    state reused: the forced turn's logprob at a step when decoded, against the same token's
    logprob when the turn up to it is prefilled. The decode writes the recurrent state back at
    every step, a prefill once a chunk: where the engine keeps the state in bfloat16 the
    roundings differ, and so does a continuation resumed from D_end's state."""
    from boundary_vllm.engine_run import EngineRequest

    forced = call.forced
    decoded = engine.run_sessions([[call]], skip_cache=True)[0][0]
    steps = (len(forced) // 2, len(forced) - 2)
    probes = [
        EngineRequest(call.prompt_token_ids + forced[:m], max_tokens=1, forced=(forced[m],)) for m in steps
    ]
    prefilled = [o[0] for o in engine.run_sessions([[p] for p in probes], skip_cache=True)]
    return max(abs(p.logprobs[0] - decoded.logprobs[m]) for m, p in zip(steps, prefilled, strict=True))
