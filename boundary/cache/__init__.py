"""A faithful model of a hybrid prefix cache in vLLM 0.33.0 align mode.

Attention KV in blocks found by chained prefix ids at ``prefix_match_unit``; recurrent states
only where retained (``prefix_cache_retention_interval=0``: a request's retained endpoints and
reactive shared-prefix junctions), each at a unit boundary; a hit resumes at the deepest
position where both are present. Bytes come from a model description laid out as vLLM pages
it; eviction is LRU behind a small protocol.

    geometry = align_mode_geometry(model, unit=64)
    cache = HybridPrefixCache(CacheConfig(geometry, capacity_bytes=32 * 2**30))
    hasher = PrefixHasher(geometry.unit)
    request = CacheRequest.from_tokens(0, prompt + output, len(prompt), hasher)
    admission = cache.admit(request, [Retain(CheckpointKind.INPUT_END, u_end)], now=0.0)
    admission.hit.attention, admission.hit.recurrent, admission.hit.joint
    cache.finish(0, now=1.0)
"""

from boundary.cache.accounting import (
    CacheGeometry,
    ModelDescription,
    RecurrentKind,
    RecurrentState,
    align_mode_geometry,
    geometry_for_unit,
    minimum_block_size,
)
from boundary.cache.chunking import prefill_chunk_ends
from boundary.cache.eviction import LRU, EvictionPolicy
from boundary.cache.hashing import PrefixHasher, PrefixId, PrefixReuse
from boundary.cache.hybrid import Admission, CacheConfig, CacheStats, HybridPrefixCache
from boundary.cache.lookup import Hit, find_joint_hit
from boundary.cache.memory import Entry, EntryKind
from boundary.cache.oracle import OracleCache
from boundary.cache.request import CacheRequest, Retain
from boundary.cache.retention import PlannedState, RetentionPlan, plan_retention

__all__ = [
    "LRU",
    "Admission",
    "CacheConfig",
    "CacheGeometry",
    "CacheRequest",
    "CacheStats",
    "Entry",
    "EntryKind",
    "EvictionPolicy",
    "Hit",
    "HybridPrefixCache",
    "ModelDescription",
    "OracleCache",
    "PlannedState",
    "PrefixHasher",
    "PrefixId",
    "PrefixReuse",
    "RecurrentKind",
    "RecurrentState",
    "Retain",
    "RetentionPlan",
    "align_mode_geometry",
    "find_joint_hit",
    "geometry_for_unit",
    "minimum_block_size",
    "plan_retention",
    "prefill_chunk_ends",
]
