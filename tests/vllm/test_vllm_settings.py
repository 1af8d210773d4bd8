"""The engine-side configuration read from ``--additional-config``."""

from __future__ import annotations

import pytest
from boundary_vllm.settings import IntegrationSettings, Policy, SettingsError, read_settings

from boundary.checkpoints import CheckpointKind


def test_the_default_policy_keeps_both_checkpoints():
    settings = read_settings({})
    assert settings == IntegrationSettings() and settings.policy is Policy.BOTH


def test_each_policy_retains_exactly_its_kinds():
    retained = {
        p: {k for k in (CheckpointKind.INPUT_END, CheckpointKind.DECODE_END) if p.retains(k)} for p in Policy
    }
    assert retained == {
        Policy.MAIN_SPARSE: set(),
        Policy.INPUT_END: {CheckpointKind.INPUT_END},
        Policy.DECODE_END: {CheckpointKind.DECODE_END},
        Policy.BOTH: {CheckpointKind.INPUT_END, CheckpointKind.DECODE_END},
    }
    assert not any(p.retains(k) for p in Policy for k in (CheckpointKind.PROMPT_END, CheckpointKind.REACTIVE))


def test_settings_come_from_the_boundary_key():
    settings = read_settings({"boundary": {"policy": "input_end", "decode_to_prefill": True}, "other": 1})
    assert settings.policy is Policy.INPUT_END and settings.decode_to_prefill


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"policy": "everything"}, "additional_config.boundary.policy: "),
        ({"log_interval_s": -1}, "additional_config.boundary.log_interval_s: "),
        ({"polcy": "both"}, "additional_config.boundary.polcy: "),
    ],
)
def test_bad_settings_name_the_field(raw, where):
    with pytest.raises(SettingsError) as err:
        read_settings({"boundary": raw})
    assert str(err.value).startswith(where)
