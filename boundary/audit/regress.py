"""Template regression: re-render a golden corpus and report any drift.

Where it sits: beside the audit: it renders (family, render, boundaries) and compares with
golden files.

A golden directory holds one folder per case, ``<family>-<case>/``, with ``case.json`` (the
family, variant, template kwargs, pinned date, conversation and tools) and ``expected.json``
(per turn: the prompt's digest, length, U_end, P_end and generation suffix; the generated
turn as the model writes it; and the round-trip verdict against the next request). A turn is
every assistant message of the conversation, plus a final answer when it ends on another role.

``check_corpus`` reports what changed (text, boundaries, output format, verdicts);
``write_expected`` (re)writes ``expected.json`` from the current templates;
``add_cases`` creates cases from a folder of conversations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from boundary.errors import BoundaryError, RequestError
from boundary.family.facade import Family, family_spec, load_family
from boundary.json_file import read_json_file
from boundary.outputs import format_output

FINAL_ANSWER = {
    "role": "assistant",
    "reasoning_content": "The user wants a short answer.",
    "content": "Sure.",
}
FOLLOW_UP = {"role": "user", "content": "Thanks."}
PINNED_NOW = "2026-05-15T12:00:00"


class GoldenCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    family: str
    variant: str
    case: str
    template_kwargs: dict[str, Any] = {}
    now: str = PINNED_NOW
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class Drift:
    """One difference between the golden files and the current rendering."""

    case: str
    turn: int | None
    field: str
    expected: Any
    actual: Any
    detail: str = ""

    def __str__(self) -> str:
        where = self.case if self.turn is None else f"{self.case} turn {self.turn}"
        return f"{where}: {self.field}: expected {self.expected!r}, got {self.actual!r}{self.detail}"


Loader = Callable[[str, str], Family]


def _turns(messages: list[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]], dict[str, Any]]]:
    """(request length, next request, the assistant message) for every turn of a conversation."""
    out = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        j = next(
            (k for k in range(i + 1, len(messages)) if messages[k].get("role") == "assistant"), len(messages)
        )
        nxt = messages[:j] if j > i + 1 else [*messages[: i + 1], FOLLOW_UP]
        out.append((i, nxt, m))
    if messages[-1].get("role") != "assistant":
        out.append((len(messages), [*messages, FINAL_ANSWER, FOLLOW_UP], FINAL_ANSWER))
    return out


def expected_for(fam: Family, case: GoldenCase) -> dict[str, Any]:
    """What the current template, tokenizer and output format give for ``case``."""
    now = datetime.fromisoformat(case.now)
    kwargs = dict(case.template_kwargs)
    turns: list[dict[str, Any]] = []
    last_text = ""
    for i, nxt, message in _turns(case.messages):
        try:
            prompt = fam.render(case.messages[:i], case.tools, variant=case.variant, now=now, **kwargs)
            out = format_output(fam, prompt, message, variant=case.variant)
            r = fam.verify_round_trip(
                case.messages[:i],
                out.token_ids,
                nxt,
                tools=case.tools,
                variant=case.variant,
                now=now,
                **kwargs,
            )
        except BoundaryError as exc:
            turns.append({"request_messages": i, "error": str(exc)})
            continue
        last_text = prompt.text
        turns.append(
            {
                "request_messages": i,
                "prompt": {
                    "sha256": hashlib.sha256(prompt.text.encode()).hexdigest(),
                    "chars": len(prompt.text),
                    "p_end": prompt.p_end,
                    "u_end": prompt.u_end,
                    "suffix": prompt.text[prompt.input_end.char :] if prompt.u_end is not None else None,
                },
                "generated": {"text": out.text, "tokens": len(out.token_ids)},
                "verdict": {
                    "d_end": r.d_end,
                    "round_trips": r.round_trips,
                    "diverged_at": r.diverged_at,
                    "reusable_length": r.reusable_length,
                    "cause": r.cause.value if r.cause else None,
                    "tail": r.tail.value,
                },
            }
        )
    return {
        "family": case.family,
        "variant": case.variant,
        "tokenizer": fam.tokenizer.source,
        "turns": turns,
        "last_prompt_text": last_text,
    }


def _load_case(folder: Path) -> GoldenCase:
    try:
        return GoldenCase.model_validate(read_json_file(folder / "case.json"))
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise RequestError(f"{loc}: {err['msg']}", location=str(folder / "case.json")) from None


def case_folders(root: str | Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        raise RequestError("not a directory of golden cases", location=str(root))
    folders = sorted(p for p in root.iterdir() if (p / "case.json").is_file())
    if not folders:
        raise RequestError("no <family>-<case>/case.json folders here", location=str(root))
    return folders


def _default_loader(name: str, variant: str) -> Family:
    return load_family(name, variant=variant)


def check_corpus(
    root: str | Path, *, loader: Loader = _default_loader, families: Iterable[str] | None = None
) -> tuple[int, list[Drift]]:
    """Re-render every case under ``root``; the number of cases checked and every drift."""
    wanted = set(families) if families else None
    drifts: list[Drift] = []
    checked = 0
    for folder in case_folders(root):
        case = _load_case(folder)
        if wanted is not None and case.family not in wanted:
            continue
        checked += 1
        expected_path = folder / "expected.json"
        if not expected_path.is_file():
            drifts.append(Drift(folder.name, None, "expected.json", "present", "missing"))
            continue
        expected = read_json_file(expected_path)
        drifts += compare(folder.name, expected, expected_for(loader(case.family, case.variant), case))
    return checked, drifts


def compare(name: str, expected: dict[str, Any], actual: dict[str, Any]) -> list[Drift]:
    out: list[Drift] = []
    if len(expected["turns"]) != len(actual["turns"]):
        return [Drift(name, None, "turns", len(expected["turns"]), len(actual["turns"]))]
    for n, (e, a) in enumerate(zip(expected["turns"], actual["turns"], strict=True)):
        for section in ("error", "prompt", "generated", "verdict"):
            ev, av = e.get(section), a.get(section)
            if ev == av:
                continue
            if not isinstance(ev, dict) or not isinstance(av, dict):
                out.append(Drift(name, n, section, ev, av))
                continue
            for key in ev.keys() | av.keys():
                if ev.get(key) != av.get(key):
                    detail = ""
                    if section == "prompt" and key == "sha256":
                        detail = _text_drift(
                            expected.get("last_prompt_text", ""), actual.get("last_prompt_text", "")
                        )
                    out.append(Drift(name, n, f"{section}.{key}", ev.get(key), av.get(key), detail))
    return out


def _text_drift(old: str, new: str) -> str:
    n = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    before, now = old[max(0, n - 24) : n + 32], new[max(0, n - 24) : n + 32]
    return f" (the last request's text first differs at char {n}: {before!r} before, {now!r} now)"


def write_expected(
    root: str | Path, *, loader: Loader = _default_loader, families: Iterable[str] | None = None
) -> int:
    """Rewrite ``expected.json`` of every case (of ``families``) from the current templates."""
    wanted = set(families) if families else None
    written = 0
    for folder in case_folders(root):
        case = _load_case(folder)
        if wanted is not None and case.family not in wanted:
            continue
        data = expected_for(loader(case.family, case.variant), case)
        (folder / "expected.json").write_text(
            json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        written += 1
    return written


def add_cases(root: str | Path, conversations: str | Path, families: Iterable[str]) -> int:
    """Create ``<family>-<case>/case.json`` for every conversation file and family (default
    variant, template defaults). Existing cases are left as they are."""
    root, conversations = Path(root), Path(conversations)
    files = sorted(conversations.glob("*.json"))
    if not files:
        raise RequestError("no conversation files (*.json) here", location=str(conversations))
    made = 0
    for name in families:
        spec = family_spec(name)
        if spec.default_variant is None:
            continue
        for path in files:
            data = read_json_file(path)
            if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
                raise RequestError("expected an object with a list of messages", location=f"{path}: messages")
            try:
                case = GoldenCase(
                    family=name,
                    variant=spec.default_variant,
                    case=data.get("name", path.stem),
                    messages=data["messages"],
                    tools=data.get("tools"),
                )
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in err["loc"])
                raise RequestError(err["msg"], location=f"{path}: {where}") from None
            folder = root / f"{name}-{case.case}"
            if (folder / "case.json").exists():
                continue
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "case.json").write_text(
                case.model_dump_json(indent=1, exclude_none=True) + "\n", encoding="utf-8"
            )
            made += 1
    return made
