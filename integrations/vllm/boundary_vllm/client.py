"""The frontend side: render with boundary, send vLLM exactly those tokens and their boundaries.

    fam = boundary.load_family("qwen3_5")
    req = chat_request(fam, messages, model="Qwen/Qwen3.5-4B", template_kwargs={"enable_thinking": True})
    reply = post_chat("http://localhost:8000", req)

Where it sits: the frontend end of the engine stage, after render and boundaries: it takes a
``Family`` render (U_end, P_end, the horizon of ``boundary.verify.horizon``) and sends it to vLLM;
``boundary_vllm`` re-exports it for users and ``examples/chat_client.py``.

The body is an ordinary ``/v1/chat/completions`` request. ``kv_transfer_params.prompt_token_ids``
makes vLLM skip its own templating and tokenization but still run its reasoning and tool-call
parsers on the output (the messages, tools and ``chat_template_kwargs`` are sent for them);
``vllm_xargs`` carries U_end and P_end to the scheduler, and the inputs of the ``chat_aware``
and ``horizon`` policies: the stability horizon predicted from the prompt (``boundary.verify.horizon``
with no output yet: where the history rewrites the family is known for will cut the next
request) and the round-trip expectation that follows from it (1 when the horizon reaches past
P_end, so the output is expected to stay in history; the engine caps the horizon at D_end).

Recording (``boundary_vllm.recording``): ``session=`` names the conversation, so an engine
that records (``record_path``) writes the request under that session in the audit's JSONL
(a production record); ``record=True`` also asks vLLM for the output ids, so the frontend can
write its own record with ``finished_from_reply`` and a ``TraceRecorder``. Nothing here
imports vLLM.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from boundary.errors import BoundaryError, RequestError
from boundary.family.facade import Family
from boundary.outputs import parse_output
from boundary.tokenize.rendering import Rendering
from boundary.verify.horizon import stability_horizon
from boundary.verify.roundtrip import ClientHabits
from boundary_vllm.forwarded import forwarded_ids
from boundary_vllm.hints import SESSION_KEY, encode_hints
from boundary_vllm.recording import MISS, UNATTRIBUTED, UNKNOWN, FinishedRequest

UNBOUNDED_OUTPUT = 1 << 30  # a horizon past P_end: the output may stay; the engine caps it at D_end


# The Chat Completions fields the OpenAI SDK's ``chat.completions.create`` takes by name (openai
# 1.40 and later); every other body field travels in its ``extra_body``.
OPENAI_CREATE_FIELDS = frozenset(
    {
        "messages",
        "model",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "n",
        "parallel_tool_calls",
        "presence_penalty",
        "response_format",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
    }
)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat-completions body and the rendering its tokens and hints came from."""

    body: dict[str, Any]
    rendering: Rendering
    session: str | None = None

    def openai_arguments(self) -> dict[str, Any]:
        """``client.chat.completions.create(**req.openai_arguments())`` sends exactly ``body``
        (see ``openai_arguments``)."""
        return openai_arguments(self.body)


