"""Incremental runs of a template's message loop give exactly a full render's result.

Differential: a session (which replays unchanged loop iterations, ``boundary.session.incremental.store``)
against a cold ``Family.render`` (the full render, itself held to transformers elsewhere and
spot-checked against transformers here) on every turn of tau-bench, BFCL and MT-bench
conversations, on every shipped template; under hypothesis, with earlier messages edited,
the conversation truncated, tools, the generation flag and template kwargs changed between
turns; and on the template fuzzer's generated templates, with the render stage alone.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

import boundary
from boundary.errors import BoundaryError
from boundary.experiment.workloads import bfcl, mt_bench
from boundary.render.template_run import compile_template, run_template
from boundary.session.incremental.store import Incremental, IncrementalTemplate, compile_incremental
from boundary.session.session import MIN_INCREMENTAL_MESSAGES, Session
from boundary.shipped.datasets import tau_bench_airline, tau_bench_airline_tools
from tests.support import FIXED_NOW, family, kwarg_settings, shipped_variants
from tests.test_session import _with_reasoning
from tests.test_template_fuzz import _Sites, statements, templates

Conversation = tuple[list[dict[str, Any]], list[dict[str, Any]] | None]


def _conversations() -> list[Conversation]:
    tau = [(t, tau_bench_airline_tools()) for t in _with_reasoning(tau_bench_airline()[::80])]
    calls = [(s.messages, s.tools) for s in bfcl.scripts()[:2]]
    prose = [(s.messages, None) for s in mt_bench.scripts()[:3]]
    return [*tau, *calls, *prose]


def _same(
    fam: boundary.Family, session: Any, request: list[dict[str, Any]], tools: Any, **options: Any
) -> None:
    """The session's result for ``request`` is the cold render's (or the same error)."""
    try:
        cold = fam.render(request, tools, now=FIXED_NOW, **options)
    except BoundaryError as exc:
        with pytest.raises(type(exc)) as raised:
            session.render(request, tools, now=FIXED_NOW, **options)
        assert str(raised.value) == str(exc)
        return
    warm = session.render(request, tools, now=FIXED_NOW, **options)
    assert warm.text == cold.text, len(request)
    assert warm.token_ids == cold.token_ids
    assert warm.input_end == cold.input_end
    assert warm == cold


def _accepted(fam: boundary.Family, variant: str) -> bool:
    return isinstance(compile_incremental(fam.template(variant), fam.limits), IncrementalTemplate)


@pytest.mark.parametrize(("name", "variant"), shipped_variants())
def test_every_turn_of_tau_bench_bfcl_and_mt_bench_equals_a_full_render(name: str, variant: str) -> None:
    fam = family(name)
    reused = 0
    for messages, tools in _conversations():
        session = Session(fam.renderer, min_messages=1)  # every request incremental
        for i in range(1, len(messages) + 1):
            if messages[i - 1]["role"] in ("user", "tool"):
                _same(fam, session, messages[:i], tools, variant=variant)
        reused += session.stats.reused_iterations
        reason = session.stats.full_render_reason
        assert (reason is None) == _accepted(fam, variant)
    assert (reused > 0) == _accepted(fam, variant)


def test_a_session_text_is_transformers_text() -> None:
    """The spot check against the real library: transformers renders the same text."""
    fam = family("qwen3_5")
    messages, tools = _conversations()[0]
    session = Session(fam.renderer, min_messages=1)  # every request incremental
    prepared, template_tools = fam.prepare(messages[:9], tools)
    for cut in (3, 5, 9):
        ours = session.render(messages[:cut], tools).text
        (text,), _ = render_jinja_template(
            [prepared[:cut]], tools=template_tools, chat_template=fam.template(), add_generation_prompt=True
        )
        assert ours == text
    assert session.stats.reused_iterations > 0


def test_most_iterations_are_replayed_late_in_a_conversation() -> None:
    fam = family("qwen3_5")
    messages, tools = _conversations()[0]
    session = Session(fam.renderer, min_messages=1)  # every request incremental
    for i in range(1, len(messages)):
        if messages[i]["role"] == "assistant":
            session.render(messages[:i], tools)
    stats = session.stats
    assert stats.full_render_reason is None
    assert stats.reused_iterations > 3 * stats.rendered_iterations


# -- edits between turns (hypothesis) ---------------------------------------------------------
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), st.integers(1, 4)),
        st.tuples(st.just("edit"), st.integers(0, 40)),
        st.tuples(st.just("truncate"), st.integers(1, 6)),
        st.tuples(st.just("drop"), st.integers(1, 4)),
        st.tuples(st.just("replace"), st.integers(0, 40)),
        st.tuples(st.just("tools"), st.sampled_from(["all", "two", "none"])),
        st.tuples(st.just("flag"), st.booleans()),
        st.tuples(st.just("kwargs"), st.integers(0, 3)),
    ),
    min_size=3,
    max_size=12,
)
EDIT_FAMILIES = [
    ("qwen3_5", "think"),
    ("deepseek_v3", "v3_1"),
    ("nemotron_3", "nano"),
    ("minimax_m2", "default"),
]


def _edits(name: str, variant: str, steps: list[tuple[str, Any]]) -> None:
    fam = family(name)
    base = _with_reasoning([tau_bench_airline()[3][:24]])[0]
    all_tools = tau_bench_airline_tools()
    choices = kwarg_settings(name)
    session = Session(fam.renderer, min_messages=1)  # every request incremental
    history, size = list(base), 2
    tools: list[dict[str, Any]] | None = all_tools
    options: dict[str, Any] = {"variant": variant}
    for kind, value in steps:
        if kind == "grow":
            size = min(size + value, len(history))
        elif kind == "edit" and size:
            i = value % size
            history[i] = {**history[i], "content": f"{history[i].get('content') or ''} (edited {value})"}
        elif kind == "replace" and size:
            history[value % size] = {"role": "user", "content": f"replaced {value}"}
        elif kind == "drop":
            size = max(size - value, 1)
        elif kind == "truncate":
            history, size = history[value:], max(size - value, 1)
        elif kind == "tools":
            tools = {"all": all_tools, "two": all_tools[:2], "none": None}[value]
        elif kind == "flag":
            options["add_generation_prompt"] = value
        elif kind == "kwargs":
            options = {**{k: v for k, v in options.items() if k in ("variant", "add_generation_prompt")}}
            options.update(choices[value % len(choices)])
        _same(fam, session, history[:size], tools, **options)


@pytest.mark.parametrize(("name", "variant"), EDIT_FAMILIES)
@settings(max_examples=8, deadline=None, derandomize=True, database=None)
@given(steps=STEPS)
def test_edits_truncation_tool_and_flag_changes_between_turns(name: str, variant: str, steps: Any) -> None:
    _edits(name, variant, steps)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "variant"), shipped_variants())
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_edits_between_turns_on_every_shipped_template(name: str, variant: str, steps: Any) -> None:
    _edits(name, variant, steps)


# -- the template fuzzer's templates, at the render stage ---------------------------------------
GROWING = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "q2"},
    {"role": "assistant", "content": ""},
    {"role": "tool", "content": '{"r": 1}'},
    {"role": "assistant", "content": "a3"},
    {"role": "user", "content": "q4"},
]


def _stage(source: str, run: Any, messages: list[dict[str, Any]], flag: bool) -> Any:
    try:
        return run(source, messages, flag)
    except BoundaryError as exc:
        return (type(exc), str(exc))


def check_incremental(source: str) -> None:
    """Turn by turn (grown, one message edited, truncated, the flag flipped), the incremental
    render stage gives the full render stage's ``TextRendering`` or the same error."""
    incremental = Incremental()

    def full(source: str, messages: list[dict[str, Any]], flag: bool) -> Any:
        return run_template(compile_template(source), messages, add_generation_prompt=flag)

    def warm(source: str, messages: list[dict[str, Any]], flag: bool) -> Any:
        return incremental.run_template(
            compile_template(source),
            messages,
            tools=None,
            documents=None,
            add_generation_prompt=flag,
            variables={},
            now=None,
            limits=compile_template(source).template.environment.limits,  # type: ignore[attr-defined]
        )

    history = list(GROWING)
    turns = [history[:n] for n in range(1, len(history) + 1)]
    edited = [*history[:2], {**history[2], "content": "A1"}, *history[3:]]
    replaced = [*history[:4], {"role": "user", "content": "q3"}, *history[5:]]
    turns += [edited, edited[3:], edited[2:], edited, edited[:5], edited[:3], replaced, history[:6]]
    for i, messages in enumerate(turns):
        flag = i % 3 != 2
        assert _stage(source, warm, messages, flag) == _stage(source, full, messages, flag), (source, i)


FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


NEIGHBOUR_READS = [  # what shipped templates read beside the message itself
    "{% if not loop.first %}{{ messages[loop.index0 - 1].role }}{% endif %}",
    "{% if not loop.last %}{{ messages[loop.index0 + 1].role }}{% endif %}",
    "{{ loop.nextitem.role if loop.nextitem else 'end' }}|{{ loop.previtem.content if loop.previtem }}",
    "{% if m.role == 'user' %}{% set ns.n = loop.index0 %}{% endif %}",
    "{% if loop.index0 > ns.n %}after{% else %}before{% endif %}",
    "{% if loop.index0 >= messages|length - 3 %}recent{% endif %}",
    "{{ loop.revindex }}{{ loop.length }}",
    "{% set ns.n = ns.n + 1 %}{{ ns.n }}",
]


@st.composite
def loop_templates(draw: st.DrawFn) -> str:
    """The fuzzer's statements inside a top-level message loop (most of its templates have
    none, and render in full), with its statements before and after."""
    sites = _Sites()
    prelude = "{% set c = cycler('a', 'b') %}{% set j = joiner('|') %}{% set ns = namespace(n=0) %}"
    head = draw(statements(sites, 1, False)) if draw(st.booleans()) else ""
    parts = st.one_of(statements(sites, 2, True), st.sampled_from(NEIGHBOUR_READS))
    body = "".join(draw(parts) for _ in range(draw(st.integers(1, 4))))
    tail = draw(statements(sites, 1, False)) if draw(st.booleans()) else ""
    return f"{prelude}{head}{{% for m in messages %}}<{{{{ m.role }}}}>{body}{{% endfor %}}{tail}"


