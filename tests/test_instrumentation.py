"""The instrumentation never changes what a template computes, and FOUND is exact.

Oracle: transformers' own ``render_jinja_template`` (text with and without the generation
prompt); U_end must be where the two texts part ways (their common prefix)."""

from __future__ import annotations

from typing import Any

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from boundary.prefixes import common_prefix_length
from boundary.render.template_run import compile_template, run_template

MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "bye"},
]
LOOP = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</>{% endfor %}"


def reference(source: str, add_generation_prompt: bool, messages: list[dict[str, Any]] = MESSAGES) -> str:
    (text,), _ = render_jinja_template(
        [messages], chat_template=source, add_generation_prompt=add_generation_prompt
    )
    return text


def ours(source: str, add_generation_prompt: bool = True, messages: list[dict[str, Any]] = MESSAGES):
    return run_template(compile_template(source), messages, add_generation_prompt=add_generation_prompt)


def divergence(source: str, messages: list[dict[str, Any]] = MESSAGES) -> int:
    return common_prefix_length(reference(source, True, messages), reference(source, False, messages))


@pytest.mark.parametrize(
    "source",
    [
        # a test with side effects: evaluated twice it would advance the cycler / joiner
        LOOP + "{% set c = cycler('a', 'b') %}{% if c.next() == 'a' and add_generation_prompt %}"
        "[{{ c.next() }}]GEN{% endif %}",
        LOOP
        + "{% set j = joiner('|') %}{% if j() == '' and add_generation_prompt %}[{{ j() }}]GEN{% endif %}",
        LOOP
        + "{% set c = cycler('x', 'y') %}{% for m in messages %}{% if add_generation_prompt or c.next() %}"
        "{{ c.current }}{% endif %}{% endfor %}",
    ],
)
def test_a_test_with_side_effects_runs_once_and_the_text_is_transformers(source: str) -> None:
    for flag in (True, False):
        assert ours(source, flag).text == reference(source, flag)


def test_a_guarded_error_in_a_test_renders_like_transformers() -> None:
    source = LOOP + "{% if add_generation_prompt or (1 / 0) %}GEN{% endif %}"
    r = ours(source, True)
    assert r.text == reference(source, True)
    # the render without the prompt would raise here: there is nothing to compare, so no FOUND
    assert r.input_end is None
    assert "line 1" in (r.input_end_reason or "")


def test_side_effect_in_the_flipped_path_makes_u_end_unavailable_not_wrong() -> None:
    source = (
        LOOP + "{% set c = cycler('a', 'b') %}{% if add_generation_prompt or c.next() == 'b' %}GEN{% endif %}"
    )
    r = ours(source, True)
    assert r.text == reference(source, True)
    assert r.input_end is None and "Cycler.next()" in (r.input_end_reason or "")


@pytest.mark.parametrize(
    "capture",
    [
        "{% set x %}" + LOOP + "{% endset %}{{ x|upper }}",
        "{% set x %}" + LOOP + "{% endset %}{{ x|length }}|{{ x[3:9] }}|{{ x|reverse|join }}",
        "{% macro body() %}" + LOOP + "{% endmacro %}{{ body()|upper }}",
        "{% macro wrap() %}[{{ caller()|upper }}]{% endmacro %}{% call wrap() %}" + LOOP + "{% endcall %}",
        "{% filter upper %}" + LOOP + "{% endfilter %}",
        "{% set x %}{% for m in messages %}{% endfor %}{% endset %}"
        "{% if x %}nonempty{% else %}empty{% endif %}",
    ],
)
def test_no_mark_leaks_into_output_the_template_captures(capture: str) -> None:
    source = capture + "{% if add_generation_prompt %}GEN{% endif %}"
    for flag in (True, False):
        r = ours(source, flag)
        assert r.text == reference(source, flag)
    r = ours(source, True)
    assert r.input_end == divergence(source)


