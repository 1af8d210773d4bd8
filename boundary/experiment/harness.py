"""The experiment: one stream, every policy, both budget modes, one or more units.

Where it sits: the experiment's top: it runs ``replay`` for every policy and unit and hands the
runs to ``metrics``, ``plan`` and ``sweep``; ``boundary.cli.experiment`` calls it and ``report``
reads its result.

For each ``prefix_match_unit``: hash the stream once, replay the oracle, replay
``main_sparse`` under equal total capacity (it is the baseline, and its peak retained-state
bytes become the equal checkpoint-byte budget unless one is given), then every policy under
every budget mode, each also replayed with prefill/decode disaggregation (no output reuse)
for the consumability metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from boundary.cache.accounting import CacheGeometry, ModelDescription, geometry_for_unit, minimum_block_size
from boundary.cache.hybrid import CacheConfig
from boundary.cache.retention import engine_geometry
from boundary.checkpoints.retention import DecodeStates
from boundary.experiment.calibration import step_constants
from boundary.experiment.cost import PrefillCostModel, StepCostModel, family_assumptions
from boundary.experiment.metrics import run_metrics
from boundary.experiment.plan import (
    logical_candidates_on_one_state,
)
from boundary.experiment.policies import ORACLE, POLICIES, policy
from boundary.experiment.presets import PRESETS
from boundary.experiment.replay import (
    BudgetMode,
    Run,
    event_order,
    replay,
    replay_oracle,
)
from boundary.experiment.serving import Routing
from boundary.experiment.stream import Stream, cache_requests
from boundary.experiment.summaries import add_incremental, oracle_metrics, oracle_records
from boundary.experiment.sweep import load_sweep

GIB = 2**30


class Eviction(StrEnum):
    """The cache executor. ``engine_steps``: vLLM's block pool page by page (a state one page per
    recurrent group, a block one per attention group; ``boundary.cache.engine_steps``), THE
    model, under both budget modes; ``byte_lru``: one LRU over whole byte-sized entries, a
    labelled what-if no headline uses (``--decode-states unit``, an engine vLLM is not, runs
    it too: the page-by-page pool keeps decode states only at block boundaries)."""

    ENGINE_STEPS = "engine_steps"
    BYTE_LRU = "byte_lru"


def page_by_page(eviction: str, output_at_unit: bool) -> bool:
    """Whether the cache runs vLLM's block pool page by page: the default, except with
    decode states at every unit (an engine vLLM is not, which only ``byte_lru`` models)."""
    return eviction == Eviction.ENGINE_STEPS.value and not output_at_unit


class ExperimentConfig(BaseModel):
    """What to run. ``units``: None entries mean the block size (vLLM's default unit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policies: tuple[str, ...] = (*POLICIES, ORACLE)
    budgets: tuple[BudgetMode, ...] = (BudgetMode.EQUAL_CAPACITY, BudgetMode.EQUAL_CHECKPOINT_BUDGET)
    units: tuple[int | None, ...] = (None,)
    capacity_gib: float = Field(32.0, gt=0)
    checkpoint_budget_gib: float | None = Field(None, gt=0)
    max_chunk_tokens: int = Field(8192, gt=0)
    junction_at_unit: bool = False
    output_at_unit: bool = False
    utilization: float = Field(0.4, gt=0, le=1)
    disaggregation: bool = True
    load_concurrency: tuple[float, ...] = ()
    load_capacity_gib: tuple[float, ...] = ()
    load_replicas: int = Field(1, gt=0)
    load_routing: Routing = Routing.SESSION_STICKY
    eviction: Eviction = Eviction.ENGINE_STEPS
    max_num_seqs: int = Field(256, gt=0)


class UnitResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    unit: int
    block_size: int
    attention_block_bytes: int
    state_bytes: int
    checkpoint_budget_bytes: float
    oracle: dict[str, Any]
    runs: list[dict[str, Any]]
    logical_candidates_on_one_state: dict[str, Any] = Field(default_factory=dict)
    load_sweep: list[dict[str, Any]] = Field(default_factory=list)


class ExperimentResult(BaseModel):
    """The machine-readable result: ``units[i].runs`` holds one metrics object per policy and
    budget mode (keys as in ``boundary.experiment.metrics``)."""

    model_config = ConfigDict(extra="forbid")

    stream: dict[str, Any]
    model: dict[str, Any]
    cost_model: dict[str, Any]
    config: dict[str, Any]
    units: list[UnitResult]
    unit1_oracle: dict[str, int] = Field(default_factory=dict)
    geometry: dict[str, Any] = Field(default_factory=dict)  # where the layout came from, when given

    def run(self, policy: str, budget: str, unit: int | None = None) -> dict[str, Any]:
        block = self.units[0] if unit is None else next(u for u in self.units if u.unit == unit)
        return next(r for r in block.runs if r["policy"] == policy and r["budget"] == budget)


Progress = Callable[[str], None]


def run_experiment(
    stream: Stream,
    model: ModelDescription,
    config: ExperimentConfig,
    progress: Progress | None = None,
    *,
    keep_runs: dict[tuple[int, str, str], Run] | None = None,
    geometry: GivenGeometry | None = None,
) -> ExperimentResult:
    """``keep_runs``, when given, receives every ``Run`` by ``(unit, budget, policy)`` (plots).
    ``geometry``: the layout to replay at (a recording's, or a given block) in place of the
    model's; a None unit is its unit. ``model`` then gives the prefill cost only."""
    say = progress or (lambda _msg: None)
    for i, r in enumerate(stream.requests):
        if r.rid != i:
            raise ValueError(
                f"stream requests must be in arrival order with rid == index (request {i} has {r.rid})"
            )
    overhead = step_constants(model.name).step_overhead_seconds
    cost = PrefillCostModel(model, utilization=config.utilization, step_overhead_seconds=overhead)
    names = [p for p in config.policies if p != ORACLE]
    for name in names:
        policy(name)  # fail on an unknown name before replaying anything
    units = [
        run_unit(
            stream,
            _layout(model, unit, geometry),
            config,
            cost,
            names,
            say,
            keep_runs,
        )
        for unit in config.units
    ]
    finest = _add_unit1_shares(stream, units)
    if config.load_concurrency and config.load_capacity_gib:
        units[0].load_sweep = _load_sweep(
            stream, _layout(model, config.units[0], geometry), config, cost, names, say
        )
    return ExperimentResult(
        stream={
            **stream.provenance,
            "name": stream.name,
            "requests": len(stream),
            "sessions": len(stream.sessions()),
            "prompt_tokens": sum(r.num_prompt_tokens for r in stream.requests),
            "output_tokens": sum(r.output_tokens for r in stream.requests),
        },
        model=_describe(model),
        cost_model={
            **cost.describe(),
            "step": StepCostModel(cost, step_constants(model.name)).describe(),
            "families": family_assumptions(PRESETS.values(), cost.utilization),
        },
        config=config.model_dump(mode="json"),
        units=units,
        unit1_oracle=finest,
        geometry={} if geometry is None else geometry.describe(),
    )


@dataclass(frozen=True, slots=True)
class GivenGeometry:
    """A layout given to the experiment in place of the model's: ``layout`` (its unit is the
    default unit) and where it came from (``source``: a recording's header, or ``--block``)."""

    layout: CacheGeometry
    source: str

    def describe(self) -> dict[str, Any]:
        g = self.layout
        return {
            "source": self.source,
            "block_size": g.block_size,
            "unit": g.unit,
            "page_bytes": g.page_bytes,
            "group_size": g.group_size,
            "attention_groups": g.attention_groups,
            "recurrent_groups": g.recurrent_groups,
        }


def _layout(model: ModelDescription, unit: int | None, given: GivenGeometry | None) -> CacheGeometry:
    """The layout at ``unit``: the given one's (``ValueError`` when the unit does not divide its
    block), else the model's (``geometry_for_unit``)."""
    if given is None:
        return geometry_for_unit(model, unit or minimum_block_size(model))
    if unit is None:
        return given.layout
    return replace(given.layout, unit=unit)


LOAD_OPTIONS = {
    "eviction",
    "junction_at_unit",
    "max_chunk_tokens",
    "max_num_seqs",
    "output_at_unit",
    "load_replicas",
    "load_routing",
}


def _load_sweep(
    stream: Stream,
    layout: CacheGeometry,
    config: ExperimentConfig,
    cost: PrefillCostModel,
    names: list[str],
    say: Progress,
) -> list[dict[str, Any]]:
    """The closed-loop load sweep at the first unit (``sweep.load_sweep``)."""
    return load_sweep(
        stream,
        layout,
        cost,
        names,
        concurrency=config.load_concurrency,
        capacity_gib=config.load_capacity_gib,
        options=config.model_dump(include=LOAD_OPTIONS),
        say=say,
    )


SLICES = ("hit_rate", "first_continuation", "steady_state")


def _add_unit1_shares(stream: Stream, units: list[UnitResult]) -> dict[str, int]:
    """Every run's and oracle's ``reused_over_unit1_oracle``; returns the unit-1 oracle."""
    finest = unit1_oracle_tokens(stream, units)
    for u in units:
        for metrics in (*u.runs, u.oracle):
            metrics["reused_over_unit1_oracle"] = over_unit1_oracle(metrics, finest)
    return finest


def unit1_oracle_tokens(stream: Stream, units: list[UnitResult]) -> dict[str, int]:
    """The unit-1 oracle's reusable tokens per slice (``SLICES``): from the unit-1 result when
    one ran, else replayed here. Every coarser unit's reuse is also a share of these."""
    done = next((u for u in units if u.unit == 1), None)
    if done is not None:
        return {s: done.oracle[s]["oracle_tokens"] for s in SLICES}
    requests = cache_requests(stream, 1)
    hits = replay_oracle(requests, 1, event_order(requests))
    turns = [r.turn for r in stream.requests]
    return {
        "hit_rate": sum(hits),
        "first_continuation": sum(h for h, t in zip(hits, turns, strict=True) if t == 1),
        "steady_state": sum(h for h, t in zip(hits, turns, strict=True) if t >= 2),
    }


def over_unit1_oracle(metrics: dict[str, Any], finest: dict[str, int]) -> dict[str, float | None]:
    """A run's (or an oracle's) reused tokens per slice over the unit-1 oracle's."""
    out: dict[str, float | None] = {}
    for s in SLICES:
        reused, total = metrics[s]["reused_tokens"], finest[s]
        out[s] = reused / total if total else None
    return out


def _describe(model: ModelDescription) -> dict[str, Any]:
    return {
        "name": model.name,
        "source": model.source,
        "num_layers": model.num_layers,
        "attention_layers": model.attention_layers,
        "recurrent_layers": model.recurrent_layers,
        "recurrent_kind": model.recurrent.kind.value,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "recurrent_state_bytes": model.recurrent_state_bytes,
        "active_params": model.active_params,
    }


def _cache_config(config: ExperimentConfig, geometry: CacheGeometry) -> CacheConfig:
    """The equal-capacity cache of ``config`` at ``geometry`` (``page_by_page`` eviction)."""
    return CacheConfig(
        geometry,
        config.capacity_gib * GIB,
        engine_steps=page_by_page(config.eviction, config.output_at_unit),
        junction_at_unit=config.junction_at_unit,
        max_chunk_tokens=config.max_chunk_tokens,
    )


def run_unit(
    stream: Stream,
    geometry: CacheGeometry,
    config: ExperimentConfig,
    cost: PrefillCostModel,
    names: list[str],
    say: Progress,
    keep_runs: dict[tuple[int, str, str], Run] | None = None,
) -> UnitResult:
    """Every policy under every budget mode at one unit (budget: ``_checkpoint_budget_bytes``)."""
    say(f"unit {geometry.unit} (block {geometry.block_size}): hashing {len(stream)} requests")
    requests = cache_requests(stream, geometry.unit)
    events = event_order(requests)
    oracle_hits = replay_oracle(requests, geometry.unit, events)
    base_config = _cache_config(config, geometry)
    decode_states = DecodeStates.UNIT if config.output_at_unit else DecodeStates.BLOCK

    def run(name: str, cache_config: CacheConfig, budget: BudgetMode) -> Run:
        states = decode_states if cache_config.output_reuse else DecodeStates.NONE
        return replay(
            stream,
            requests,
            policy(name),
            cache_config,
            cost,
            oracle_hits,
            budget=budget,
            events=events,
            geometry=engine_geometry(geometry, states),
        )

    say(f"  main_sparse / {BudgetMode.EQUAL_CAPACITY.value}")
    baseline = run("main_sparse", base_config, BudgetMode.EQUAL_CAPACITY)
    budget_bytes = _checkpoint_budget_bytes(config, baseline, geometry)
    metrics: list[dict[str, Any]] = []
    runs: dict[tuple[str, str], Run] = {}
    for budget in config.budgets:
        cache_config = base_config
        if budget is BudgetMode.EQUAL_CHECKPOINT_BUDGET:
            cache_config = replace(base_config, checkpoint_budget_bytes=budget_bytes)
        here = _budget_runs(run, cache_config, budget, baseline, names, config.disaggregation, say, runs)
        add_incremental(here, runs, budget.value)
        metrics += here
    if keep_runs is not None:
        keep_runs.update({(geometry.unit, b, name): r for (b, name), r in runs.items()})
    return UnitResult(
        unit=geometry.unit,
        block_size=geometry.block_size,
        attention_block_bytes=geometry.block_bytes,
        state_bytes=geometry.state_bytes,
        checkpoint_budget_bytes=budget_bytes,
        oracle=oracle_metrics(oracle_records(stream, oracle_hits, cost, config.max_chunk_tokens)),
        runs=metrics,
        logical_candidates_on_one_state=_candidates(stream, geometry, decode_states),
    )


def _candidates(stream: Stream, geometry: CacheGeometry, decode_states: DecodeStates) -> dict[str, Any]:
    """Q13 at this unit, where the policy sees decode states (``plan``)."""
    return logical_candidates_on_one_state(stream.requests, engine_geometry(geometry, decode_states))


def _checkpoint_budget_bytes(config: ExperimentConfig, baseline: Run, geometry: CacheGeometry) -> float:
    """The equal checkpoint-byte budget B: ``checkpoint_budget_gib`` if set, else
    main_sparse's *peak* retained-state bytes under equal capacity (``baseline``: so the
    baseline keeps what it kept), at least one state and at most the capacity (at most 90% of
    it under the byte-LRU what-if, whose blocks get the rest). Every policy then admits at most
    B bytes of kept states, blocks keeping the equal-capacity pool (``boundary.cache.budget``:
    LRU eviction of unheld kept states, refusal when held ones fill it)."""
    if config.checkpoint_budget_gib is not None:
        return config.checkpoint_budget_gib * GIB
    peak = float(baseline.stats.peak_state_bytes)
    share = 1.0 if page_by_page(config.eviction, config.output_at_unit) else 0.9
    return min(max(peak, float(geometry.state_bytes)), share * (config.capacity_gib * GIB))


def _budget_runs(
    run: Callable[[str, CacheConfig, BudgetMode], Run],
    cache_config: CacheConfig,
    budget: BudgetMode,
    baseline: Run,
    names: list[str],
    disaggregation: bool,
    say: Progress,
    runs: dict[tuple[str, str], Run],
) -> list[dict[str, Any]]:
    """Every policy under one budget mode, replayed first (main_sparse, the others' baseline,
    then decode_end, Q4's counterfactual), then measured in ``names`` order; each run lands in
    ``runs`` by ``(budget, policy)``."""
    splits: dict[str, Run | None] = {}
    order = ["main_sparse", "decode_end", *names]
    for name in dict.fromkeys(n for n in order if n in names or n == "main_sparse"):
        if name == "main_sparse" and budget is BudgetMode.EQUAL_CAPACITY:
            result = baseline
        else:
            say(f"  {name} / {budget.value}")
            result = run(name, cache_config, budget)
        splits[name] = (
            run(name, replace(cache_config, output_reuse=False), budget) if disaggregation else None
        )
        runs[(budget.value, name)] = result
    here, decode_only = runs[(budget.value, "main_sparse")], runs.get((budget.value, "decode_end"))
    return [
        run_metrics(runs[(budget.value, name)], here, splits[name], decode_only=decode_only) for name in names
    ]