def openai_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for the OpenAI SDK's ``client.chat.completions.create`` that send
    exactly ``body``: the Chat Completions fields by name (``OPENAI_CREATE_FIELDS``), every
    other field (``kv_transfer_params``, ``vllm_xargs``, ``chat_template_kwargs``,
    ``return_token_ids``, ...) in ``extra_body``, which the SDK merges into the JSON it
    sends. A body that already holds ``extra_body`` is refused (it is not a body field)."""
    if "extra_body" in body:
        raise ValueError("the body holds 'extra_body': give the request body itself, not SDK arguments")
    named = {k: v for k, v in body.items() if k in OPENAI_CREATE_FIELDS}
    extra = {k: v for k, v in body.items() if k not in OPENAI_CREATE_FIELDS}
    return {**named, "extra_body": extra} if extra else named


def chat_request(
    family: Family,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    model: str,
    variant: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    habits: ClientHabits | None = None,
    session: str | None = None,
    record: bool = False,
    max_model_len: int | None = None,
    **params: Any,
) -> ChatRequest:
    """Render ``messages`` once and build the request. ``params`` are further body fields
    (``max_tokens``, ``temperature``, ``stream``...); ``habits``: whether this client sends
    reasoning back (default: it does not), which the horizon depends on. ``session`` and
    ``record``: see the module docstring (``record`` also asks vLLM for the output ids).
    ``truncate_prompt_tokens`` / ``truncation_side`` in ``params`` and ``max_model_len`` are
    applied to the forwarded ids here, as vLLM applies them to a prompt it renders itself
    (``forwarded``): vLLM skips them for forwarded ids."""
    kwargs = dict(template_kwargs or {})
    rendering = family.render(messages, tools, add_generation_prompt=True, variant=variant, **kwargs)
    ids = forwarded_ids(
        rendering.token_ids,
        truncate_prompt_tokens=params.get("truncate_prompt_tokens"),
        truncation_side=params.get("truncation_side"),
        max_model_len=max_model_len,
    )
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages], **params}
    body["kv_transfer_params"] = merged_kv_transfer_params(params.get("kv_transfer_params"), ids)
    horizon = predicted_horizon(family, rendering, messages, habits, variant, kwargs)
    hints = encode_hints(
        rendering.u_end,
        rendering.p_end,
        round_trip=None if horizon is None else float(horizon >= rendering.p_end),
        horizon=None if horizon is None else horizon if horizon < rendering.p_end else UNBOUNDED_OUTPUT,
    )
    if session is not None:
        hints[SESSION_KEY] = session
    if record:
        body.setdefault("return_token_ids", True)
    if hints:
        body["vllm_xargs"] = {**body.get("vllm_xargs", {}), **hints}
    if tools:
        body["tools"] = [dict(t) for t in tools]
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    return ChatRequest(body, rendering, session)


def merged_kv_transfer_params(
    owned: Mapping[str, Any] | None, prompt_token_ids: Sequence[int]
) -> dict[str, Any]:
    """``kv_transfer_params`` holding both a router's own entries (``owned``: a disaggregated
    router's ``do_remote_prefill``, ``remote_engine_id``...) and boundary's forwarded ids. A
    router that sets the field must merge into it, never replace it: without
    ``prompt_token_ids`` vLLM renders the messages itself and the hints, computed for boundary's
    ids, are checked against other tokens. Different ids already in ``owned`` are refused."""
    merged = dict(owned or {})
    theirs = merged.get("prompt_token_ids")
    if theirs is not None and list(theirs) != list(prompt_token_ids):
        raise RequestError(
            "the router's prompt_token_ids differ from boundary's rendering: send one or the other",
            location="kv_transfer_params.prompt_token_ids",
        )
    merged["prompt_token_ids"] = list(prompt_token_ids)
    return merged


def finished_from_reply(
    request: ChatRequest, reply: Mapping[str, Any], *, arrival_s: float | None = None
) -> FinishedRequest:
    """The frontend's record of one answered request (for ``TraceRecorder.submit``): the output
    ids vLLM returned (``return_token_ids``), the cached prompt tokens it reported as the hit;
    which checkpoint served it only the engine knows (``served`` is ``unattributed``, or
    ``miss`` when it reported 0 cached tokens). A reply without
    ``usage.prompt_tokens_details.cached_tokens`` (vLLM started without
    ``--enable-prompt-tokens-details``) is recorded as ``unknown`` with no hit, never as a
    miss. ``arrival_s``: when the frontend sent the request (Unix seconds, ``time.time()``),
    recorded as the line's arrival time."""
    choice = reply["choices"][0]
    cached = reported_cached_tokens(reply)
    served = UNKNOWN if cached is None else UNATTRIBUTED if cached else MISS
    rendering = request.rendering
    sent = request.body["kv_transfer_params"]["prompt_token_ids"]
    return FinishedRequest(
        session=request.session or str(reply.get("id", "unknown")),
        prompt_token_ids=sent,
        output_token_ids=choice.get("token_ids") or [],
        u_end=rendering.u_end if len(sent) == len(rendering.token_ids) else None,  # None: truncated
        d_end=None,
        hit_tokens=cached,
        served=served,
        policy=None,
        arrival_s=arrival_s,
        session_named=request.session is not None,
    )


def reported_cached_tokens(reply: Mapping[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` of a chat-completions reply (None: not
    reported, as vLLM does without ``--enable-prompt-tokens-details``); a value that is not a
    non-negative int is a ``ValueError``."""
    usage = reply.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is None:
        return None
    if type(cached) is not int or cached < 0:
        raise ValueError(
            f"usage.prompt_tokens_details.cached_tokens: expected a non-negative int, got {cached!r}"
        )
    return cached


def predicted_horizon(
    family: Family,
    rendering: Rendering,
    messages: Sequence[Mapping[str, Any]],
    habits: ClientHabits | None,
    variant: str | None,
    template_kwargs: Mapping[str, Any],
) -> int | None:
    """The stability horizon of the request before any output exists (None: not predicted)."""
    try:
        parsed = parse_output(family, [], rendering, variant=variant)
        return stability_horizon(
            family,
            rendering,
            [],
            parsed,
            messages,
            habits=habits or ClientHabits(echo_reasoning=False),
            variant=variant,
            template_kwargs=template_kwargs,
        ).position
    except BoundaryError:
        return None


def post_chat(
    base_url: str, request: ChatRequest, *, timeout: float = 600.0, api_key: str | None = None
) -> Any:
    """POST the body to ``{base_url}/v1/chat/completions`` and return the decoded JSON reply."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    http_request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(request.body).encode("utf-8"),
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(http_request, timeout=timeout) as response:
        return json.load(response)
