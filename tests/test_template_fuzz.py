"""Differential template fuzzer: generated templates render exactly as transformers renders
them, and a FOUND U_end is exactly where transformers' renders with and without the
generation prompt part ways.

The grammar covers what can break an instrumented render: ``{% set %}`` blocks and
``namespace`` writes, macros (bare, filtered, recursive), ``caller()``, recursive loops,
``{% filter %}`` and ``{% generation %}`` blocks, filters on captured output (``upper``,
``length``, slicing, ``reverse``), ``cycler`` / ``joiner`` side effects inside if-tests,
guarded errors, reads of ``add_generation_prompt`` in and out of if-tests, and flag branches
that only change state (a ``namespace`` counter printed later, no text of their own) or rebind
the flag with the no-op ``default`` idioms.

Every if-test that reads the flag gets both branches, each starting with a character used
nowhere else, so the two transformers renders differ at their first character after the
point where they take different branches: the common prefix of the two texts *is* that point,
an oracle computed from transformers' output alone.
"""

from __future__ import annotations

from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from boundary.errors import BoundaryError
from boundary.prefixes import common_prefix_length
from boundary.render.template_run import compile_template, run_template

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ],
    [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": '{"r": 1}'},
    ],
]

FLAG_TESTS = [
    "add_generation_prompt",
    "not add_generation_prompt",
    "add_generation_prompt and messages|length > 1",
    "messages[-1].role == 'user' and add_generation_prompt",
    "add_generation_prompt or messages|length > 2",
    "c.next() == 'a' and add_generation_prompt",
    "add_generation_prompt and c.current == 'b'",
    "add_generation_prompt or c.next() == 'b'",
    "j() == '' and add_generation_prompt",
    "add_generation_prompt or (1 / 0)",
    "add_generation_prompt and (messages[9] is defined)",
    "add_generation_prompt is true",
    "(add_generation_prompt ~ '') == 'True'",
    "(true if add_generation_prompt else false)",
    "ns.n > 1 and not add_generation_prompt",
    "add_generation_prompt and 'u' in messages[0].role",
    "messages[0].content.startswith('h') or add_generation_prompt",
]
LOOP_FLAG_TESTS = [
    "loop.last and add_generation_prompt",
    "loop.last and not add_generation_prompt",
    "m.role == 'assistant' and add_generation_prompt",
    "loop.index0 > 0 or add_generation_prompt",
]
PLAIN_TESTS = ["m.role == 'user'", "loop.first", "m.content", "ns.n % 2 == 0", "c.next() == 'a'", "j()"]
LOOP_OUTPUTS = ["{{ m.role }}", "{{ m.content }}", "{{ loop.index }}", "{{ m.content|upper }}"]
OUTPUTS = ["{{ c.next() }}", "{{ j() }}", "{{ ns.n }}", "{{ c.current }}", "{{ messages|length }}"]
WORDS = ["<s>", "</s>", "\n", "user:", "assistant:", "x", " ", "[", "]"]
CAPTURE_FILTERS = ["upper", "length", "trim", "reverse|join", "first", "lower|replace('a', 'b')"]
NOOP_IDIOMS = [
    "{% set add_generation_prompt = add_generation_prompt if add_generation_prompt is defined else true %}",
    "{% set add_generation_prompt = add_generation_prompt | default(false) %}",
]
UNSAFE_FLAG_USES = ["{{ add_generation_prompt }}", "{% set g = add_generation_prompt %}{{ g }}"]


class _Sites:
    """Hands out the pair of unique characters that start each flag branch."""

    def __init__(self) -> None:
        self.n = 0

    def pair(self) -> tuple[str, str]:
        then, otherwise = chr(0x2460 + 2 * self.n), chr(0x2461 + 2 * self.n)
        self.n += 1
        return then, otherwise


