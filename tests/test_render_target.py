"""Render targets against the real libraries, from raw requests.

``vllm-0.33``: the request goes through vLLM 0.33.0's own ``ChatCompletionRequest`` and chat
utils (``parse_chat_message_content`` with the content format vLLM detects for the template,
``_postprocess_messages``, ``[tool.model_dump() for tool in request.tools]``), then the
installed transformers (vLLM's pin, < 5.21) renders it. ``transformers``: the installed
transformers' ``apply_chat_template`` given a copy of the raw request. boundary's text and ids
must be equal. A template that prints every message and the tools with ``tojson`` shows key
order, types and nulls, so hypothesis varies exactly those. The same file runs in ``.venv-tf``
(transformers >= 5.24, no vLLM; ``scripts/test``), where the 5.24 rules are checked.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import metadata
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import boundary
from boundary.render.options import RenderOptions
from boundary.render.target import DEFAULT_TARGET, resolve_target, transformers_target
from tests.support import FIXED_NOW, family, fixed_strftime, fixture_cases, keyed_session, loops_over_content

TRANSFORMERS = tuple(int(p) for p in metadata.version("transformers").split(".")[:3])
needs_5_24 = pytest.mark.skipif(
    TRANSFORMERS < (5, 24), reason=f"transformers {metadata.version('transformers')} < 5.24 is installed"
)
DUMP = (
    "{% for m in messages %}{{ m | tojson }}\n{% endfor %}"
    "{% if tools is not none %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}<gen>{% endif %}"
)


@cache
def _custom(template: str) -> boundary.Family:
    return boundary.Family.from_template(template, family("qwen3_5").tokenizer)


@cache
def _hf(name: str, template: str) -> Any:
    return family(name).tokenizer.to_transformers(template)


# -- vLLM 0.33.0's own request path ---------------------------------------------------------------
class _Parser:
    model_config = SimpleNamespace(enable_prompt_embeds=False)

    def mm_placeholder_storage(self) -> dict[str, Any]:
        return {}


class _Tracker:  # text-only requests: vLLM's parser never stores media
    def create_parser(self, mm_processor_kwargs: Any = None) -> _Parser:
        return _Parser()


def vllm_request(
    template: str, messages: list[Any], tools: list[Any] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """What vLLM 0.33.0 hands ``apply_chat_template`` for this request (sent as JSON)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.chat_utils.chat_message import _postprocess_messages, parse_chat_message_content
    from vllm.renderers.hf import _detect_content_format

    body: dict[str, Any] = {"model": "m", "messages": messages}
    if tools is not None:
        body["tools"] = tools
    request = ChatCompletionRequest(**json.loads(json.dumps(body)))
    content_format = _detect_content_format(template, default="string")
    conversation: list[dict[str, Any]] = []
    for message in request.messages:
        conversation += parse_chat_message_content(message, _Tracker(), content_format, False)
    _postprocess_messages(conversation)
    tool_dicts = None if request.tools is None else [tool.model_dump() for tool in request.tools]
    return conversation, tool_dicts


def _vllm_reference(name: str, template: str, messages: list[Any], tools: Any, **kw: Any) -> tuple[str, Any]:
    conversation, tool_dicts = vllm_request(template, messages, tools)
    hf = _hf(name, template)
    options = {"tools": tool_dicts, "add_generation_prompt": True, "strftime_now": fixed_strftime, **kw}
    text = hf.apply_chat_template(conversation, tokenize=False, **options)
    ids = hf.apply_chat_template(conversation, tokenize=True, return_dict=False, **options)
    return text, ids


def _transformers_reference(
    name: str, template: str, messages: Any, tools: Any, **kw: Any
) -> tuple[str, Any]:
    hf = _hf(name, template)
    options = {"add_generation_prompt": True, "strftime_now": fixed_strftime, **kw}
    raw_messages, raw_tools = copy.deepcopy(messages), copy.deepcopy(tools)
    text = hf.apply_chat_template(raw_messages, tools=raw_tools, tokenize=False, **options)
    ids = hf.apply_chat_template(raw_messages, tools=raw_tools, tokenize=True, return_dict=False, **options)
    return text, ids


