"""Validated tools kept across sessions: an agent sends one tool list with every request of
every conversation, so its validation and its template form are made once per process.

Where it sits: in the session stage, under ``boundary.session.session``, which asks it for a
request's tools by their exact content key (``boundary.request.identity.items_key``).

Invariants: an entry answers only for the exact content it was made from (the key holds the
tools' exact content, key order and value types kept) under one ``strict_request`` and one
render target; its template tools are private deep copies (``template_tools``) that no caller
can reach and nothing changes (templates run in the immutable sandbox), so sessions share them
and their ``tojson`` texts (``KeptJson``). A list that fails validation is never kept: it
raises again on each request. At most ``MAX_ENTRIES`` are kept, least recently used dropped
first; a session keeps its entry alive while it holds it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from boundary.footprint import held_bytes
from boundary.render.sandbox.kept_json import KeptJson
from boundary.render.target import RenderTarget, template_tools
from boundary.request.identity import ContentKey, as_read
from boundary.request.validation import parse_tools

MAX_ENTRIES = 64


@dataclass(frozen=True, slots=True)
class KeptTools:
    """One tool list, validated and in the form its template reads, with its ``tojson`` texts
    as renders make them (``json``, shared by the sessions holding the list); ``nbytes``
    counts the template tools and the key (``held_bytes``), as a session holding them counts
    them."""

    key: tuple[bool, str, ContentKey]  # (strict_request, target name, the tools' content key)
    tools: list[dict[str, Any]]
    nbytes: int
    json: KeptJson


class ToolsMemo:
    """``KeptTools`` by key, shared between threads. Two callers missing one key together may
    both build it (the same value); the first stored is kept."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[bool, str, ContentKey], KeptTools] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, tools: Sequence[Any], key: ContentKey, strict: bool, target: RenderTarget) -> KeptTools:
        """The kept form of ``tools`` (whose content key is ``key``), validated and made
        now if no session of this process kept it; raises the validation error otherwise."""
        full = (strict, target.name, key)
        with self._lock:
            found = self._entries.get(full)
            if found is not None:
                self._entries.move_to_end(full)
                self.hits += 1
                return found
            self.misses += 1
        sent = [as_read(t) for t in tools]
        made = template_tools(target, parse_tools(tools, strict=strict), sent)
        assert made is not None
        built = KeptTools(full, made, held_bytes(made) + held_bytes(full), KeptJson(made))
        with self._lock:
            kept = self._entries.setdefault(full, built)
            self._entries.move_to_end(full)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return kept


TOOLS = ToolsMemo()  # the process's: every session of every family shares it

__all__ = ["MAX_ENTRIES", "TOOLS", "KeptTools", "ToolsMemo"]
