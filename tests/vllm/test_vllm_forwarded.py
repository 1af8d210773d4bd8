"""Forwarded ids behave like prompts vLLM renders itself: truncation and ``max_model_len`` as
vLLM's own ``TokenizeParams`` applies them, the hints of a truncated prompt rejected by a real
scheduler (the prompt length differs), and a router's ``kv_transfer_params`` merged, not
replacing boundary's ids."""

from __future__ import annotations

import json

import pytest
from boundary_vllm.client import chat_request, finished_from_reply, merged_kv_transfer_params
from boundary_vllm.forwarded import forwarded_ids
from boundary_vllm.hints import HintStatus, decode_hints

from boundary.errors import RequestError
from boundary.shipped.datasets import tau_bench_airline
from tests.support import family

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.renderers.params import TokenizeParams

pytestmark = pytest.mark.vllm

MODEL = "Qwen/Qwen3.5-4B"
MAX_MODEL_LEN = 8192


def request(**params):
    return chat_request(
        family("qwen3_5"),
        tau_bench_airline()[11][:4],
        model=MODEL,
        template_kwargs={"enable_thinking": True},
        max_tokens=64,
        **params,
    )


def vllm_received(body: dict) -> tuple[list[int], dict]:
    """The ids and ``extra_args`` vLLM's chat endpoint hands the engine for ``body`` (the ids
    popped from ``kv_transfer_params`` as its online renderer does)."""
    parsed = ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))
    ids = parsed.kv_transfer_params.pop("prompt_token_ids")
    return ids, parsed.to_sampling_params(64, {}).extra_args


def vllm_truncated(ids: list[int], truncate: int, side: str | None) -> list[int]:
    """What vLLM's tokenization step makes of ``ids`` for a prompt it renders itself."""
    params = TokenizeParams(
        max_total_tokens=MAX_MODEL_LEN,
        max_output_tokens=64,
        truncate_prompt_tokens=truncate,
        truncation_side=side,
    )
    return list(params._token_truncation(None, ids))


@pytest.mark.parametrize(("truncate", "side"), [(300, "left"), (300, "right"), (-1, "left"), (5_000, None)])
def test_truncation_cuts_the_forwarded_ids_as_vllm_cuts_a_prompt_it_renders(truncate, side):
    whole = request().rendering.token_ids
    params = {"truncate_prompt_tokens": truncate, **({"truncation_side": side} if side else {})}
    if truncate == -1:  # the context less one token, which needs the context
        whole = list(whole) * (MAX_MODEL_LEN // len(whole) + 1)
        sent = forwarded_ids(whole, max_model_len=MAX_MODEL_LEN, **params)
    else:
        sent = request(**params).body["kv_transfer_params"]["prompt_token_ids"]
    assert sent == vllm_truncated(list(whole), truncate, side)
    assert len(sent) == min(len(whole), MAX_MODEL_LEN - 1 if truncate == -1 else truncate)


def test_the_hints_of_a_truncated_prompt_are_rejected_by_the_scheduler_and_counted():
    """The rendering's hints name the whole prompt: the engine receives 300 tokens, so they are
    ignored after truncation, never applied to other tokens."""
    from boundary_vllm.replay import EngineShape, Replay, ReplayRequest

    req = request(truncate_prompt_tokens=300, truncation_side="left")
    ids, extra_args = vllm_received(req.body)
    assert len(ids) == 300 < len(req.rendering.token_ids)
    hints = decode_hints(extra_args, len(ids))
    assert hints.status is HintStatus.REJECTED
    assert f"computed for {len(req.rendering.token_ids)} prompt tokens but the engine received 300" in str(
        hints.reason
    )
    run = Replay(EngineShape())
    vllm_request = run.request(ReplayRequest(tuple(ids), (1,)))
    vllm_request.sampling_params.extra_args = extra_args
    run.scheduler.add_request(vllm_request)
    assert run.scheduler.boundary_counters.hints["rejected"] == 1
    assert run.scheduler.boundary_retention.plan(vllm_request.request_id) is None


def test_truncation_without_a_side_or_a_context_is_refused_with_the_field_named():
    with pytest.raises(RequestError, match=r"^truncation_side: .*served tokenizer's own"):
        request(truncate_prompt_tokens=300)
    with pytest.raises(RequestError, match=r"^truncate_prompt_tokens: .*pass max_model_len"):
        request(truncate_prompt_tokens=-1, truncation_side="left")
    with pytest.raises(RequestError, match=r"^truncate_prompt_tokens: expected an int >= -1"):
        request(truncate_prompt_tokens=-2)
    assert request(truncate_prompt_tokens=10_000).body["truncate_prompt_tokens"] == 10_000  # nothing cut


def test_a_prompt_past_max_model_len_is_refused_before_it_is_sent():
    whole = request().rendering.token_ids
    with pytest.raises(RequestError, match=rf"^kv_transfer_params.prompt_token_ids: .*{len(whole)} tokens"):
        request(max_model_len=len(whole) - 1)
    assert len(request(max_model_len=len(whole)).body["kv_transfer_params"]["prompt_token_ids"]) == len(whole)


def test_a_record_of_a_truncated_request_holds_the_ids_sent_and_no_u_end():
    req = request(truncate_prompt_tokens=300, truncation_side="right")
    reply = {
        "id": "r",
        "choices": [{"token_ids": [1, 2]}],
        "usage": {"prompt_tokens_details": {"cached_tokens": 0}},
    }
    record = finished_from_reply(req, reply)
    assert list(record.prompt_token_ids) == req.rendering.token_ids[:300]
    assert record.u_end is None


def test_a_router_that_owns_kv_transfer_params_merges_into_them():
    """A disaggregated router's own entries travel beside boundary's ids, and vLLM still takes
    boundary's ids with hints the engine accepts; replacing the field would drop the ids."""
    owned = {"do_remote_prefill": True, "remote_engine_id": "prefill-0"}
    req = request(kv_transfer_params=owned)
    sent = req.body["kv_transfer_params"]
    assert sent == {**owned, "prompt_token_ids": req.rendering.token_ids}
    assert owned == {"do_remote_prefill": True, "remote_engine_id": "prefill-0"}  # the caller's copy
    ids, extra_args = vllm_received(req.body)
    assert ids == req.rendering.token_ids
    assert decode_hints(extra_args, len(ids)).status is HintStatus.ACCEPTED

    # a router forwarding a body boundary built merges its entries the same way
    routed = {**request().body}
    routed["kv_transfer_params"] = merged_kv_transfer_params(
        owned, routed["kv_transfer_params"]["prompt_token_ids"]
    )
    assert vllm_received(routed)[0] == req.rendering.token_ids
    with pytest.raises(RequestError, match="differ from boundary's rendering"):
        merged_kv_transfer_params({"prompt_token_ids": [1, 2, 3]}, req.rendering.token_ids)
