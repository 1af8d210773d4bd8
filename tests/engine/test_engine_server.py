"""The served path: vLLM's OpenAI server (CPU build) started with the README's flags and boundary's
scheduler, driven over HTTP by boundary's client (``chat_request`` + ``post_chat``), by the
``openai`` SDK (``openai_arguments``) and by plain chat requests only the server renders
(``server_family``), streaming and not.

One server for the module; ``served`` sends every request once, one at a time, in a fixed order,
and the tests read what came back: hits equal the cache model's prediction for that order,
outputs equal a from-scratch pass, ``/metrics`` carries boundary's counters, the server's
recording replays with ``boundary experiment``, forwarded ids are truncated (their hints then
ignored) or refused past ``max_model_len``.

The from-scratch pass runs on the same server, each request with a ``cache_salt`` of its own (the
salt enters the first block's hash, so those requests neither read nor feed the served ones'
cache) and one at a time as the served pass, so the two differ by the reused prefix alone; a
second server with caching off would cost another start-up for the same comparison.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from boundary.checkpoints.retention import Variant
from boundary.cli.main import main as boundary_main
from boundary.shipped.datasets import tau_bench_airline
from boundary.trace.reader import read_recording
from boundary.trace.writer import TraceWriter
from tests.engine.server import Samples, Server, documented_flags, total
from tests.support import family

pytestmark = pytest.mark.engine

THINKING = {"enable_thinking": True}
SAMPLING = {"max_tokens": 4, "temperature": 0.0, "logprobs": True, "top_logprobs": 2}
# (conversation, messages, how it is sent); each request ends on a user turn or a tool result
SESSIONS = ((11, 6, "client"), (0, 8, "sdk"), (3, 6, "plain"))
REFERENCE, TRUNCATED, FLUSH = "reference", "truncated", "flush"  # sessions outside the served pass
TRUNCATE_TO = 300
RECORD = "served.jsonl"  # the server's recording, in its directory


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request as sent and answered. ``input_end``: the hint sent, or (plain requests) the
    U_end boundary renders for the same messages, which the server derives."""

    session: str
    body: dict[str, Any]
    prompt_token_ids: tuple[int, ...]
    input_end: int | None
    round_trip: float | None
    horizon: int | None
    output_token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    margins: tuple[float, ...]
    cached: int | None
    stopped: bool  # finish_reason "stop": the last output token is a stop token
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class Served:
    exchanges: list[Exchange]  # the served pass, in the order sent
    references: list[Exchange]  # the same requests from scratch, in the same order
    truncated: Exchange
    flush: Exchange
    refused: tuple[int, str]  # HTTP status and body of the over-long forwarded prompt
    metrics: Samples  # /metrics after everything above
    seconds: dict[str, float]


def prefixes(conversation: int, messages: int) -> list[list[dict]]:
    conv = tau_bench_airline()[conversation][:messages]
    return [conv[: k + 1] for k, m in enumerate(conv) if m["role"] in ("user", "tool")]


def exchange(
    session: str, body: Mapping[str, Any], reply: Mapping[str, Any], prompt_ids: Sequence[int]
) -> Exchange:
    """An exchange from a non-streamed reply (or a streamed one assembled by ``assembled``)."""
    from boundary_vllm.client import reported_cached_tokens

    choice = reply["choices"][0]
    steps = (choice.get("logprobs") or {}).get("content") or []
    hints = body.get("vllm_xargs") or {}
    rendered = family("qwen3_5").render(body["messages"], add_generation_prompt=True, **THINKING)
    return Exchange(
        session=session,
        body=dict(body),
        prompt_token_ids=tuple(prompt_ids),
        input_end=hints.get("boundary_input_end", rendered.u_end),
        round_trip=hints.get("boundary_round_trip"),
        horizon=hints.get("boundary_horizon"),
        output_token_ids=tuple(choice["token_ids"]),
        logprobs=tuple(s["logprob"] for s in steps),
        margins=tuple(s["top_logprobs"][0]["logprob"] - s["top_logprobs"][1]["logprob"] for s in steps),
        cached=reported_cached_tokens(reply),
        stopped=choice["finish_reason"] == "stop",
        prompt_tokens=reply["usage"]["prompt_tokens"],
    )


