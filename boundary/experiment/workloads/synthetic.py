"""A synthetic generator for scale: sessions rendered at the token level, no template run.

Where it sits: the experiment's request stage, standing in for render and boundaries at the
token level; ``workloads.build_stream`` calls it.

It emulates a ChatML reasoning template token by token (Qwen3.5's rules): a system turn;
user turns; assistant turns that carry a think block only after the last user message
(``history="drop_before_last_user"``), or always (``"append_only"``, Qwen3.6
``preserve_thinking``); tool results in a user turn; the generation prompt
``<|im_start|>assistant\\n<think>\\n``; outputs ``reasoning \\n</think>\\n\\n content <|im_end|>``.
So U_end, P_end and D_end behave as they do with the real template (an output round-trips
exactly when the client echoes reasoning and the next history keeps the think block, which is
the prediction each request carries), and a million requests cost seconds, not hours. Token
ids are seeded draws; lengths are uniform in the ranges given.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from boundary.experiment.stream import Continuation, StreamRequest
from boundary.experiment.workloads.script import ClientBehaviour

IM_START, IM_END, NL, THINK, END_THINK, TOOL_RESPONSE, END_TOOL_RESPONSE = 1, 2, 3, 4, 5, 6, 7
SYSTEM, USER, ASSISTANT = 10, 11, 12
VOCAB = (1000, 150_000)

Range = tuple[int, int]


@dataclass(frozen=True, slots=True)
class SyntheticShape:
    """Sizes in tokens (inclusive ranges); ``tool_calls``: tool calls before each answer."""

    system_tokens: int = 1500
    user_turns: Range = (1, 4)
    tool_calls: Range = (0, 4)
    user_tokens: Range = (20, 200)
    tool_call_tokens: Range = (15, 60)
    tool_result_tokens: Range = (40, 400)
    reasoning_tokens: Range = (40, 300)
    answer_tokens: Range = (20, 250)


@dataclass(slots=True)
class _Turn:
    role: str
    content: bytes  # uint32 token ids
    reasoning: bytes = b""
    tool_call: bool = False


def _tokens(rng: np.random.Generator, span: Range) -> bytes:
    count = int(rng.integers(span[0], span[1] + 1))
    return rng.integers(VOCAB[0], VOCAB[1], size=count, dtype=np.uint32).tobytes()


def _render(system: bytes, turns: list[_Turn], *, keep: bool, history: str) -> tuple[array[int], int]:
    """The prompt for the model call after ``turns``, and its U_end."""
    out = array("I", [IM_START, SYSTEM, NL])
    out.frombytes(system)
    out.extend((IM_END, NL))
    last_user = max((i for i, t in enumerate(turns) if t.role == "user"), default=-1)
    for i, t in enumerate(turns):
        if t.role == "user":
            out.extend((IM_START, USER, NL))
            out.frombytes(t.content)
            out.extend((IM_END, NL))
        elif t.role == "tool":
            out.extend((IM_START, USER, NL, TOOL_RESPONSE, NL))
            out.frombytes(t.content)
            out.extend((NL, END_TOOL_RESPONSE, IM_END, NL))
        else:
            out.extend((IM_START, ASSISTANT, NL))
            if history == "append_only" or i > last_user:
                out.extend((THINK, NL))
                if keep:
                    out.frombytes(t.reasoning)
                out.extend((NL, END_THINK, NL, NL))
            out.frombytes(t.content)
            out.extend((IM_END, NL))
    u_end = len(out)
    out.extend((IM_START, ASSISTANT, NL, THINK, NL))
    return out, u_end


def sessions(
    count: int,
    *,
    seed: int = 0,
    shape: SyntheticShape = SyntheticShape(),
    client: ClientBehaviour = "dropped",
    history: Literal["drop_before_last_user", "append_only"] = "drop_before_last_user",
    shared_system: bool = True,
) -> Iterator[list[StreamRequest]]:
    """``count`` sessions, one list of requests each (``rid`` -1, times 0)."""
    shared = _tokens(np.random.default_rng([seed]), (shape.system_tokens, shape.system_tokens))
    keep = client == "kept"
    for s in range(count):
        rng = np.random.default_rng([seed, s])
        system = shared if shared_system else _tokens(rng, (shape.system_tokens, shape.system_tokens))
        name = f"synthetic_{s:06d}"
        turns: list[_Turn] = []
        requests: list[StreamRequest] = []
        for _ in range(int(rng.integers(shape.user_turns[0], shape.user_turns[1] + 1))):
            turns.append(_Turn("user", _tokens(rng, shape.user_tokens)))
            calls = int(rng.integers(shape.tool_calls[0], shape.tool_calls[1] + 1))
            for call in range(calls + 1):
                tool = call < calls
                reasoning = _tokens(rng, shape.reasoning_tokens)
                content = _tokens(rng, shape.tool_call_tokens if tool else shape.answer_tokens)
                prompt, u_end = _render(system, turns, keep=keep, history=history)
                n = len(prompt)
                prompt.frombytes(reasoning)
                prompt.extend((NL, END_THINK, NL, NL))
                prompt.frombytes(content)
                prompt.append(IM_END)
                previous = turns[-1].role
                continuation = (
                    Continuation.FIRST
                    if not requests
                    else Continuation.TOOL
                    if previous == "tool"
                    else Continuation.USER
                )
                requests.append(
                    StreamRequest(
                        rid=-1,
                        session=name,
                        turn=len(requests),
                        tokens=prompt,
                        num_prompt_tokens=n,
                        u_end=u_end,
                        d_end=len(prompt) - 1,
                        continuation=continuation,
                        tool_call=tool,
                        round_trip=keep and (tool or history == "append_only"),
                    )
                )
                turns.append(_Turn("assistant", content, reasoning, tool))
                if tool:
                    turns.append(_Turn("tool", _tokens(rng, shape.tool_result_tokens)))
        yield requests
