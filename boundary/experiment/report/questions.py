"""The experiment plan's thirteen questions, numbered and defined as the plan numbers and
defines them, each answered from an ``ExperimentResult`` (nothing is recomputed here):

Where it sits: in the report, last in the flow: ``boundary.experiment.report`` calls it for the
thirteen answers.

1. the effective joint prefix hit on the first continuation after a checkpoint is produced;
2. how often the next request reuses D_end;
3. how much of that D_end reuse comes from tool-call continuations;
4. when D_end does not match, how often U_end is the useful fallback;
5. how often U_end avoids a first-continuation miss caused by an unreachable P_end;
6. after a shared branch has been observed and its junction materialized, how much U_end adds;
7. how many more prompt tokens each policy reuses;
8. how much prefill work each policy avoids;
9. how much recurrent-state memory each endpoint kind consumes;
10. whether the second checkpoint's extra evictions offset its reuse;
11. TTFT, throughput and cache residency under realistic concurrency;
12. first reuse vs steady-state reuse;
13. how often several logical candidates map to one materialized checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from boundary.experiment.harness import UnitResult
from boundary.experiment.plan import NO_EFFECT, VERDICT_THRESHOLD
from boundary.experiment.report import answers as a
from boundary.experiment.report.fmt import EQUAL_BUDGET, EQUAL_CAPACITY, get, pct, runs_under, seconds
from boundary.experiment.report.targets import lines as target_lines

Describe = Callable[[dict[str, Any]], str | None]

# (heading, one run's line or None, the line when no run has one)
QUESTIONS: tuple[tuple[str, Describe, str], ...] = (
    (
        "**1. Effective joint hit on the first continuation.** A session's second request, the first "
        "that can reuse a checkpoint its session produced:",
        a.first_continuation,
        "no first continuations",
    ),
    (
        "**2. How often the next request reuses D_end.** Continuations served by a D_end state:",
        a.decode_end,
        "no continuations",
    ),
    (
        "**3. D_end reuse from tool-call continuations.**",
        a.decode_end_tool_share,
        "no D_end reuse under any policy (question 2), so none comes from tool-call continuations",
    ),
    (
        "**4. U_end as the fallback when D_end does not match.** Among continuations whose previous "
        "request's D_end state was retained but hash-rejected, those U_end served with a deeper joint "
        "hit than `decode_end` (D_end alone, nothing to fall back on) had on the same request:",
        a.fallback,
        "no continuation found its previous request's D_end retained and hash-rejected",
    ),
    (
        "**5. First-continuation misses from an unreachable P_end that U_end avoids.** Among first "
        "continuations where P_end's state exists but is not a prefix of the request, those where "
        "`main_sparse` reused less than the oracle, and of those, the ones U_end served deeper:",
        a.unreachable_prompt_end,
        "no first continuations",
    ),
    (
        "**6. What U_end adds once the branch's junction exists.** Requests whose prefix carried a "
        "cached reactive junction at lookup:",
        a.after_junction,
        "no runs",
    ),
    ("**7. Extra prompt tokens reused.**", a.prompt_tokens, "no runs"),
    ("**8. Prefill work avoided.**", a.prefill_work, "no runs"),
    (
        "**9. Recurrent-state memory per endpoint kind** (time-averaged retained bytes, by the kind a "
        "state is counted under; snapshot bytes = states created × state size):",
        a.bytes_by_kind,
        "no runs",
    ),
)


def answers(unit: UnitResult) -> list[str]:
    cap = runs_under(unit, EQUAL_CAPACITY) or unit.runs
    name = cap[0]["budget"] if cap else EQUAL_CAPACITY
    out = [
        f"Numbers below are under **{name}** unless a line says otherwise "
        f"(unit {unit.unit}, block {unit.block_size}).",
        "",
    ]
    oracle_fc = unit.oracle["first_continuation"]["reused_over_oracle"]
    for k, (heading, describe, empty) in enumerate(QUESTIONS, 1):
        after = [f"- `oracle`: reused / oracle {pct(oracle_fc)}"] if k == 1 else []
        out += _question(heading, cap, describe, *after, empty=empty)
    out += second_checkpoint(unit)
    oracle_ttft = seconds(unit.oracle["ttft_estimate_seconds"]["mean"])
    out += _question(
        "**11. TTFT, throughput and cache residency** at this run's concurrency (TTFT here is the "
        "prefill plus a step's fixed cost for every step it runs in, so a forced split pays one more; "
        "queued TTFT, throughput and saturation are in the closed-loop load sweep, where a report has "
        "one; whether a policy's extra steps outweigh the prefill it saved, summed over the stream):",
        cap,
        a.load,
        f"- `oracle`: prefill time and step cost, no queue, mean {oracle_ttft}",
    )
    out += _question(
        "**12. First reuse vs steady state** (hit rate; reused / oracle):", cap, a.first_vs_steady
    )
    out += collisions(unit, cap)
    out += [
        "**Phase 2 / 3 targets** (equal checkpoint-byte budget; met: at least the best rival's reused / "
        "oracle, with no tolerance; a miss in percentage points, with its cause):",
        *targets(unit),
        "",
    ]
    return out


def collisions(unit: UnitResult, runs: Sequence[dict[str, Any]]) -> list[str]:
    """Q13: the plan's logical candidates on one state (per request, whatever the policy),
    then per policy the collisions the engine adds (on the twin, a junction on a kept state)."""
    head = [
        "**13. Logical candidates on one materialized checkpoint.** Per request at this unit, where "
        "U_end, P_end and D_end materialize:"
    ]
    c = unit.logical_candidates_on_one_state
    head.append(f"- {a.logical_candidates(c)}" if c else "- not computed")
    return _question("\n".join([*head, "Per policy, apart from the plan's candidates:"]), runs, a.collapsed)


def second_checkpoint(unit: UnitResult) -> list[str]:
    out = [
        "**10. Do the second checkpoint's extra evictions offset its reuse?** `both` against each "
        "single endpoint, request by request: prefill work saved where `both` reused more, lost where "
        "it reused less (the states its second checkpoint displaced), the net and the verdict "
        f"(`pays` / `costs` only when the net reaches {pct(VERDICT_THRESHOLD)} of the stream's "
        f"prefill work, else `{NO_EFFECT}`):"
    ]
    for budget in (EQUAL_CAPACITY, EQUAL_BUDGET):
        both = get(unit, "both", budget)
        if both and both.get("second_checkpoint_verdict"):
            for single, v in both["second_checkpoint_verdict"].items():
                out.append(f"- [{budget}] {a.verdict(single, v)}")
    for r in runs_under(unit, EQUAL_CAPACITY) or unit.runs:
        out.append(f"- `{r['policy']}`: {a.evictions(r)}")
    return [*out, ""]


def targets(unit: UnitResult) -> list[str]:
    """``chat_aware`` at least max(``main_sparse``, ``input_end``, ``decode_end``); ``horizon`` at
    least ``both``: met, or missed by how much and why (``report.targets``)."""
    return target_lines(unit)


def _question(
    heading: str, runs: Sequence[dict[str, Any]], describe: Describe, *after: str, empty: str = "no runs"
) -> list[str]:
    """The heading, one line per run that has an answer, then ``after``; ``empty`` says why
    when no run has one (a section is never left blank)."""
    lines = [heading]
    for r in runs:
        text = describe(r)
        if text is not None:
            lines.append(f"- `{r['policy']}`: {text}")
    if len(lines) == 1:
        lines.append(f"- {empty}")
    return [*lines, *after, ""]
