"""One checkpoint rule: a state materializes at the deepest prefix_match_unit boundary at or
before its anchor, the prompt's last token never covered; the public API, the retention policy
and the plugin place states by it alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundary.checkpoints.kinds import (
    Checkpoint,
    CheckpointKind,
    checkpoint_position,
    input_end_position,
    materialize,
    prompt_end_position,
)
from boundary.checkpoints.policies import decide
from boundary.checkpoints.retention import EngineGeometry, RequestBoundaries, Variant
from boundary.offsets import TokenOffset


@given(logical=st.integers(0, 10**7), unit=st.integers(1, 4096))
def test_materialized_position_is_the_deepest_unit_multiple_at_or_before(logical: int, unit: int) -> None:
    position = materialize(logical, unit)
    assert position % unit == 0
    assert position <= logical < position + unit


def test_checkpoint_names_its_kind_and_both_positions() -> None:
    cp = Checkpoint.at(CheckpointKind.DECODE_END, TokenOffset(1000), 528, p_end=TokenOffset(900))
    assert (cp.kind.value, cp.logical, cp.position, cp.unit) == ("decode_end", 1000, 528, 528)


@pytest.mark.parametrize(
    ("kind", "logical", "p_end", "unit", "position"),
    [
        # the measured disagreement: P_end 1600 at unit 64 is kept at 1536, not 1600
        (CheckpointKind.PROMPT_END, 1600, 1600, 64, 1536),
        (CheckpointKind.PROMPT_END, 528, 528, 528, 0),
        (CheckpointKind.PROMPT_END, 529, 529, 528, 528),
        (CheckpointKind.PROMPT_END_BLOCK, 1600, 1600, 512, 1536),
        # U_end with no generation suffix lands where P_end's state does
        (CheckpointKind.INPUT_END, 528, 528, 528, 0),
        (CheckpointKind.INPUT_END, 1600, 1600, 64, 1536),
        (CheckpointKind.INPUT_END, 1590, 1600, 64, 1536),
        (CheckpointKind.DECODE_END, 1700, 1600, 64, 1664),
    ],
)
def test_the_rule_anchors_prompt_side_states_before_the_last_prompt_token(
    kind: CheckpointKind, logical: int, p_end: int, unit: int, position: int
) -> None:
    assert checkpoint_position(kind, logical, p_end, unit) == position


@given(
    p_end=st.integers(1, 10**6),
    u_back=st.integers(0, 200),
    unit=st.sampled_from([1, 16, 64, 128, 528, 1024]),
)
def test_the_retention_policy_keeps_each_state_where_the_rule_places_it(
    p_end: int, u_back: int, unit: int
) -> None:
    u_end = max(0, p_end - u_back)
    geometry = EngineGeometry(block_size=unit * 2 if unit <= 528 else unit, unit=unit)
    b = RequestBoundaries(p_end=p_end, u_end=u_end)
    for variant, kind, want in [
        (Variant.MAIN_SPARSE, CheckpointKind.PROMPT_END, prompt_end_position(p_end, unit)),
        (Variant.INPUT_END, CheckpointKind.INPUT_END, input_end_position(u_end, p_end, unit)),
    ]:
        kept = {
            k for keep in decide(variant, b, geometry).keeps if kind in keep.kinds for k in [keep.position]
        }
        assert kept == ({want} if want > 0 else set()), (variant, kept, want)


@pytest.mark.parametrize(("logical", "unit"), [(-1, 16), (10, 0)])
def test_invalid_positions_and_units_are_refused(logical: int, unit: int) -> None:
    with pytest.raises(ValueError):
        materialize(logical, unit)


@pytest.mark.parametrize(("u_end", "p_end"), [(5, 4), (-1, 4)])
def test_a_u_end_outside_the_prompt_is_refused(u_end: int, p_end: int) -> None:
    with pytest.raises(ValueError, match="outside the prompt"):
        input_end_position(u_end, p_end, 16)