def test_recursive_macro_upper_cased_gives_transformers_text_and_the_exact_u_end() -> None:
    source = (
        "{% macro walk(ms) %}{% if ms %}<{{ ms[0].role }}>{{ ms[0].content }}{{ walk(ms[1:]) }}{% endif %}"
        "{% endmacro %}{{ walk(messages)|upper }}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    r = ours(source, True)
    assert r.text == reference(source, True)
    assert r.input_end == divergence(source) == len(reference(source, False))


def test_a_probe_inside_captured_output_is_unavailable_with_the_reason() -> None:
    source = LOOP + "{% set tail %}{% if add_generation_prompt %}GEN{% endif %}{% endset %}{{ tail|trim }}"
    r = ours(source, True)
    assert r.text == reference(source, True)
    assert r.input_end is None and "AssignBlock" in (r.input_end_reason or "")


def test_a_macro_printed_bare_is_tracked_like_top_level_output() -> None:
    source = (
        "{% macro turn(m) %}<{{ m.role }}>{{ m.content }}</>{% endmacro %}"
        "{% macro tail() %}{% if add_generation_prompt %}<assistant>{% endif %}{% endmacro %}"
        "{% for m in messages %}{{ turn(m) }}{% endfor %}{{ tail() }}"
    )
    r = ours(source, True)
    assert r.text == reference(source, True)
    assert r.input_end == divergence(source)
    assert r.message_starts[1] == reference(source, False).index("<user>")


def test_generation_blocks_keep_transformers_scoping_and_get_u_end() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{% set local = 'L' %}"
        "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}[{{ local }}]{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    for flag in (True, False):
        assert ours(source, flag).text == reference(source, flag)
    r = ours(source, True)
    assert r.input_end == divergence(source)
    (span,) = r.generation_spans
    assert r.text[span.start : span.end] == "hello"


def test_internal_names_are_invisible_to_templates() -> None:
    source = (
        "{{ _bnd_rec }}|{{ _bnd_probe }}|{{ bnd }}|{{ _RECORDER }}|{{ recorder }}" + LOOP
        + "{% if add_generation_prompt %}GEN{% endif %}"
    )  # fmt: skip
    for flag in (True, False):
        assert ours(source, flag).text == reference(source, flag)
    assert ours(source, True).input_end == divergence(source)


def test_a_rebound_flag_is_unavailable_but_the_default_idiom_is_not() -> None:
    rebound = LOOP + "{% set add_generation_prompt = true %}{% if add_generation_prompt %}GEN{% endif %}"
    r = ours(rebound, False)
    assert r.text == reference(rebound, False)
    assert r.input_end is None and "rebound" in (r.input_end_reason or "")
    idiom = (
        "{% if add_generation_prompt is not defined %}{% set add_generation_prompt = false %}{% endif %}"
        + LOOP + "{% if add_generation_prompt %}GEN{% endif %}"
    )  # fmt: skip
    assert ours(idiom, True).input_end == divergence(idiom)


def test_the_flipped_test_reads_loop_properties_as_the_other_render_would() -> None:
    source = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% if loop.last and not add_generation_prompt %}[final]{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    r = ours(source, True)
    assert r.text == reference(source, True)
    assert r.input_end == divergence(source)


TAIL = "{% if ns.agp %}<assistant>{% endif %}"


@pytest.mark.parametrize(
    "source",
    [
        # the flag stored in a namespace at the top, the generation prompt printed from it
        "{% set ns = namespace(agp=false) %}{% if add_generation_prompt %}{% set ns.agp = true %}"
        "{% endif %}" + LOOP + TAIL,
        "{% set ns = namespace(agp=add_generation_prompt) %}" + LOOP + TAIL,
        # a plain variable, a macro, a cycler carried out of the branch
        "{% if add_generation_prompt %}{% set agp = 1 %}{% endif %}" + LOOP + "{% if agp %}<a>{% endif %}",
        "{% set ns = namespace(agp=false) %}{% macro on() %}{% set ns.agp = true %}{% endmacro %}"
        "{% if add_generation_prompt %}{{ on() }}{% endif %}" + LOOP + TAIL,
        "{% set c = cycler('', '<assistant>') %}{% if add_generation_prompt %}{{ c.next() }}{% endif %}"
        + LOOP
        + "{{ c.next() }}",
    ],
)
def test_a_flag_carried_out_of_its_branch_is_unavailable_never_found_early(source: str) -> None:
    for flag in (True, False):
        r = ours(source, flag)
        assert r.text == reference(source, flag)
        assert r.input_end is None, (source, flag, r.input_end, divergence(source))
        assert "add_generation_prompt" in (r.input_end_reason or "")


def test_state_set_in_a_branch_that_opens_with_its_own_text_still_gives_the_exact_u_end() -> None:
    source = (
        "{% set ns = namespace(agp=false) %}" + LOOP
        + "{% if add_generation_prompt %}<assistant>{% set ns.agp = true %}{% else %}.{% endif %}"
        + "{% if ns.agp %}[gen]{% endif %}"
    )  # fmt: skip
    for flag in (True, False):
        assert ours(source, flag).text == reference(source, flag)
        assert ours(source, flag).input_end == divergence(source)


def test_state_set_in_a_flag_branch_that_nothing_reads_keeps_u_end() -> None:
    source = LOOP + "{% if add_generation_prompt %}{% set unused = 1 %}<assistant>{% endif %}"
    for flag in (True, False):
        assert ours(source, flag).input_end == divergence(source)


NOOP_IDIOMS = [
    "{%- set add_generation_prompt = add_generation_prompt if add_generation_prompt is defined else true %}",
    "{% set add_generation_prompt = add_generation_prompt if add_generation_prompt is not undefined"
    " else false %}",
    "{% set add_generation_prompt = true if add_generation_prompt is undefined else add_generation_prompt %}",
    "{% set add_generation_prompt = false if add_generation_prompt is not defined"
    " else add_generation_prompt %}",
    "{%- set add_generation_prompt = add_generation_prompt | default(true) %}",
    "{% set add_generation_prompt = add_generation_prompt|d(false) %}",
    "{% set add_generation_prompt = add_generation_prompt | default(true, false) %}",
]


@pytest.mark.parametrize("idiom", NOOP_IDIOMS)
@pytest.mark.parametrize("flag", [True, False])
def test_the_no_op_default_idioms_keep_u_end_exact(idiom: str, flag: bool) -> None:
    source = idiom + LOOP + "{% if add_generation_prompt %}<assistant>{% endif %}"
    r = ours(source, flag)
    assert r.text == reference(source, flag)
    assert r.input_end == divergence(source) and r.input_end_reason is None


@pytest.mark.parametrize(
    "rebinding",
    [
        "{% set add_generation_prompt = add_generation_prompt | default(true, true) %}",  # falsy -> true
        "{% set add_generation_prompt = add_generation_prompt if add_generation_prompt is undefined"
        " else true %}",
        "{% set add_generation_prompt = add_generation_prompt | default(messages) %}"
        "{% set add_generation_prompt = not add_generation_prompt %}",
    ],
)
def test_a_rebinding_that_is_not_the_idiom_stays_unavailable(rebinding: str) -> None:
    source = rebinding + LOOP + "{% if add_generation_prompt %}<assistant>{% endif %}"
    r = ours(source, False)
    assert r.text == reference(source, False)
    assert r.input_end is None and "rebound" in (r.input_end_reason or "")


WATCHED_LOOP = (
    "{% set ns = namespace(seen=false) %}{% for m in messages %}{% if ns.seen %}[again]{% endif %}"
    "<{{ m.role }}>{{ m.content }}</>{% if loop.last and add_generation_prompt %}{% set ns.seen = true %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_state_a_flag_branch_sets_but_nothing_reads_afterwards_keeps_the_exact_u_end() -> None:
    """The branch runs on the last message; the state it sets is read only at the top of each
    iteration, so no read follows it: U_end stays FOUND (gpt-oss's ``last_tool_call``)."""
    for flag in (True, False):
        r = ours(WATCHED_LOOP, flag)
        assert r.text == reference(WATCHED_LOOP, flag)
        assert r.input_end == divergence(WATCHED_LOOP), r.input_end_reason


def test_state_read_after_the_divergence_withdraws_u_end() -> None:
    source = WATCHED_LOOP + "{% if ns.seen %}[seen]{% endif %}"
    for flag in (True, False):
        r = ours(source, flag)
        assert r.text == reference(source, flag)
        assert r.input_end is None and "ns.seen" in (r.input_end_reason or "")


@pytest.mark.parametrize(
    "silent",
    [
        "{% if add_generation_prompt %}{% endif %}",
        "{% set ns = namespace(n=0) %}[{{ ns.n }}]"
        "{% if add_generation_prompt %}{% set ns.n = 1 %}{% endif %}",
    ],
)
def test_a_branch_that_prints_nothing_and_leaves_nothing_read_places_no_mark(silent: str) -> None:
    source = silent + LOOP + "{% if add_generation_prompt %}<assistant>{% endif %}"
    for flag in (True, False):
        r = ours(source, flag)
        assert r.text == reference(source, flag)
        assert r.input_end == divergence(source), r.input_end_reason
