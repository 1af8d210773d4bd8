"""boundary's output readers against vLLM 0.33.0's own composed parsers, on a seeded corpus
of 520 generated turns per format (tests/outputs/corpus.py), and the ``vllm`` backend against
the same parsers called directly.

vLLM's parsers are the oracle (tests/outputs/oracle.py calls them as its server does).
gpt-oss / harmony is not in the corpus: vLLM's harmony parser reads token ids of the
``o200k_harmony`` encoding, which ``openai_harmony`` downloads (no network here) and which the
stand-in gpt-oss tokenizer does not have. Nemotron Nano v2's ``<TOOLCALL>`` has no parser
in vLLM 0.33.0 (NVIDIA ships ``nemotron_json`` as a plugin), so it has no oracle here.
"""

from __future__ import annotations

import math
from functools import cache

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")


from boundary.outputs.arguments import convert_parameter
from tests.outputs.differential import CONFIGS, Compared, boundary_read, compare, corpus

pytestmark = pytest.mark.vllm

IDS = [f"{n}-{v or ''}" for n, v, _ in CONFIGS]
# boundary's own readers: agreement on names + arguments (as JSON) + content, out of 520
# (docs/audit.md, "Reading output as the engine reads it").
FLOORS = {
    ("qwen3", None): 520,
    ("granite_4_h", None): 520,
    ("qwen3_5", None): 520,
    ("nemotron_3", None): 520,
    ("kimi_linear", None): 520,
    ("minimax_m2", None): 520,
    ("mistral", None): 520,
    ("deepseek_v3", "v3"): 520,
    ("deepseek_v3", "v3_1"): 520,
}


@cache
def _compared(name: str, variant: str | None, syntax: str) -> tuple[Compared, ...]:
    """The whole corpus of one format read by both sides, once per session (each family's
    tokenizer and parser class are built once)."""
    return tuple(compare(name, variant, c) for c in corpus(name, variant, syntax))


@pytest.mark.parametrize(("name", "variant", "syntax"), CONFIGS, ids=IDS)
def test_the_vllm_backend_returns_exactly_what_vllms_parsers_return(name, variant, syntax):
    for r in _compared(name, variant, syntax)[:98]:  # every kind of turn, seven times
        assert boundary_read(name, variant, r.case.text, backend="vllm") == r.theirs, r.case


@pytest.mark.parametrize(("name", "variant", "syntax"), CONFIGS, ids=IDS)
def test_boundarys_readers_agree_with_vllm_at_least_as_often_as_recorded(name, variant, syntax):
    results = _compared(name, variant, syntax)
    assert len(results) >= 500
    agree = sum(r.agree for r in results)
    assert agree >= FLOORS[name, variant], f"{agree}/{len(results)}"


@pytest.mark.parametrize(("name", "variant", "syntax"), CONFIGS, ids=IDS)
def test_boundarys_readers_return_vllms_exact_strings(name, variant, syntax):
    """Reasoning and content byte for byte; arguments the same JSON value (kept as the model
    wrote them where vLLM's hermes parser re-serializes them)."""
    for r in _compared(name, variant, syntax):
        assert r.agree and (r.ours.reasoning, r.ours.content) == (r.theirs.reasoning, r.theirs.content), (
            r.case
        )


def test_well_formed_calls_agree_for_every_format():
    """Realistic turns: calls alone, or after content, with nested / unicode / escaped arguments."""
    for name, variant, syntax in CONFIGS:
        for r in _compared(name, variant, syntax):
            if r.case.kind in ("one_call", "several_calls", "undeclared_tool"):
                assert r.calls_agree, (name, r.case)


# -- XML parameter typing: boundary's rules are vLLM's ------------------------------------------

SCHEMAS = [
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "string"},
    {"type": "object"},
    {"type": "array"},
    {"type": "null"},
    {"type": ["integer", "null"]},
    {"type": ["string", "integer"]},
    {"type": ["boolean", "number"]},
    {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    {"oneOf": [{"type": "string"}, {"type": "array"}]},
    {"allOf": [{"type": "number"}]},
    {"enum": ["a", "b"]},
    {"enum": [1, 2, 3]},
    {"enum": [True, None]},
    {"type": "int"},
    {"type": "float"},
    {"type": "bool"},
    {"type": "dict"},
    {"type": "list"},
    {"type": "Unknown"},
    {"description": "no type"},
    {},
    {"type": [" Integer ", "NULL"]},
    {"anyOf": [{"type": "object"}, {"enum": [0.5]}]},
    {"type": "text"},
]
VALUES = [
    "3", "3.0", "-7", "1e3", "12345678901234567890", "0x1F", " 42 ", "1_000",
    "nan", "inf", "-Infinity", "NaN",
    "true", "False", "1", "0", "yes",
    "null", "None", "",
    '{"a": 1}', "[1, 2]", "[1e999]", '"quoted"', "{bad json",
    "hello", "日本",
]  # fmt: skip


def test_xml_parameter_typing_is_vllms_on_the_typing_corpus():
    from vllm.tool_parsers.utils import coerce_to_schema_type, extract_types_from_schema

    cases = [(schema, value) for schema in SCHEMAS for value in VALUES]
    assert len(cases) >= 540
    for schema, value in cases:
        ours = convert_parameter(value, schema)
        theirs = coerce_to_schema_type(value, extract_types_from_schema(schema))
        assert type(ours) is type(theirs) and (ours == theirs or _both_nan(ours, theirs)), (schema, value)


def _both_nan(a: object, b: object) -> bool:
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
