"""The renderer matches transformers' apply_chat_template byte for byte and id for id, and
finds U_end in the same pass, on every shipped template x the fixture corpus."""

from __future__ import annotations

from typing import Any

import pytest

import boundary
from boundary.render.marks import CLOSE, OPEN
from boundary.render.template_run import compile_template, run_template
from tests.support import (
    FIXED_NOW,
    family,
    fixed_strftime,
    fixture_cases,
    kwarg_settings,
    reference_request,
    reference_tokenizer,
    shipped_variants,
)

CASES = fixture_cases()


def _matrix() -> list[Any]:
    params = []
    for name, variant in shipped_variants():
        for kwargs in kwarg_settings(name):
            for case in CASES:
                label = ",".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults"
                params.append(
                    pytest.param(name, variant, kwargs, case, id=f"{name}-{variant}-{case['name']}-{label}")
                )
    return params


def _reference(name: str, variant: str, messages, tools, agp: bool, kwargs, *, tokenize: bool, **extra):
    hf = reference_tokenizer(name, variant)
    return hf.apply_chat_template(
        messages,
        tools=tools,
        add_generation_prompt=agp,
        tokenize=tokenize,
        return_dict=False,
        strftime_now=fixed_strftime,
        **kwargs,
        **extra,
    )


@pytest.mark.parametrize(("name", "variant", "kwargs", "case"), _matrix())
def test_text_ids_and_u_end_match_transformers(name: str, variant: str, kwargs: dict, case: dict) -> None:
    fam = family(name)
    messages, tools = reference_request(fam, case["messages"], case.get("tools"), variant)
    try:
        ref_text = _reference(name, variant, messages, tools, True, kwargs, tokenize=False)
    except Exception as exc:  # the template itself refuses this conversation
        with pytest.raises(boundary.TemplateRenderError) as info:
            fam.render(case["messages"], case.get("tools"), variant=variant, now=FIXED_NOW, **kwargs)
        assert str(exc) in str(info.value)
        return
    r = fam.render(case["messages"], case.get("tools"), variant=variant, now=FIXED_NOW, **kwargs)
    assert r.text == ref_text
    assert r.token_ids == _reference(name, variant, messages, tools, True, kwargs, tokenize=True)

    # Oracle (tests only): the history rendered without the generation prompt.
    history_text = _reference(name, variant, messages, tools, False, kwargs, tokenize=False)
    history_ids = _reference(name, variant, messages, tools, False, kwargs, tokenize=True)
    assert r.text.startswith(history_text)
    assert r.token_ids[: len(history_ids)] == history_ids
    assert r.u_end == len(history_ids)
    assert r.input_end.char == len(history_text)
    assert r.u_end <= r.p_end


def test_a_template_without_a_generation_prompt_has_u_end_at_p_end() -> None:
    fam = family("mistral")
    r = fam.render(CASES[0]["messages"], now=FIXED_NOW)
    assert compile_template(fam.template()).probes == 0
    assert r.u_end == r.p_end


def test_marks_never_reach_the_text_even_when_the_boundary_is_unavailable() -> None:
    src = (
        "{% set gp = '<|im_start|>assistant\\n' if add_generation_prompt else '' %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{{ gp }}"
    )
    fam = boundary.Family.from_template(src, family("qwen3").tokenizer)
    r = fam.render([{"role": "user", "content": "hi"}])
    assert r.u_end is None
    assert r.input_end.status is boundary.BoundaryStatus.UNAVAILABLE
    assert "line 1" in r.input_end.reason
    assert r.text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert r.checkpoint(64) is None


def test_generation_prompt_read_inside_a_filtered_macro_is_reported_unavailable() -> None:
    src = (
        "{% macro tail() %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{% endmacro %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{{ tail()|trim }}"
    )
    fam = boundary.Family.from_template(src, family("qwen3").tokenizer)
    r = fam.render([{"role": "user", "content": "hi"}])
    assert r.u_end is None
    assert "Macro" in r.input_end.reason


def test_generation_prompt_read_inside_a_macro_printed_bare_is_found() -> None:
    src = (
        "{% macro tail() %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{% endmacro %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{{ tail() }}"
    )
    fam = boundary.Family.from_template(src, family("qwen3").tokenizer)
    r = fam.render([{"role": "user", "content": "hi"}])
    history = fam.tokenizer.to_transformers(src).apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=True, add_generation_prompt=False
    )
    history = history["input_ids"] if isinstance(history, dict) or hasattr(history, "keys") else history
    assert r.u_end == len(history) == 6


def test_elif_chains_are_probed_where_the_flag_is_tested() -> None:
    src = (
        "{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }}{{ '\\n' }}"
        "{% elif loop.last and not add_generation_prompt %}A*:{{ m.content }}{{ '\\n' }}"
        "{% else %}A:{{ m.content }}{{ '\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}A:{% endif %}"
    )
    fam = boundary.Family.from_template(src, family("qwen3").tokenizer)
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    with_prompt = fam.render(msgs, add_generation_prompt=True)
    without = fam.render(msgs, add_generation_prompt=False)
    assert with_prompt.text == "U:q\nA:a\nA:"
    assert without.text == "U:q\nA*:a\n"
    assert with_prompt.input_end.char == len("U:q\n")  # where the two renderings part ways


def test_message_starts_follow_the_rendering_loop() -> None:
    fam = family("qwen3_5")
    case = next(c for c in CASES if c["name"] == "multi_turn")
    r = fam.render(case["messages"])
    starts = r.message_starts
    assert len(starts) == len(case["messages"])
    for i in range(2, len(starts)):
        assert starts[i] is not None and starts[i - 1] < starts[i]
        assert r.text[starts[i] :].startswith("<|im_start|>" + case["messages"][i]["role"])


