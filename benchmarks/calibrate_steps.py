"""The load model's step cost form fitted to a running vLLM engine (``boundary_vllm.step_costs``).

Times prefill steps of a few prompt sizes and decode steps of a few batch sizes on the tiny
random-weight Gated DeltaNet model (vLLM's CPU build), prefix caching off, and fits the form
``boundary.experiment.calibration`` prices steps with: a fixed cost per step, prefill linear
in tokens, decode a fixed cost plus a cost per sequence. Prints the samples, what a forced
split costs read off them (two steps of n/2 tokens minus one of n, beside the one step overhead
the load model charges it), the fitted
constants, the largest relative residual of each fit, whether the fit supports the form (or
why not: a residual over 25%, a constant of the wrong sign; on a busy machine, measure again),
and the GPU assumption beside them.

Where it sits: outside the package, at the engine end: a script nobody imports; it drives
``boundary_vllm.step_costs`` (the engine tier's CPU build) and reads the experiment's cost form.

Absolute times are CPU times of a tiny model: they check the form, not the GPU values (which
stay assumptions, stated with their sources in every report header).

Usage (from the repository root, in the engine environment):
    BOUNDARY_CACHE_DIR=... PYTHONPATH=.:integrations/vllm .venv-engine/bin/python \\
        benchmarks/calibrate_steps.py [--sizes 256,512,1024,2048] [--batches 1,2,4,8] \\
        [--repeats 5] [--clock cpu|wall]
"""

from __future__ import annotations

import argparse
import json
import os

from boundary.experiment.calibration import ASSUMED_H200, split_extra_seconds


def main() -> None:
    from boundary_vllm.step_costs import FIT_TOLERANCE, fit, measure
    from boundary_vllm.tiny_models import model_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512,1024,2048")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = ap.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(","))
    batches = tuple(int(x) for x in args.batches.split(","))
    samples = measure(model_dir("gdn"), sizes, batches, repeats=args.repeats, clock=args.clock)
    fitted = fit(samples)
    unstable = fitted.instabilities(FIT_TOLERANCE, max(batches))
    result = {
        "engine": "vLLM CPU build, tiny random-weight GDN model (boundary_vllm.tiny_models), bf16",
        "clock": "CPU seconds of the engine's thread" if args.clock == "cpu" else "wall seconds",
        "load_average_1min": os.getloadavg()[0],
        "prefill_step_seconds": samples.prefill,
        "decode_step_seconds": samples.decode,
        "fit": fitted.describe(),
        "fit_supports_the_form": not unstable,
        "fit_instabilities": unstable,
        # a forced split: the same prompt in two steps of half its tokens, against one step
        "forced_split_extra_seconds": split_extra_seconds(samples.prefill),
        "forced_split_charged_seconds": fitted.step_overhead_seconds,
        "gpu_assumption": ASSUMED_H200.describe(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
