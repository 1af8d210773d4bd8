"""Shipped templates run in the trusted sandbox; everything else keeps every check.

A template is trusted only when its source is a shipped file byte for byte; it then renders
exactly as the fully checked path does (text, ids, U_end, P_end), its render limits still fire,
and a check that can fire for it (an unsafe name, ``str.format``, an attribute of a frame) is
never skipped, even when trust is forced on a hostile template.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import jinja2
import pytest
from jinja2.runtime import LoopContext
from jinja2.sandbox import _mutable_spec
from jinja2.utils import Namespace
from markupsafe import Markup

import boundary
from boundary.family.registry import family_names, family_spec, shipped_templates
from boundary.render import template_run
from boundary.render.sandbox import RenderLimits, Sandbox
from boundary.render.sandbox.trusted import REFUSED_BY_NAME, TrustedSandbox, is_plain, plain_attributes
from boundary.render.template_run import compile_template, run_template
from boundary.session.incremental.store import IncrementalTemplate, compile_incremental
from boundary.shipped.datasets import (
    bfcl_multi_turn,
    mt_bench_questions,
    tau_bench_airline,
    tau_bench_airline_tools,
)
from boundary.shipped.resources import data_dir
from boundary.shipped.trust import shipped_as

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [(name, variant) for name in family_names() for variant in shipped_templates(name)]
FAMILIES = sorted({name for name, _ in SHIPPED})


@pytest.fixture
def untrusting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every template compiled while it is active is compiled as if it were not shipped."""
    compile_template.cache_clear()
    monkeypatch.setattr(template_run, "shipped_as", lambda source: None)
    yield
    compile_template.cache_clear()


