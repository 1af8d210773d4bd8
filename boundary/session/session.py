"""Session-incremental rendering: per-turn cost proportional to what changed.

Where it sits: after the renderer (``boundary.renderer``), whose results it reproduces
incrementally; the ``Family`` facade offers it.

A serving frontend renders every turn of a conversation, and each request repeats the whole
history. ``Session.render`` gives exactly what ``Family.render`` gives for the same request,
but only validates the messages it has not seen (by exact content: key order and value
types kept, see ``boundary.request.identity``) and only tokenizes the text after the last
point where (a) the new text agrees with the previous request's text and (b) the token
stream is provably cut there: a safe cut that the tokenizer's encoder itself declares
(``Tokenizer.cut_rule``, rule in ``boundary.tokenize.segments``) lying at least ``lookahead``
characters inside the shared text. An encoder that declares no safe cut (for instance one
whose added tokens strip any run of whitespace) is simply encoded in full every turn.
Templates that rewrite history (dropping earlier reasoning, injecting a date or a default
system prompt) simply move that point back to where the texts first differ.

The template runs every turn, but its message loop replays the iterations whose inputs are
unchanged (``boundary.session.incremental.store``; ``SessionStats.full_render_reason`` says why a template
runs in full).

``boundary.session.cache.SessionCache`` keeps sessions by id, bounded by a count and by the
bytes they hold (``Session.nbytes``).

Threads: a ``Session`` renders one request at a time under its own lock (a second request of
the same conversation waits for the first) and may be shared by a frontend's threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from boundary.footprint import held_bytes, list_size, set_size
from boundary.offsets import TokenMap
from boundary.render.options import RenderOptions
from boundary.render.sandbox.kept_json import ACTIVE_KEPT_JSON, KeptJson
from boundary.render.target import RenderTarget, resolve_target, template_tools
from boundary.renderer import Renderer, check_arguments
from boundary.request.identity import ContentKey, SeenPrefix, as_read, items_key
from boundary.request.models import Message, Tool
from boundary.request.validation import (
    ArgumentsForm,
    call_ids_of,
    parse_messages,
    parse_messages_or_plain,
    parse_tools,
)
from boundary.session.ids import KeptIds
from boundary.session.incremental.store import Incremental
from boundary.session.kept_tools import TOOLS
from boundary.tokenize.rendering import Rendering
from boundary.tokenize.segments import Clock

# Below this many messages a request runs the template in full: tracing a loop of fewer
# iterations costs more than replaying them saves (on tau-bench and ShareGPT-like chats a
# session re-running the template in full is faster up to 10-19 messages; docs/sessions.md)
MIN_INCREMENTAL_MESSAGES = 16
# A request of fewer messages is validated in full and keeps no message keys: keying a
# message costs about what validating it again does; a session's first such request keeps no
# ids either, so a conversation's first request costs what a cold render does (docs/sessions.md)
MIN_KEYED_MESSAGES = 4
# Bytes counted for a session that holds nothing yet: its objects, the incremental store's
# and the exact-content keyer's (measured with tracemalloc: ``tests/test_session_bytes.py``;
# the keyer is made only at its first key, so an empty session's count errs high).
_EMPTY_SESSION = 8 * 1024


@dataclass(slots=True)
class SessionStats:
    """Counters over a session's renders: how many tokens were kept and how many encoded."""

    requests: int = 0
    reused_tokens: int = 0
    encoded_tokens: int = 0
    revalidated_messages: int = 0
    reused_iterations: int = 0  # message-loop iterations replayed (``boundary.session.incremental.store``)
    chained_iterations: int = 0  # of those, replayed as the loop's unchanged head (one chain)
    rendered_iterations: int = 0
    full_render_reason: str | None = None  # why the last render ran the template in full
    bytes: int = 0  # what the session holds after its last render (``Session.nbytes``)