@settings(FUZZ, max_examples=40)
@given(templates())
def test_fuzzed_templates_render_incrementally_as_in_full(source: str) -> None:
    check_incremental(source)


@settings(FUZZ, max_examples=60)
@given(loop_templates())
def test_fuzzed_loop_bodies_render_incrementally_as_in_full(source: str) -> None:
    check_incremental(source)


@pytest.mark.slow
@settings(FUZZ, max_examples=1000)
@given(loop_templates())
def test_fuzzed_loop_bodies_render_incrementally_as_in_full_many(source: str) -> None:
    check_incremental(source)


@pytest.mark.slow
@settings(FUZZ, max_examples=1000)
@given(templates())
def test_fuzzed_templates_render_incrementally_as_in_full_many(source: str) -> None:
    check_incremental(source)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("{{ loop.cycle('a', 'b') }}", "`loop.cycle`"),
        ("{% if loop.index > 2 %}{% break %}{% endif %}", "breaks out of"),
        ("{{ messages[1:]|length }}", "'messages' as a whole"),
        ("{{ strftime_now('%Y') }}", "'strftime_now'"),
        ("{% set alias = ns %}{{ alias.n }}", "'ns' as a whole"),
        ("{{ [1, 2]|random }}", "'random'"),
    ],
)
def test_a_loop_the_plan_cannot_prove_renders_in_full_and_says_why(body: str, why: str) -> None:
    source = "{% set ns = namespace(n=0) %}{% for m in messages %}<{{ m.role }}>" + body + "{% endfor %}"
    reason = compile_incremental(source)
    assert isinstance(reason, str) and why in reason and "template line 1" in reason
    if "random" not in body:
        check_incremental(source)  # still exactly the full render


