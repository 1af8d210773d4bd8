"""The Phase 2 / 3 targets on small workloads at every unit: does each policy meet its own?

``chat_aware`` must reuse at least max(``main_sparse``, ``input_end``, ``decode_end``) and
``horizon`` at least ``both``, under the equal checkpoint-byte budget, at units 1, 16, 64 and
the block (1056), on tau-bench (reasoning dropped; Qwen3.6 ``preserve_thinking``, kept), BFCL
(reasoning kept) and ShareGPT-like chat (many user turns, no tools; dropped and kept). Each
workload is a subset of sessions so a run takes seconds to a couple of minutes on one core.

Where it sits: outside the package, at the report end: a script nobody imports; it runs the
experiment harness (``boundary.experiment``) and its target check on each workload.

ShareGPT-like traffic is a trace file made here: sessions of 3-8 user turns drawn from MT-bench
questions (seeded), answers from MT-bench's GPT-4 references where it ships them, else
synthesised, every answer with synthetic reasoning; the client sends that reasoning back
(``kept``) or not (``dropped``). Prints one table: reused / oracle per policy and the margin of
each target (negative: missed).

Usage: python benchmarks/targets.py [--sessions 40] [--capacity-gib 32] [--only NAME,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from boundary.experiment.workloads.mt_bench import sharegpt_like as sharegpt_like_scripts
from boundary.experiment.workloads.script import (
    SessionScript,
    client_history,
    with_reasoning,
)

UNITS = (1, 16, 64, 1056)
POLICIES = "main_sparse,input_end,decode_end,both,chat_aware,horizon,oracle"
P36 = ["--family", "qwen3_6", "--template-kwargs", '{"preserve_thinking": true}', "--client", "kept"]
TARGETS = (("chat_aware", ("main_sparse", "input_end", "decode_end")), ("horizon", ("both",)))


def sharegpt_like(path: Path, sessions: int, client: str, seed: int = 0) -> Path:
    """Write a ShareGPT-like trace (chat requests, ``output.message``) to ``path``."""
    lines = []
    for shaped in sharegpt_like_scripts(sessions, seed):
        name, messages = shaped.name, shaped.messages
        script = with_reasoning(SessionScript(name, messages), seed, (40, 240))
        for i, m in enumerate(script.messages):
            if m["role"] == "assistant":
                history = client_history(script.messages[:i], client)  # type: ignore[arg-type]
                lines.append({"session": name, "messages": history, "output": {"message": m}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def workloads(sessions: int, out: Path) -> dict[str, list[str]]:
    tau, bfcl = ["--sessions", str(sessions)], ["--sessions", str(sessions)]
    return {
        "tau-q35-dropped": ["--workload", "tau_bench", "--family", "qwen3_5", *tau],
        "tau-q36-kept": ["--workload", "tau_bench", *P36, *tau],
        "bfcl-q35-kept": ["--workload", "bfcl", "--family", "qwen3_5", "--client", "kept", *bfcl],
        "bfcl-q35-kept-unit-decode": [
            "--workload", "bfcl", "--family", "qwen3_5", "--client", "kept", "--decode-states", "unit", *bfcl,
        ],
        "sharegpt-q35-dropped": [
            "--workload", str(sharegpt_like(out / "sharegpt-dropped.jsonl", sessions, "dropped")),
            "--family", "qwen3_5",
        ],
        "sharegpt-q36-kept": [
            "--workload", str(sharegpt_like(out / "sharegpt-kept.jsonl", sessions, "kept")), *P36,
        ],
    }  # fmt: skip


def run(name: str, args: list[str], out: Path, capacity: float) -> dict[str, Any]:
    result = out / f"{name}-{capacity:g}gib.json"
    units = [a for u in UNITS for a in ("--unit", str(u))]
    cmd = [sys.executable, "-m", "boundary", "experiment", *args, *units, "--policies", POLICIES]
    cmd += ["--budget", "equal_checkpoint_budget", "--capacity-gib", str(capacity), "--json", str(result)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if done.returncode:
        raise SystemExit(f"{name}: {done.stderr[-2000:]}")
    return dict(json.loads(result.read_text(encoding="utf-8")))


def rows(name: str, result: dict[str, Any]) -> list[str]:
    out = []
    for unit in result["units"]:
        reused = {
            r["policy"]: r["hit_rate"]["reused_over_oracle"]
            for r in unit["runs"]
            if r["budget"] == "equal_checkpoint_budget"
        }
        cells = [f"{100 * reused.get(p, float('nan')):.2f}" for p in POLICIES.split(",")[:-1]]
        margins = []
        for mine, rivals in TARGETS:
            best = max(rivals, key=lambda p: reused.get(p, -1.0))
            margins.append(f"{100 * (reused[mine] - reused[best]):+.2f} vs {best}")
        out.append(f"| {name} | {unit['unit']} | " + " | ".join(cells + margins) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--only", default="")
    ap.add_argument("--capacity-gib", type=float, default=32.0)
    ap.add_argument("--out", type=Path, default=Path("out/targets"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = set(filter(None, args.only.split(",")))
    header = ["workload", "unit", *POLICIES.split(",")[:-1], "chat_aware margin", "horizon margin"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header), flush=True)
    for name, wargs in workloads(args.sessions, args.out).items():
        if chosen and name not in chosen:
            continue
        print("\n".join(rows(name, run(name, wargs, args.out, args.capacity_gib))), flush=True)


if __name__ == "__main__":
    main()
