"""A checkpoint materializes at the deepest prefix_match_unit boundary at or before it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundary.checkpoints import Checkpoint, CheckpointKind, materialize


@given(logical=st.integers(0, 10**7), unit=st.integers(1, 4096))
def test_materialized_position_is_the_deepest_unit_multiple_at_or_before(logical: int, unit: int) -> None:
    position = materialize(logical, unit)
    assert position % unit == 0
    assert position <= logical < position + unit


def test_checkpoint_names_its_kind_and_both_positions() -> None:
    cp = Checkpoint.at(CheckpointKind.DECODE_END, 1000, 528)
    assert (cp.kind.value, cp.logical, cp.position, cp.unit) == ("decode_end", 1000, 528, 528)


@pytest.mark.parametrize(("logical", "unit"), [(-1, 16), (10, 0)])
def test_invalid_positions_and_units_are_refused(logical: int, unit: int) -> None:
    with pytest.raises(ValueError):
        materialize(logical, unit)