# -- requests: key orders, nulls, numeric types, reasoning under every alias -------------------
def _shuffled(draw: Any, d: dict[str, Any]) -> dict[str, Any]:
    keys = draw(st.permutations(list(d)))
    return {k: d[k] for k in keys}


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.0, 0.5]), st.text("ab", max_size=3)
)


@st.composite
def tools_strategy(draw: Any) -> list[dict[str, Any]] | None:
    if draw(st.booleans()):
        return None
    tools = []
    for i in range(draw(st.integers(1, 2))):  # vLLM refuses an empty list
        props = {f"p{j}": _shuffled(draw, {"type": "string", "default": draw(SCALARS)}) for j in range(3)}
        fn: dict[str, Any] = {
            "name": f"tool_{i}",
            "parameters": _shuffled(draw, {"type": "object", "properties": _shuffled(draw, props)}),
        }
        for key, values in (
            ("description", st.one_of(st.none(), st.just("Does it."))),
            ("strict", st.one_of(st.none(), st.booleans())),
        ):
            if draw(st.booleans()):
                fn[key] = draw(values)
        tool = {"type": "function", "function": _shuffled(draw, fn)}
        tools.append(_shuffled(draw, tool))
    return tools


@st.composite
def assistant_strategy(draw: Any, dict_arguments: bool) -> dict[str, Any]:
    m: dict[str, Any] = {
        "role": "assistant",
        "content": draw(st.one_of(st.none(), st.just(""), st.just("Done."))),
    }
    for alias in ("reasoning", "reasoning_content", "thinking"):
        if draw(st.booleans()):
            m[alias] = draw(st.one_of(st.none(), st.just(""), st.just(f"think via {alias}")))
    if draw(st.booleans()):
        m["refusal"] = None
    calls = draw(st.sampled_from(["none", "empty", "call"]))
    if calls == "empty":
        m["tool_calls"] = []
    elif calls == "call":
        args = _shuffled(draw, {"b": draw(SCALARS), "a": draw(SCALARS)})
        arguments = args if dict_arguments and draw(st.booleans()) else json.dumps(args)
        m["tool_calls"] = [
            _shuffled(
                draw,
                {
                    "id": "call_1",
                    "type": "function",
                    "function": _shuffled(draw, {"name": "tool_0", "arguments": arguments}),
                },
            )
        ]
    return _shuffled(draw, m)


