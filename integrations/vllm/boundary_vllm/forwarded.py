"""Forwarded prompt ids held to the rules vLLM applies to a prompt it renders itself.

Where it sits: the frontend end, beside ``client``: ``chat_request`` runs it on the ids it puts in
``kv_transfer_params["prompt_token_ids"]``; it imports nothing of vLLM's.

vLLM feeds forwarded ids straight to the engine: its tokenization step, where
``truncate_prompt_tokens`` and the ``max_model_len`` check run, is skipped (vLLM's
``OnlineRenderer``), so a body whose ids are longer than its truncation would run every token.
Here the same rules run on the ids before they are sent (``TokenizeParams`` of vLLM 0.32 to 0.34):
``truncate_prompt_tokens`` keeps that many tokens from ``truncation_side`` (``-1``: the context
less one token for the output), and a prompt longer than ``max_model_len`` is refused. vLLM's
default side is the served tokenizer's own, which a frontend cannot see, so truncating needs the
side named. Hints computed for the whole rendering no longer match a truncated prompt: the engine
rejects them (``hints.decode_hints``: the prompt length differs) and counts the rejection.
"""

from __future__ import annotations

from collections.abc import Sequence

from boundary.errors import RequestError

SIDES = ("left", "right")  # left: keep the last tokens; right: keep the first ones


def forwarded_ids(
    ids: Sequence[int],
    *,
    truncate_prompt_tokens: int | None = None,
    truncation_side: str | None = None,
    max_model_len: int | None = None,
) -> list[int]:
    """``ids`` as vLLM would run them had it tokenized the prompt itself: truncated as asked,
    refused (``RequestError``) when longer than ``max_model_len`` (None: not checked here)."""
    limit = _truncation_limit(truncate_prompt_tokens, max_model_len)
    out = list(ids)
    if limit is not None and limit < len(out):
        if truncation_side not in SIDES:
            raise RequestError(
                f"truncate_prompt_tokens={truncate_prompt_tokens} cuts this {len(out)}-token prompt, but "
                f"truncation_side is {truncation_side!r}: name 'left' (keep the last tokens) or 'right' "
                "(keep the first); vLLM's default is the served tokenizer's own, which boundary cannot see",
                location="truncation_side",
            )
        out = out[len(out) - limit :] if truncation_side == "left" else out[:limit]
    if max_model_len is not None and len(out) > max_model_len:
        raise RequestError(
            f"the prompt has {len(out)} tokens, more than max_model_len={max_model_len}: vLLM does not "
            "truncate forwarded ids; shorten the conversation or pass truncate_prompt_tokens",
            location="kv_transfer_params.prompt_token_ids",
        )
    return out


def _truncation_limit(truncate: int | None, max_model_len: int | None) -> int | None:
    """The length ``truncate_prompt_tokens`` keeps (None: no truncation)."""
    if truncate is None:
        return None
    if type(truncate) is not int or truncate < -1:
        raise RequestError(f"expected an int >= -1, got {truncate!r}", location="truncate_prompt_tokens")
    if truncate == -1:
        if max_model_len is None:
            raise RequestError(
                "truncate_prompt_tokens=-1 keeps max_model_len - 1 tokens: pass max_model_len (the "
                "served model's context) so boundary can truncate the ids it forwards",
                location="truncate_prompt_tokens",
            )
        return max(0, max_model_len - 1)
    if max_model_len is not None and truncate > max_model_len:
        raise RequestError(
            f"{truncate} cannot be greater than max_model_len = {max_model_len}",
            location="truncate_prompt_tokens",
        )
    return truncate
