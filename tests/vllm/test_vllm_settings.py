"""The engine-side configuration read from ``--additional-config``."""

from __future__ import annotations

import pytest
from boundary_vllm.settings import IntegrationSettings, SettingsError, read_settings

from boundary.checkpoints.retention import Variant


def test_the_default_policy_keeps_both_checkpoints():
    settings = read_settings({})
    assert settings == IntegrationSettings() and settings.policy is Variant.BOTH


def test_every_variant_of_the_policy_module_is_a_setting():
    for variant in Variant:
        assert read_settings({"boundary": {"policy": variant.value}}).policy is variant
    assert read_settings({"boundary": {"upstream_twin": False}}).upstream_twin is False


def test_settings_come_from_the_boundary_key():
    settings = read_settings({"boundary": {"policy": "input_end", "decode_to_prefill": True}, "other": 1})
    assert settings.policy is Variant.INPUT_END and settings.decode_to_prefill


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
