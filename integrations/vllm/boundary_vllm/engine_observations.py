"""An engine run kept for re-checking: the requests as the engine ran them (tokens, hints, the
scheduler's steps) and the hit it served each, so the cache model can be checked against that
run again, without the engine, after the model changes.

Where it sits: the engine end, beside ``prediction``: ``engine_experiment.run_policy`` saves one
file per policy run when asked (``EngineExperimentConfig.record_dir``); ``recheck`` reads one
back and predicts every request with the cache model as it is now (``predicted_hits`` at the
saved ``ModelShape``). A saved run is a gzip'd JSON object: how it ran (``what``), the policy,
the model shape and, per session, each request's ``Observed`` fields with its ``engine_hit``.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from boundary.checkpoints.retention import Variant
from boundary_vllm.prediction import ModelShape, Observed, predicted_hits

FORMAT = 1


@dataclass(frozen=True, slots=True)
class SavedRun:
    """One policy's engine run: what the engine ran and the hit it served each request;
    ``what``: how it ran (engine, pool, sessions in flight), in words."""

    policy: Variant
    shape: ModelShape
    sessions: tuple[tuple[Observed, ...], ...]
    engine_hits: tuple[tuple[int, ...], ...]
    what: str = ""


@dataclass(frozen=True, slots=True)
class Recheck:
    """The model as it is now against a saved run: requests, agreeing ones, and each
    disagreement as (session index, request index, engine hit, model hit)."""

    requests: int
    agreeing: int
    disagreements: tuple[tuple[int, int, int, int], ...]

    @property
    def agreement(self) -> float:
        return self.agreeing / self.requests if self.requests else 1.0


def save_run(path: Path, run: SavedRun) -> None:
    sessions = [
        [{**asdict(o), "engine_hit": hit} for o, hit in zip(s, hits, strict=True)]
        for s, hits in zip(run.sessions, run.engine_hits, strict=True)
    ]
    body = {
        "format": FORMAT,
        "what": run.what,
        "policy": run.policy.value,
        "shape": asdict(run.shape),
        "sessions": sessions,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(body, f)


def load_run(path: Path) -> SavedRun:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        body = json.load(f)
    if body.get("format") != FORMAT:
        raise ValueError(f"{path}: saved-run format {body.get('format')!r}, this reader knows {FORMAT}")
    sessions = tuple(tuple(observed_from(r) for r in s) for s in body["sessions"])
    hits = tuple(tuple(int(r["engine_hit"]) for r in s) for s in body["sessions"])
    shape = ModelShape(**body["shape"])
    return SavedRun(Variant(body["policy"]), shape, sessions, hits, body.get("what", ""))


def observed_from(r: dict[str, Any]) -> Observed:
    """One request's ``Observed`` from its JSON fields (as ``dataclasses.asdict`` writes them)."""
    return Observed(
        tuple(r["prompt_token_ids"]),
        tuple(r["output_token_ids"]),
        r["input_end"],
        tuple(r["stop_token_ids"]),
        r["round_trip"],
        r["horizon"],
        r["admitted"],
        r["finished"],
        tuple((step, order, end) for step, order, end in r["steps"]),
    )


def recheck(run: SavedRun) -> Recheck:
    """Every request of ``run`` predicted by the cache model now, beside the engine's hit."""
    predicted = predicted_hits(run.sessions, run.policy, run.shape)
    differ = tuple(
        (si, ri, engine, model)
        for si, (hits, models) in enumerate(zip(run.engine_hits, predicted, strict=True))
        for ri, (engine, model) in enumerate(zip(hits, models, strict=True))
        if engine != model
    )
    requests = sum(len(s) for s in run.sessions)
    return Recheck(requests, requests - len(differ), differ)
