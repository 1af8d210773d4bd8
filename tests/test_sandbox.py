"""Templates are untrusted code: escapes fail with typed errors, runaway renders hit limits."""

from __future__ import annotations

import pytest

import boundary
from boundary.render.sandbox import RenderLimits
from boundary.render.template_run import compile_template, run_template

MESSAGES = [{"role": "user", "content": "hi"}]


def _render(src: str, limits: RenderLimits | None = None) -> str:
    compiled = compile_template(src, limits or RenderLimits())
    return run_template(compiled, MESSAGES, limits=limits or RenderLimits()).text


@pytest.mark.parametrize(
    "src",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ lipsum.__globals__['os'].popen('id').read() }}",
        "{{ namespace.__init__.__globals__ }}",
        "{% set x = messages.append({'role': 'user'}) %}",
        "{{ messages[0].update({'role': 'system'}) }}",
    ],
)
def test_attribute_escapes_and_input_mutation_are_sandbox_violations(src: str) -> None:
    with pytest.raises(boundary.SandboxViolation):
        _render(src)


@pytest.mark.parametrize(
    "src",
    [
        "{% include '/etc/passwd' %}",
        "{% import 'os' as os %}",
        "{% extends 'base.jinja' %}",
        "{% from 'x' import y %}",
    ],
)
def test_file_access_is_refused_when_compiling(src: str) -> None:
    with pytest.raises(boundary.SandboxViolation, match="no file access"):
        compile_template(src)


def test_nested_loops_stop_at_the_loop_step_limit() -> None:
    limits = RenderLimits(max_loop_steps=10_000)
    with pytest.raises(boundary.RenderLimitExceeded, match="max_loop_steps"):
        _render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", limits)


def test_a_render_that_runs_too_long_stops_at_the_time_limit() -> None:
    limits = RenderLimits(max_seconds=0.2, max_loop_steps=10**12)
    src = (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = j * j %}{% endfor %}{% endfor %}"
    )
    with pytest.raises(boundary.RenderLimitExceeded, match="max_seconds"):
        _render(src, limits)


@pytest.mark.parametrize(
    "src",
    [
        "{{ 'x' * 10**10 }}",
        "{{ ['x'] * 10**10 }}",
        "{% set s = namespace(v='ab') %}{% for i in range(64) %}{% set s.v = s.v + s.v %}{% endfor %}",
        "{{ 'a'.ljust(10**11) }}",
        "{{ 2 ** (10 ** 12) }}",
        "{% set s = namespace(v='ab') %}{% for i in range(64) %}{% set s.v = [s.v, s.v]|join %}{% endfor %}",
    ],
)
def test_building_gigabytes_is_refused_before_it_is_built(src: str) -> None:
    with pytest.raises(boundary.RenderLimitExceeded):
        _render(src)


def test_output_is_capped() -> None:
    limits = RenderLimits(max_output_chars=100_000)
    with pytest.raises(boundary.RenderLimitExceeded, match="max_output_chars"):
        _render("{% for i in range(10000) %}{{ 'x' * 100 }}{% endfor %}", limits)


def test_unbounded_macro_recursion_is_a_limit_error() -> None:
    with pytest.raises(boundary.RenderLimitExceeded, match="recursion"):
        _render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")


def test_raise_exception_surfaces_the_template_message_and_line() -> None:
    src = "{% if messages %}\n{{ raise_exception('Conversation roles must alternate') }}\n{% endif %}"
    with pytest.raises(boundary.TemplateRenderError, match="Conversation roles must alternate") as info:
        _render(src)
    assert info.value.location == "template:2"


def test_syntax_errors_are_load_errors_with_a_line() -> None:
    with pytest.raises(boundary.TemplateLoadError) as info:
        compile_template("{% for m in messages %}\n{{ m.content }")
    assert info.value.location.startswith("template:")


def test_default_limits_render_the_longest_tau_bench_request_exactly_as_transformers() -> None:
    """The limits leave room for real work: the longest tau-bench conversation (up to its last
    user message) renders under the defaults, text and ids equal to transformers' unlimited
    render of it."""
    from boundary.shipped.datasets import tau_bench_airline
    from tests.support import FIXED_NOW, family, fixed_strftime, reference_request, reference_tokenizer

    fam = family("gpt_oss")
    longest = max(tau_bench_airline(), key=len)
    request = longest[: max(i for i, m in enumerate(longest) if m["role"] == "user") + 1]
    r = fam.render(request, now=FIXED_NOW)
    prepared, _ = reference_request(fam, request)
    hf = reference_tokenizer("gpt_oss", fam.default_variant)
    kwargs = {"add_generation_prompt": True, "strftime_now": fixed_strftime}
    text = hf.apply_chat_template(prepared, tokenize=False, **kwargs)
    ids = hf.apply_chat_template(prepared, tokenize=True, return_dict=False, **kwargs)
    assert r.text == text
    assert r.token_ids == ids
    assert r.p_end == len(ids) == len(hf(text, add_special_tokens=False)["input_ids"])
    assert len(ids) > 5_000  # a long request, not a trivial one
