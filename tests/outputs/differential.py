"""Side-by-side reading of the generated-turn corpus by boundary and by vLLM's parsers.

``python -m tests.outputs.differential`` prints per-format agreement and the disagreements.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

from boundary.outputs import output_format, parse_output
from tests.outputs.corpus import MESSAGES, TOOLS, Case, cases
from tests.outputs.oracle import Read, vllm_read
from tests.support import family

# (family, variant, syntax): every format vLLM 0.33.0 has a parser pair for, on a family that uses it
CONFIGS: list[tuple[str, str | None, str]] = [
    ("qwen3", None, "hermes_json"),
    ("granite_4_h", None, "hermes_json"),
    ("qwen3_5", None, "qwen3_coder_xml"),
    ("nemotron_3", None, "qwen3_coder_xml"),
    ("kimi_linear", None, "kimi_sections"),
    ("minimax_m2", None, "minimax_xml"),
    ("mistral", None, "mistral"),
    ("deepseek_v3", "v3", "deepseek_v3"),
    ("deepseek_v3", "v3_1", "deepseek_v3_1"),
]


def _args(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=lambda c: f"<{c}>")
    except ValueError:
        return ("not json", text)


def _norm(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return repr(v)
    return v


@dataclass(frozen=True, slots=True)
class Compared:
    case: Case
    ours: Read
    theirs: Read

    @property
    def calls_agree(self) -> bool:
        return [(n, _args(a)) for n, a in self.ours.calls] == [(n, _args(a)) for n, a in self.theirs.calls]

    @property
    def agree(self) -> bool:
        """Names, arguments (as JSON) and content agree."""
        return self.calls_agree and (self.ours.content or None) == (self.theirs.content or None)

    @property
    def agree_reasoning(self) -> bool:
        return (self.ours.reasoning or None) == (self.theirs.reasoning or None)


def boundary_read(name: str, variant: str | None, text: str, backend: str | None = None) -> Read:
    fam = family(name, variant)
    prompt = _prompt(name, variant)
    kwargs = {} if backend is None else {"backend": backend}
    parsed = parse_output(fam, text, prompt, tools=TOOLS, variant=variant, **kwargs)
    calls = tuple((c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls)
    return Read(parsed.reasoning, parsed.content, calls)


_PROMPTS: dict[tuple[str, str | None], Any] = {}


def _prompt(name: str, variant: str | None) -> Any:
    if (name, variant) not in _PROMPTS:
        _PROMPTS[name, variant] = family(name, variant).render(MESSAGES, TOOLS, variant=variant)
    return _PROMPTS[name, variant]


def corpus(name: str, variant: str | None, syntax: str, n: int = 520) -> list[Case]:
    fmt = output_format(family(name, variant), variant)
    prompt = _prompt(name, variant)
    prefilled = fmt.think is not None and prompt.text[prompt.input_end.char or 0 :].rstrip().endswith(
        "<think>"
    )
    return cases(syntax, fmt.stop_token, prefilled_think=prefilled, n=n)


def compare(name: str, variant: str | None, case: Case) -> Compared:
    fam = family(name, variant)
    fmt = output_format(fam, variant)
    body = case.text[: len(case.text) - len(fmt.stop_token)] if case.stopped else case.text
    prompt = _prompt(name, variant)
    theirs = vllm_read(name, variant, body, tools=TOOLS, messages=MESSAGES, prompt_ids=prompt.token_ids)
    return Compared(case, boundary_read(name, variant, case.text), theirs)


def main(argv: list[str]) -> None:
    n = int(argv[1]) if len(argv) > 1 else 520
    show = int(argv[2]) if len(argv) > 2 else 3
    for name, variant, syntax in CONFIGS:
        results = [compare(name, variant, c) for c in corpus(name, variant, syntax, n)]
        ok = sum(r.agree for r in results)
        ok_r = sum(r.agree and r.agree_reasoning for r in results)
        print(
            f"{name}/{variant or '-'} {syntax}: {ok}/{len(results)} agree ({100 * ok / len(results):.1f}%), "
            f"with reasoning {ok_r}"
        )
        bad = Counter(r.case.kind for r in results if not r.agree)
        print("   disagree by kind:", dict(bad))
        shown = Counter()
        for r in results:
            if not r.agree and shown[r.case.kind] < show:
                shown[r.case.kind] += 1
                print(f"   [{r.case.kind}] {r.case.text!r}\n      ours  ={r.ours}\n      vllm  ={r.theirs}")


if __name__ == "__main__":
    main(sys.argv)
