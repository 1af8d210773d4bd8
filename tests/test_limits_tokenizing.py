"""Tokenizing a render's output is held to the render's limits.

The output limit is set so that tokenizing anything it admits stays within a stated memory
bound (``docs/limits.md``), the render deadline goes on through tokenizing, and a template
nested too deeply to compile is a ``TemplateLoadError``. Each large case runs in a forked
process whose address space is capped: an allocation failure inside tiktoken or tokenizers
aborts a process (it cannot be caught), so an unbounded case would show as ``crashed`` here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import boundary
from boundary.render.sandbox import DEFAULT_LIMITS
from boundary.render.template_run import compile_template

# What tokenizing an output of DEFAULT_LIMITS.max_output_chars may add to a process at most
# (docs/limits.md), and the address space a case may add (tiktoken and tokenizers reserve more
# address space than they touch).
BOUND_MIB = 600 * DEFAULT_LIMITS.max_output_chars // 2**20  # 600 bytes a character: 1.17 GiB
ADDRESS_SPACE_MIB = 2048
TIME_CAP_S = 60.0

# n chunks of 64 Ki characters of s, each ending in its index (no two alike within a half, so
# the segment cache serves none of them), <|im_start|> (a safe cut) after every `every`-th, and
# U_end in the middle (placing it may encode the segment around it once more).
_HALF = (
    "{% for i in range(n // 2) %}{{ s * (65536 // s|length) }}{{ i }}"
    "{% if i % every == every - 1 %}<|im_start|>{% endif %}{% endfor %}"
)
BIG = _HALF + "{% if add_generation_prompt %}y{% endif %}" + _HALF

# The child process: one fork per case; the fork caps its address space, renders and reports
# [outcome, message, seconds, peak RSS growth in MiB] as a JSON line.
HARNESS = textwrap.dedent(
    """
    import json, os, resource, sys, time
    import boundary
    from boundary.render.sandbox import RenderLimits

    def rss_mib(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def run(family, source, kwargs, overrides, cap_mib):
        fam = boundary.Family.from_template(source, boundary.load_family(family).tokenizer,
                                            limits=RenderLimits(**overrides))
        messages = [{"role": "user", "content": "hi"}]
        fam.tokenizer.encode("load the vocabulary before measuring")
        cap = int((rss_mib("VmSize") + cap_mib) * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # start the peak-RSS counter from here
        start, t0 = rss_mib("VmRSS"), time.monotonic()
        try:
            r = fam.render(messages, **kwargs)
            outcome, message = "ok", f"{len(r.text)} chars, {len(r.token_ids)} tokens"
        except boundary.BoundaryError as exc:
            outcome, message = type(exc).__name__, str(exc)
        except BaseException as exc:
            outcome, message = "untyped " + type(exc).__name__, str(exc)[:200]
        return [outcome, message[:300], time.monotonic() - t0, rss_mib("VmHWM") - start]

    cases, cap_mib = json.load(sys.stdin)
    results = []
    for case in cases:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, json.dumps(run(*case, cap_mib)).encode())
            os._exit(0)
        os.close(write)
        data = b""
        while chunk := os.read(read, 65536):
            data += chunk
        os.close(read)
        _, status = os.waitpid(pid, 0)
        results.append(json.loads(data) if data else ["crashed", f"wait status {status}", 0, 0])
    print(json.dumps(results))
    """
)

needs_fork = pytest.mark.skipif(
    not (hasattr(os, "fork") and os.path.exists("/proc/self/clear_refs")), reason="needs fork and /proc"
)


def _run(cases: list[tuple[str, str, dict[str, Any], dict[str, Any]]]) -> list[list[Any]]:
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS],
        input=json.dumps([cases, ADDRESS_SPACE_MIB]),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def _chunks(chars: int) -> int:
    return chars // 65536 - 1  # room for the added tokens


# (family, template, kwargs, limits overrides). qwen3 encodes with tiktoken segments,
# deepseek_v3 with tokenizers alone. The largest outputs the default admits, of the text
# that costs most to tokenize (emoji: 4 UTF-8 bytes and 1–2 tokens a character), in one
# segment (no safe cut) and in many.
AT_THE_LIMIT = [
    (
        family,
        BIG,
        {"s": s, "n": _chunks(DEFAULT_LIMITS.max_output_chars), "every": every},
        {"max_seconds": 60},
    )
    for family in ("qwen3", "deepseek_v3")
    for s, every in (("😀", 10**9), ("😀", 4), ("é", 10**9), ("a b ", 10**9))
]
# The template: 6 × 10 M characters.
OVER_THE_LIMIT = [
    (family, "{% for i in range(6) %}{{ 'x' * 10**7 }}{% endfor %}", {}, {})
    for family in ("qwen3", "deepseek_v3")
]
# Fast to render, slow to tokenize: the deadline fires while tokenizing.
SLOW_TO_TOKENIZE = [
    (family, BIG, {"s": "😀", "n": 30, "every": 1}, {"max_seconds": 0.3})
    for family in ("qwen3", "deepseek_v3")
]


@pytest.fixture(scope="module")
def outcomes() -> list[list[Any]]:
    return _run(AT_THE_LIMIT + OVER_THE_LIMIT + SLOW_TO_TOKENIZE)


def _bounded(result: list[Any]) -> None:
    outcome, message, seconds, grown_mib = result
    assert not outcome.startswith(("untyped", "crashed")), (outcome, message)
    assert seconds < TIME_CAP_S, (outcome, message, seconds)
    assert grown_mib < BOUND_MIB, (outcome, message, grown_mib)


@pytest.mark.slow
@needs_fork
@pytest.mark.parametrize("case", range(len(AT_THE_LIMIT)))
def test_tokenizing_the_largest_output_the_limit_admits_stays_within_the_stated_bound(
    case: int, outcomes: list[list[Any]]
) -> None:
    result = outcomes[case]
    _bounded(result)
    assert result[0] in ("ok", "RenderLimitExceeded"), result  # the deadline may fire on a loaded machine


@pytest.mark.slow
@needs_fork
@pytest.mark.parametrize("case", range(len(OVER_THE_LIMIT)))
def test_sixty_million_characters_are_refused_with_a_typed_error_not_an_abort(
    case: int, outcomes: list[list[Any]]
) -> None:
    result = outcomes[len(AT_THE_LIMIT) + case]
    _bounded(result)
    assert result[0] == "RenderLimitExceeded" and "max_output_chars" in result[1], result


@pytest.mark.slow
@needs_fork
@pytest.mark.parametrize("case", range(len(SLOW_TO_TOKENIZE)))
def test_the_render_deadline_fires_while_tokenizing(case: int, outcomes: list[list[Any]]) -> None:
    result = outcomes[len(AT_THE_LIMIT) + len(OVER_THE_LIMIT) + case]
    _bounded(result)
    assert result[0] == "RenderLimitExceeded", result
    assert result[1].startswith("tokenizer: rendering and tokenizing ran longer than max_seconds"), result


def test_a_render_that_finishes_in_time_is_not_refused_by_tokenizing() -> None:
    fam = boundary.load_family("qwen3")
    r = fam.render([{"role": "user", "content": "😀 " * 50_000}])
    assert len(r.token_ids) > 50_000


NESTED = [
    "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "{{ " + "[" * 5000 + "]" * 5000 + " }}",
    "{% if true %}" * 5000 + "x" + "{% endif %}" * 5000,
    "{% if true %}" * 120 + "x" + "{% endif %}" * 120,  # Python's own nesting limit (100 blocks)
    "{% for i in [1] %}" * 5000 + "x" + "{% endfor %}" * 5000,
    "{% macro f() %}" * 5000 + "{% endmacro %}" * 5000,
    "{{ 1" + " + 1" * 5000 + " }}",
    "{{ 1" + "|string" * 5000 + " }}",
]


@pytest.mark.parametrize("source", NESTED, ids=range(len(NESTED)))
def test_a_template_nested_too_deeply_is_a_template_load_error(source: str) -> None:
    with pytest.raises(boundary.TemplateLoadError, match="nests too deeply"):
        compile_template(source)


def test_a_deeply_nested_template_is_a_load_error_for_a_family_too() -> None:
    tok = boundary.load_family("qwen3").tokenizer
    with pytest.raises(boundary.TemplateLoadError, match="nests too deeply"):
        boundary.Family.from_template("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", tok)


class _CountingClock:
    def __init__(self) -> None:
        self.reads = 0

    def check_tokenizing(self) -> None:
        self.reads += 1


def test_the_segment_encoder_reads_the_clock_at_least_every_64_ki_characters() -> None:
    tok = boundary.load_family("qwen3").tokenizer
    clock = _CountingClock()
    text = ("x" * 70_000 + "<|im_start|>") * 5
    assert tok.encode(text, clock=clock).ids == tok.encode(text).ids
    assert clock.reads >= 5


@pytest.mark.parametrize("family", ["qwen3", "deepseek_v3"])
def test_a_rendering_past_its_deadline_is_refused_by_tokenizing(family: str) -> None:
    from boundary.render.marks import TextRendering
    from boundary.render.sandbox import Deadline, RenderLimits
    from boundary.tokenize.encode import encode_rendering

    rendered = TextRendering(
        "hello <|im_start|> world", None, "n/a", (), (), Deadline(RenderLimits(max_seconds=0))
    )
    with pytest.raises(boundary.RenderLimitExceeded, match=r"^tokenizer: rendering and tokenizing"):
        encode_rendering(rendered, boundary.load_family(family).tokenizer)
