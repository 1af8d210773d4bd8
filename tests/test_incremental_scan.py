"""The incremental message loop's own position, its runs of replayed iterations, and guarded
scans: each gives exactly what a full render gives, including where a limit stops it.

The rewritten message loop never reads jinja2's ``LoopContext``: ``loop.<attr>`` comes from
the run (``Run.loop_attr``), and a run of replayable iterations is skipped in one loop step.
A guarded scan (``incremental_plan._guard``: ``{% for m in messages[::-1] %}{% if ns.flag
and ... %}...``) stops once its guard is false; it is found where that rule holds and only
there.
"""

from __future__ import annotations

from typing import Any

import pytest

import boundary
from boundary.errors import BoundaryError
from boundary.render.sandbox import RenderLimits
from boundary.render.template_run import compile_template, run_template
from boundary.session.incremental.store import Incremental, IncrementalTemplate, compile_incremental
from boundary.shipped.datasets import tau_bench_airline
from tests.support import FIXED_NOW, family
from tests.test_incremental import GROWING, check_incremental

POSITIONS = (
    "{% for m in messages %}{{ m.content }}:{{ loop.index0 }},{{ loop.index }},{{ loop.revindex }},"
    "{{ loop.revindex0 }},{{ loop.first }},{{ loop.last }},{{ loop.length }},{{ loop.depth }},"
    "{{ loop.depth0 }},{{ loop.previtem.content if loop.previtem is defined else '-' }},"
    "{{ loop.nextitem.content if loop.nextitem is defined else '-' }},"
    "{{ loop.previtem is defined }}{{ loop.nextitem is defined }};{% endfor %}"
)

SCAN = (
    "{%- set ns = namespace(flag=true, last=-1) %}"
    "{%- for m in messages[::-1] %}"
    "{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.flag and m.role == 'user' %}{%- set ns.flag = false %}{%- set ns.last = index %}{%- endif %}"
    "{%- endfor %}"
    "{%- for m in messages %}{{ m.role }}{% if loop.index0 > ns.last %}*{% endif %}:{{ m.content }};"
    "{%- endfor %}"
)


def _incremental(source: str) -> IncrementalTemplate:
    compiled = compile_incremental(source)
    assert isinstance(compiled, IncrementalTemplate), compiled
    return compiled


def _render(
    incremental: Incremental, source: str, messages: list[dict[str, Any]], limits: RenderLimits
) -> Any:
    try:
        return incremental.run_template(
            compile_template(source, limits),
            messages,
            tools=None,
            documents=None,
            add_generation_prompt=True,
            variables={},
            now=None,
            limits=limits,
        )
    except BoundaryError as exc:
        return (type(exc), str(exc))


def _full(source: str, messages: list[dict[str, Any]], limits: RenderLimits) -> Any:
    try:
        return run_template(compile_template(source, limits), messages, limits=limits)
    except BoundaryError as exc:
        return (type(exc), str(exc))


def test_every_loop_attribute_is_jinja2s_at_every_position_replayed_or_not() -> None:
    check_incremental(POSITIONS)
    incremental = Incremental()
    limits = RenderLimits()
    for n in [*range(1, len(GROWING) + 1), *range(len(GROWING), 0, -1)]:
        full = _full(POSITIONS, GROWING[:n], limits)
        for _ in range(2):  # the second time, every iteration reads what it read the first
            assert _render(incremental, POSITIONS, GROWING[:n], limits) == full
    assert incremental.reused >= len(GROWING) * (len(GROWING) + 1)


def test_a_probe_that_takes_the_loop_as_a_whole_sees_the_loop_where_it_stands() -> None:
    source = (
        "{% for m in messages %}<{{ m.content }}>{% if loop.last and add_generation_prompt %}"
        "[gen]{% endif %}{% endfor %}"
    )
    check_incremental(source)


