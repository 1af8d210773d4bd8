"""D_end on the engine side: where a finished request's committed tokens end, and whether a
state kept there can ever serve a later prefill on this engine.

Where it sits: the engine end, after checkpoints: ``scheduler`` and ``retention`` settle D_end with
it at finish, ``prediction`` uses the same rule for the cache model; it imports only
``boundary.checkpoints.retention``.

D_end excludes trailing stop tokens (the template re-renders the turn's end itself) and any
draft tokens (vLLM appends only verified tokens to ``output_token_ids``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from boundary.checkpoints.retention import capped_d_end


def committed_end(
    num_prompt_tokens: int, output_token_ids: Sequence[int], stop_token_ids: Collection[int]
) -> int:
    """The token position just past the last generated token that is not a trailing stop token."""
    end = len(output_token_ids)
    while end > 0 and output_token_ids[end - 1] in stop_token_ids:
        end -= 1
    return num_prompt_tokens + end


def final_d_end(
    num_prompt_tokens: int, output_token_ids: Sequence[int], stop_token_ids: Collection[int], num_tokens: int
) -> int:
    """D_end of a finished request, as the retention decision and the recorded trace both take
    it: ``boundary.checkpoints.retention.capped_d_end`` of its committed end."""
    end = committed_end(num_prompt_tokens, output_token_ids, stop_token_ids)
    return capped_d_end(end, num_tokens, num_prompt_tokens)


def request_d_end(request: Any) -> int:
    """``final_d_end`` of a finished vLLM ``Request``."""
    params = request.sampling_params
    stops = params.all_stop_token_ids if params is not None else ()
    return final_d_end(request.num_prompt_tokens, request.output_token_ids, stops, request.num_tokens)


class Consumability(StrEnum):
    CONSUMABLE = "consumable"
    NON_CONSUMABLE = "non_consumable"


@dataclass(frozen=True, slots=True)
class DecodeEndAvailability:
    status: Consumability
    reason: str

    @property
    def consumable(self) -> bool:
        return self.status is Consumability.CONSUMABLE


KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")


def connector_roles(kv_transfer_config: Any) -> list[str]:
    """The KV roles that decide where decode runs: the connector's own or, for a
    ``MultiConnector`` (whose own ``kv_role`` vLLM requires but which moves no KV itself), its
    children's (``kv_connector_extra_config["connectors"]``, nested ones read through)."""
    if kv_transfer_config is None or getattr(kv_transfer_config, "kv_connector", None) is None:
        return []
    top = {
        "kv_role": kv_transfer_config.kv_role,
        "kv_connector_extra_config": kv_transfer_config.kv_connector_extra_config,
    }
    roles: list[str] = []
    pending: list[Any] = [top]
    while pending:
        config = pending.pop(0)
        children = (config.get("kv_connector_extra_config") or {}).get("connectors") or []
        if children:
            pending.extend(children)
        elif config.get("kv_role") in KV_ROLES:
            roles.append(str(config["kv_role"]))
    return roles


def decode_end_availability(kv_transfer_config: Any, *, decode_to_prefill: bool) -> DecodeEndAvailability:
    """Decode-end states live where decode ran; they help only if the next prefill runs there too
    (or a KV path carries them back). ``kv_transfer_config`` is vLLM's ``KVTransferConfig`` or None.
    Under any connector role, ``kv_both`` included, that is a setting (``decode_to_prefill``),
    never assumed; a ``MultiConnector``'s roles are its children's, and when every one is
    ``kv_producer`` this engine hands decode off and D_end is not consumable whatever the setting."""
    roles = connector_roles(kv_transfer_config)
    if not roles:
        return DecodeEndAvailability(Consumability.CONSUMABLE, "prefill and decode run on this engine")
    role = roles[0] if len(set(roles)) == 1 else "kv_both"
    if role == "kv_producer" and kv_transfer_config.kv_role != "kv_producer":
        return DecodeEndAvailability(
            Consumability.NON_CONSUMABLE,
            f"every connector under {kv_transfer_config.kv_connector} is kv_producer: decode runs on another "
            "instance, so no decode-end state is kept here (decode_to_prefill does not apply)",
        )
    if decode_to_prefill:
        return DecodeEndAvailability(
            Consumability.CONSUMABLE,
            f"{role}: a decode->prefill KV path is configured (decode_to_prefill); decode states are offered "
            "to the connector as they are cached",
        )
    where = (
        "decode runs on another instance"
        if role == "kv_producer"
        else "the next prefill runs on another instance"
        if role == "kv_consumer"
        else "a prefill/decode pair can be configured with kv_both, so the next prefill may run elsewhere"
    )
    return DecodeEndAvailability(
        Consumability.NON_CONSUMABLE,
        f"prefill and decode are disaggregated ({role}): {where} and no decode->prefill path is configured; "
        f"decode-end states are not retained (set decode_to_prefill when a connector carries them back)",
    )
