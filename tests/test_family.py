"""The family registry: every shipped family loads with its verbatim templates and
provenance; local model directories and user templates work offline."""

from __future__ import annotations

import hashlib
import json
import re
import time
from functools import cache
from typing import Any

import pytest

import boundary
from boundary.shipped.resources import data_dir
from tests.support import FIXED_NOW, ROOT, family, fixed_strftime, fixture_cases, reference_request

HYBRID = {
    "qwen3_next",
    "qwen3_5",
    "qwen3_6",
    "nemotron_3",
    "nemotron_nano_v2",
    "granite_4_h",
    "kimi_linear",
    "zamba2",
    "minimax_m1",
    "lfm2",
    "jamba",
    "falcon_h1",
}
COMPARISON = {"qwen3", "minimax_m2", "deepseek_v3", "gpt_oss", "mistral"}


def test_the_registry_lists_every_hybrid_family_and_the_comparison_families() -> None:
    names = set(boundary.family_names())
    assert names >= HYBRID | COMPARISON
    for name in HYBRID:
        assert boundary.family_spec(name).hybrid, name


@pytest.mark.parametrize("name", sorted(HYBRID | COMPARISON))
def test_shipped_templates_are_verbatim_and_carry_their_provenance(name: str) -> None:
    spec = boundary.family_spec(name)
    folder = data_dir("templates") / name
    for variant in spec.variants:
        data = (folder / variant.file).read_bytes()
        assert hashlib.sha256(data).hexdigest() == variant.sha256, variant.file
        assert variant.source and variant.license
    if "NVIDIA" in "".join(v.license for v in spec.variants):
        assert (folder / "NOTICE").is_file()


@pytest.mark.parametrize("name", ["jamba", "falcon_h1"])
def test_families_without_a_verbatim_template_take_a_user_template(name: str) -> None:
    with pytest.raises(boundary.TemplateLoadError, match="pass template="):
        boundary.load_family(name)
    template = family("zamba2").template()
    fam = boundary.load_family(name, template=template, tokenizer=family("qwen3").tokenizer)
    r = fam.render([{"role": "user", "content": "hi"}])
    assert r.text.endswith("<|im_start|>assistant\n")
    assert r.u_end == r.p_end - 3  # "<|im_start|>", "assistant", "\n"


def test_unknown_families_and_variants_are_load_errors() -> None:
    with pytest.raises(boundary.TemplateLoadError, match="unknown family 'llama9'"):
        boundary.load_family("llama9")
    with pytest.raises(boundary.TemplateLoadError, match="unknown variant"):
        boundary.load_family("qwen3_5", variant="turbo")
    with pytest.raises(boundary.RequestError, match="variant"):
        family("qwen3_5").render([{"role": "user", "content": "x"}], variant="turbo")


def _reference_ids(tok, messages, tools=None):
    return tok.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_from_pretrained_reads_a_saved_model_directory(tmp_path) -> None:
    source = family("qwen3_5")
    hf = source.tokenizer.to_transformers(source.template())
    hf.save_pretrained(tmp_path)
    fam = boundary.Family.from_pretrained(tmp_path)
    case = next(c for c in fixture_cases() if c["name"] == "tool_loop_two_steps")
    msgs, tools = reference_request(fam, case["messages"], case["tools"])
    r = fam.render(case["messages"], case["tools"])
    assert r.token_ids == _reference_ids(hf, msgs, tools)
    history = hf.apply_chat_template(
        msgs, tools=tools, add_generation_prompt=False, tokenize=True, return_dict=False
    )
    assert r.u_end == len(history) and r.token_ids[: r.u_end] == history