class Session:
    """Renders the successive requests of one conversation; results equal ``Family.render``.

    A message counts as seen only when its exact content is: each message given is keyed by
    ``boundary.request.identity.item_key`` (key order and value types kept, ``1`` / ``1.0`` /
    ``True`` distinct), taken when it is rendered, so a caller may pass freshly parsed dicts
    every turn or edit earlier message objects in place between turns. Tools are keyed the
    same way, as a whole. Everything kept was validated and normalized under one
    ``(arguments, strict_request, target, variant)`` (the variant chosen: the content format
    vLLM detects is the template's); a call with another starts the messages over, and the
    tools key includes ``strict_request`` and the target.

    Threads: ``render`` holds the session's lock from start to end, the template run
    included, so concurrent requests of one conversation are rendered one after the other,
    each with exactly its cold result. A render that raises part-way leaves state a later
    render reuses only where it is whole: the kept text is emptied before the kept ids are
    cut, and messages are kept only once validated.

    Memory: ``nbytes`` counts what the session holds (see there), kept up to date by each
    render at a cost independent of the conversation's length.
    """

    __slots__ = (
        "_call_ids",
        "_incremental",
        "_keep_ids",
        "_kept",
        "_lock",
        "_min_keyed",
        "_normalized",
        "_normalized_bytes",
        "_parsed_under",
        "_seen",
        "_tools",
        "_tools_bytes",
        "_tools_json",
        "_tools_key",
        "family",
        "nbytes",
        "stats",
    )

    def __init__(
        self,
        family: Renderer,
        *,
        incremental: bool = True,
        min_messages: int = MIN_INCREMENTAL_MESSAGES,
        min_keyed_messages: int = MIN_KEYED_MESSAGES,
    ) -> None:
        """``incremental=False`` runs the template in full on every request; a request of fewer
        than ``min_messages`` messages always does. A request of fewer than
        ``min_keyed_messages`` messages is validated in full and keeps no message keys."""
        self.family = family
        self.stats = SessionStats()
        self._lock = threading.Lock()
        self._seen = SeenPrefix()  # the messages last given, by exact content
        self._call_ids: set[str] = set()  # the tool-call ids ``_normalized`` makes
        self._normalized: list[dict[str, Any]] = []
        self._normalized_bytes = [0]  # [k]: ``held_bytes`` of ``_normalized[:k]``
        # (arguments, strict_request, target, variant) the kept messages were normalized under
        self._parsed_under: tuple[ArgumentsForm | None, bool, str, str] | None = None
        self._min_keyed = min_keyed_messages
        self._tools_key: tuple[bool, str, ContentKey] | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._tools_bytes = 0
        self._tools_json: KeptJson | None = None  # ``tojson`` of ``_tools``, kept while they are
        self._kept = KeptIds(family.tokenizer)  # the last request's text and ids
        self._keep_ids = True  # False for a short first request: its ids are not kept
        self._incremental = Incremental(enabled=incremental, min_messages=min_messages)
        self.nbytes = self._count()

    # The signature is ``Renderer.render``'s, spelled out again (alike by design: a session is a
    # drop-in for the renderer); the work is the renderer's (``render_with_encoder``).
    def render(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        tools: Sequence[Mapping[str, Any] | Tool] | None = None,
        add_generation_prompt: bool | None = None,
        *,
        variant: str | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        sanitize_control_tokens: bool = False,
        arguments: ArgumentsForm | None = None,
        now: datetime | None = None,
        continue_final_message: bool | str = False,
        strict_request: bool = False,
        strict_template_kwargs: bool = False,
        target: str | RenderTarget | None = None,
        **template_kwargs: Any,
    ) -> Rendering:
        """Same signature and result as ``Family.render``: the renderer renders the prepared
        messages, with this session's encoder (``_encode``) in place of a full encode and its
        incremental template run (``boundary.session.incremental.store``) in place of a full run. Holds the
        session's lock throughout."""
        options = RenderOptions(
            add_generation_prompt=add_generation_prompt,
            variant=variant,
            documents=documents,
            sanitize_control_tokens=sanitize_control_tokens,
            arguments=arguments,
            now=now,
            continue_final_message=continue_final_message,
            strict_request=strict_request,
            strict_template_kwargs=strict_template_kwargs,
            target=target,
            template_kwargs=template_kwargs,
        )
        with self._lock:
            try:
                return self._render(messages, tools, options)
            finally:
                self._settle_stats()

    def _render(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        tools: Sequence[Mapping[str, Any] | Tool] | None,
        options: RenderOptions,
    ) -> Rendering:
        """``render``'s work, under the session's lock."""
        fam = self.family
        check_arguments(options.arguments)
        resolved = resolve_target(options.target)
        selected = fam.select_variant(options.variant, tools)
        arguments = options.arguments
        if resolved.family_conventions:
            arguments = arguments or fam.tool_arguments(selected)
        normalized = self._prepare(messages, arguments, options.strict_request, resolved, selected)
        self._prepare_tools(tools, options.strict_request, resolved)
        sanitize = options.sanitize_control_tokens
        if sanitize:  # pieces are encoded apart; nothing here to reuse
            self._kept.clear()
        # set only when it changes what a render reads (a first request without tools: no)
        kept_json = None
        if self._tools_json is not None or ACTIVE_KEPT_JSON.get() is not None:
            kept_json = ACTIVE_KEPT_JSON.set(self._tools_json)
        encoder = self._encode if self._keep_ids else self._encode_alone
        try:
            return fam.render_with_encoder(
                normalized,
                self._tools,
                options,
                encoder=None if sanitize else encoder,
                run=None if sanitize else self._incremental.run_template,
            )
        finally:
            if kept_json is not None:
                ACTIVE_KEPT_JSON.reset(kept_json)

    def _settle_stats(self) -> None:
        """The counters of the render that ended, and ``nbytes``."""
        inc, stats = self._incremental, self.stats
        stats.reused_iterations, stats.rendered_iterations = inc.reused, inc.rendered
        stats.chained_iterations = inc.chained
        stats.full_render_reason = inc.reason
        stats.bytes = self.nbytes = self._count()

    def _count(self) -> int:
        """The bytes counted in ``nbytes``: O(1), from sizes kept as the state changed."""
        return (
            _EMPTY_SESSION
            + self._kept.nbytes
            + self._seen.nbytes
            + self._normalized_bytes[-1]
            + list_size(self._normalized)
            + set_size(self._call_ids)
            + _CALL_ID * len(self._call_ids)
            + self._tools_bytes
            + (self._tools_json.nbytes if self._tools_json is not None else 0)
            + self._incremental.nbytes
        )

    def _prepare(
        self,
        messages: Sequence[Any],
        arguments: ArgumentsForm | None,
        strict: bool,
        target: RenderTarget,
        variant: str,
    ) -> list[dict[str, Any]]:
        """The normalized messages: those whose key matches the one kept at the same index
        (a prefix) are reused, the rest validated and normalized again. A request of fewer
        than ``min_keyed_messages`` keeps none (the next keys them all); if it is the
        session's first, its ids are not kept either (the next encodes in full)."""
        if type(messages) is not list and (
            isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence)
        ):
            parse_messages(messages)  # type: ignore[arg-type]  # raises the usual error
        if (arguments, strict, target.name, variant) != self._parsed_under:
            self._forget_messages()
            self._parsed_under = (arguments, strict, target.name, variant)
        short = len(messages) < self._min_keyed
        self._keep_ids = not short or self.stats.requests > 0
        if short:
            self._forget_messages()
            self.stats.revalidated_messages += len(messages)
            return self._validate(messages, 0, set(), arguments, strict, target, variant)
        keep = min(self._seen.common(messages), len(self._normalized))
        tail = messages[keep:]
        head_ids = self._call_ids if keep == len(self._normalized) else call_ids_of(self._normalized[:keep])
        call_ids = set(head_ids)  # validation adds the tail's to it
        normalized = self._validate(tail, keep, call_ids, arguments, strict, target, variant)
        self._normalized = self._normalized[:keep] + normalized
        del self._normalized_bytes[keep + 1 :]
        _extend_sums(self._normalized_bytes, map(held_bytes, normalized))
        self._call_ids = head_ids | call_ids_of(normalized)
        self._seen.accept()
        self.stats.revalidated_messages += len(tail)
        return list(self._normalized)

    def _forget_messages(self) -> None:
        self._seen.reset()
        self._normalized, self._normalized_bytes, self._call_ids = [], [0], set()

    def _validate(
        self,
        tail: Sequence[Any],
        first_index: int,
        call_ids: set[str],
        arguments: ArgumentsForm | None,
        strict: bool,
        target: RenderTarget,
        variant: str,
    ) -> list[dict[str, Any]]:
        """``tail`` (the request's messages from ``first_index``) validated and normalized;
        adds their tool-call ids to ``call_ids``."""
        if target.family_conventions:
            parsed = parse_messages_or_plain(tail, first_index=first_index, call_ids=call_ids, strict=strict)
            return self.family.normalize_parsed(parsed, arguments, variant=variant, target=target)
        models = parse_messages(tail, first_index=first_index, call_ids=call_ids, strict=strict)
        return self.family.normalize(models, arguments, variant=variant, target=target, sent=tail)

    def _prepare_tools(self, tools: Sequence[Any] | None, strict: bool, target: RenderTarget) -> None:
        """Validate and normalize ``tools`` unless exactly these were, under this ``strict``
        and ``target``, by this session or another of the process (``kept_tools.TOOLS``), whose
        ``tojson`` texts are then replayed (``boundary.render.sandbox.kept_json``)."""
        if tools is None:
            self._tools, self._tools_key, self._tools_bytes, self._tools_json = None, None, 0, None
            return
        key = items_key(tools)
        if key is None:  # no exact key: validated each time, nothing kept
            sent = [as_read(t) for t in tools]
            self._tools = template_tools(target, parse_tools(tools, strict=strict), sent)
            self._tools_key, self._tools_bytes, self._tools_json = None, held_bytes(self._tools), None
        elif (strict, target.name, key) != self._tools_key:
            kept = TOOLS.get(tools, key, strict, target)
            self._tools, self._tools_key, self._tools_bytes = kept.tools, kept.key, kept.nbytes
            self._tools_json = kept.json

    def _encode(self, text: str, clock: Clock | None = None) -> tuple[list[int], TokenMap]:
        """``text``'s ids and token map, the kept ids reused (``KeptIds.encode``), counted."""
        kept, stats = self._kept, self.stats
        ids, token_map = kept.encode(text, clock)
        stats.requests += 1
        stats.reused_tokens += kept.reused
        stats.encoded_tokens += kept.encoded
        return ids, token_map

    def _encode_alone(self, text: str, clock: Clock | None = None) -> tuple[list[int], TokenMap]:
        """A short first request's encode: in full, as a cold render's, nothing kept."""
        if self._kept.text or self._kept.ids:
            self._kept.clear()
        encoded = self.family.tokenizer.encode(text, clock=clock)
        self.stats.requests += 1
        self.stats.encoded_tokens += len(encoded.ids)
        return encoded.ids, encoded.token_map


_CALL_ID = 96  # bytes counted per tool-call id kept: a short str and its set slot


def _extend_sums(sums: list[int], more: Iterable[int]) -> None:
    """Continue the running total ``sums`` over ``more``."""
    total = sums[-1]
    for n in more:
        total += n
        sums.append(total)