def test_the_session_names_why_a_shipped_template_renders_in_full() -> None:
    fam = family("gpt_oss")
    session = fam.session()
    session.render([{"role": "user", "content": "hi"}])
    assert "loop_messages" in (session.stats.full_render_reason or "")
    assert session.stats.reused_iterations == 0


def test_a_session_runs_a_short_request_in_full() -> None:
    """Tracing a loop of a few iterations costs more than replaying them saves: a request of
    fewer than ``MIN_INCREMENTAL_MESSAGES`` runs the template in full and says so; from there
    on the loop runs incrementally (the first such request traces every iteration)."""
    fam = family("qwen3_5")
    session = fam.session()
    m = MIN_INCREMENTAL_MESSAGES
    turns = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(m + 3)]
    short = f"fewer than {m}"
    for n, reason, rendered in [(1, short, 0), (m - 1, short, 0), (m + 1, None, m + 1), (m + 3, None, m + 3)]:
        request = turns[:n]
        assert session.render(request).text == fam.render(request).text
        said = session.stats.full_render_reason
        assert said is None if reason is None else reason in (said or ""), (n, said)
        assert session.stats.rendered_iterations == rendered
    assert session.stats.reused_iterations == session.stats.chained_iterations == m + 1


def test_a_session_that_switches_templates_never_replays_the_other_template() -> None:
    """Iterations are keyed by the template: two templates with the same reads, one store."""
    incremental = Incremental()
    messages = GROWING[:4]
    for source in [
        "{% for m in messages %}A{{ m.content }}{% endfor %}",
        "{% for m in messages %}B{{ m.content }}{% endfor %}",
    ] * 2:
        options: dict[str, Any] = {"tools": None, "documents": None, "variables": {}, "now": None}
        warm = incremental.run_template(
            compile_template(source),
            messages,
            add_generation_prompt=True,
            limits=compile_template(source).template.environment.limits,
            **options,  # type: ignore[attr-defined]
        )
        assert warm == run_template(compile_template(source), messages)
    assert incremental.reused == 8


def test_a_template_kwarg_that_shadows_a_global_is_keyed_like_any_value() -> None:
    source = "{% for m in messages %}{{ m.content }}={{ range }};{% endfor %}"
    incremental = Incremental()
    limits = compile_template(source).template.environment.limits  # type: ignore[attr-defined]
    for value in ("r1", "r2", "r1"):
        options: dict[str, Any] = {"tools": None, "documents": None, "now": None, "limits": limits}
        warm = incremental.run_template(
            compile_template(source),
            GROWING[:3],
            add_generation_prompt=True,
            variables={"range": value},
            **options,
        )
        assert warm.text == f"sys={value};hi={value};a1={value};"
    assert incremental.reused == 3


@pytest.mark.parametrize(
    "block", ["{% filter upper %}{0}{% endfilter %}", "{% set captured %}{0}{% endset %}"]
)
def test_a_name_set_inside_a_block_is_still_read_from_outside_after_it(block: str) -> None:
    """Jinja scopes what a filter or set block assigns to the block: a later read of the name
    is the outer value, which must be keyed."""
    inner = block.replace("{0}", "{% set x = 'in' %}")
    source = "{% for m in messages %}" + inner + "{{ m.content }}={{ x }};{% endfor %}"
    incremental = Incremental()
    limits = compile_template(source).template.environment.limits  # type: ignore[attr-defined]
    for value in ("x1", "x2"):
        options: dict[str, Any] = {"tools": None, "documents": None, "now": None, "limits": limits}
        warm = incremental.run_template(
            compile_template(source),
            GROWING[:2],
            add_generation_prompt=True,
            variables={"x": value},
            **options,
        )
        assert warm.text == f"sys={value};hi={value};"
