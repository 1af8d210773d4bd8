"""Request streams from real conversations: what a serving engine sees, turn by turn.

Where it sits: the request and render stages for the engine end: it renders conversations with a
``Family`` (render, boundaries, ``boundary.outputs``) into request streams; ``replay``,
``scenarios``, the benchmarks of the vLLM plugin and ``integrations/vllm/gpu_check.py`` read them.

For each assistant message of a conversation, the request is the history before it rendered
with the generation prompt (token ids, U_end, P_end), and the model's output is that message as
the model itself emits it after that prompt (``boundary.outputs.format_output``: its reasoning
framing, tool-call syntax, stop token). The next request then renders the history with the
message in it, as the template rewrites it, so whether P_end, U_end or D_end are a prefix of the
next request is decided by the real template and tokenizer, never assumed.

The shipped conversations carry no reasoning; ``with_reasoning`` adds a short deterministic
reasoning text to every assistant message (derived from the turn, the same on every run), for
workloads that need reasoning turns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from boundary.family.facade import Family
from boundary.outputs import GeneratedOutput, format_output
from boundary.tokenize.rendering import Rendering


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a conversation: its prompt and the model's output for it.

    ``index`` is the assistant message this request generates; ``next_role`` the role of the
    message after it (None at the end of the conversation).
    """

    index: int
    next_role: str | None
    prompt: Rendering
    output: GeneratedOutput

    @property
    def tokens(self) -> list[int]:
        """Prompt and output ids: everything the engine holds when the request finishes."""
        return [*self.prompt.token_ids, *self.output.token_ids]


def with_reasoning(conversation: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with a ``reasoning_content`` on every assistant message, derived from the
    message before it and from what the assistant does (calls tools or answers)."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(conversation):
        m = dict(message)
        if m.get("role") == "assistant" and not m.get("reasoning_content"):
            before = conversation[i - 1] if i else {}
            words = " ".join(str(before.get("content") or "").split()[:12])
            calls = [c["function"]["name"] for c in m.get("tool_calls") or ()]
            plan = f"I will call {', '.join(calls)}." if calls else "I can answer directly."
            m["reasoning_content"] = f"The {before.get('role', 'user')} message says: {words}. {plan}"
        out.append(m)
    return out


def conversation_turns(
    family: Family,
    conversation: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    variant: str | None = None,
    **template_kwargs: Any,
) -> list[Turn]:
    """Every assistant turn of ``conversation`` as a request and its output, in order."""
    messages = [dict(m) for m in conversation]
    turns = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or i == 0:
            continue
        prompt = family.render(
            messages[:i], tools, add_generation_prompt=True, variant=variant, **template_kwargs
        )
        output = format_output(family, prompt, message, variant=variant)
        next_role = messages[i + 1]["role"] if i + 1 < len(messages) else None
        turns.append(Turn(i, next_role, prompt, output))
    return turns
