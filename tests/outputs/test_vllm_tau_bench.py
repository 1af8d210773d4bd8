"""Realistic turns: boundary's readers against vLLM 0.33.0's composed parsers on the tau-bench
airline trajectories (seeded synthetic reasoning, the airline tools declared), each assistant
turn written by ``format_output`` after the prompt boundary rendered for it.

Beside the crafted corpus (test_vllm_differential.py), this is the shape of traffic the audit
and the experiment read: long multi-turn prompts, tool results, turns after a tool result
(where DeepSeek-V3.1's template adds no generation prompt, so the prompt does not show
whether ``thinking`` is on). boundary reads with no template kwargs given, as its callers do:
the prompt's ``Rendering`` carries the kwargs that rendered it. vLLM's parsers get them as
the request's ``chat_template_kwargs``.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary.outputs import format_output, parse_output
from boundary.shipped.datasets import tau_bench_airline_tools
from boundary.trace.records import MessageOutput
from boundary.trace.tau_bench import tau_bench_trace
from tests.outputs.oracle import vllm_read
from tests.support import family

pytestmark = pytest.mark.vllm

TRAJECTORIES = 12  # about 170 assistant turns
# (family, variant, template kwargs): every format with a vLLM parser pair, DeepSeek-V3.1 both ways
FORMATS: list[tuple[str, str | None, dict[str, Any]]] = [
    ("qwen3", None, {}),
    ("granite_4_h", None, {}),
    ("qwen3_5", None, {}),
    ("nemotron_3", None, {}),
    ("kimi_linear", None, {}),
    ("minimax_m2", None, {}),
    ("mistral", None, {}),
    ("deepseek_v3", "v3", {}),
    ("deepseek_v3", "v3_1", {"thinking": True}),
    ("deepseek_v3", "v3_1", {"thinking": False}),
]
IDS = [f"{n}-{v or ''}-{'-'.join(f'{k}={x}' for k, x in kw.items())}".rstrip("-") for n, v, kw in FORMATS]


def _nine_char_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call ids as Mistral's template requires them (9 alphanumerics), each id mapped to
    the same new one wherever it appears."""
    text = json.dumps(messages)
    for old in {c["id"] for m in messages for c in m.get("tool_calls") or ()}:
        text = text.replace(json.dumps(old), json.dumps(hashlib.sha256(old.encode()).hexdigest()[:9]))
    return json.loads(text)


def _requests(name: str, trajectories: int) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(messages, the assistant message that follows) per assistant turn."""
    out = []
    for request in tau_bench_trace(reasoning="seeded", trajectories=trajectories):
        assert request.messages is not None and isinstance(request.output, MessageOutput)
        turn = [*request.messages, request.output.message]
        if name == "mistral":
            turn = _nine_char_ids(turn)
        out.append((turn[:-1], turn[-1]))
    return out


def _read(parsed_calls: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((name, json.loads(arguments)) for name, arguments in parsed_calls)


@cache
def _agreement(name: str, variant: str | None, kwargs_json: str) -> tuple[int, list[str]]:
    """Turns read alike (reasoning, content, calls by name and JSON value), and the first
    disagreements."""
    kwargs = json.loads(kwargs_json)
    fam = family(name, variant)
    tools = tau_bench_airline_tools()
    agree, shown = 0, []
    for messages, produced in _requests(name, TRAJECTORIES):
        prompt = fam.render(messages, tools, variant=variant, **kwargs)
        out = format_output(fam, prompt, produced, variant=variant)
        theirs = vllm_read(
            name,
            variant,
            out.body,
            tools=tools,
            messages=messages,
            prompt_ids=prompt.token_ids,
            template_kwargs=kwargs,
        )
        ours = parse_output(fam, out.token_ids, prompt, tools=tools, variant=variant)
        mine = [(c["function"]["name"], c["function"]["arguments"]) for c in ours.tool_calls]
        same = (ours.reasoning or None, ours.content or None, _read(mine)) == (
            theirs.reasoning or None,
            theirs.content or None,
            _read(theirs.calls),
        )
        agree += same
        if not same and len(shown) < 3:
            shown.append(f"{out.body[:200]!r}: ours {ours.message} vllm {theirs}")
    return agree, shown


@pytest.mark.slow
@pytest.mark.parametrize(("name", "variant", "kwargs"), FORMATS, ids=IDS)
def test_realistic_turns_read_as_vllm_reads_them_at_least_99_percent(name, variant, kwargs) -> None:
    turns = len(tau_bench_trace(trajectories=TRAJECTORIES))
    agree, shown = _agreement(name, variant, json.dumps(kwargs))
    assert turns >= 150
    assert agree >= 0.99 * turns, (f"{agree}/{turns}", shown)


def test_deepseek_v3_1_thinking_turns_after_a_tool_result_read_as_vllm_reads_them() -> None:
    """The fast-suite slice: DeepSeek-V3.1 with ``thinking=True`` on three trajectories, every
    turn alike (turns after a tool result included: the prompt opens no ``<think>``)."""
    fam = family("deepseek_v3", "v3_1")
    tools = tau_bench_airline_tools()
    requests = _requests("deepseek_v3", 3)
    assert any(messages[-1]["role"] == "tool" for messages, _ in requests)
    for messages, produced in requests:
        prompt = fam.render(messages, tools, variant="v3_1", thinking=True)
        out = format_output(fam, prompt, produced, variant="v3_1")
        theirs = vllm_read(
            "deepseek_v3",
            "v3_1",
            out.body,
            tools=tools,
            messages=messages,
            prompt_ids=prompt.token_ids,
            template_kwargs={"thinking": True},
        )
        ours = parse_output(fam, out.token_ids, prompt, tools=tools, variant="v3_1")
        assert (ours.reasoning, ours.content) == (theirs.reasoning, theirs.content), out.body[:200]
        mine = [(c["function"]["name"], c["function"]["arguments"]) for c in ours.tool_calls]
        assert _read(mine) == _read(theirs.calls)