@st.composite
def request_strategy(
    draw: Any, dict_arguments: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A request; arguments as an object only where ``dict_arguments`` (vLLM's request model
    takes them as text only)."""
    assistant = draw(assistant_strategy(dict_arguments))
    parts = [{"type": "text", "text": "Hi"}, {"type": "text", "text": ""}, {"type": "text", "text": "there"}]
    messages = [
        {"role": "system", "content": "Be brief."},
        _shuffled(draw, {"role": "user", "content": draw(st.sampled_from(["Hi", parts])), "name": "ann"}),
        assistant,
    ]
    if assistant.get("tool_calls"):
        parts = [{"type": "text", "text": "22"}, {"type": "text", "text": "C"}]
        messages.append(
            _shuffled(
                draw,
                {"role": "tool", "tool_call_id": "call_1", "content": draw(st.sampled_from(["22 C", parts]))},
            )
        )
    messages.append({"role": "user", "content": "And now?"})
    return messages, draw(tools_strategy())


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.vllm
@SETTINGS
@given(req=request_strategy(dict_arguments=False))
def test_vllm_target_hands_the_template_what_vllm_hands_it(req: Any) -> None:
    messages, tools = req
    r = _custom(DUMP).render(messages, tools, target="vllm-0.33")
    text, ids = _vllm_reference("qwen3_5", DUMP, messages, tools)
    assert r.text == text
    assert r.token_ids == ids


@SETTINGS
@given(req=request_strategy(dict_arguments=True))
def test_transformers_target_hands_the_template_what_transformers_hands_it(req: Any) -> None:
    messages, tools = req
    r = _custom(DUMP).render(copy.deepcopy(messages), copy.deepcopy(tools), target="transformers")
    text, ids = _transformers_reference("qwen3_5", DUMP, messages, tools)
    assert r.text == text
    assert r.token_ids == ids


# -- shipped families ---------------------------------------------------------------------------
ODD_TOOLS = [
    {
        "function": {
            "parameters": {
                "properties": {"unit": {"default": None, "type": "string"}, "city": {"type": "string"}},
                "type": "object",
                "required": ["city"],
            },
            "name": "get_weather",
            "strict": None,
        },
        "type": "function",
    }
]
ODD_TURN = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Weather"},
            {"type": "text", "text": ""},
            {"type": "text", "text": "in Rome?"},
        ],
    },
    {
        "content": None,
        "role": "assistant",
        "reasoning_content": "Look it up.",
        "refusal": None,
        "tool_calls": [
            {
                "function": {"arguments": '{"unit": null, "city": "Rome"}', "name": "get_weather"},
                "id": "call12345",
                "type": "function",
            }
        ],
    },
    {
        "tool_call_id": "call12345",
        "role": "tool",
        "content": [{"type": "text", "text": "22"}, {"type": "text", "text": "C"}],
    },
    {"role": "assistant", "content": "It is 22 C.", "reasoning": "Report it."},
    {"role": "user", "content": "Thanks"},
]


def _matrix() -> list[Any]:
    names = ("multi_turn", "tool_loop", "reasoning_in_history", "content_parts")
    cases = [c for c in fixture_cases() if c["name"] in names]
    requests = [(c["name"], c["messages"], c.get("tools")) for c in cases] + [
        ("odd_tools", ODD_TURN, ODD_TOOLS)
    ]
    return [
        pytest.param(name, variant.name, messages, tools, id=f"{name}-{variant.name}-{case}")
        for name in boundary.family_names()
        if boundary.family_spec(name).variants and name not in ("jamba", "falcon_h1")
        for variant in boundary.family_spec(name).variants
        for case, messages, tools in requests
    ]


@pytest.mark.vllm
@pytest.mark.parametrize(("name", "variant", "messages", "tools"), _matrix())
def test_shipped_families_render_as_vllm_renders_them(
    name: str, variant: str, messages: Any, tools: Any
) -> None:
    fam = family(name)
    if fam.spec.reasoning_field != "reasoning_content" or fam.tool_arguments(variant) != "object":
        pytest.skip(f"{name} declares a family fact on top of vLLM (reasoning field / argument form)")
    template = fam.template(fam.select_variant(variant, tools))
    r = fam.render(messages, tools, variant=variant, now=FIXED_NOW)
    text, ids = _vllm_reference(name, template, messages, tools)
    assert r.text == text
    assert r.token_ids == ids


# -- the installed transformers (5.20 beside vLLM, 5.24 in .venv-tf) -----------------------------
THINKING_ONLY = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello.", "thinking": "greet back", "tool_calls": None},
    {"role": "user", "content": "Bye"},
]


def test_transformers_target_is_the_installed_version() -> None:
    target = resolve_target("transformers")
    assert target.version[:2] == TRANSFORMERS[:2] and target.library == "transformers"
    assert resolve_target(None).name == DEFAULT_TARGET == "vllm-0.33"


@needs_5_24
def test_transformers_5_24_copies_thinking_into_reasoning_content_and_drops_nulls() -> None:
    r = _custom(DUMP).render(THINKING_ONLY, target="transformers")
    text, ids = _transformers_reference("qwen3_5", DUMP, THINKING_ONLY, None)
    assert r.text == text and r.token_ids == ids
    assert '"reasoning_content": "greet back"' in text and "tool_calls" not in text  # the 5.24 rules show
    assert "reasoning_content" not in _custom(DUMP).render(THINKING_ONLY, target="transformers-5.20").text


@needs_5_24
def test_a_real_template_reading_reasoning_content_sees_thinking_on_5_24() -> None:
    fam = family("qwen3_6")
    r = fam.render(THINKING_ONLY, target="transformers", preserve_thinking=True)
    template = fam.template()
    text, ids = _transformers_reference("qwen3_6", template, THINKING_ONLY, None, preserve_thinking=True)
    assert r.text == text and r.token_ids == ids and "greet back" in text
    assert "greet back" not in fam.render(THINKING_ONLY, target="vllm-0.33", preserve_thinking=True).text


def test_declared_versions_apply_their_own_rules() -> None:
    assert transformers_target("5.20.2").rules == frozenset()
    assert transformers_target("5.21").rules == {"alias_reasoning"}
    assert transformers_target("5.24.0").rules == {"alias_reasoning", "drop_none_fields"}


# -- the target is an option like any other -----------------------------------------------------
@pytest.mark.parametrize("bad", ["vllm", "transformers-x", "", "VLLM-0.33"])
def test_an_unknown_target_is_a_typed_error(bad: str) -> None:
    fam = family("qwen3_5")
    messages = [{"role": "user", "content": "Hi"}]
    for call in (
        lambda: fam.render(messages, target=bad),
        lambda: fam.prepare(messages, options=RenderOptions(target=bad)),
        lambda: fam.session().render(messages, target=bad),
    ):
        with pytest.raises(boundary.RequestError, match=r"^target: ") as info:
            call()
        assert info.value.location == "target"


def test_a_session_keys_on_the_target() -> None:
    fam = _custom(DUMP)
    session = keyed_session(fam)
    for target in ["vllm-0.33", "transformers", "vllm-0.33", "transformers-5.24", "transformers-5.20"]:
        got = session.render(THINKING_ONLY, [ODD_TOOLS[0]], target=target)
        cold = fam.render(THINKING_ONLY, [ODD_TOOLS[0]], target=target)
        assert (got.text, got.token_ids) == (cold.text, cold.token_ids), target


def test_the_cli_takes_a_target(capsys: Any, tmp_path: Any) -> None:
    from boundary.cli.main import main

    conv = tmp_path / "c.json"
    conv.write_text(json.dumps({"messages": THINKING_ONLY}))
    assert main(["render", "--conversation", str(conv), "--target", "transformers", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["target"] == resolve_target("transformers").name
    assert main(["render", "--conversation", str(conv), "--target", "nope"]) != 0
    assert "target: unknown render target 'nope'" in capsys.readouterr().err


def test_an_explicit_argument_form_applies_under_the_transformers_target() -> None:
    sent = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"b": 1, "a": 2}'}}
            ],
        },
    ]
    as_object = copy.deepcopy(sent)
    as_object[1]["tool_calls"][0]["function"]["arguments"] = {"b": 1, "a": 2}
    r = _custom(DUMP).render(sent, target="transformers", arguments="object")
    assert r.text == _transformers_reference("qwen3_5", DUMP, as_object, None)[0]
    assert r.text != _custom(DUMP).render(sent, target="transformers").text


CRAFTED_FORMATS = [
    "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
    "{% for m in messages %}{% for p in m['content'] | list %}{{ p }}{% endfor %}{% endfor %}",
    "{% set ns = namespace(rest=messages) %}{% for m in ns.rest %}{% for p in m.content %}{% endfor %}"
    "{% endfor %}",
    "{% set msgs = messages[1:] %}{% for m in msgs %}{% for k, v in m.content %}{% endfor %}{% endfor %}",
    "{% macro show(c) %}{% for p in c %}{{ p.text }}{% endfor %}{% endmacro %}"
    "{% for m in messages %}{{ show(m.content) }}{% endfor %}",
    "{% for m in messages %}{% set content = m.content %}{% for p in content %}{% endfor %}{% endfor %}",
    "{% for m in messages %}{{ m.content }}{% endfor %}",
    "{% for m in messages %}{{ m.content",
]


@pytest.mark.vllm
def test_the_content_format_is_the_one_vllm_detects() -> None:
    from vllm.renderers.hf import _detect_content_format

    from boundary.family.registry import shipped_templates
    from boundary.render.content_format import detect_content_format
    from tests.test_family import HELD_OUT

    sources = [t for n in boundary.family_names() for t in shipped_templates(n).values()]
    sources += [p.read_text(encoding="utf-8") for p in sorted(HELD_OUT.glob("*.jinja"))] + CRAFTED_FORMATS
    found = [detect_content_format(s) for s in sources]
    assert found == [_detect_content_format(s, default="string") for s in sources]
    assert {"openai", "string"} <= set(found)
    real = len(sources) - len(CRAFTED_FORMATS)  # the reference the other tests build agrees too
    assert [loops_over_content(s) for s in sources[:real]] == [f == "openai" for f in found[:real]]
