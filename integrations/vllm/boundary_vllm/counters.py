"""What the integration did, counted: checkpoints created and the bytes they hold, hits by the
kind of checkpoint that served them, prefill chunks split early, and hint outcomes.

Where it sits: the engine end, reporting: ``scheduler``, ``retention`` and ``kept_states`` count
into it, ``replay`` reads it back; it imports only ``boundary.checkpoints.kinds`` (the kinds it counts
by).

``CheckpointCounters`` is plain data (tests read it directly). ``PrometheusExport`` mirrors it
into ``prometheus_client`` metrics in the engine process: they reach vLLM's ``/metrics`` when
``PROMETHEUS_MULTIPROC_DIR`` is set for the server (the engine process inherits it), and
otherwise never (the scheduler warns at start-up, ``engine_checks.metrics_warning``). Every
metric carries vLLM's own ``model_name`` and ``engine`` labels (the served model name and the
engine index), so several engines or models behind one ``/metrics`` stay apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from boundary.checkpoints.kinds import CheckpointKind

MISS = "miss"  # a lookup that reused nothing
UNTRACKED = "untracked"  # a hit on a state whose origin was not recorded (ledger overflow, reset)
ENGINE_LABELS = ("model_name", "engine")  # vLLM's own metric labels


@dataclass(slots=True)
class CheckpointCounters:
    """Monotonic counts since the scheduler started; ``retained_bytes`` is the current holding."""

    created: Counter[str] = field(default_factory=Counter)  # kind -> checkpoints created
    created_bytes: Counter[str] = field(default_factory=Counter)  # kind -> bytes of state retained
    hits: Counter[str] = field(default_factory=Counter)  # kind | MISS | UNTRACKED -> admissions
    hit_tokens: Counter[str] = field(default_factory=Counter)  # kind -> prompt tokens served from cache
    forced_splits: int = 0  # prefill chunks ended early so a kept state exists
    dropped: int = 0  # prompt-side states a finish decision no longer kept (chat_aware / horizon)
    hints: Counter[str] = field(default_factory=Counter)  # HintStatus / "derived" -> requests
    retained_bytes: dict[str, int] = field(default_factory=dict)  # kind -> bytes held right now

    def record_created(self, kind: CheckpointKind, num_bytes: int, *, new_checkpoint: bool) -> None:
        if new_checkpoint:
            self.created[kind.value] += 1
        self.created_bytes[kind.value] += num_bytes

    def record_hit(self, kind: CheckpointKind | str, num_tokens: int) -> None:
        label = kind.value if isinstance(kind, CheckpointKind) else kind
        self.hits[label] += 1
        self.hit_tokens[label] += num_tokens

    def snapshot(self) -> CheckpointCounters:
        return CheckpointCounters(
            Counter(self.created),
            Counter(self.created_bytes),
            Counter(self.hits),
            Counter(self.hit_tokens),
            self.forced_splits,
            self.dropped,
            Counter(self.hints),
            dict(self.retained_bytes),
        )

    def summary(self) -> str:
        def fmt(c: Counter[str] | dict[str, int]) -> str:
            return ", ".join(f"{k}={v}" for k, v in sorted(c.items())) or "none"

        return (
            f"checkpoints created: {fmt(self.created)}; hits: {fmt(self.hits)}; "
            f"forced splits: {self.forced_splits}; dropped at finish: {self.dropped}; "
            f"retained bytes: {fmt(self.retained_bytes)}; "
            f"hints: {fmt(self.hints)}"
        )


class PrometheusExport:
    """Counter/gauge mirrors of ``CheckpointCounters``, labelled per engine (``ENGINE_LABELS``)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Gauge
        from prometheus_client import Counter as PCounter

        registry = REGISTRY if registry is None else registry
        engine = list(ENGINE_LABELS)
        # One declaration per metric, alike by design: each names its metric and help text.
        self._created = PCounter(
            "boundary_checkpoints_created",
            "Recurrent-state checkpoints created, by kind",
            [*engine, "kind"],
            registry=registry,
        )
        self._created_bytes = PCounter(
            "boundary_checkpoint_bytes_retained",
            "Bytes of recurrent state retained at creation, by kind",
            [*engine, "kind"],
            registry=registry,
        )
        self._hits = PCounter(
            "boundary_prefix_hits",
            "Prefix-cache admissions by the checkpoint kind that served them",
            [*engine, "kind"],
            registry=registry,
        )
        self._hit_tokens = PCounter(
            "boundary_prefix_hit_tokens",
            "Prompt tokens served from cache, by checkpoint kind",
            [*engine, "kind"],
            registry=registry,
        )
        self._splits = PCounter(
            "boundary_forced_splits",
            "Prefill chunks ended early at a U_end checkpoint",
            engine,
            registry=registry,
        )
        self._hints = PCounter(
            "boundary_requests", "Requests by checkpoint-hint outcome", [*engine, "hints"], registry=registry
        )
        self._retained = Gauge(
            "boundary_retained_bytes",
            "Bytes of recurrent state currently held, by kind",
            [*engine, "kind"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._decode_end = Gauge(
            "boundary_decode_end_consumable",
            "1 when a decode-end state can serve a later prefill",
            engine,
            registry=registry,
            multiprocess_mode="livemax",
        )

    def add(
        self,
        now: CheckpointCounters,
        before: CheckpointCounters,
        *,
        decode_end_consumable: bool,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Export what changed between two snapshots of one scheduler's counters; ``labels``:
        that engine's ``model_name`` and ``engine`` (empty strings when not given). A kind no
        longer held (evicted, or a prefix-cache reset) is set back to 0."""
        engine = {name: (labels or {}).get(name, "") for name in ENGINE_LABELS}
        for metric, new, old in (
            (self._created, now.created, before.created),
            (self._created_bytes, now.created_bytes, before.created_bytes),
            (self._hits, now.hits, before.hits),
            (self._hit_tokens, now.hit_tokens, before.hit_tokens),
            (self._hints, now.hints, before.hints),
        ):
            for label, value in new.items():
                if value > old.get(label, 0):
                    metric.labels(*engine.values(), label).inc(value - old.get(label, 0))
        if now.forced_splits > before.forced_splits:
            self._splits.labels(**engine).inc(now.forced_splits - before.forced_splits)
        for label in before.retained_bytes.keys() - now.retained_bytes.keys():
            self._retained.labels(*engine.values(), label).set(0)
        for label, value in now.retained_bytes.items():
            self._retained.labels(*engine.values(), label).set(value)
        self._decode_end.labels(**engine).set(1 if decode_end_consumable else 0)
