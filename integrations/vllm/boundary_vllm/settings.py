"""Engine-side configuration, read from vLLM's ``--additional-config``:

    vllm serve MODEL --scheduler-cls boundary_vllm.scheduler.AsyncBoundaryScheduler \\
        --additional-config '{"boundary": {"policy": "both"}}'

Policies (which states are kept besides upstream's P_end and reactive junctions):

- ``main_sparse``: none; the scheduler behaves exactly as upstream (a baseline that keeps counters).
- ``input_end``: the state at the materialized U_end of every request that carries one.
- ``decode_end``: the aligned decode-end state (D_end) of every finished request that carries hints.
- ``both``: both of the above.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boundary.checkpoints import CheckpointKind

SETTINGS_KEY = "boundary"


class Policy(StrEnum):
    MAIN_SPARSE = "main_sparse"
    INPUT_END = "input_end"
    DECODE_END = "decode_end"
    BOTH = "both"

    def retains(self, kind: CheckpointKind) -> bool:
        """Whether this policy keeps ``kind`` in addition to upstream's checkpoints."""
        if kind is CheckpointKind.INPUT_END:
            return self in (Policy.INPUT_END, Policy.BOTH)
        if kind is CheckpointKind.DECODE_END:
            return self in (Policy.DECODE_END, Policy.BOTH)
        return False


class IntegrationSettings(BaseModel):
    """``additional_config["boundary"]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Policy = Policy.BOTH
    server_family: str | None = Field(
        default=None,
        description=(
            "For prompts rendered by vLLM itself (no hints in vllm_xargs): recover U_end from the generation "
            "prompt this boundary family appends; 'model' uses the served model's own tokenizer and template."
        ),
    )
    server_family_variant: str | None = None
    server_template_kwargs: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Further template-variable settings whose generation prompts to recognise, e.g. "
        '[{"enable_thinking": false}] with server_family "model".',
    )
    decode_to_prefill: bool = Field(
        default=False,
        description="Disaggregated prefill/decode only: a KV path carries decode-side states to prefill.",
    )
    request_policy: bool = Field(
        default=False,
        description="Requests may pick their own policy in vllm_xargs.boundary_policy (A/B runs).",
    )
    log_interval_s: float = Field(default=30.0, ge=0)
    ledger_capacity: int = Field(default=65536, ge=1, description="How many retained states are attributed.")


class SettingsError(ValueError):
    """``additional_config["boundary"]`` is malformed; the message names the field."""


def read_settings(additional_config: Mapping[str, Any] | object) -> IntegrationSettings:
    raw = additional_config.get(SETTINGS_KEY, {}) if isinstance(additional_config, Mapping) else {}
    try:
        return IntegrationSettings.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"additional_config.{SETTINGS_KEY}.{where}: {first['msg']}") from None