def assembled(chunks: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[int]]:
    """A streamed answer as one reply (token ids, logprobs, finish reason, usage) and its prompt ids."""
    content: list[dict] = []
    token_ids: list[int] = []
    finish = None
    for chunk in chunks:
        for choice in chunk["choices"]:
            token_ids += choice.get("token_ids") or []
            content += (choice.get("logprobs") or {}).get("content") or []
            finish = choice.get("finish_reason") or finish
    choice = {"token_ids": token_ids, "logprobs": {"content": content}, "finish_reason": finish}
    prompt = next(c["prompt_token_ids"] for c in chunks if c.get("prompt_token_ids"))
    return {"choices": [choice], "usage": chunks[-1]["usage"]}, prompt


def post(server: Server, body: Mapping[str, Any]) -> dict[str, Any]:
    """A plain JSON POST to the chat endpoint (a client that is not boundary's)."""
    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def sdk_create(client: Any, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """``chat.completions.create(**arguments)`` with the ``openai`` package, streamed or not."""
    if not arguments.get("stream"):
        reply = client.chat.completions.create(**arguments).model_dump()
        return reply, reply["prompt_token_ids"]
    return assembled([chunk.model_dump() for chunk in client.chat.completions.create(**arguments)])


def send(server: Server, client: Any, how: str, messages: list[dict], stream: bool) -> Exchange:
    """One request of the served pass, sent the way ``how`` names."""
    from boundary_vllm.client import chat_request, post_chat

    if how == "plain":  # no boundary field: the server renders, the scheduler derives U_end
        body = {"model": server.model, "messages": messages, "chat_template_kwargs": THINKING, **SAMPLING}
        streaming = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        arguments = {**{k: v for k, v in body.items() if k != "chat_template_kwargs"}, **streaming}
        arguments["extra_body"] = {"chat_template_kwargs": THINKING, "return_token_ids": True}
        reply, prompt = sdk_create(client, arguments)
        return exchange(how, body, reply, prompt)
    streaming = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    req = chat_request(
        family("qwen3_5"),
        messages,
        model=server.model,
        template_kwargs=THINKING,
        session=how,
        record=True,
        **SAMPLING,
        **(streaming if how == "sdk" else {}),
    )
    if how == "client":
        return exchange(how, req.body, post_chat(server.url, req), req.rendering.token_ids)
    reply, prompt = sdk_create(client, req.openai_arguments())
    return exchange(how, req.body, reply, prompt)


def salted(server: Server, body: Mapping[str, Any], salt: str, session: str) -> Exchange:
    """``body`` sent with a cache salt of its own, not streamed, recorded under ``session``:
    computed from scratch."""
    sent = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    sent |= {"cache_salt": salt, "return_token_ids": True}
    sent["vllm_xargs"] = {**sent.get("vllm_xargs", {}), "boundary_session": session}
    if "kv_transfer_params" in sent:
        sent["kv_transfer_params"] = {**sent["kv_transfer_params"]}  # vLLM pops the ids it reads
    reply = post(server, sent)
    return exchange(session, sent, reply, reply["prompt_token_ids"])


@pytest.fixture(scope="module")
def server(engine_model, tmp_path_factory):
    directory = tmp_path_factory.mktemp("server")
    settings = {
        "policy": "both",
        "server_family": "qwen3_5",
        "record_path": str(directory / RECORD),
        "log_interval_s": 0,
    }
    running = Server.start(engine_model, directory, settings)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def served(server):
    """Every request, once, one at a time: the served pass, the from-scratch pass, a truncated and
    an over-long forwarded prompt, then one request after the metrics' 1 s export interval so
    ``/metrics`` holds every count."""
    import openai
    from boundary_vllm.client import chat_request

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    began = time.monotonic()
    exchanges = [
        send(server, client, how, messages, stream=how != "client" and k % 2 == 1)
        for conversation, count, how in SESSIONS
        for k, messages in enumerate(prefixes(conversation, count))
    ]
    seconds = {"served": time.monotonic() - began}
    references = [salted(server, e.body, f"{REFERENCE}-{k}", REFERENCE) for k, e in enumerate(exchanges)]
    seconds["from scratch"] = time.monotonic() - began - seconds["served"]
    req = chat_request(
        family("qwen3_5"),
        prefixes(0, 8)[-1],
        model=server.model,
        template_kwargs=THINKING,
        truncate_prompt_tokens=TRUNCATE_TO,
        truncation_side="left",
        **SAMPLING,
    )
    truncated = salted(server, req.body, TRUNCATED, TRUNCATED)
    over = {k: v for k, v in req.body.items() if k not in ("truncate_prompt_tokens", "truncation_side")}
    over["kv_transfer_params"] = {"prompt_token_ids": req.rendering.token_ids * 8}
    try:
        post(server, over)
        refused = (200, "")
    except urllib.error.HTTPError as error:
        refused = (error.code, error.read().decode("utf-8", errors="replace"))
    time.sleep(1.2)  # past the export interval: the next step exports every count
    flush = salted(server, exchanges[0].body, FLUSH, FLUSH)
    return Served(exchanges, references, truncated, flush, refused, server.metrics(), seconds)


def everything(served: Served) -> list[Exchange]:
    return [*served.exchanges, *served.references, served.truncated, served.flush]


def test_the_server_runs_the_readme_flags_with_the_one_scheduler_class(server, served):
    flags = documented_flags()
    assert flags[flags.index("--scheduler-cls") + 1] == "boundary_vllm.scheduler.AutoBoundaryScheduler"
    assert "--enable-prompt-tokens-details" in flags
    assert server.command[5 : 5 + len(flags)] == flags  # after `-m ENTRY_POINT --model MODEL`, as written
    log = server.log_text()
    assert "boundary checkpoints: policy=both, active" in log  # the CPU build's sync engine, its class
    assert "metrics cannot be exported" not in log
    print(f"server tier: start {server.start_s:.1f} s, {served.seconds}")


def test_every_reply_reports_cached_tokens_and_the_server_renders_plain_requests_as_boundary(served):
    assert all(e.cached is not None for e in everything(served))  # --enable-prompt-tokens-details
    for e in served.exchanges:
        rendered = family("qwen3_5").render(e.body["messages"], add_generation_prompt=True, **THINKING)
        assert e.prompt_token_ids == tuple(rendered.token_ids)
        assert e.prompt_tokens == len(e.prompt_token_ids) and len(e.output_token_ids) >= 1
    assert {e.session for e in served.exchanges} == {"client", "sdk", "plain"}
    assert {bool(e.body.get("stream")) for e in served.exchanges if e.session != "client"} == {True, False}


def predicted(server: Server, served: Served) -> list[int]:
    """The cache model's hit per served request, fed the order they were sent (one at a time) and
    the geometry the server's recording header gives."""
    from boundary_vllm.prediction import ModelShape, Observed, predicted_hits

    header, _ = read_recording(server.directory / RECORD)
    assert header is not None
    g = header.geometry
    shape = ModelShape(
        g.block_size,
        g.prefix_match_unit,
        page_bytes=g.page_bytes,
        attention_groups=g.attention_groups,
        recurrent_groups=g.recurrent_groups,
    )
    observed = [
        Observed(
            e.prompt_token_ids,
            e.output_token_ids,
            e.input_end,
            e.output_token_ids[-1:] if e.stopped else (),
            e.round_trip,
            e.horizon,
            admitted=2 * k,
            finished=2 * k + 1,
            steps=(),
        )
        for k, e in enumerate(served.exchanges)
    ]
    return predicted_hits([observed], Variant.BOTH, shape)[0]


def test_served_hits_equal_the_cache_models_prediction(server, served):
    """Every request is served exactly the predicted hit, a conversation's first one included
    (its system prompt's block-aligned state, kept by an earlier conversation's request)."""
    hits = [e.cached for e in served.exchanges]
    assert hits == predicted(server, served)
    block = read_recording(server.directory / RECORD)[0].geometry.block_size
    assert any(h and h % block for h in hits)  # sub-block states served (U_end's)
    assert any(h and h % block == 0 for h in hits)  # block-aligned states served (P_end's floor)
    for how in ("client", "sdk", "plain"):  # every way of sending reuses states
        assert any(e.cached for e in served.exchanges if e.session == how)


def test_the_block_size_the_cpu_builds_handshake_resets_is_restored(server, served):
    """The CPU build re-applies its platform defaults after the engine core's start-up
    (``compat`` note [3]); the plugin puts the resolved block back, says so once, and the
    recording's header carries the resolved block."""
    from boundary_vllm.compat import DIFF

    header, _ = read_recording(server.directory / RECORD)
    assert header is not None and header.geometry.block_size % 128 == 0
    warnings = [line for line in server.log_text().splitlines() if "reset the block size" in line]
    if DIFF.handshake_resets_block_size:
        assert len(warnings) == 1 and f"restored to {header.geometry.block_size}" in warnings[0]
    else:
        assert warnings == []


def test_outputs_equal_a_from_scratch_pass(served):
    from boundary_vllm.engine_run import EngineOutcome
    from boundary_vllm.output_comparison import compare_outputs, tolerance_for

    def outcome(e: Exchange) -> EngineOutcome:
        return EngineOutcome("", e.cached or 0, e.output_token_ids, e.logprobs, e.margins, 0.0, None)

    tolerance = tolerance_for(0.0)  # one request at a time: no batching noise, the floor
    assert all(r.cached == 0 for r in served.references)
    bad = [
        f"request {k} ({e.session}, hit {e.cached}): {c}"
        for k, (e, r) in enumerate(zip(served.exchanges, served.references, strict=True))
        if not (c := compare_outputs(outcome(e), outcome(r), tolerance)).agrees(tolerance)
    ]
    assert not bad


def test_metrics_carry_boundarys_counters(served):
    m, sent = served.metrics, everything(served)
    assert total(m, "boundary_prefix_hit_tokens_total") == sum(e.cached or 0 for e in sent)
    assert total(m, "boundary_prefix_hit_tokens_total") == total(m, "vllm:prompt_tokens_cached_total")
    plain = [e for e in sent if "kv_transfer_params" not in e.body]
    assert total(m, "boundary_requests_total", hints="derived") == len(plain)
    assert total(m, "boundary_requests_total", hints="accepted") == len(sent) - len(plain) - 1
    assert total(m, "boundary_requests_total", hints="rejected") == 1  # the truncated prompt's
    assert total(m, "boundary_prefix_hits_total", kind="input_end") > 0


def test_the_servers_recording_replays_with_the_cli_to_the_served_hits(server, served, tmp_path):
    header, records = read_recording(server.directory / RECORD)
    kept = [r for r in records if r.session not in (REFERENCE, TRUNCATED, FLUSH)]
    assert [r.hit_tokens for r in kept] == [e.cached for e in served.exchanges]
    path, out = tmp_path / "served.jsonl", tmp_path / "experiment.json"
    with TraceWriter(path, header=header) as writer:
        for record in kept:
            writer.write(record)
    args = ["experiment", "--workload", str(path), "--policies", "both", "--budget", "equal_capacity"]
    assert boundary_main([*args, "--eviction", "byte_lru", "--no-cache", "--json", str(out)]) == 0
    (unit,) = json.loads(out.read_text())["units"]
    assert (unit["block_size"], unit["unit"]) == (
        header.geometry.block_size,
        header.geometry.prefix_match_unit,
    )
    (both,) = unit["runs"]
    hits = [e.cached or 0 for e in served.exchanges]
    assert sum(hits) > 0
    assert both["joint_matched_tokens"] == sum(hits)


def test_forwarded_ids_are_truncated_as_asked_and_their_hints_then_ignored(server, served):
    truncated = served.truncated
    whole = family("qwen3_5").render(truncated.body["messages"], add_generation_prompt=True, **THINKING)
    assert truncated.prompt_tokens == TRUNCATE_TO < len(whole.token_ids)  # before: every token ran
    assert truncated.prompt_token_ids == tuple(whole.token_ids[-TRUNCATE_TO:])  # truncation_side="left"
    log = server.log_text()
    assert "boundary hints ignored" in log and f"the engine received {TRUNCATE_TO}" in log


def test_forwarded_ids_past_max_model_len_are_refused_not_run(served):
    status, text = served.refused
    assert status == 400, text
    assert "8192" in text
