"""GPU check for the vLLM integration: does reusing a recurrent-state checkpoint give the same
logits and outputs as a full prefill, and how much time to first token does it save?

Two steps:

    python integrations/vllm/gpu_check.py prepare   # here: boundary + vLLM (CPU is enough)
    python integrations/vllm/gpu_check.py run        # on the GPU machine

``prepare`` renders a tau-bench slice with boundary's Qwen3.5 template and vocabulary (every
assistant turn becomes a request; the model's output is the turn as the model writes it, with a
deterministic reasoning text, since tau-bench carries none), replays it through vLLM 0.33.0's
real scheduler and KV-cache manager under each policy (block 16, ``boundary_vllm.replay``), and
writes the token streams with each request's joint hit per policy to
``gpu_check_stream.json.gz`` beside this script (well under a megabyte).

``run`` needs only torch and transformers (the GPU machines here have no vLLM and no boundary):

- transformers path (always): a small Qwen3.5-style hybrid (3 Gated DeltaNet layers per
  attention layer, Qwen3.5's vocabulary size) with seeded dummy weights, built with
  transformers' own ``Qwen3_5ForCausalLM``. Per request: a full prefill; then, for each
  policy's hit position ``h``, a prefill to ``h`` whose cache (KV and recurrent state) is kept,
  and the prefill of the remaining ``prompt[h:]`` from it. Reported: time to first token
  (prefill, synchronized) both ways, the largest logit difference over the suffix, whether the
  last-token argmax agrees, and whether greedy continuations are equal.
- vLLM path (when vllm==0.33.0 and boundary_vllm import): the same model as a dummy-weight
  vLLM engine with ``BoundaryScheduler``; each policy replays the prompts (prefix cache reset
  between policies, the policy chosen per request), plus a pass that never reads the cache.
  Reported: per-request cached tokens, time to first token, and whether greedy outputs equal the
  no-reuse pass. Dummy weights do not reproduce the recorded outputs, so D_end hits do not occur
  on this path; the transformers path covers D_end positions.

Writes ``gpu_check.json`` (into ``$OUT`` when set, else the working directory) and a summary on
stdout. Stops starting new work after ``--budget-s`` seconds (default 420: the whole check fits
in 8 minutes). Exit status 1 when a reused state disagrees with the full prefill.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STREAM = HERE / "gpu_check_stream.json.gz"
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
    from boundary_vllm.settings import Policy
    from boundary_vllm.workload import conversation_turns, with_reasoning

    import boundary
    from boundary.datasets import tau_bench_airline

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
    for policy in Policy:
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


# -- vLLM path -------------------------------------------------------------------------------
def vllm_check(
    stream: dict[str, Any], *, shape: dict[str, Any], deadline: float, greedy_tokens: int = 8
) -> dict[str, Any]:
    """The prompts through a dummy-weight vLLM engine with the boundary scheduler."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the scheduler's counters stay reachable
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    model_dir = Path(tempfile.mkdtemp(prefix="boundary-gpu-check-"))
    hf_config = {
        "architectures": ["Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_text",
        "torch_dtype": "bfloat16",
    }
    (model_dir / "config.json").write_text(json.dumps(hf_config | shape), encoding="utf-8")
    llm = LLM(
        model=str(model_dir),
        skip_tokenizer_init=True,
        load_format="dummy",
        dtype="bfloat16",
        seed=0,
        enable_prefix_caching=True,
        async_scheduling=False,
        scheduler_cls="boundary_vllm.scheduler.BoundaryScheduler",
        additional_config={
            "boundary": {"policy": "main_sparse", "request_policy": True, "log_interval_s": 0}
        },
        max_model_len=16384,
        gpu_memory_utilization=0.5,
        enforce_eager=True,
        disable_log_stats=False,
    )
    requests = stream["requests"]
    passes: dict[str, list[dict[str, Any]]] = {}
    for name in ("no_reuse", *POLICIES):
        if time.monotonic() > deadline:
            break
        llm.reset_prefix_cache()
        rows = []
        for record in requests:
            extra: dict[str, Any] = {}
            if name != "no_reuse" and record["input_end"] is not None:
                extra = {
                    "boundary_input_end": record["input_end"],
                    "boundary_prompt_end": len(record["prompt"]),
                    "boundary_policy": name,
                }
            params = SamplingParams(
                max_tokens=greedy_tokens,
                temperature=0.0,
                extra_args=extra or None,
                skip_reading_prefix_cache=name == "no_reuse",
            )
            start = time.perf_counter()
            out = llm.generate([TokensPrompt(prompt_token_ids=record["prompt"])], params, use_tqdm=False)[0]
            wall = time.perf_counter() - start
            metrics = getattr(out, "metrics", None)
            rows.append(
                {
                    "cached_tokens": out.num_cached_tokens or 0,
                    "ttft_s": getattr(metrics, "first_token_latency", None),
                    "wall_s": wall,
                    "output": list(out.outputs[0].token_ids),
                }
            )
        passes[name] = rows
    reference = passes.get("no_reuse", [])
    summary = {}
    for name in POLICIES:
        rows = passes.get(name)
        if rows is None:
            continue
        ttft = [r["ttft_s"] for r in rows if r["ttft_s"] is not None]
        summary[name] = {
            "requests": len(rows),
            "hits": sum(r["cached_tokens"] > 0 for r in rows),
            "cached_tokens": sum(r["cached_tokens"] for r in rows),
            "mean_ttft_s": statistics.fmean(ttft) if ttft else None,
            "outputs_equal_no_reuse": sum(
                a["output"] == b["output"] for a, b in zip(rows, reference, strict=False)
            ),
        }
    counters = None
    try:
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        counters = scheduler.boundary_report().summary()
    except AttributeError:
        pass
    return {
        "path": "vllm",
        "vllm": _vllm_version(),
        "passes": passes,
        "summary": summary,
        "boundary_counters": counters,
        "note": "dummy weights do not reproduce the recorded outputs: D_end hits cannot occur on this path",
    }


# -- run -------------------------------------------------------------------------------------
def run(
    out_dir: Path,
    *,
    budget_s: float,
    device: str | None = None,
    dtype: str = "float32",
    tiny: bool = False,
    max_requests: int | None = None,
    engines: tuple[str, ...] = ("transformers", "vllm"),
) -> dict[str, Any]:
    import torch

    started = time.monotonic()
    deadline = started + budget_s
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    stream = load_stream()
    shape = TINY if tiny else SMALL
    report: dict[str, Any] = {
        "provenance": stream["provenance"],
        "machine": {
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
        "results": {},
    }
    attempts: dict[str, Callable[[], dict[str, Any]]] = {
        "transformers": lambda: transformers_check(
            stream, device=device, dtype=dtype, shape=shape, deadline=deadline, max_requests=max_requests
        ),
        "vllm": lambda: vllm_check(stream, shape=shape, deadline=deadline),
    }
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
    report["verdict"] = _verdict(report["results"].get("transformers"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def _vllm_unavailable(device: str) -> str | None:
    version = _vllm_version()
    if version is None:
        return "vllm is not installed on this machine"
    if version != "0.33.0":
        return f"vllm=={version} is installed; boundary_vllm is pinned to 0.33.0"
    if not device.startswith("cuda"):
        return "no GPU: vLLM's wheel ships CUDA kernels only"
    try:
        import boundary_vllm.scheduler  # noqa: F401
    except ImportError as exc:
        return f"boundary_vllm cannot be imported: {exc}"
    return None


def _verdict(result: dict[str, Any] | None) -> str:
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


def _print_summary(report: dict[str, Any]) -> None:
    print(f"elapsed {report['elapsed_s']:.1f}s  verdict: {report['verdict']}")
    for engine, result in report["results"].items():
        if "summary" not in result:
            print(f"[{engine}] {result.get('status')}: {result.get('reason') or result.get('error')}")
            continue
        print(f"[{engine}]")
        for policy, s in result["summary"].items():
            print(f"  {policy:12s} " + "  ".join(f"{k}={_fmt(v)}" for k, v in s.items()))


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="render and replay the stream (needs boundary and vllm)")
    run_parser = sub.add_parser("run", help="the check itself (needs torch and transformers)")
    run_parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    run_parser.add_argument("--budget-s", type=float, default=420.0)
    run_parser.add_argument("--device", default=None)
    run_parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    run_parser.add_argument("--tiny", action="store_true", help="the CPU-sized model")
    run_parser.add_argument("--max-requests", type=int, default=None)
    run_parser.add_argument("--engine", action="append", choices=["transformers", "vllm"])
    args = parser.parse_args(argv)
    if args.command == "prepare":
        data = prepare()
        print(f"wrote {STREAM} ({len(data['requests'])} requests)")
        return 0
    report = run(
        args.out,
        budget_s=args.budget_s,
        device=args.device,
        dtype=args.dtype,
        tiny=args.tiny,
        max_requests=args.max_requests,
        engines=tuple(args.engine or ("transformers", "vllm")),
    )
    _print_summary(report)
    return 0 if not report["verdict"].startswith("reuse disagrees") else 1


if __name__ == "__main__":
    sys.exit(main())
