"""The audit runner and its what-if re-runs, on the shipped tau-bench trajectories (seeded
synthetic reasoning: the data has none) and on small hand-made traces.

Nemotron 3 and Granite 4.0-H run on their labelled stand-in tokenizers (``fam.tokenizer.stand_in``).
"""

from __future__ import annotations

import pytest

from boundary.audit.runner import AuditSettings, audit_requests
from boundary.audit.whatif import candidates, run_what_if, trace_habits, with_turns_as_written
from boundary.errors import RequestError
from boundary.outputs import format_output
from boundary.trace.records import TextOutput, TokenOutput, TraceRequest, sessions
from boundary.trace.tau_bench import tau_bench_trace
from boundary.verify.roundtrip import ClientHabits
from tests.support import family

SEEDED = tau_bench_trace(reasoning="seeded", trajectories=4)


def test_every_turn_with_a_next_request_agrees_with_the_verifier():
    fam = family("qwen3_5")
    run = audit_requests(fam, SEEDED[:12])
    by_session = sessions(SEEDED[:12])
    checked = 0
    for rec in run.records:
        session = by_session[rec.session]
        if rec.turn + 1 >= len(session):
            assert rec.next_common_prefix is None and rec.round_trips is None
            continue
        request, nxt = session[rec.turn], session[rec.turn + 1]
        prompt = fam.render(request.messages, request.tools)
        ids = format_output(fam, prompt, request.output.message).token_ids
        r = fam.verify_round_trip(request.messages, ids, nxt.messages)
        assert rec.next_common_prefix == r.reusable_length
        assert (rec.round_trips, rec.d_end, rec.cause) == (r.round_trips, r.d_end, r.cause and r.cause.value)
        assert rec.checkpoints["decode_end"].reused_by_next == r.round_trips
        checked += 1
    assert checked >= 8


def test_qwen3_5_with_reasoning_the_client_does_not_echo_reuses_input_end_not_d_end():
    run = audit_requests(family("qwen3_5"), SEEDED)
    s = run.summary
    assert s.turns == len(SEEDED) and s.sessions == 4 and s.turns_with_next == len(SEEDED) - 4
    assert s.kinds["decode_end"].rate == 0.0
    assert s.kinds["input_end"].rate > 0.5
    # P_end's state stops before the prompt's last token (``<think>``'s newline): it is reused only
    # where the next request keeps ``<think>`` after the header, and U_end is reused there too
    assert 0 < s.kinds["prompt_end"].reached < s.kinds["input_end"].reached
    assert s.kinds["prompt_end"].mean_reused_tokens < s.kinds["input_end"].mean_reused_tokens
    assert set(s.causes) <= {"hidden_reasoning_dropped", "empty_think_block"}
    assert s.causes["hidden_reasoning_dropped"] > 0
    assert any(age != "1" for age in s.producer_age)  # older U_end checkpoints are reused too
    assert s.mean_reused_tokens >= s.mean_best_of_turn_tokens
    assert s.horizon.rate == 1.0


def test_preserve_thinking_and_an_echoing_client_make_qwen3_6_d_end_round_trip():
    fam = family("qwen3_6")
    settings = AuditSettings(habits=trace_habits(SEEDED))
    base = audit_requests(fam, SEEDED, settings)
    names = [w.name for w in candidates(fam, settings, base)]
    assert names[:2] == ["preserve_thinking=True", "echo reasoning_content"]
    assert "preserve_thinking=True + echo reasoning_content" in names
    runs = {w.name: run_what_if(fam, SEEDED, settings, base, w) for w in candidates(fam, settings, base)}
    both = runs["preserve_thinking=True + echo reasoning_content"]
    assert both.decode_end_rate_gain > 0.5 and both.reused_tokens_gain > 0
    assert set(both.summary.causes) <= {"tool_call_reserialized"}  # tojson spacing of nested arguments
    assert runs["preserve_thinking=True"].summary.kinds["decode_end"].rate == 0.0  # nothing to preserve
    assert not runs["arguments as written"].applicable  # the XML template iterates arguments|items
    assert "template refuses" in runs["arguments as written"].reason


def test_sending_arguments_as_written_makes_qwen3_tool_call_turns_round_trip():
    fam = family("qwen3")
    plain = tau_bench_trace(trajectories=4)
    settings = AuditSettings(habits=trace_habits(plain))
    base = audit_requests(fam, plain, settings)
    assert base.summary.causes.get("tool_call_reserialized", 0) > 0
    what_if = next(w for w in candidates(fam, settings, base) if w.name == "arguments as written")
    done = run_what_if(fam, plain, settings, base, what_if)
    assert "tool_call_reserialized" not in done.summary.causes
    assert done.decode_end_rate_gain > 0


def test_a_client_habit_rewrites_later_copies_of_each_turn_only():
    parsed = {
        ("s", 0): {
            "role": "assistant",
            "content": None,
            "reasoning_content": "why",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
            ],
        }
    }
    sent = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    trace = [
        TraceRequest(session="s", messages=[{"role": "user", "content": "x"}]),
        TraceRequest(
            session="s",
            messages=[
                {"role": "user", "content": "x"},
                sent,
                {"role": "tool", "tool_call_id": "c", "content": "ok"},
            ],
        ),
    ]
    out = with_turns_as_written(trace, parsed, reasoning=True, arguments=True)
    assert out[0] == trace[0]
    assert out[1].messages[1]["reasoning_content"] == "why"
    assert out[1].messages[1]["tool_calls"][0]["function"]["arguments"] == '{"a":1}'


def test_outputs_given_as_text_or_ids_or_taken_from_the_next_request_audit_alike():
    fam = family("qwen3")
    session = tau_bench_trace(trajectories=1)[:3]
    texts, ids, implied = [], [], []
    for r in session:
        out = format_output(fam, fam.render(r.messages), r.output.message)
        texts.append(r.model_copy(update={"output": TextOutput(text=out.text)}))
        ids.append(r.model_copy(update={"output": TokenOutput(token_ids=out.token_ids)}))
        implied.append(r.model_copy(update={"output": None}))
    a, b, c = (audit_requests(fam, t).records for t in (texts, ids, implied))
    strip = [{k: v for k, v in rec.model_dump().items() if k != "output_source"} for rec in a]
    assert strip == [{k: v for k, v in rec.model_dump().items() if k != "output_source"} for rec in b]
    assert strip[:2] == [{k: v for k, v in rec.model_dump().items() if k != "output_source"} for rec in c][:2]
    assert [r.output_source for r in c] == ["next_request", "next_request", "none"]


def test_a_request_the_template_refuses_names_its_session_and_turn():
    bad = [
        TraceRequest(session="s", messages=[{"role": "user", "content": "x"}]),
        TraceRequest(session="s", messages=[{"role": "tool", "tool_call_id": "z", "content": "x"}]),
    ]
    with pytest.raises(RequestError, match=r"session 's' request 1: messages\[0\].tool_call_id"):
        audit_requests(family("qwen3"), bad)


def test_granite_and_nemotron_3_audit_on_their_stand_in_tokenizers():
    for name in ("granite_4_h", "nemotron_3"):
        fam = family(name)
        assert fam.tokenizer.stand_in
        run = audit_requests(fam, SEEDED[:10])
        assert run.summary.turns == 10


def test_habits_are_read_from_the_trace():
    assert trace_habits(SEEDED) == ClientHabits(echo_reasoning=False)
    echoed = tau_bench_trace(reasoning="seeded", echo_reasoning=True, trajectories=1)
    assert trace_habits(echoed).echo_reasoning
