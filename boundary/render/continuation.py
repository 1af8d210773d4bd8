"""``continue_final_message``: rendering the final message open for the model to continue.

Where it sits: in the render stage, around ``boundary.render.template_run.run_template`` — it edits the
validated messages before the render and cuts the ``TextRendering`` after it, exactly as
transformers' ``render_jinja_template`` does: the final message's text gets a tag appended,
the chat is rendered, and the text is cut where the tag begins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from boundary.errors import RequestError, TemplateRenderError
from boundary.offsets import CharOffset, Span
from boundary.render.marks import TextRendering

CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def generation_prompt(add_generation_prompt: bool | None, continue_final_message: bool | str) -> bool:
    """``add_generation_prompt`` as given, or by default ``not continue_final_message``."""
    if add_generation_prompt is None:
        return not continue_final_message
    if add_generation_prompt and continue_final_message:
        raise RequestError(
            "continue_final_message and add_generation_prompt are not compatible: continue the final "
            "message, or prompt a new assistant message",
            location="continue_final_message",
        )
    return add_generation_prompt


def open_final_message(
    messages: Sequence[Mapping[str, Any]], continue_final_message: bool | str, source: str
) -> tuple[list[Mapping[str, Any]], str]:
    """The messages with the tag after the final message's text (the last text part of a list),
    and that text; the given messages are not modified. Refuses what transformers refuses."""
    field = continue_final_message if isinstance(continue_final_message, str) else "content"
    if not messages:
        raise RequestError("continue_final_message: there is no final message", location="messages")
    where = f"messages[{len(messages) - 1}].{field}"
    last = dict(messages[-1])
    value = last.get(field)
    if value is None:
        raise RequestError(
            f"continue_final_message: the final message has no {field!r} to continue", location=where
        )
    if field not in source:
        raise RequestError(
            f"continue_final_message: the chat template never mentions {field!r}",
            location="continue_final_message",
        )
    if isinstance(value, (list, tuple)):
        parts = [dict(p) if isinstance(p, Mapping) else p for p in value]
        for part in reversed(parts):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                final = part["text"]
                part["text"] = final + CONTINUE_TAG
                break
        else:
            raise RequestError(
                "continue_final_message: the final message has no text part to continue", location=where
            )
        last[field] = parts
    elif isinstance(value, str):
        final = value
        last[field] = value + CONTINUE_TAG
    else:
        raise RequestError(
            f"continue_final_message: expected text, got {type(value).__name__}", location=where
        )
    return [*messages[:-1], last], final


def cut_after_final_message(rendered: TextRendering, final: str) -> TextRendering:
    """``rendered`` cut where transformers cuts it (at the tag; before trailing whitespace if the
    template trimmed the tag's space), with ``input_end`` moved to the final message's start,
    never beyond the generation-prompt probe's position."""
    text = rendered.text
    tag = CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise TemplateRenderError(
            "continue_final_message: the template drops part of the final message, so it cannot be continued",
            location="template",
        )
    at = text.rindex(tag)
    cut_text = text[:at] if text[at : at + len(CONTINUE_TAG)] == CONTINUE_TAG else text[:at].rstrip()
    cut = len(cut_text)
    start = rendered.message_starts[-1] if rendered.message_starts else None
    if rendered.input_end is None:
        input_end, reason = None, rendered.input_end_reason
    elif start is None:
        input_end = None
        reason = (
            "the template's message loop never began the final message, "
            "so where the continued message starts is unknown"
        )
    else:
        input_end, reason = CharOffset(min(start, rendered.input_end, cut)), None
    starts = tuple(s if s is None or s <= cut else None for s in rendered.message_starts)
    spans = tuple(
        Span(s.start, CharOffset(min(s.end, cut))) for s in rendered.generation_spans if s.start < cut
    )
    return TextRendering(cut_text, input_end, reason, starts, spans, rendered.deadline)
