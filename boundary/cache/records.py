"""The hybrid prefix cache's records: its configuration, what one admission did, the requests
in flight and the counters over a replay.

Where it sits: in the cache model, under ``hybrid`` and ``engine_steps``, which both fill
these records; ``hybrid`` re-exports the public ones.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from boundary.cache.accounting import CacheGeometry
from boundary.cache.eviction import LRU, EvictionPolicy
from boundary.cache.lookup import Hit
from boundary.cache.memory import Entry
from boundary.cache.request import CacheRequest
from boundary.cache.retention import PlannedState, RetentionPlan
from boundary.checkpoints.retention import Decision, serving_kind


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """``capacity_bytes``: all cache memory. ``checkpoint_budget_bytes``: None for no cap on
    retained states; else, page by page (``engine_steps``), retained states are admitted up to
    this many bytes inside the one pool (``boundary.cache.budget``: blocks keep the whole pool);
    under the byte-LRU what-if, retained states get exactly this many bytes and blocks the rest.
    ``max_chunk_tokens``: the scheduler's ``max_num_batched_tokens``. ``output_reuse``: False
    models prefill/decode disaggregation without a decode-to-prefill path: the prefill side
    never sees output KV or output-side states (the policy is told so through its geometry's
    ``decode_states``). ``recurrent_groups_first``: vLLM's KV-cache groups put the recurrent
    ones before attention (its order for the hybrid models served); a step's copy-on-write
    endpoints are let go group by group in that order (``engine_steps``)."""

    geometry: CacheGeometry
    capacity_bytes: float
    checkpoint_budget_bytes: float | None = None
    junction_at_unit: bool = False
    max_chunk_tokens: int = 8192
    eviction: Callable[[], EvictionPolicy] = LRU
    output_reuse: bool = True
    engine_steps: bool = False
    async_lag: bool = False
    recurrent_groups_first: bool = True

    def __post_init__(self) -> None:
        budget = self.checkpoint_budget_bytes
        if budget is not None and self.engine_steps and not 0 < budget <= self.capacity_bytes:
            raise ValueError(f"checkpoint budget {budget} must be inside (0, capacity {self.capacity_bytes}]")
        if budget is not None and not self.engine_steps and not 0 < budget < self.capacity_bytes:
            raise ValueError(f"checkpoint budget {budget} must be inside (0, capacity {self.capacity_bytes})")
        if self.engine_steps and not math.isfinite(self.capacity_bytes):
            raise ValueError(
                "engine_steps models a block pool of a fixed number of pages: capacity must be finite"
            )


@dataclass(frozen=True, slots=True)
class Admission:
    """What admitting one request did. ``forced_splits``: extra prefill chunks the plan's
    in-prompt states cost beyond the scheduler's own stops; ``recached``: states created under
    a prefix id some live state already answers to (vLLM caches duplicates);
    ``prefill_steps``: the chunks its prefill runs in, the forced ones included (each a
    scheduler step); ``split_at``: the chunk ends only the plan asked for (where a scheduler
    that keeps these states must stop a chunk)."""

    hit: Hit
    plan: RetentionPlan
    created: tuple[Entry, ...]
    forced_splits: int
    recached: int
    prefill_steps: int = 1
    split_at: tuple[int, ...] = ()


@dataclass(slots=True)
class InFlight:
    """One admitted request until ``finish``: what it holds and what it created."""

    request: CacheRequest
    table: list[Entry]
    states: list[Entry]
    scratch: Entry | None
    decision: Decision
    created: list[Entry]
    running: list[Entry] = field(default_factory=list)  # engine_steps: held Mamba pages, oldest first
    planned: dict[int, PlannedState] = field(default_factory=dict)
    pending: list[PlannedState] = field(default_factory=list)  # sub-block states copied next step
    tentative: list[Entry] = field(default_factory=list)  # decode boundaries keyed until finish
    tentative_decode: bool = False
    copy_page: int | None = None  # a partially hit state's copy-on-write page, taken at the first step
    history: list[int] = field(default_factory=list)  # engine_steps: each step's end


@dataclass(slots=True)
class CacheStats:
    """Counters over a replay. ``evictions[(victim, cause)]``: entries of kind ``victim``
    evicted to make room for an allocation of kind ``cause``. ``*_byte_seconds``: time
    integrals of live bytes (occupancy = integral / elapsed)."""

    evictions: Counter[tuple[str, str]] = field(default_factory=Counter)
    created: Counter[str] = field(default_factory=Counter)
    state_hits: Counter[str] = field(default_factory=Counter)
    dropped_states: int = 0  # prompt-side states a finish decision no longer kept
    budget_refusals: Counter[str] = field(default_factory=Counter)  # states the budget had no room for
    evicted_states: list[Entry] = field(default_factory=list)
    state_bytes: int = 0
    state_bytes_by_kind: Counter[str] = field(default_factory=Counter)  # by a state's primary kind
    state_byte_seconds_by_kind: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    block_bytes: int = 0
    peak_state_bytes: int = 0
    state_byte_seconds: float = 0.0
    block_byte_seconds: float = 0.0
    started_at: float | None = None
    clock: float = 0.0

    def label(self, state: Entry, labels: tuple[str, ...]) -> None:
        """Give ``state`` its ``labels``, moving its bytes to its new primary kind: only
        labelled states count in ``state_bytes_by_kind`` (``_forget`` takes them out)."""
        if state.labels:
            self.state_bytes_by_kind[primary_kind(state)] -= state.nbytes
        state.labels = labels
        if labels:
            self.state_bytes_by_kind[primary_kind(state)] += state.nbytes


def primary_kind(state: Entry) -> str:
    """The kind a state is counted under: its first label in serving order."""
    kind = serving_kind(state.labels)
    return kind.value if kind is not None else state.labels[0] if state.labels else "unlabelled"