# A loop that prints the system message first, then the loop that renders the turns: both
# iterate ``messages`` and print, but the first leaves every later message at one place.
_SYSTEM_LOOP_FIRST = (
    "{%- for m in messages %}{%- if m['role'] == 'system' %}[SYS]{{ m['content'] }}[/SYS]{%- endif %}"
    "{%- endfor %}"
    "{%- for m in messages %}{%- if m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


@pytest.mark.parametrize(
    ("source", "name"), [(_SYSTEM_LOOP_FIRST, "qwen3"), (None, "mistral")], ids=["crafted", "mistral"]
)
def test_u_end_of_a_continued_message_is_where_the_rendering_loop_began_it(source, name: str) -> None:
    """With two loops over the messages, U_end under ``continue_final_message`` comes from the
    one that spreads its messages over the most places: the loop that renders the turns."""
    fam = family(name) if source is None else boundary.Family.from_template(source, family(name).tokenizer)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of Italy?"},
        {"role": "assistant", "content": "The capital is"},
    ]
    r = fam.render(messages, continue_final_message=True)
    hf = fam.tokenizer.to_transformers(fam.template())
    prepared, _ = reference_request(fam, messages)
    assert r.text == hf.apply_chat_template(prepared, continue_final_message=True, tokenize=False)
    history = hf.apply_chat_template(prepared[:-1], add_generation_prompt=False, tokenize=False)
    assert r.text.startswith(history) and r.input_end.char == len(history)
    assert r.message_starts[-1] == len(history)
    ids = hf.apply_chat_template(prepared[:-1], add_generation_prompt=False, tokenize=True, return_dict=False)
    assert r.u_end == len(ids) and r.token_ids[: r.u_end] == ids


def test_generation_blocks_are_tracked_inside_macros_that_printed_first() -> None:
    src = (
        "{% macro turn(m) %}<|im_start|>{{ m.role }}{{ '\\n' }}"
        "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}"
        "{% else %}{{ m.content }}<|im_end|>{% endif %}{{ '\\n' }}{% endmacro %}"
        "{% for m in messages %}{{ turn(m) }}{% endfor %}"
    )
    fam = boundary.Family.from_template(src, family("qwen3").tokenizer)
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "answer"}]
    r = fam.render(msgs, add_generation_prompt=False)
    (span,) = r.generation_spans
    assert r.text[span.start : span.end] == "answer<|im_end|>"


def test_compiled_templates_are_cached_by_source() -> None:
    src = family("qwen3_5").template()
    assert compile_template(src) is compile_template(src)


def test_each_render_marks_with_a_fresh_nonce_that_a_message_cannot_forge(monkeypatch) -> None:
    """A message that carries the exact marks of an earlier render (its nonce included) is
    plain text to the next render: the text is transformers' and U_end does not move."""
    import boundary.render.template_run as render_module

    nonces: list[str] = []
    real = render_module.secrets.token_hex

    def recording(n: int) -> str:
        nonces.append(real(n))
        return nonces[-1]

    monkeypatch.setattr(render_module.secrets, "token_hex", recording)
    fam = family("qwen3_5")
    variant = fam.default_variant
    compiled = compile_template(fam.template())
    user = [{"role": "user", "content": "Hi"}]
    run_template(compiled, user)
    run_template(compiled, user)
    assert len(nonces) == 2 and nonces[0] != nonces[1] and len(nonces[0]) == 12
    # every kind of mark, written with the nonce the *next* render will use if nonces repeat
    forged = "".join(f"{OPEN}{nonces[-1]}:{payload}{CLOSE}" for payload in ("g", "m0.0", "s", "e"))
    messages = [
        {"role": "user", "content": "first " + forged},
        {"role": "assistant", "content": forged + " answer"},
        {"role": "user", "content": forged},
    ]
    monkeypatch.setattr(render_module.secrets, "token_hex", lambda n: nonces[-1])  # replayed on purpose
    replayed = run_template(compiled, messages)
    monkeypatch.setattr(render_module.secrets, "token_hex", recording)
    fresh = run_template(compiled, messages)
    hf = reference_tokenizer("qwen3_5", variant)
    expected = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    history = hf.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert fresh.text == expected
    assert fresh.input_end == len(history)
    assert nonces[-1] != nonces[-2]
    # the same render with the nonce replayed reads the forged marks: why the nonce must be fresh
    assert replayed.text != expected


def test_a_renders_context_is_the_one_jinja2_builds() -> None:
    """``template_run.new_context`` flattens the template's globals itself: the same parent
    (keys, order, values: a template's own globals before the environment's), the same
    global names, for a shipped template and for one with globals of its own."""
    import jinja2

    from boundary.render.template_run import new_context

    shipped = compile_template(boundary.load_family("qwen3_5").template()).template
    env = jinja2.Environment()
    env.globals["shadowed"] = "environment"
    own = env.from_string("{{ shadowed }} {{ mine }}", globals={"shadowed": "template", "mine": 1})
    context = {"messages": [], "add_generation_prompt": True, "mine": 2}
    for template in (shipped, own):
        theirs, ours = template.new_context(dict(context)), new_context(template, dict(context))
        assert list(ours.parent.items()) == list(theirs.parent.items())
        assert ours.globals_keys == theirs.globals_keys
        assert (ours.name, ours.blocks, ours.environment) == (theirs.name, theirs.blocks, theirs.environment)
    assert "".join(own.root_render_func(new_context(own, {}))) == "template 1"
