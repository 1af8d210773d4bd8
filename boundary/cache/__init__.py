"""A faithful model of a hybrid prefix cache in vLLM 0.33.0 align mode.

Where it sits: after checkpoints and the retention policy, whose decisions it executes; the
experiment drives it.

Attention KV in blocks found by chained prefix ids at ``prefix_match_unit``; recurrent states
only where retained (``prefix_cache_retention_interval=0``: the states the retention policy
``boundary.checkpoints.policies`` decides, P_end's block twin among them, and reactive shared-prefix
junctions), each at a unit boundary; a hit resumes at the deepest
position where both are present. Bytes come from a model description laid out as vLLM pages
it; eviction is LRU behind a small protocol.

    geometry = align_mode_geometry(model, unit=64)
    cache = HybridPrefixCache(CacheConfig(geometry, capacity_bytes=32 * 2**30))
    hasher = PrefixHasher(geometry.unit)
    request = CacheRequest.from_tokens(0, prompt + output, len(prompt), hasher)
    policy = engine_geometry(geometry)
    at_admission = decide("input_end", RequestBoundaries(len(prompt), u_end), policy)
    admission = cache.admit(request, at_admission, now=0.0)
    admission.hit.attention, admission.hit.recurrent, admission.hit.joint
    at_finish = decide("input_end", RequestBoundaries(len(prompt), u_end, d_end), policy)
    cache.finish(0, now=1.0, decision=at_finish)
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
from boundary.cache.entry import Entry, EntryKind
from boundary.cache.eviction import LRU, EvictionPolicy
from boundary.cache.hashing import PrefixHasher, PrefixId, PrefixReuse
from boundary.cache.hybrid import Admission, CacheConfig, CacheStats, HybridPrefixCache
from boundary.cache.lookup import Hit, find_joint_hit
from boundary.cache.oracle import OracleCache
from boundary.cache.request import CacheRequest
from boundary.cache.retention import PlannedState, RetentionPlan, engine_geometry, plan_retention

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
    "RetentionPlan",
    "align_mode_geometry",
    "engine_geometry",
    "find_joint_hit",
    "geometry_for_unit",
    "minimum_block_size",
    "plan_retention",
    "prefill_chunk_ends",
]
