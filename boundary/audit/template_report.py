"""A template check as data and as a report: its JSON records, what changed between two
checks, and the Markdown a template maintainer reads.

Where it sits: after ``audit.template_check``; ``boundary check-template`` writes what it
returns.

A record's identity is its conversation's name (its index for an unnamed one) and message
count; two checks are compared on the fields that say what a request renders to and what
it means for the cache (``COMPARED``), never on timings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from boundary.audit.template_check import RequestCheck, TemplateCheck

Record = dict[str, Any]

COMPARED = (
    "text_sha256",
    "u_end",
    "p_end",
    "reason",
    "error",
    "target_equal",
    "extends",
    "declared",
    "answer",
)
"""The fields whose change is a change of the template's behaviour."""


def records(result: TemplateCheck) -> list[Record]:
    """Every request of ``result`` as a JSON-ready dict (the ``RequestCheck`` fields)."""
    return [asdict(r) for r in result.requests]


def _key(record: Mapping[str, Any]) -> tuple[str, int]:
    return (str(record["name"] or record["conversation"]), int(record["messages"]))


@dataclass(frozen=True, slots=True)
class Change:
    """One request that differs between two checks: ``fields`` maps each field of ``COMPARED``
    that differs to its (before, after) values; a request on one side only has the single
    field ``"request"`` with ``("absent", "present")`` or the reverse."""

    where: str
    fields: dict[str, tuple[Any, Any]]

    def __str__(self) -> str:
        shown = [
            "text changed"
            if f == "text_sha256"
            else f"answer: {_verdict(before)} -> {_verdict(after)}"
            if f == "answer"
            else f"{f}: {before!r} -> {after!r}"
            for f, (before, after) in self.fields.items()
        ]
        return f"{self.where}: " + "; ".join(shown)


def _verdict(answer: Mapping[str, Any] | None) -> str:
    if not answer:
        return "none"
    if answer.get("skipped"):
        return "skipped"
    return "round trips" if answer.get("round_trips") else f"diverges ({answer.get('cause')})"


def changes(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> list[Change]:
    """The requests that differ from ``before`` to ``after`` (records as ``records`` gives
    them), in ``after``'s order, requests only in ``before`` last."""
    old = {_key(r): r for r in before}
    new = {_key(r): r for r in after}
    out: list[Change] = []
    for key, r in new.items():
        was = old.get(key)
        if was is None:
            out.append(Change(_where(key), {"request": ("absent", "present")}))
            continue
        differ = {f: (was.get(f), r.get(f)) for f in COMPARED if was.get(f) != r.get(f)}
        if differ:
            out.append(Change(_where(key), differ))
    out += [Change(_where(k), {"request": ("present", "absent")}) for k in old if k not in new]
    return out


def _where(key: tuple[str, int]) -> str:
    return f"{key[0]}, {key[1]} messages"


# -- Markdown --------------------------------------------------------------------------------

_LISTED = 50  # changed requests listed in the Markdown report


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _u_end(result: TemplateCheck) -> list[str]:
    kinds: dict[str, Counter[str]] = {}
    for r in result.requests:
        status = "error" if r.error else "found" if r.u_end is not None else "unavailable"
        kinds.setdefault(r.kind, Counter())[status] += 1
    rows = [
        (kind, sum(c.values()), c["found"], c["unavailable"], c["error"]) for kind, c in sorted(kinds.items())
    ]
    lines = [
        "## U_end",
        "",
        *_table(("request kind", "requests", "FOUND", "UNAVAILABLE", "render failed"), rows),
    ]
    reasons = Counter(r.reason for r in result.missing_u_end)
    lines += [f"- UNAVAILABLE ×{n}: {reason}" for reason, n in reasons.most_common()]
    lines += [f"- {r.where}: render failed: {r.error}" for r in result.errors[:10]]
    return [*lines, ""]


def _append_only(result: TemplateCheck) -> list[str]:
    follow_ups = [r for r in result.requests if r.previous is not None]
    rewrites = result.rewrites
    declared = sum(1 for r in rewrites if r.declared)
    lines = [
        "## History append-only",
        "",
        f"{len(rewrites)} of {len(follow_ups)} follow-up requests do not start with the previous request "
        f"up to its U_end ({declared} predicted by the family's declared rewrites).",
        "",
    ]
    by_key = {(r.conversation, r.messages): r for r in result.requests}
    for r in rewrites:
        previous = by_key.get((r.conversation, r.previous or 0))
        lines.append(
            f"- {r.where}: first difference in {r.first_difference}; U_end of the request of "
            f"{r.previous} messages unreachable; P_end {'reachable' if r.reaches_p_end else 'unreachable'}; "
            f"D_end {_d_end(previous)}; "
            + (f"declared: {r.declared}" if r.declared else "not declared by the family")
        )
    return [*lines, ""]


def _d_end(previous: RequestCheck | None) -> str:
    answer = previous.answer if previous is not None else None
    if answer is None or answer.skipped is not None:
        return "not checked"
    return "reusable" if answer.round_trips else f"unreachable ({answer.cause})"


def _answers(result: TemplateCheck) -> list[str]:
    answers = [r.answer for r in result.requests if r.answer is not None]
    checked = [a for a in answers if a.skipped is None]
    causes = Counter(a.cause or "other" for a in checked if not a.round_trips)
    rows = [("round trips", sum(1 for a in checked if a.round_trips))]
    rows += [(cause, n) for cause, n in causes.most_common()]
    lines = [
        "## Answers (D_end)",
        "",
        f"{len(checked)} answers written as the model emits them and checked against the next request; "
        f"{len(answers) - len(checked)} skipped.",
        "",
    ]
    lines += _table(("verdict / cause", "answers"), rows)
    skipped = Counter(a.skipped for a in answers if a.skipped is not None)
    lines += [f"- skipped ×{n}: {why}" for why, n in skipped.most_common()]
    return [*lines, ""]


def _target(result: TemplateCheck, target: str) -> list[str]:
    compared = [r for r in result.requests if r.target_equal is not None]
    if not compared:
        return ["## Agreement with transformers", "", "Not compared.", ""]
    lines = [
        "## Agreement with transformers",
        "",
        f"{sum(1 for r in compared if r.target_equal)} of {len(compared)} requests: text and ids equal "
        f"to `apply_chat_template` given the request as {target} hands it over.",
    ]
    lines += [f"- {r.where}: differs" for r in result.target_mismatches[:20]]
    return [*lines, ""]


def markdown(
    result: TemplateCheck,
    *,
    title: str,
    header: Sequence[str],
    target: str,
    diffs: Mapping[str, Sequence[Change]] | None = None,
) -> str:
    """The report: ``header`` lines, then U_end per request kind, append-only history, the
    answers' round trips by cause, agreement with transformers and, per comparison in
    ``diffs`` (``{"previous template": [...]}``), what changed."""
    lines = [f"# Template check: {title}", "", *header, ""]
    lines += _u_end(result) + _append_only(result) + _answers(result) + _target(result, target)
    for against, found in (diffs or {}).items():
        lines += [f"## Changes against the {against}", ""]
        if found:
            counts = Counter(f for c in found for f in c.fields)
            lines.append(
                f"{len(found)} requests changed ("
                + ", ".join(f"{f}: {n}" for f, n in counts.most_common())
                + ")."
            )
            lines += ["", *(f"- {c}" for c in found[:_LISTED])]
            lines += (
                [f"- ... and {len(found) - _LISTED} more (all in --json)"] if len(found) > _LISTED else []
            )
        else:
            lines.append("None.")
        lines.append("")
    return "\n".join(lines)
