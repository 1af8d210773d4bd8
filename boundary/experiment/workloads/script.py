"""A session script: a whole conversation whose assistant messages are model calls.

Where it sits: the experiment's request stage, under every workload: the shared transforms they
call before ``rendering``.

Workloads produce scripts; ``rendering`` turns each assistant message into one request (the
history before it, rendered with the generation prompt, and the tokens the model generated).
Here: the transforms every workload shares, each seeded by the session so a stream is
reproducible: a per-session system prompt, synthetic reasoning on assistant turns, and the
client's handling of reasoning in the history it sends back.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, Any]
ClientBehaviour = Literal["kept", "dropped"]
SystemPromptMode = Literal["shared", "per_session", "head_rewrite"]


@dataclass(frozen=True, slots=True)
class SessionScript:
    """``messages``: the full conversation (OpenAI format); ``tools``: its function tools;
    ``synthesised``: which parts a workload made up (reported in the stream's provenance)."""

    name: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    synthesised: tuple[str, ...] = field(default=())


def session_rng(seed: int, session: str, purpose: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x00{session}\x00{purpose}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def with_own_system_prompt(script: SessionScript, seed: int) -> SessionScript:
    """Give the session a system prompt no other session shares: a reference line first in
    the system message (a new system message when there is none)."""
    tag = session_rng(seed, script.name, "system").getrandbits(64)
    line = f"Conversation reference: {tag:016x}."
    messages = [dict(m) for m in script.messages]
    if messages and messages[0]["role"] == "system" and isinstance(messages[0].get("content"), str):
        messages[0]["content"] = f"{line}\n\n{messages[0]['content']}"
    else:
        messages.insert(0, {"role": "system", "content": line})
    return SessionScript(script.name, messages, script.tools, script.synthesised)


def with_head_note(history: Sequence[Message], turn: int) -> list[Message]:
    """``history`` as a client that rewrites the head of the prompt every request sends it: a
    note for request ``turn`` appended to the leading system message (a new one when there is
    none), as a coding agent's per-turn system note folded into the system block by its
    frontend. Everything after the note is new text to the cache on every request."""
    note = f"Workspace status for request {turn}: {turn % 7 + 1} files changed since the last request."
    messages = [dict(m) for m in history]
    if messages and messages[0]["role"] == "system" and isinstance(messages[0].get("content"), str):
        messages[0]["content"] = f"{messages[0]['content']}\n\n{note}"
    else:
        messages.insert(0, {"role": "system", "content": note})
    return messages


_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{1,}")
_OPENERS = ("Let me", "First,", "The user", "I need to", "Next,", "So", "Checking", "Now", "Wait,", "Then")


def synthetic_reasoning(rng: random.Random, vocabulary: Sequence[str], words: tuple[int, int]) -> str:
    """Seeded stand-in reasoning: sentences of words from the conversation itself, a length
    drawn uniformly from ``words``. No dataset here carries real reasoning text."""
    count = rng.randint(*words)
    sentences, sentence = [], [rng.choice(_OPENERS)]
    for _ in range(count):
        sentence.append(rng.choice(vocabulary))
        if len(sentence) >= rng.randint(8, 18):
            sentences.append(" ".join(sentence) + ".")
            sentence = [rng.choice(_OPENERS)]
    if len(sentence) > 1:
        sentences.append(" ".join(sentence) + ".")
    return " ".join(sentences)


def with_reasoning(script: SessionScript, seed: int, words: tuple[int, int]) -> SessionScript:
    """Every assistant message gets ``reasoning_content`` (kept if it already has one)."""
    text = " ".join(m["content"] for m in script.messages if isinstance(m.get("content"), str))
    vocabulary = _WORD.findall(text) or ["step"]
    rng = session_rng(seed, script.name, "reasoning")
    messages = []
    for m in script.messages:
        m = dict(m)
        if m["role"] == "assistant" and not m.get("reasoning_content"):
            m["reasoning_content"] = synthetic_reasoning(rng, vocabulary, words)
        messages.append(m)
    return SessionScript(script.name, messages, script.tools, (*script.synthesised, "reasoning"))


def client_history(messages: Sequence[Message], client: ClientBehaviour) -> list[Message]:
    """The history a client sends back: assistant reasoning kept, or dropped (what most
    OpenAI-compatible clients do: they resend ``content`` and ``tool_calls`` only)."""
    if client == "kept":
        return [dict(m) for m in messages]
    out = []
    for m in messages:
        if m["role"] == "assistant" and "reasoning_content" in m:
            m = {k: v for k, v in m.items() if k != "reasoning_content"}
        out.append(dict(m))
    return out
