"""D_end on the engine side: committed tokens, and whether the state can serve a later prefill."""

from __future__ import annotations

import pytest
from boundary_vllm.decode_end import Consumability, committed_end, decode_end_availability

from tests.vllm.streams import turn


def test_d_end_excludes_the_trailing_stop_token_only():
    t = turn(11, 4)
    stop = {t.output.stop_token_id}
    assert committed_end(t.prompt.p_end, t.output.token_ids, stop) == len(t.tokens) - 1
    assert committed_end(t.prompt.p_end, t.output.token_ids[:-1], stop) == len(t.tokens) - 1
    assert committed_end(t.prompt.p_end, [], stop) == t.prompt.p_end


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("role", "decode_to_prefill", "status"),
    [
        (None, False, Consumability.CONSUMABLE),
        ("kv_both", False, Consumability.NON_CONSUMABLE),  # a prefill/decode pair may use kv_both
        ("kv_both", True, Consumability.CONSUMABLE),
        ("kv_consumer", False, Consumability.NON_CONSUMABLE),
        ("kv_producer", False, Consumability.NON_CONSUMABLE),
        ("kv_consumer", True, Consumability.CONSUMABLE),
    ],
)
def test_d_end_is_non_consumable_when_disaggregated_without_a_decode_to_prefill_path(
    role, decode_to_prefill, status
):
    from vllm.config import KVTransferConfig

    config = None if role is None else KVTransferConfig(kv_connector="NixlConnector", kv_role=role)
    availability = decode_end_availability(config, decode_to_prefill=decode_to_prefill)
    assert availability.status is status
    assert availability.reason
    if status is Consumability.NON_CONSUMABLE:
        assert role in availability.reason and "decode_to_prefill" in availability.reason