@st.composite
def statements(draw: st.DrawFn, sites: _Sites, depth: int, in_loop: bool) -> str:
    kinds = ["text", "output", "flag_if", "plain_if"]
    if depth > 0:
        kinds += ["for", "set_block", "macro", "call_block", "filter_block", "generation", "recursive_macro"]
        kinds += ["recursive_for", "namespace"]
    if in_loop:
        kinds += ["loop_output", "loop_flag_if"]
    kinds += ["unsafe"] * (draw(st.integers(0, 9)) == 0)
    kinds += ["flag_state"] * (draw(st.integers(0, 4)) == 0)
    kind = draw(st.sampled_from(kinds))

    def body(loop: bool = in_loop) -> str:
        n = draw(st.integers(1, 2))
        return "".join(draw(statements(sites, depth - 1, loop)) for _ in range(n))

    if kind == "text":
        return "".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
    if kind == "output":
        return draw(st.sampled_from(OUTPUTS))
    if kind == "loop_output":
        return draw(st.sampled_from(LOOP_OUTPUTS))
    if kind == "unsafe":
        return draw(st.sampled_from(UNSAFE_FLAG_USES))
    if kind == "flag_state":  # the branch prints nothing: the renders part ways where ns.n is printed
        return f"{{% if {draw(st.sampled_from(FLAG_TESTS))} %}}{{% set ns.n = ns.n + 1 %}}{{% endif %}}"
    if kind in ("flag_if", "loop_flag_if"):
        test = draw(st.sampled_from(FLAG_TESTS + (LOOP_FLAG_TESTS if kind == "loop_flag_if" else [])))
        then, otherwise = sites.pair()
        inner = body() if depth > 0 else ""
        other = body() if depth > 0 else ""
        return f"{{% if {test} %}}{then}{inner}{{% else %}}{otherwise}{other}{{% endif %}}"
    if kind == "plain_if":
        test = draw(st.sampled_from(PLAIN_TESTS if in_loop else PLAIN_TESTS[3:]))
        inner = body() if depth > 0 else "y"
        return f"{{% if {test} %}}{inner}{{% endif %}}"
    if kind == "for":
        return f"{{% for m in messages %}}{body(True)}{{% endfor %}}"
    if kind == "recursive_for":
        return (
            "{% for m in messages recursive %}" + body(True)
            + "{% if loop.depth < 2 and m.role == 'user' %}{{ loop([m])|upper }}{% endif %}{% endfor %}"
        )  # fmt: skip
    if kind == "set_block":
        flt = draw(st.sampled_from(CAPTURE_FILTERS))
        slicing = draw(st.sampled_from(["", "[1:]", "[:-1]"]))
        return f"{{% set cap %}}{body()}{{% endset %}}{{{{ cap{slicing}|{flt} }}}}"
    if kind == "macro":
        name = f"mk{draw(st.integers(0, 999))}"
        flt = draw(st.sampled_from(["", "|upper", "|length", "|trim"]))
        return f"{{% macro {name}() %}}{body()}{{% endmacro %}}{{{{ {name}(){flt} }}}}"
    if kind == "recursive_macro":
        flt = draw(st.sampled_from(["", "|upper"]))
        return (
            "{% macro walk(ms) %}{% if ms %}<{{ ms[0].role }}>"
            + body(False)
            + "{{ walk(ms[1:]) }}{% endif %}"
            "{% endmacro %}{{ walk(messages)" + flt + " }}"
        )
    if kind == "call_block":
        flt = draw(st.sampled_from(["", "|upper", "|length"]))
        wrap = f"{{% macro wrap() %}}({{{{ caller(){flt} }}}}){{% endmacro %}}"
        return f"{wrap}{{% call wrap() %}}{body()}{{% endcall %}}"
    if kind == "filter_block":
        return f"{{% filter {draw(st.sampled_from(['upper', 'trim', 'lower']))} %}}{body()}{{% endfilter %}}"
    if kind == "generation":
        return f"{{% generation %}}{body()}{{% endgeneration %}}"
    assert kind == "namespace"
    return f"{{% set ns.n = ns.n + 1 %}}{body()}"


@st.composite
def templates(draw: st.DrawFn) -> str:
    sites = _Sites()
    prelude = "{% set c = cycler('a', 'b') %}{% set j = joiner('|') %}{% set ns = namespace(n=0) %}"
    prelude += draw(st.sampled_from(["", *NOOP_IDIOMS]))
    parts = [draw(statements(sites, 3, False)) for _ in range(draw(st.integers(1, 4)))]
    then, otherwise = sites.pair()
    tail = f"{{% if add_generation_prompt %}}{then}assistant:{{% else %}}{otherwise}{{% endif %}}"
    return prelude + "".join(parts) + (tail if draw(st.booleans()) else "")


def _reference(source: str, messages: list[dict[str, Any]], flag: bool) -> str | None:
    try:
        (text,), _ = render_jinja_template([messages], chat_template=source, add_generation_prompt=flag)
    except (jinja2.TemplateError, ArithmeticError, TypeError, ValueError, LookupError, AttributeError):
        return None
    return text


def _ours(source: str, messages: list[dict[str, Any]], flag: bool) -> Any:
    try:
        return run_template(compile_template(source), messages, add_generation_prompt=flag)
    except BoundaryError:
        return None


def check_template(source: str) -> None:
    for messages in CONVERSATIONS:
        references = {flag: _reference(source, messages, flag) for flag in (True, False)}
        for flag in (True, False):
            r = _ours(source, messages, flag)
            expected = references[flag]
            assert (r is None) == (expected is None), (source, messages, flag)
            if r is None:
                continue
            assert r.text == expected, (source, messages, flag)
            other = references[not flag]
            if r.input_end is not None and other is not None:
                assert r.input_end == common_prefix_length(expected, other), (source, messages, flag)
            starts = [s for s in r.message_starts if s is not None]
            assert all(0 <= s <= len(r.text) for s in starts)


FUZZ = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,  # reproducible in CI; each test below draws its own examples
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# Four tests of 500 templates each (2,000 in all), so that parallel workers share them.
@pytest.mark.slow
@FUZZ
@given(templates())
def test_generated_templates_render_as_transformers_and_found_is_exact(source: str) -> None:
    check_template(source)


@pytest.mark.slow
@FUZZ
@given(templates())
def test_generated_templates_second_draw(source: str) -> None:
    check_template(source)


@pytest.mark.slow
@FUZZ
@given(templates())
def test_generated_templates_third_draw(source: str) -> None:
    check_template(source)


@pytest.mark.slow
@FUZZ
@given(templates())
def test_generated_templates_fourth_draw(source: str) -> None:
    check_template(source)


def test_a_small_draw_runs_in_the_fast_suite() -> None:
    """Forty templates outside the slow marker, so ``-m "not slow"`` still fuzzes a little."""

    @settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @given(templates())
    def run(source: str) -> None:
        check_template(source)

    run()
