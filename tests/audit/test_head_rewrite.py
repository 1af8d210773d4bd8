"""A client that rewrites the head of the prompt every turn: the audit names it ``head_rewrite``
with the message it changed.

The oracle for where the two requests part is transformers' ``apply_chat_template`` with the
shipped Qwen3.5 template (``reference_tokenizer``), not boundary's renderer.
"""

from __future__ import annotations

from typing import Any

from boundary.audit.runner import audit_requests
from boundary.trace.records import TraceRequest, sessions
from boundary.trace.tau_bench import tau_bench_trace
from boundary.verify.divergence import head_change
from boundary.verify.roundtrip import Cause
from tests.support import family, reference_request, reference_tokenizer

PLAIN = tau_bench_trace(reasoning="none", trajectories=1)


def _noted(requests: list[TraceRequest]) -> list[TraceRequest]:
    """Every request's leading system message with a note for that request appended (what a
    frontend sends after folding an agent's per-turn system note into the system block)."""
    out = []
    for k, r in enumerate(requests):
        messages = [dict(m) for m in r.messages or []]
        assert messages[0]["role"] == "system"
        messages[0]["content"] += f"\n\nWorkspace note {k}: {k * 3} files changed."
        out.append(r.model_copy(update={"messages": messages}))
    return out


def _reference_text(messages: list[dict[str, Any]], tools: Any) -> str:
    fam = family("qwen3_5")
    msgs, ts = reference_request(fam, messages, tools)
    text = reference_tokenizer("qwen3_5", fam.default_variant).apply_chat_template(
        msgs, tools=ts, tokenize=False, add_generation_prompt=True
    )
    assert isinstance(text, str)
    return text


def test_a_rewritten_system_block_is_named_head_rewrite_with_its_message_index():
    noted = _noted(PLAIN[:4])
    run = audit_requests(family("qwen3_5"), noted)
    checked = 0
    for rec in run.records[:-1]:
        # the oracle: the two requests' texts part before the first user message starts
        a = _reference_text(noted[rec.turn].messages or [], noted[rec.turn].tools)
        b = _reference_text(noted[rec.turn + 1].messages or [], noted[rec.turn + 1].tools)
        c = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        assert c < a.index("<|im_start|>user")
        assert rec.cause == Cause.HEAD_REWRITE.value, rec.detail
        assert rec.detail is not None and "messages[0] of the next request" in rec.detail
        assert rec.checkpoints["input_end"].reused_by_next is False
        checked += 1
    assert checked == 3
    assert run.summary.causes == {"head_rewrite": 3}


def test_the_same_trace_without_the_rewrite_keeps_its_head():
    run = audit_requests(family("qwen3_5"), PLAIN[:4])
    assert "head_rewrite" not in run.summary.causes
    assert all(rec.checkpoints["input_end"].reused_by_next for rec in run.records[:-1])


def test_the_verifier_names_the_rewrite_too():
    fam = family("qwen3_5")
    first, second = _noted(PLAIN[:2])
    prompt = fam.render(first.messages or [], first.tools)
    nxt = fam.render(second.messages or [], second.tools)
    generated = nxt.token_ids[len(prompt.token_ids) - 40 : len(prompt.token_ids)]
    r = fam.verify_round_trip(first.messages or [], generated, second.messages, tools=first.tools)
    assert r.cause is Cause.HEAD_REWRITE and "messages[0]" in (r.detail or "")


def test_head_change_names_the_first_changed_head_message():
    sys0, sys1 = {"role": "system", "content": "a"}, {"role": "system", "content": "b"}
    user, bot = {"role": "user", "content": "u"}, {"role": "assistant", "content": "x"}
    assert head_change([sys0, user], [sys0, user, bot, user]) is None
    assert head_change([sys0, user], [sys1, user, bot, user]) == "messages[0]"
    assert head_change([sys0, sys0, user], [sys0, sys1, user]) == "messages[1]"
    assert head_change([user], [sys0, user]) == "messages[0]"
    assert head_change([sys0, user], [sys0, user, bot, sys1]) == "messages[3]"
    assert head_change([sys0, user], [sys0, sys1, bot]) == "messages[1]"
    assert len(sessions(PLAIN[:4])) == 1
