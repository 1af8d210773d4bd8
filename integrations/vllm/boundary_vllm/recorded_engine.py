"""The header a recording engine writes: its geometry, read from vLLM's own configuration.

Where it sits: the engine end, beside ``recording``: the scheduler builds the header with
``recording_header`` from itself and hands it to ``recording.recorder_from``; ``boundary
experiment`` reads it back (``boundary.trace.reader.read_header``) and replays at that geometry. It
reads the scheduler's ``kv_cache_config`` and ``cache_config`` (vLLM's
``kv_cache_interface.MambaSpec`` tells a recurrent group from an attention one).

What it reads: the align-mode block (``cache_config.block_size``); the unit a hit lands on (the
plugin's retention knows it: ``prefix_match_unit`` where vLLM's sub-block hits are on, else the
block); the bytes of one layer's page (every group's page is padded to one size); the layers a
group holds; how many groups hold attention and how many a recurrent state; one layer's
recurrent state before padding; the pool's pages (``kv_cache_config.num_blocks``, the null page
included).
"""

from __future__ import annotations

from typing import Any

from boundary.trace.header import RecordedGeometry, RecordingHeader
from boundary_vllm.pin import installed_vllm

SESSIONS = (
    "vllm_xargs.boundary_session where the client names one; otherwise the request id, marked "
    "session_from request_id and grouped by prefix-chaining of prompt ids when read"
)


def recording_header(scheduler: Any) -> RecordingHeader | None:
    """The header of a recording made by ``scheduler`` (a boundary scheduler, or any vLLM
    ``Scheduler``: then the unit is the block and the policy unnamed); None on a model without
    recurrent layers (no hybrid geometry to replay at)."""
    from vllm.v1.kv_cache_interface import MambaSpec

    config = scheduler.kv_cache_config
    groups = config.kv_cache_groups
    recurrent = [g.kv_cache_spec for g in groups if isinstance(g.kv_cache_spec, MambaSpec)]
    if not recurrent:
        return None
    block = int(scheduler.cache_config.block_size)
    retention = getattr(scheduler, "boundary_retention", None)
    settings = getattr(scheduler, "boundary_settings", None)
    build = installed_vllm()
    geometry = RecordedGeometry(
        block_size=block,
        prefix_match_unit=int(retention.hit_unit) if retention is not None else block,
        page_bytes=max(int(g.kv_cache_spec.page_size_bytes) for g in groups),
        group_size=max(len(g.layer_names) for g in groups),
        attention_groups=len(groups) - len(recurrent),
        recurrent_groups=len(recurrent),
        state_bytes=max(int(s.real_page_size_bytes) for s in recurrent),
        num_pages=int(config.num_blocks),
    )
    return RecordingHeader(
        engine=str(build) if build is not None else "vllm",
        policy=settings.policy.value if settings is not None and retention is not None else None,
        sessions=SESSIONS,
        geometry=geometry,
    )