@pytest.fixture
def trusting_all(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every template compiled while it is active is compiled as if it were shipped."""
    compile_template.cache_clear()
    monkeypatch.setattr(template_run, "shipped_as", lambda source: "test/forced.jinja")
    yield
    compile_template.cache_clear()


# -- the trust decision ----------------------------------------------------------------------------


@pytest.mark.parametrize(("family", "variant"), SHIPPED, ids=lambda x: x)
def test_every_shipped_template_is_trusted(family: str, variant: str) -> None:
    source = shipped_templates(family)[variant]
    trust = compile_template(source).trust
    assert trust.trusted
    assert shipped_as(source) == trust.shipped
    assert trust.shipped is not None  # the file it is, byte for byte (two families share one)
    assert (data_dir("templates") / trust.shipped).read_bytes() == source.encode()
    assert trust.names == plain_attributes(Sandbox().parse(source))
    assert bool(trust.skipped) == bool(trust.names)


@pytest.mark.parametrize("edit", ["append", "flip", "crlf"])
def test_a_shipped_template_changed_by_one_byte_is_not_trusted(edit: str) -> None:
    source = shipped_templates("qwen3_5")["think"]
    assert compile_template(source).trust.trusted
    if edit == "append":
        changed = source + "\n"
    elif edit == "flip":
        i = source.index("<|im_start|>")
        changed = source[:i] + "<|im_start|]" + source[i + len("<|im_start|>") :]
    else:
        changed = source.replace("\n", "\r\n", 1)
    assert len(changed.encode()) - len(source.encode()) in (0, 1)
    compiled = compile_template(changed)
    assert shipped_as(changed) is None
    assert compiled.trust == template_run.Trust(False, None)
    assert type(compiled.template.environment) is Sandbox


def test_a_session_runs_a_shipped_template_trusted_and_a_changed_one_fully_checked() -> None:
    """The incremental run (a session's) compiles its rewritten template in the same kind of
    environment as the cold render: trusted only for the shipped bytes."""
    source = shipped_templates("qwen3_5")["think"]
    for text, trusted in [(source, True), (source + "\n", False)]:
        compiled = compile_incremental(text)
        assert isinstance(compiled, IncrementalTemplate)
        assert compiled.compiled.trust.trusted is trusted
        assert compiled.compiled.trust == compile_template(text).trust
        assert (type(compiled.compiled.template.environment) is TrustedSandbox) is trusted


def test_trust_is_decided_by_the_recorded_sha256_not_by_the_file_alone(tmp_path: Path) -> None:
    # every shipped file is recorded: the trusted set is exactly the recorded variants
    recorded = {f"{name}/{v.file}" for name in family_names() for v in family_spec(name).variants if v.sha256}
    files = {f"{p.parent.name}/{p.name}" for p in data_dir("templates").glob("*/*.jinja")}
    assert files <= recorded
    trusted = {shipped_as(shipped_templates(n)[v]) for n, v in SHIPPED}
    assert None not in trusted and len(trusted) >= len(SHIPPED) - 1  # two families share one file
    # a source no family records is untrusted even when it sits beside the shipped files
    assert shipped_as("{{ messages[0].content }}") is None


# -- the static analysis ---------------------------------------------------------------------------


def test_the_analysis_keeps_only_plain_names() -> None:
    tree = Sandbox().parse(
        "{{ a.role }}{{ a.__class__ }}{{ a._x }}{{ b.format }}{{ b.format_map }}{{ c.append }}"
        "{{ c.update }}{{ d.mro }}{{ g.gi_frame }}{{ e.startswith('x') }}{{ loop.index0 }}"
    )
    assert plain_attributes(tree) == {"role", "startswith", "index0"}


def test_the_refused_names_cover_every_name_jinja2_refuses_by_name() -> None:
    assert {n for _, names in _mutable_spec for n in names} <= REFUSED_BY_NAME
    assert {"mro", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code"} <= REFUSED_BY_NAME
    assert not is_plain("__class__") and not is_plain("_private") and not is_plain("format")


def _gen() -> Iterator[int]:
    yield 1


def _objects() -> list[Any]:
    """One value of every kind a template can reach (opaque ones excepted)."""
    loop = LoopContext(iter([{"role": "a"}, {"role": "b"}]), jinja2.Undefined)
    next(iter(loop))
    ns = Namespace(role="x", fmt="{0}".format, items=1)
    env = Sandbox()
    macro = env.from_string("{% macro m() %}{% endmacro %}").module.m
    return [
        {"role": "user", "get": 1},
        "text",
        Markup("<b>"),
        [1, 2],
        (1, 2),
        {1, 2},
        3,
        2.5,
        True,
        None,
        ns,
        loop,
        macro,
        _gen(),
        _objects,
        str,
        jinja2.Undefined(name="u"),
    ]


SHIPPED_NAMES = {
    n
    for name, variant in SHIPPED
    for n in plain_attributes(Sandbox().parse(shipped_templates(name)[variant]))
}
NAMES = sorted(
    SHIPPED_NAMES
    | {"fmt", "count", "copy", "keys", "real", "upper", "index", "cycle", "send", "f_back", "tb_frame"}
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, jinja2.Undefined) or isinstance(b, jinja2.Undefined):
        return type(a) is type(b)
    if callable(a) and type(a).__name__ == "function":  # a wrapped str.format, rebuilt per access
        return type(b).__name__ == "function" and a.__wrapped__ == b.__wrapped__
    return bool(a == b) if not isinstance(a, Iterator) else a is b


def test_every_plain_name_is_safe_on_every_reachable_object() -> None:
    env = Sandbox()
    for obj in _objects():
        for name in NAMES:
            if not is_plain(name):
                continue
            try:
                value = getattr(obj, name)
            except (AttributeError, jinja2.UndefinedError):
                continue
            assert env.is_safe_attribute(obj, name, value), (type(obj), name)


def test_trusted_getattr_is_sandbox_getattr_for_every_object_and_name() -> None:
    checked, trusted = Sandbox(), TrustedSandbox(names=NAMES)
    frame = sys._getframe()
    for obj in [*_objects(), frame, frame.f_code]:
        for name in [*NAMES, "__class__", "format", "append", "mro", "gi_frame", "f_back"]:
            outcomes = []
            for env in (checked, trusted):
                try:
                    outcomes.append(env.getattr(obj, name))
                except (jinja2.exceptions.SecurityError, jinja2.UndefinedError) as exc:
                    outcomes.append(type(exc))
            assert _same(*outcomes), (type(obj).__name__, name, outcomes)
    assert isinstance(frame, FrameType)


# -- same output, every check that can fire kept, limits kept --------------------------------------


Request = tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None]
NOW = datetime(2026, 1, 2, 3, 4, 5)


def _requests() -> list[Request]:
    """Real conversations: tau-bench (with its tools), MT-bench, BFCL, the fixture corpus."""
    requests: list[Request] = []
    tools = tau_bench_airline_tools()
    for t, trajectory in enumerate(tau_bench_airline()[:4]):
        for i, m in enumerate(trajectory):
            if m["role"] == "assistant" and i % 3 == 0:
                requests.append((f"tau{t}.{i}", trajectory[:i], tools))
    for q in mt_bench_questions()[:4]:
        requests.append((f"mt{q['question_id']}", [{"role": "user", "content": q["turns"][0]}], None))
    for entry in bfcl_multi_turn()[:3]:
        first, second = entry["question"][:2]
        messages = [*first, {"role": "assistant", "content": "Done."}, *second]
        requests.append((f"bfcl{entry['id']}", messages, None))
    for path in sorted((ROOT / "fixtures" / "conversations").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        messages = data["messages"]
        if messages[-1]["role"] == "assistant":
            messages = messages[:-1]
        requests.append((path.stem, messages, data.get("tools")))
    return requests


def _render_all(family: str) -> list[tuple[Any, ...]]:
    fam = boundary.load_family(family)
    out: list[tuple[Any, ...]] = []
    for name, messages, tools in _requests():
        try:
            r = fam.render(messages, tools, now=NOW)
        except boundary.BoundaryError as exc:
            out.append((name, type(exc).__name__, str(exc)))
            continue
        out.append((name, r.text, r.token_ids, r.u_end, r.p_end))
    return out


@pytest.fixture(scope="module")
def trusted_renders() -> dict[str, list[tuple[Any, ...]]]:
    compile_template.cache_clear()
    renders = {}
    for family in FAMILIES:
        fam = boundary.load_family(family)
        assert fam.renderer.compiled(fam.template()).trust.trusted
        renders[family] = _render_all(family)
    return renders


@pytest.mark.parametrize("family", FAMILIES)
def test_a_trusted_template_renders_exactly_as_the_fully_checked_path(
    family: str, trusted_renders: dict[str, list[tuple[Any, ...]]], untrusting: None
) -> None:
    fam = boundary.load_family(family)
    assert not fam.renderer.compiled(fam.template()).trust.trusted
    checked = _render_all(family)
    assert checked == trusted_renders[family]
    assert sum(len(r) == 5 for r in checked) >= 10  # most requests render


@pytest.mark.parametrize(
    "src",
    [
        "{{ messages[0].role }}{{ ''.__class__.__mro__ }}",
        "{{ messages[0].role }}{{ messages.__class__ }}",
        "{{ messages[0].role }}{{ '{0.__class__}'.format(messages) }}",
        "{{ messages[0].role }}{{ '{m.role.__class__}'.format_map({'m': messages[0]}) }}",
        "{% set f = '{0.__class__}'.format %}{{ messages[0].role }}{{ f(1) }}",
        "{{ messages[0].role }}{{ fmt(1) }}",
        "{% set ns = namespace(f=fmt) %}{{ messages[0].role }}{{ ns.f(1) }}",
        "{% set ns = namespace(f=fmt) %}{{ messages[0].role }}{{ ns.f.__globals__ }}",
        "{{ messages[0].role }}{{ messages|attr('__class__') }}",
        "{{ messages[0].role }}{% set x = messages.append(1) %}",
        "{{ messages[0].role }}{{ messages[0].update({'role': 'system'}) }}",
        "{{ messages[0].role }}{{ raise_exception.__globals__ }}",
        "{{ messages[0].role }}{{ frame.f_back }}",
        "{{ messages[0].role }}{{ frame.f_code.co_name }}",
    ],
)
def test_a_forced_trust_keeps_every_check_that_can_fire(src: str, trusting_all: None) -> None:
    compiled = compile_template(src)
    assert compiled.trust.trusted and "role" in compiled.trust.names
    inputs = {"frame": sys._getframe(), "fmt": "{0.__class__}".format}
    with pytest.raises(boundary.SandboxViolation):
        run_template(compiled, [{"role": "user", "content": "hi"}], variables=inputs)


@pytest.mark.parametrize(
    "src",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ '{0.__class__}'.format(messages) }}",
        "{% set x = messages.append(1) %}",
    ],
)
def test_an_untrusted_template_keeps_every_check(src: str) -> None:
    compiled = compile_template(src)
    assert not compiled.trust.trusted and compiled.trust.skipped == ()
    with pytest.raises(boundary.SandboxViolation):
        run_template(compiled, [{"role": "user", "content": "hi"}])


def test_the_loop_step_limit_fires_on_a_trusted_template() -> None:
    limits = RenderLimits(max_loop_steps=20)
    fam = boundary.load_family("qwen3_5", limits=limits)
    assert fam.renderer.compiled(fam.template()).trust.trusted
    with pytest.raises(boundary.RenderLimitExceeded, match="max_loop_steps"):
        fam.render(tau_bench_airline()[0][:30])
    fam.render(tau_bench_airline()[0][:3])  # a short one stays under it


def test_the_output_limit_fires_on_a_trusted_template() -> None:
    limits = RenderLimits(max_output_chars=100_000)
    fam = boundary.load_family("qwen3_5", limits=limits)
    assert fam.renderer.compiled(fam.template()).trust.trusted
    with pytest.raises(boundary.RenderLimitExceeded, match="max_output_chars"):
        fam.render([{"role": "user", "content": "x" * 150_000}])
    fam.render([{"role": "user", "content": "x" * 50_000}])


def test_the_size_limit_fires_on_a_trusted_template() -> None:
    limits = RenderLimits(max_string_chars=10_000)
    fam = boundary.load_family("qwen3_5", limits=limits)
    assert fam.renderer.compiled(fam.template()).trust.trusted
    with pytest.raises(boundary.RenderLimitExceeded, match="max_string_chars"):
        fam.render([{"role": "user", "content": "x" * 20_000}])