def test_from_pretrained_reads_a_template_inside_tokenizer_config(tmp_path) -> None:
    source = family("qwen3")
    (tmp_path / "tokenizer.json").write_text(source.tokenizer.backend.to_str(), encoding="utf-8")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "chat_template": source.template(),
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    fam = boundary.Family.from_pretrained(tmp_path, name="my-qwen3")
    assert fam.name == "my-qwen3"
    r = fam.render([{"role": "user", "content": "hi"}])
    assert r.text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_from_pretrained_without_a_template_is_a_load_error(tmp_path) -> None:
    (tmp_path / "tokenizer.json").write_text(family("qwen3").tokenizer.backend.to_str(), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    with pytest.raises(boundary.TemplateLoadError, match="no chat template"):
        boundary.Family.from_pretrained(tmp_path)


def test_from_pretrained_on_a_missing_directory_names_the_path(tmp_path) -> None:
    missing = tmp_path / "models" / "Qwen3.5-35B-A3B"
    for given in (missing, str(missing)):
        with pytest.raises(FileNotFoundError) as caught:
            boundary.Family.from_pretrained(given)
        assert isinstance(caught.value, boundary.TemplateLoadError)
        assert str(caught.value) == f"{missing}: no such model directory"


def test_from_pretrained_on_a_file_says_it_is_not_a_directory(tmp_path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(boundary.ModelNotFoundError, match=r"tokenizer\.json: not a directory$"):
        boundary.Family.from_pretrained(path)


def test_from_pretrained_on_a_hub_id_fails_at_once_while_offline(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty hub cache
    monkeypatch.chdir(tmp_path)
    import transformers  # importing it is slow and is not what is timed

    assert transformers.AutoTokenizer
    started = time.monotonic()
    with pytest.raises(boundary.ModelNotFoundError) as caught:
        boundary.Family.from_pretrained("acme/no-such-model")
    assert time.monotonic() - started < 10  # no retries (the hub client retries for ~52 s)
    assert str(caught.value) == (
        "acme/no-such-model: not a local directory, not in the hub cache, "
        "and the hub is offline or unreachable"
    )


def test_from_pretrained_on_a_hub_id_fails_at_once_when_the_hub_is_unreachable(tmp_path, monkeypatch) -> None:
    import socket

    def unreachable(address, timeout=None):
        raise OSError(f"no route to {address[0]}")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(boundary.ModelNotFoundError, match=r"hub is offline or unreachable$"):
        boundary.Family.from_pretrained("acme/no-such-model")


def test_from_template_with_a_syntax_error_fails_when_made() -> None:
    broken = "{% for m in messages %}{{ m.content }}"  # no endfor
    with pytest.raises(
        boundary.TemplateLoadError, match=r"^template:1: syntax error: Unexpected end of template"
    ):
        boundary.Family.from_template(broken, family("qwen3").tokenizer)


def test_an_unknown_arguments_form_is_a_request_error_listing_the_allowed_ones() -> None:
    fam = family("qwen3")
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(boundary.RequestError) as caught:
        fam.render(messages, arguments="bogus")
    assert str(caught.value) == "arguments: expected one of 'object', 'string', got 'bogus'"
    sessions = fam.sessions()
    sessions.render("c1", messages)
    with pytest.raises(boundary.RequestError, match=r"^arguments: expected one of"):
        sessions.render("c1", messages, arguments="bogus")  # nothing new to normalize: still refused
    with pytest.raises(boundary.RequestError, match=r"^arguments: expected one of"):
        fam.render([{"role": "user", "content": 3}], arguments="bogus")  # the option is checked first
    assert fam.render(messages, arguments="string").text == fam.render(messages).text


def test_from_template_accepts_a_transformers_tokenizer() -> None:
    source = family("qwen3_5")
    hf = source.tokenizer.to_transformers()
    fam = boundary.Family.from_template(source.template(), hf)
    messages = fixture_cases()[0]["messages"]
    assert fam.render(messages).token_ids == source.render(messages).token_ids


def test_template_kwargs_reach_the_template() -> None:
    fam = family("qwen3_5")
    msgs = [{"role": "user", "content": "hi"}]
    on, off = fam.render(msgs), fam.render(msgs, enable_thinking=False)
    assert on.text.endswith("<think>\n") and off.text.endswith("<think>\n\n</think>\n\n")
    assert on.u_end == off.u_end


@pytest.mark.parametrize("sanitize", [False, True])
def test_template_kwargs_are_resolved_once_per_render_in_a_session_too(monkeypatch, sanitize: bool) -> None:
    import boundary.renderer as renderer_module

    calls: list[object] = []
    real = renderer_module.resolve_kwargs

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(renderer_module, "resolve_kwargs", counting)
    fam = family("qwen3_5")
    msgs = [{"role": "user", "content": "hi"}]
    kwargs = {"enable_thinking": False, "unread": 1, "sanitize_control_tokens": sanitize}
    direct = fam.render(msgs, **kwargs)
    assert len(calls) == 1
    session = fam.session()
    for turn in range(2):
        assert session.render(msgs, **kwargs) == direct
        assert len(calls) == 2 + turn
    assert direct.ignored_template_kwargs == ("unread",)


def test_a_family_wraps_a_renderer_and_offers_its_methods_unchanged() -> None:
    import inspect

    from boundary.renderer import Renderer

    fam = family("qwen3_5")
    assert not isinstance(fam, Renderer) and isinstance(fam.renderer, Renderer)
    delegated = ("render", "render_prepared", "prepare", "normalize", "template", "select_variant")
    for name in (*delegated, "tool_arguments", "resolve_template_kwargs", "compiled"):
        assert inspect.signature(getattr(fam, name)) == inspect.signature(getattr(fam.renderer, name)), name
        assert getattr(boundary.Family, name).__doc__ == getattr(Renderer, name).__doc__, name
    for name in ("spec", "name", "templates", "tokenizer", "default_variant", "limits"):
        assert getattr(fam, name) is getattr(fam.renderer, name), name
    msgs = [{"role": "user", "content": "hi"}]
    assert fam.render(msgs, enable_thinking=False) == fam.renderer.render(msgs, enable_thinking=False)
    assert repr(fam).startswith("Family('qwen3_5'")


# -- held-out real templates ----------------------------------------------------------------------
HELD_OUT = ROOT / "fixtures" / "held_out_templates"
# What each held-out template reads among the kwargs clients send to every model (hand-checked
# against the template text).
HELD_OUT_READS: dict[str, frozenset[str]] = {
    "trl_llama3_1.jinja": frozenset(),
    "trl_llama3_2.jinja": frozenset(),
    "trl_gemma3.jinja": frozenset(),
    "trl_glm4moe.jinja": frozenset({"enable_thinking"}),
    "trl_lfm2_2_5_v2.jinja": frozenset(),
    "trl_phi3_5.jinja": frozenset(),
    "trl_qwen2_5.jinja": frozenset(),
    "trl_deepseek_r1_distill.jinja": frozenset(),
    "vllm_template_chatml.jinja": frozenset(),
}
CLIENT_KWARGS = [{}, {"enable_thinking": False}, {"enable_thinking": True}, {"reasoning_effort": "low"}]


def test_held_out_templates_are_the_packages_bytes() -> None:
    table = (HELD_OUT / "PROVENANCE.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([\w.]+\.jinja)` \|.*\| `([0-9a-f]{64})` \|$", table, flags=re.M))
    assert set(rows) == set(HELD_OUT_READS) == {p.name for p in HELD_OUT.glob("*.jinja")}
    for name, digest in rows.items():
        assert hashlib.sha256((HELD_OUT / name).read_bytes()).hexdigest() == digest, name
    shipped = {hashlib.sha256(p.read_bytes()).hexdigest() for p in data_dir("templates").glob("*/*.jinja")}
    assert not shipped & set(rows.values())  # held out: none of them is a shipped template


@cache
def _held_out(name: str) -> tuple[boundary.Family, Any]:
    template = (HELD_OUT / name).read_text(encoding="utf-8")
    tokenizer = family("qwen3").tokenizer.to_transformers(template)
    return boundary.Family.from_template(template, tokenizer), tokenizer


def _held_out_matrix() -> list[Any]:
    return [
        pytest.param(name, kwargs, case, id=f"{name}-{case['name']}-{','.join(kwargs) or 'defaults'}")
        for name in HELD_OUT_READS
        for kwargs in CLIENT_KWARGS
        for case in fixture_cases()
    ]


@pytest.mark.parametrize(("name", "kwargs", "case"), _held_out_matrix())
def test_held_out_templates_match_transformers_and_list_the_kwargs_they_ignore(
    name: str, kwargs: dict[str, Any], case: dict[str, Any]
) -> None:
    fam, hf = _held_out(name)
    messages, tools = reference_request(fam, case["messages"], case.get("tools"))

    def reference(agp: bool, tokenize: bool) -> Any:
        return hf.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=agp,
            tokenize=tokenize,
            return_dict=False,
            strftime_now=fixed_strftime,
            **kwargs,
        )

    try:
        text = reference(True, False)
    except Exception as exc:  # the template itself refuses this conversation
        with pytest.raises(boundary.TemplateRenderError) as info:
            fam.render(case["messages"], case.get("tools"), now=FIXED_NOW, **kwargs)
        assert str(exc) in str(info.value)
        return
    r = fam.render(case["messages"], case.get("tools"), now=FIXED_NOW, **kwargs)
    assert r.text == text
    assert r.token_ids == reference(True, True)
    assert r.ignored_template_kwargs == tuple(k for k in kwargs if k not in HELD_OUT_READS[name])
    history = reference(False, False)
    if r.u_end is not None and text.startswith(history):
        assert r.input_end.char == len(history)
