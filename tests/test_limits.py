"""Render limits with no holes.

Every adversarial template below ends in a typed error (``RenderLimitExceeded``, or
``TemplateRenderError`` where the template is simply wrong) within seconds and a few
hundred MB — never ``MemoryError``, ``RecursionError`` or a hang. Each runs in a forked
process whose address space is capped, so a check that failed would show as an untyped
``MemoryError`` here instead of exhausting the machine. Templates that stay under the
limits render exactly what transformers renders (its ``render_jinja_template`` is the
oracle).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

import boundary
from boundary.render.sandbox import RenderLimits, Sandbox
from boundary.render.template_run import compile_template, run_template

MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": 'hi <there> & "you"'},
    {
        "role": "assistant",
        "content": "hello",
        "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
    },
]

# Address space a case may add, and the time past which a case counts as unbounded (the default
# max_seconds is 10; the margin is for loaded machines). Not a speed measurement.
MEMORY_CAP_MB = 640
TIME_CAP_S = 20.0

SHARED = "{% set a = ['x' * 10**4] * 10**3 %}{% set b = [a] * 10**3 %}"  # prints as 10**10 chars
LIST_LOOP = "{% set ns = namespace(l=[]) %}{% for i in range(10**5) %}"
FAST = {"max_seconds": 1.0}
LOOPING = {"max_seconds": 1.0, "max_loop_steps": 10**12}

# (template, limits overrides): each must raise RenderLimitExceeded.
OVER_LIMITS: list[tuple[str, dict[str, Any]]] = [
    # operators
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", {}),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", {}),
    ("{{ 'x' * 10**10 }}", {}),
    ("{{ [0] * 10**9 }}", {}),
    ("{{ ('x',) * 10**9 }}", {}),
    ("{{ 2 ** 100000 }}", {}),
    ("{% set x = 7 ** 1000 %}{{ x * x * x * x * x }}", {}),
    ("{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}", {}),
    ("{{ '%999999999d' % 1 }}", {}),
    ("{{ '%.999999999f' % 1.0 }}", {}),
    ("{{ '%*d' % (10**9, 1) }}", {}),
    ("{{ '%(a)999999999s' % {'a': 'x'} }}", {}),
    ("{{ '%s%s%s' % (('x' * 10**7,) * 3) }}", {}),
    # str.format widths and precisions, nested ones too
    ("{{ '{:>999999999}'.format(1) }}", {}),
    ("{{ '{0:{1}}'.format(1, 10**9) }}", {}),
    ("{{ '{:.999999999f}'.format(1.0) }}", {}),
    ("{{ '{a:>999999999}'.format_map({'a': 1}) }}", {}),
    ("{{ ('{0}' * 10**3).format('x' * 10**5) }}", {}),
    # filters
    ("{{ ('a' * 10**6)|replace('a', 'b' * 100) }}", {}),
    ("{{ 'abc'|replace('', 'x' * 10**7) }}", {}),
    ("{{ 'x'|center(10**9) }}", {}),
    ("{{ 'a\nb'|indent(10**9) }}", {}),
    ("{{ ('a\n' * 10**5)|indent(1000) }}", {}),
    ("{{ '%999999999s'|format('x') }}", {}),
    ("{{ ('ab ' * 10**6)|wordwrap(1) }}", {}),
    ("{{ 'a b c d'|wordwrap(1, wrapstring='x' * 10**7) }}", {}),
    ("{{ (['x' * 10**5] * 1000)|join }}", {}),
    ("{{ (['x' * 10**5] * 1000)|map('string')|join }}", {}),
    ("{{ ('x' * 10**7)|list }}", {}),
    ("{{ (range(10**5)|list) * 30 }}", {}),
    ("{{ range(10**5)|map('center', 10**5)|list|length }}", {}),
    ("{{ [1, 2, 3]|map('center', 10**8)|list }}", {}),
    ("{{ [1]|batch(10**9, 'x')|list }}", {}),
    ("{{ [1, 2]|slice(10**9)|list }}", {}),
    ("{{ {'a': 1}|tojson(indent=10**9) }}", {}),
    ("{{ [1, 2, 3]|tojson(separators=('x' * 10**7, ':')) }}", {}),
    ("{{ {'k': 'x' * 10**7}|urlencode }}", {}),
    ("{{ 15|round(-10**9) }}", {}),
    ("{{ 1.5|round(10**9, 'floor') }}", {}),
    ("{{ ('f' * 10**5)|int(base=16) }}", {}),
    ("{{ {'a': '\"' * 4 * 10**6}|xmlattr }}", {}),
    ("{{ ('<a>' * 10**5)|striptags }}", {}),
    ("{{ ('a ' * 8 * 10**6)|wordcount }}", {}),
    ("{{ ('a ' * 8 * 10**6)|title }}", {}),
    ("{{ ('a ' * 10**6)|urlize }}", {}),
    ("{{ ([[1] * 1000] * 10**4)|sum(start=[]) }}", {}),
    ("{{ ([['x' * 100] * 100] * 10**4)|pprint }}", {}),
    # what a shared value prints as: every way to turn it into text
    (SHARED + "{{ b }}", {}),
    (SHARED + "{{ b|string }}", {}),
    (SHARED + "{{ b|tojson }}", {}),
    (SHARED + "{{ b|join }}", {}),
    (SHARED + "{{ b|pprint }}", {}),
    (SHARED + "{{ b|trim }}", {}),
    (SHARED + "{{ b|upper }}", {}),
    (SHARED + "{{ b|e }}", {}),
    (SHARED + "{{ b|replace('x', 'y') }}", {}),
    (SHARED + "{{ 'x' ~ b }}", {}),
    (SHARED + "{{ '%s' % (b,) }}", {}),
    (SHARED + "{{ '{}'.format(b) }}", {}),
    (SHARED + "{{ '{!r}'.format(b) }}", {}),
    ("{{ [messages] * 10**6 }}", {}),
    # methods
    ("{{ ('a' * 10**6).replace('a', 'b' * 100) }}", {}),
    ("{{ 'x'.ljust(10**9) }}", {}),
    ("{{ 'x'.zfill(10**9) }}", {}),
    ("{{ 'a\tb'.expandtabs(10**9) }}", {}),
    ("{{ 'ab'.join(['x' * 10**5] * 1000) }}", {}),
    ("{{ ''.join((['x' * 10**5] * 1000)|map('string')) }}", {}),
    ("{{ ('a' * 10**6).translate({97: 'x' * 100}) }}", {}),
    ("{{ ('x' * 10**7).encode('utf-32') }}", {}),
    ("{{ ('ab' * 10**6).encode().hex('-' * 100) }}", {}),
    ("{{ (1).to_bytes(10**9, 'big') }}", {}),
    ("{{ dict.fromkeys((range(10**5)|list) * 9) }}", {}),
    # globals
    ("{{ lipsum(n=10**7) }}", {}),
    ("{{ lipsum(1, max=10**9) }}", {}),
    ("{{ strftime_now('%999999999Y') }}", {}),
    ("{{ strftime_now('%c' * 10**6) }}", {}),
    # block, macro and caller output
    ("{% filter upper %}{% for i in range(10**5) %}{{ 'x' * 1000 }}{% endfor %}{% endfilter %}", {}),
    ("{% set s = 'x' * 10**4 %}{% set x %}{% for i in range(10**5) %}{{ s }}{% endfor %}{% endset %}", {}),
    (
        "{% macro m() %}{% for i in range(10**5) %}{{ caller() }}{% endfor %}{% endmacro %}"
        "{% call m() %}{{ 'x' * 10**4 }}{% endcall %}",
        {},
    ),
    # what a render builds in all, held across loop steps
    (LIST_LOOP + "{% set ns.l = ns.l + [ns.l] %}{% endfor %}", {}),
    (LIST_LOOP + "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}", {}),
    # loops, recursion, time
    (
        "{% for i in range(0, 10**18, 10**13) %}{% for j in range(0, 10**18, 10**13) %}{% endfor %}"
        "{% endfor %}",
        {},
    ),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}),
    ("{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}", FAST),
    ("{{ range(10**5)|select('in', range(10**5)|list)|list|length }}", FAST),
    ("{% for i in range(10**5) %}{% for j in range(10**5) %}{{ j }}{% endfor %}{% endfor %}", LOOPING),
]

# Templates that are wrong, not too big: the template's own error, typed.
TEMPLATE_ERRORS: list[tuple[str, dict[str, Any]]] = [
    ("{{ ('x' * 10**6).split('') }}", {}),
    ("{{ range(10**5)|groupby('x') }}", {}),
    ("{{ 'x'|center('y') }}", {}),
    ("{{ '%d' % 'x' }}", {}),
    ("{{ range(10**6) }}", {}),
]

# Large but within the limits: they render, quickly and in bounded memory.
WITHIN_LIMITS: list[tuple[str, dict[str, Any]]] = [
    ("{{ ('9' * 10**6)|int }}", {}),
    ("{{ ('9' * 10**6)|filesizeformat }}", {}),
    ("{{ ('x ' * 10**6).split()|length }}", {}),
    ("{{ ('a ' * 8 * 10**6)|capitalize|length }}", {}),
    ("{{ (range(10**5)|list * 10)|unique|list|length }}", {}),
    ("{{ range(10**5)|batch(3)|list|length }}", {}),
    ("{{ cycler(*range(10**5)).next() }}", {}),
    ("{{ (['x'] * 10**6)|unique|list|length }}", {}),
    ("{{ (range(10**5)|list * 4)|sort|length }}", {}),
]

# The child process: forks once per case, caps the fork's address space, and reports what
# happened as a JSON line: [outcome, message, seconds, peak RSS growth in MB].
HARNESS = textwrap.dedent(
    """
    import json, os, resource, sys, time
    import boundary
    from boundary.render.template_run import compile_template, run_template
    from boundary.render.sandbox import RenderLimits

    MESSAGES = [{"role": "user", "content": "hi"}]

    def rss_mb(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def run(source, overrides, cap_mb):
        size = rss_mb("VmSize")
        resource.setrlimit(resource.RLIMIT_AS, (int((size + cap_mb) * 2**20), resource.RLIM_INFINITY))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # start the peak-RSS counter from here
        start = rss_mb("VmRSS")
        limits = RenderLimits(**overrides)
        t0 = time.monotonic()
        try:
            run_template(compile_template(source, limits), MESSAGES, limits=limits)
            outcome, message = "ok", ""
        except boundary.BoundaryError as exc:
            outcome, message = type(exc).__name__, str(exc)
        except BaseException as exc:  # what the limits are there to prevent
            outcome, message = "untyped " + type(exc).__name__, str(exc)[:200]
        return [outcome, message[:300], time.monotonic() - t0, rss_mb("VmHWM") - start]

    cases, cap_mb, timeout = json.load(sys.stdin)
    results = []
    for source, overrides in cases:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, json.dumps(run(source, overrides, cap_mb)).encode())
            os._exit(0)
        os.close(write)
        deadline, done = time.monotonic() + timeout, False
        while not done and time.monotonic() < deadline:
            done = os.waitpid(pid, os.WNOHANG)[0] == pid
            time.sleep(0 if done else 0.01)
        if not done:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            results.append(["hang", "", timeout, 0])
        else:
            data = b""
            while chunk := os.read(read, 65536):
                data += chunk
            results.append(json.loads(data) if data else ["crashed", "", 0, 0])
        os.close(read)
    print(json.dumps(results))
    """
)


def _run_cases(cases: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    payload = json.dumps([cases, MEMORY_CAP_MB, 3 * TIME_CAP_S])
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS], input=payload, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


needs_fork = pytest.mark.skipif(
    not (hasattr(os, "fork") and os.path.exists("/proc/self/clear_refs")), reason="needs fork and /proc"
)


@pytest.fixture(scope="module")
def outcomes() -> dict[str, list[Any]]:
    cases = OVER_LIMITS + TEMPLATE_ERRORS + WITHIN_LIMITS
    return {source: result for (source, _), result in zip(cases, _run_cases(cases), strict=True)}


def _bounded(result: list[Any]) -> None:
    outcome, message, seconds, grown_mb = result
    assert not outcome.startswith(("untyped", "hang", "crashed")), (outcome, message)
    assert seconds < TIME_CAP_S, (outcome, seconds)
    assert grown_mb < MEMORY_CAP_MB, (outcome, grown_mb)


@needs_fork
@pytest.mark.parametrize("source", [s for s, _ in OVER_LIMITS])
def test_an_adversarial_template_stops_at_a_limit(source: str, outcomes: dict[str, list[Any]]) -> None:
    result = outcomes[source]
    _bounded(result)
    assert result[0] == "RenderLimitExceeded", result


@needs_fork
@pytest.mark.parametrize("source", [s for s, _ in TEMPLATE_ERRORS])
def test_a_wrong_template_fails_with_its_own_typed_error(source: str, outcomes: dict[str, list[Any]]) -> None:
    result = outcomes[source]
    _bounded(result)
    assert result[0] == "TemplateRenderError", result


@needs_fork
@pytest.mark.parametrize("source", [s for s, _ in WITHIN_LIMITS])
def test_a_large_template_within_the_limits_renders_in_bounded_time_and_memory(
    source: str, outcomes: dict[str, list[Any]]
) -> None:
    result = outcomes[source]
    _bounded(result)
    assert result[0] == "ok", result


# -- under the limits, the text is transformers' ----------------------------------------------

SMALL = RenderLimits(max_string_chars=20_000, max_total_chars=2_000_000)

# Each builds something just under SMALL.max_string_chars (or exercises a checked operation
# on ordinary values); all must render exactly as transformers renders them.
UNDER_LIMITS = [
    "{{ 'x' * 20000 }}",
    "{{ ['ab'] * 2500 }}",
    "{{ 'ab'|center(19000) }}",
    "{{ 'a\nb\n\nc'|indent(4000) }}{{ 'a\nb'|indent('>>', true, true) }}",
    "{{ ('abc ' * 1000)|replace('b', 'xyz') }}{{ 'abc'|replace('', '-') }}{{ 'aaa'|replace('a', 'b', 2) }}",
    "{{ '%18000d|%-5s|%.3f|%x|%c|%5.1e' % (7, 'ab', 3.14159, 255, 65, 12345.6) }}",
    "{{ '%(k)s=%(v)05d' % {'k': 'n', 'v': 42} }}{{ '%s|%r|%a' % ('é', 'é', 'é') }}",
    "{{ '{:>18000}'.format(1) }}{{ '{0:{1}}|{2!r}|{3:,.2f}|{4:_b}'.format('a', 9, [1], 12345.678, 255) }}",
    "{{ '{a}-{b:^7}'.format_map({'a': 1, 'b': 'c'}) }}",
    "{{ 'x'.ljust(19000) }}{{ 'x'.zfill(10) }}{{ 'a\tb'.expandtabs(12) }}{{ ','.join(['a', 'b']) }}",
    "{{ 'Hello World'.replace('o', '0') }}{{ 'a b'.split() }}{{ 'a\nb'.splitlines() }}{{ 'ab'.encode() }}",
    "{{ range(1000)|map('string')|join(',') }}",
    "{{ ([3, 1, 2] * 100)|sort|unique|list }}{{ ['b', 'A', 'a']|sort }}"
    "{{ ['b', 'A']|sort(case_sensitive=true) }}",
    "{{ messages|map(attribute='role')|list }}"
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
    "{{ messages|tojson }}{{ messages|tojson(indent=2) }}"
    "{{ {'é': [1, 2.5, none, true]}|tojson(ensure_ascii=true) }}",
    "{{ {'b': 1, 'a': [1, 2]}|tojson(separators=(',', ':'), sort_keys=true) }}",
    "{{ messages|pprint }}{{ {'a': 'x' * 300, 'b': range(40)|list}|pprint }}",
    "{{ {'class': 'x', 'id': '<1>'}|xmlattr }}{{ {'q': 'a b', 'n': 1}|urlencode }}{{ 'a b/é'|urlencode }}",
    "{{ ('<b>bold</b> <!-- c --> text ' * 50)|striptags }}{{ ('word ' * 100)|wordcount }}",
    "{{ ('the quick brown fox ' * 100)|wordwrap(30) }}{{ ('x ' * 100)|truncate(50) }}",
    "{{ 'hello world'|title }}{{ 'hELLO'|capitalize }}{{ 'ß'|upper }}{{ 'İ'|lower }}",
    "{{ [1, 2, 3, 4, 5]|batch(2, 'x')|list }}{{ [1, 2, 3, 4, 5]|slice(2, 'x')|list }}",
    "{{ messages|groupby('role')|map(attribute='grouper')|list }}{{ {'b': 1, 'A': 2}|dictsort }}",
    "{{ [[1], [2, 3]]|sum(start=[]) }}{{ [1, 2, 3]|sum }}{{ ['a', 'B']|max }}"
    "{{ messages|min(attribute='role') }}",
    "{{ 2.567|round(2) }}{{ 15|round(-1) }}{{ 2.5|round(0, 'floor') }}{{ '42'|int }}{{ 'ff'|int(base=16) }}",
    "{{ 1234567|filesizeformat }}{{ '<&>'|e }}{{ '<'|forceescape }}{{ '<b>'|safe }}"
    "{{ 'a' ~ 1 ~ [2] ~ none }}",
    "{{ 'ab'|reverse }}{{ [1, 2]|reverse|list }}{{ range(3)|reverse|list }}{{ 'abc'|list }}",
    "{{ [1, 'a', {'b': none}, (1,), 2.5] }}{{ namespace(a=1) }}{{ dict(a=1, b=[2]) }}{{ 2 ** 10 }}",
    "{{ 7 // 2 }}{{ 7 % 3 }}{{ 2 * 3 }}{{ 'ab' * 3 }}{{ [1] * 3 }}{{ 1 + 2 }}{{ 'a' + 'b' }}{{ [1] + [2] }}",
    "{{ (messages|map(attribute='content')|join('\n'))[:10] }}{{ messages[0]['content'][::2] }}",
    "{{ lipsum(2, false, 5, 6)|length > 0 }}{{ strftime_now('%Y') | length }}",
    "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s + m.role %}{% endfor %}"
    "{{ ns.s }}",
    "{% macro m(x) %}[{{ x }}{{ caller() if caller else '' }}]{% endmacro %}"
    "{{ m(1) }}{% call m(2) %}c{% endcall %}",
    "{% set x %}{% for m in messages %}{{ m.role }};{% endfor %}{% endset %}{{ x|upper }}"
    "{% filter upper %}abc{% endfilter %}",
]


def _reference(source: str) -> str:
    (text,), _ = render_jinja_template([MESSAGES], chat_template=source)
    return text


@pytest.mark.parametrize("source", UNDER_LIMITS)
def test_under_the_limits_the_text_is_transformers(source: str) -> None:
    ours = run_template(compile_template(source, SMALL), MESSAGES, add_generation_prompt=False, limits=SMALL)
    reference = _reference(source)
    if "lipsum" in source or "strftime_now" in source:
        assert len(ours.text) == len(reference)
    else:
        assert ours.text == reference


@pytest.mark.parametrize(
    ("under", "over"),
    [
        ("{{ 'x' * 20000 }}", "{{ 'x' * 20001 }}"),
        ("{{ 'x'|center(20000) }}", "{{ 'x'|center(20001) }}"),
        ("{{ '%20000d' % 1 }}", "{{ '%20001d' % 1 }}"),
        ("{{ 'x'.rjust(20000) }}", "{{ 'x'.rjust(20001) }}"),
        ("{{ ('x' * 10000) ~ ('y' * 10000) }}", "{{ ('x' * 10000) ~ ('y' * 10001) }}"),
        ("{{ ('x' * 10000) + ('y' * 10000) }}", "{{ ('x' * 10000) + ('y' * 10001) }}"),
        ("{{ ['x' * 10000, 'y' * 10000]|join }}", "{{ ['x' * 10000, 'y' * 10001]|join }}"),
        ("{{ ('a' * 10000)|replace('a', 'bb') }}", "{{ ('a' * 10001)|replace('a', 'bb') }}"),
    ],
)
def test_the_limit_is_exact_for_what_is_measured_exactly(under: str, over: str) -> None:
    text = run_template(compile_template(under, SMALL), MESSAGES, limits=SMALL).text
    assert text == _reference(under)
    with pytest.raises(boundary.RenderLimitExceeded, match="max_string_chars=20,000"):
        run_template(compile_template(over, SMALL), MESSAGES, limits=SMALL)


def test_what_a_render_builds_in_all_is_bounded() -> None:
    limits = RenderLimits(max_total_chars=1_000_000)
    source = LIST_LOOP + "{% set ns.l = ns.l + [ns.l] %}{% endfor %}"
    with pytest.raises(boundary.RenderLimitExceeded, match="max_total_chars"):
        run_template(compile_template(source, limits), MESSAGES, limits=limits)


def test_filters_iterating_in_python_count_against_the_step_limit() -> None:
    limits = RenderLimits(max_loop_steps=1_000)
    source = "{{ range(5000)|map('string')|list|length }}"
    with pytest.raises(boundary.RenderLimitExceeded, match="max_loop_steps"):
        run_template(compile_template(source, limits), MESSAGES, limits=limits)


def test_measured_sizes_bound_what_python_builds() -> None:
    """The estimates the checks rely on are never below the real size."""
    env = Sandbox()
    shared = ["é\n'\"\\" * 3]
    values: list[Any] = [
        "",
        "plain",
        "a\n\t\x00\u2028é😀'\"\\",
        [shared, shared, (1,), ()],
        {"a": [1, 2.5, None, True], 3: "b", None: [], 1.5: {}},
        {"nested": {"deep": [[["x" * 70_000]]]}},
        10**300,
        -2.5e-300,
    ]
    for value in values:
        assert env.text(value) >= len(str(value))
        for indent in (None, 0, 2, "\t"):
            for ascii in (False, True):
                for separators in (None, (",", ":"), (" , ", " :: ")):
                    try:
                        dumped = json.dumps(value, ensure_ascii=ascii, indent=indent, separators=separators)
                    except (TypeError, ValueError):
                        continue
                    text = env.filters["tojson"](value, ascii, indent, separators)
                    assert text == dumped
    for fmt, args in [
        ("%5s|%-3d|%.2f|%r|%a|%x|%c", ("é", 7, 1.5, "é", "é", 255, 65)),
        ("%(a)s%%", {"a": [1]}),
    ]:
        assert env.percent_size(fmt, args)[0] >= len(fmt % args)


def test_the_hooks_for_the_instrumentation_compute_what_jinja2_does() -> None:
    """``checked_concat`` is ``~`` (jinja2's ``str_join``), ``_checked_add`` is ``+`` and
    ``checked_slice`` is ``x[a:b:c]``, each refused past ``max_string_chars`` first."""
    env = Sandbox(SMALL)
    assert env.checked_concat(("a", 1, [2], None, jinja2_undefined())) == "a1[2]None"
    assert env._checked_add("ab", "cd") == "abcd"
    assert env._checked_add([1], [2]) == [1, 2]
    assert env._checked_add(2, 3) == 5
    assert env.checked_slice("abcdef", 1, None, 2) == "bdf"
    assert env.checked_slice([1, 2, 3], None, -1) == [1, 2]
    with pytest.raises(boundary.RenderLimitExceeded):
        env.checked_concat(("x" * 10_000, "y" * 10_001))
    with pytest.raises(boundary.RenderLimitExceeded):
        env._checked_add("x" * 10_000, "y" * 10_001)
    with pytest.raises(boundary.RenderLimitExceeded):
        env._checked_add(2**4095, 2**4095)
    with pytest.raises(boundary.RenderLimitExceeded):
        env.checked_slice(["x"] * 3000, None, None)


def jinja2_undefined() -> Any:
    from jinja2 import Undefined

    return Undefined()


def test_a_render_holds_its_deadline_only_while_it_runs() -> None:
    from boundary.render.sandbox import active_deadline

    run_template(compile_template("{{ 'x' * 300 }}"), MESSAGES)
    assert active_deadline() is None
    # outside a render the per-operation checks still hold
    env = Sandbox(SMALL)
    with pytest.raises(boundary.RenderLimitExceeded):
        env.filters["center"]("x", 30_000)
    assert env.filters["center"]("x", 5) == "  x  "


def test_loop_steps_and_filter_steps_count_against_one_budget() -> None:
    limits = RenderLimits(max_loop_steps=1000)
    loop = "{% for i in range(600) %}{% endfor %}"
    sort = "{{ (range(600)|list)|sort|length }}"
    for alone in (loop, sort):  # each stays under the limit on its own
        run_template(compile_template(alone, limits), MESSAGES, limits=limits)
    with pytest.raises(boundary.RenderLimitExceeded, match="max_loop_steps"):
        run_template(compile_template(loop + sort, limits), MESSAGES, limits=limits)
