"""Configuration cross-checks when a boundary scheduler is built: a configuration the plugin
would run wrongly under is refused with the fix named; one under which it cannot help is logged.

Where it sits: the engine end, at construction: ``boundary_vllm.scheduler`` runs these checks when
vLLM builds it; it imports only ``settings``.

- The scheduler class must match ``scheduler_config.async_scheduling`` as vLLM resolved it: the
  async class feeds output placeholders the sync engine loop never resolves, and the reverse.
  ``AutoBoundaryScheduler`` always matches; a refusal names who turned async scheduling off
  (vLLM's CPU platform does it itself).
- Speculative decoding is refused unless ``allow_speculative_decoding`` opts in: the plugin's
  decode-side states and the worker's state moves after a verify step were never checked
  (accepted, it is logged as unverified).
- ``prefix_match_unit`` equal to the align-mode block: no sub-block state can be hit, and U_end
  floors to P_end's block in almost every turn, so the plugin changes next to nothing.
- Metrics that cannot be exported: the scheduler runs in vLLM's engine-core process (a child
  process, as ``vllm serve`` runs it) and ``PROMETHEUS_MULTIPROC_DIR`` is not set, so no
  ``boundary_*`` metric reaches the server's ``/metrics`` (``metrics_warning``).

This module never imports vLLM: the scheduler hands it the facts.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping
from dataclasses import dataclass

from boundary_vllm.settings import IntegrationSettings


class ConfigurationError(ValueError):
    """The engine's configuration and the boundary scheduler disagree; the message says what
    to change."""


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """What the checks read from vLLM's config. ``async_scheduling``: as vLLM resolved it (the
    platform's hook has the last word: vLLM's CPU build turns it off itself); ``speculative``:
    the speculative method (None: off); ``block_size`` / ``hit_unit``: the align-mode block and
    ``prefix_match_unit`` where the plugin is active (None: inactive, it behaves as upstream)."""

    scheduler_class: str
    scheduler_is_async: bool
    async_scheduling: bool
    speculative: str | None = None
    platform: str = ""  # vLLM's ``current_platform.device_type`` ("cpu", "cuda", ...)
    block_size: int | None = None
    hit_unit: int | None = None


METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def metrics_warning(environ: Mapping[str, str], *, child_process: bool, log_interval_s: float) -> str | None:
    """Why boundary's metrics cannot reach the server's ``/metrics`` (None: they can). They are
    ``prometheus_client`` metrics of the process the scheduler runs in: a child process (vLLM's
    engine core under ``vllm serve``) exports them only through ``PROMETHEUS_MULTIPROC_DIR``."""
    if not child_process or environ.get(METRICS_DIR_ENV):
        return None
    logged = (
        f"they are still logged every {log_interval_s:g} s"
        if log_interval_s
        else "log_interval_s is 0: nothing logs them"
    )
    return (
        f"boundary_* metrics cannot be exported: the scheduler runs in a child process and {METRICS_DIR_ENV} "
        f"is not set, so the server's /metrics never sees them ({logged}); set {METRICS_DIR_ENV} to an empty "
        "directory in the server's environment"
    )


AUTO_SCHEDULER = "boundary_vllm.scheduler.AutoBoundaryScheduler"


def _class_mismatch(facts: EngineFacts) -> str:
    """Why a boundary scheduler class does not fit the engine's resolved async scheduling, with
    who decided it: the platform (the CPU build always schedules synchronously) or the flags."""
    if facts.async_scheduling:
        return (
            f"--scheduler-cls {facts.scheduler_class} is the synchronous scheduler but this engine "
            f"schedules asynchronously: use {AUTO_SCHEDULER}, which follows the engine's setting "
            "(or pass --no-async-scheduling)"
        )
    decided = (
        "vLLM's CPU platform turns async scheduling off itself"
        if facts.platform == "cpu"
        else f"async scheduling is off on this engine (platform {facts.platform or 'unknown'}: "
        "--no-async-scheduling, or the platform or executor turned it off)"
    )
    return (
        f"--scheduler-cls {facts.scheduler_class} needs async scheduling, but {decided}: use "
        f"{AUTO_SCHEDULER}, which follows the engine's setting"
    )


def check_engine(
    facts: EngineFacts,
    settings: IntegrationSettings,
    *,
    environ: Mapping[str, str] | None = None,
    child_process: bool | None = None,
) -> list[str]:
    """Raise ``ConfigurationError`` for a configuration the plugin cannot run under; return
    the warnings to log for one it runs under without effect, unverified or unobserved.
    ``environ`` / ``child_process``: this process's environment and whether a parent process
    started it (default: read from this process)."""
    if facts.scheduler_is_async != facts.async_scheduling:
        raise ConfigurationError(_class_mismatch(facts))
    warnings: list[str] = []
    if facts.block_size is None:
        return warnings
    if facts.speculative is not None:
        if not settings.allow_speculative_decoding:
            raise ConfigurationError(
                f"speculative decoding ({facts.speculative}) with boundary checkpoints is unverified: "
                "turn it off, or set additional_config.boundary.allow_speculative_decoding to run "
                "the two together unverified"
            )
        warnings.append(
            f"speculative decoding ({facts.speculative}) is on: boundary's decode-side checkpoints "
            "and the recurrent-state moves after a verify step are unverified"
        )
    if facts.hit_unit is not None and facts.hit_unit == facts.block_size:
        finer = 16 if facts.hit_unit > 16 and facts.hit_unit % 16 == 0 else None
        advice = (
            f"--prefix-match-unit {finer} (or another divisor of the block)"
            if finer
            else ("a --prefix-match-unit that divides the block")
        )
        warnings.append(
            f"prefix_match_unit equals the block size ({facts.block_size}): no state inside a block "
            "can be hit, so U_end floors to P_end's block in almost every turn and the policy "
            f"changes next to nothing; set {advice}"
        )
    metrics = metrics_warning(
        os.environ if environ is None else environ,
        child_process=multiprocessing.parent_process() is not None
        if child_process is None
        else child_process,
        log_interval_s=settings.log_interval_s,
    )
    if metrics is not None:
        warnings.append(metrics)
    return warnings
