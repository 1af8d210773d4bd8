"""The plugin and the experiment run one set of policy rules: the same functions of
``boundary.checkpoints.retention`` and ``boundary.checkpoints.policies``, the same policy names."""

from __future__ import annotations

import pytest

from boundary.checkpoints import policies as retention_rules
from boundary.checkpoints import retention as retention_policy
from boundary.checkpoints.retention import Variant
from boundary.experiment import policies
from boundary.experiment.stream import StreamRequest

pytestmark = pytest.mark.vllm


def test_the_plugin_and_the_experiment_call_the_same_policy_functions():
    from boundary_vllm import decode_end, prediction, retention

    assert decode_end.capped_d_end is policies.capped_d_end is retention_policy.capped_d_end
    assert retention.may_keep_decode is policies.may_keep_decode is retention_rules.may_keep_decode
    assert prediction.may_keep_decode is retention_rules.may_keep_decode
    assert retention.decide is policies.decide is prediction.decide is retention_rules.decide


@pytest.mark.parametrize(
    ("prompt", "output", "stops"),
    [
        (95, [1, 2, 3, 7], {7}),  # a trailing stop token
        (95, [1, 2, 3, 4], {7}),  # length-capped: the last sampled token has no state
        (95, [7], {7}),  # only the stop token
        (95, [1], {7}),  # one sampled token, never fed back
    ],
)
def test_the_plugin_and_the_experiment_take_the_same_d_end(prompt, output, stops):
    from array import array

    from boundary_vllm.decode_end import committed_end, final_d_end

    from boundary.experiment.stream import Continuation

    tokens = array("I", [*range(prompt), *output])
    request = StreamRequest(
        rid=0,
        session="s",
        turn=0,
        tokens=tokens,
        num_prompt_tokens=prompt,
        u_end=None,
        d_end=committed_end(prompt, output, stops),
        continuation=Continuation.FIRST,
    )
    experiment = policies.boundaries(request, finished=True).d_end
    assert experiment == final_d_end(prompt, output, stops, len(tokens))


def test_the_plugin_setting_takes_the_variants_by_their_names():
    from boundary_vllm.settings import IntegrationSettings, read_settings

    assert IntegrationSettings.model_fields["policy"].annotation is Variant
    for name in policies.POLICIES:
        assert read_settings({"boundary": {"policy": name}}).policy is Variant(name)