def test_a_guarded_scan_is_found_and_stops_once_its_guard_is_false() -> None:
    assert _incremental(SCAN).plan.scans == ("ns.flag (line 1)",)
    check_incremental(SCAN)
    incremental = Incremental()
    assert _render(incremental, SCAN, GROWING, RenderLimits()) == _full(SCAN, GROWING, RenderLimits())
    assert incremental.scan_skipped == len(GROWING) - 1  # the last message is the last user query


@pytest.mark.parametrize(
    "variant",
    [
        # a set before the test that is not integer arithmetic (it could raise, or print)
        SCAN.replace(
            "{%- set index = (messages|length - 1) - loop.index0 %}", "{%- set index = m.content|upper %}"
        ),
        # the guard is not what the test evaluates first
        SCAN.replace("ns.flag and m.role == 'user'", "m.role == 'user' and ns.flag"),
        # an else branch runs when the guard is false
        SCAN.replace(
            "{%- endif %}{%- endfor %}", "{%- else %}{%- set ns.last = index %}{%- endif %}{%- endfor %}", 1
        ),
        # a statement after the test
        SCAN.replace("{%- endif %}{%- endfor %}", "{%- endif %}{%- set tail = 1 %}{%- endfor %}", 1),
        # the scan reads how far the loop goes
        SCAN.replace("ns.flag and m.role == 'user'", "ns.flag and not loop.last"),
        # the guard is not a namespace attribute
        SCAN.replace("ns.flag and", "flag and").replace(
            "{%- for m in messages[::-1] %}", "{%- set flag = true %}{%- for m in messages[::-1] %}", 1
        ),
    ],
)
def test_a_loop_outside_the_guarded_scan_rule_is_not_stopped(variant: str) -> None:
    assert variant != SCAN
    assert _incremental(variant).plan.scans == ()
    check_incremental(variant)


@pytest.mark.parametrize("source", [SCAN, POSITIONS], ids=["scan", "positions"])
def test_a_loop_step_limit_stops_an_incremental_run_exactly_where_it_stops_a_full_one(source: str) -> None:
    """Skipped scan iterations and replayed runs are charged their loop steps: for every
    limit, each turn either renders as in full or fails with the full render's error."""
    outcomes = set()
    for max_loop_steps in range(1, 2 * len(GROWING) + 2):
        limits = RenderLimits(max_loop_steps=max_loop_steps)
        incremental = Incremental()
        for n in range(1, len(GROWING) + 1):
            full = _full(source, GROWING[:n], limits)
            assert _render(incremental, source, GROWING[:n], limits) == full, (max_loop_steps, n)
            outcomes.add(isinstance(full, tuple))
    assert outcomes == {True, False}


def test_a_session_under_a_loop_step_limit_fails_on_the_turn_a_cold_render_fails() -> None:
    conversation = next(t for t in tau_bench_airline() if len(t) >= 30)
    requests = [conversation[:i] for i, m in enumerate(conversation) if m["role"] == "assistant"]
    steps = len(requests[3 * len(requests) // 4]) * 2  # passes three quarters in (replays first)
    fam = boundary.load_family("qwen3_5", limits=RenderLimits(max_loop_steps=steps))
    session = fam.session()
    failed = 0
    for request in requests:
        try:
            cold: Any = fam.render(request, now=FIXED_NOW)
        except BoundaryError as exc:
            cold = (type(exc), str(exc))
            failed += 1
        try:
            warm: Any = session.render(request, now=FIXED_NOW)
        except BoundaryError as exc:
            warm = (type(exc), str(exc))
        assert warm == cold, len(request)
    assert 0 < failed < len(requests)
    assert session.stats.reused_iterations > 0


def test_shipped_qwen_templates_stop_their_last_query_scan() -> None:
    for name in ("qwen3", "qwen3_5", "qwen3_6", "qwen3_next"):
        fam = family(name)
        compiled = compile_incremental(fam.template(fam.default_variant), fam.limits)
        assert isinstance(compiled, IncrementalTemplate)
        assert [s.split(" ")[0] for s in compiled.plan.scans] == ["ns.multi_step_tool"], name
