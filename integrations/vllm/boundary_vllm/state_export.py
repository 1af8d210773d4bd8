"""State-export modes the plugin has not verified, refused unless opted in.

Where it sits: the engine end, configuration: ``scheduler`` asks it at construction, beside
``engine_checks``; it imports only ``engine_checks`` (the error type) and ``settings``.

The plugin's placement and the state-content model (``worker_states``) assume vLLM's default way
of storing a recurrent state per align-mode block (a chunk-end or kernel-exported checkpoint,
copied between blocks by Model Runner V2). Modes that store or rebuild states another way were
never checked with boundary's sub-block and decode states, so like speculative decoding they are
refused unless ``allow_unverified_state_export`` opts in (then logged as unverified):

- FlashInfer **ReplaySSM** (``cache_config.use_replayssm``; since 0.34.0 it runs beside
  align-mode prefix caching): states kept as replay rings, not per-block snapshots;
- KDA **RecoverSSM** (``cache_config.use_kda_recoverssm``): states recomputed, not stored.
"""

from __future__ import annotations

from typing import Any

from boundary_vllm.engine_checks import ConfigurationError
from boundary_vllm.settings import IntegrationSettings

UNVERIFIED_MODES = {
    "use_replayssm": "FlashInfer ReplaySSM (cache_config.use_replayssm)",
    "use_kda_recoverssm": "KDA RecoverSSM (cache_config.use_kda_recoverssm)",
}


def unverified_state_exports(cache_config: Any) -> list[str]:
    """The unverified state-export modes ``cache_config`` (vLLM's ``CacheConfig``) turns on."""
    return [name for attr, name in UNVERIFIED_MODES.items() if getattr(cache_config, attr, False)]


def check_state_export(cache_config: Any, settings: IntegrationSettings) -> list[str]:
    """Raise ``ConfigurationError`` for an unverified mode unless opted in; return the warnings
    to log when opted in."""
    modes = unverified_state_exports(cache_config)
    if not modes:
        return []
    what = ", ".join(modes)
    if not settings.allow_unverified_state_export:
        raise ConfigurationError(
            f"{what}: boundary's checkpoints were never verified with this way of storing recurrent "
            "states (its sub-block and decode states may be wrong there); set "
            '{"boundary": {"allow_unverified_state_export": true}} to run anyway, unverified'
        )
    return [
        f"{what}: running unverified (allow_unverified_state_export); boundary's states were not checked here"
    ]
