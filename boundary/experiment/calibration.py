"""The serving cost model's constants: what one scheduler step costs on the GPU.

Where it sits: under ``cost`` (which turns these into step times) and ``serving``; imports
nothing of the experiment.

A scheduler step that runs ``b`` decoding sequences and prefill chunks worth ``F`` FLOPs takes

    step_overhead + (decode_base + decode_per_sequence * b if b else 0) + F / (peak * utilization)

Prefill is compute-bound (``boundary.experiment.cost.PrefillCostModel``: FLOPs over an H200's
dense BF16 peak at a stated utilization); decode is memory-bound: every step with decode reads
the active weights once (``decode_base``) and each sequence's KV and recurrent state
(``decode_per_sequence``). Mixed steps add the two (no overlap assumed: conservative).

``ASSUMED_H200`` are order-of-magnitude figures, not measurements: a 3B-active MoE in BF16 reads
~6 GB of active weights per step at 4.8 TB/s (~1.3 ms), routing spreads a batch over more
experts, and launches, sampling and scheduling add a few ms. The *form* is checked against a
running engine: vLLM's CPU build on a tiny GDN model (``boundary_vllm.step_costs``;
``benchmarks/calibrate_steps.py`` prints the fit and says whether it holds within 25%) fits
a fixed cost per step, prefill linear in tokens (7% residual) and decode a fixed cost plus a
cost per sequence (12-13%); CPU values of a tiny model say nothing of an
H200's, so no GPU model has a measured entry. Calibration on a GPU fills
``MEASURED_STEP_CONSTANTS`` (by ``ModelDescription.name``); a measured entry replaces the
assumption and every report names which one it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class StepConstants:
    """Seconds. ``prefill_utilization``: the share of the peak FLOP rate prefill reaches (None:
    the experiment's ``--utilization``). ``source``: where the figures come from."""

    step_overhead_seconds: float
    decode_base_seconds: float
    decode_seconds_per_sequence: float
    source: str
    prefill_utilization: float | None = None

    def describe(self) -> dict[str, Any]:
        return asdict(self)


ASSUMED_H200 = StepConstants(
    step_overhead_seconds=0.002,
    decode_base_seconds=0.006,
    decode_seconds_per_sequence=0.0001,
    source=(
        "assumed for one H200 (not measured): 2 ms scheduling, launches and sampling per step; "
        "6 ms per decode step for the active weights and expert spread; 0.1 ms per decoding "
        "sequence for its KV and recurrent state reads; the form (fixed cost per step, prefill "
        "linear in tokens, decode fixed plus per sequence) is checked against vLLM's CPU engine "
        "by benchmarks/calibrate_steps.py (largest residuals 7% prefill, 12-13% decode), the GPU "
        "values are not"
    ),
)

# Constants measured against the engine, by ModelDescription.name. Empty until calibrated.
MEASURED_STEP_CONSTANTS: dict[str, StepConstants] = {}


def split_extra_seconds(prefill: Mapping[int, float]) -> dict[int, float]:
    """What a forced split costs, read off measured prefill steps: for every ``n`` timed beside
    ``n / 2``, two steps of ``n / 2`` tokens minus one of ``n`` (the load model charges it one
    ``step_overhead``: the same tokens, one more step)."""
    return {
        n: 2 * prefill[n // 2] - t for n, t in sorted(prefill.items()) if n % 2 == 0 and n // 2 in prefill
    }


def step_constants(model_name: str) -> StepConstants:
    """The measured constants for ``model_name`` when there are some, else ``ASSUMED_H200``."""
    return MEASURED_STEP_CONSTANTS.get(model_name, ASSUMED_H200)
