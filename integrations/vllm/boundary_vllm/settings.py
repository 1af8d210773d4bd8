"""Engine-side configuration, read from vLLM's ``--additional-config``:

    vllm serve MODEL --scheduler-cls boundary_vllm.scheduler.AutoBoundaryScheduler \\
        --additional-config '{"boundary": {"policy": "both"}}'

Where it sits: the engine end, configuration: ``scheduler`` and ``engine_checks`` read it; it
imports only ``boundary.checkpoints.retention`` (the variant names) and ``boundary.trace.reader``
(its size bound).

Policies are the variants of ``boundary.checkpoints.retention`` (the same decision the experiment's
cache model runs): ``main_sparse`` (P_end), ``input_end`` (U_end), ``decode_end`` (D_end),
``both`` (U_end + D_end), ``chat_aware`` and ``horizon`` (one state each, from the request's
``boundary_round_trip`` / ``boundary_horizon`` hints). Reactive junctions are always kept;
P_end's block twin is kept unless ``upstream_twin`` is false. Requests without hints are
scheduled and cached exactly as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boundary.checkpoints.retention import Variant
from boundary.trace.reader import MAX_TRACE_BYTES

SETTINGS_KEY = "boundary"


class IntegrationSettings(BaseModel):
    """``additional_config["boundary"]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Variant = Variant.BOTH  # the engine runs exactly the policy module's variants
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
        description=(
            "With a KV connector (kv_producer, kv_consumer or kv_both): decode-side states can serve this "
            "deployment's next prefills (a decode->prefill path, or kv_both on an engine that also serves "
            "its own next prefills). Without it D_end is not kept under any connector role."
        ),
    )
    upstream_twin: bool = Field(
        default=True,
        description="Keep P_end's block twin, as upstream does (false: keep only what the policy names).",
    )
    request_policy: bool = Field(
        default=False,
        description="Requests may pick their own policy in vllm_xargs.boundary_policy (A/B runs).",
    )
    allow_speculative_decoding: bool = Field(
        default=False,
        description="Run with speculative decoding, unverified with boundary checkpoints (else refused).",
    )
    allow_unverified_state_export: bool = Field(
        default=False,
        description="Run with a recurrent-state export mode the plugin has not verified (FlashInfer "
        "ReplaySSM, KDA RecoverSSM), unverified (else refused).",
    )
    log_interval_s: float = Field(default=30.0, ge=0)
    ledger_capacity: int = Field(default=65536, ge=1, description="How many retained states are attributed.")
    record_path: str | None = Field(
        default=None,
        description="Write each finished request as a line of the audit's JSONL here (also: the "
        "BOUNDARY_RECORD_PATH environment variable); off by default.",
    )
    record_max_records: int = Field(
        default=100_000, ge=1, description="Stop recording after this many lines."
    )
    record_max_bytes: int = Field(
        default=MAX_TRACE_BYTES,
        ge=1,
        le=MAX_TRACE_BYTES,
        description="Stop recording after this many bytes (at most what `boundary audit` reads).",
    )


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
