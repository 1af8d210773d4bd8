"""Checks a template maintainer runs in their own pytest suite: does the template expose U_end,
and does every request extend the previous one up to it?

Where it sits: beside the audit: assertions over ``boundary.audit.template_check`` (which
renders each request of a corpus through a ``Family`` or ``Renderer``); a maintainer's tests
call it, nothing in the library imports it.

    from boundary import Family
    from boundary.testing import assert_exposes_u_end, assert_renders_append_only, builtin_conversations

    fam = Family.from_pretrained("path/to/model")
    conversations = builtin_conversations()
    assert_exposes_u_end(fam, conversations)
    assert_renders_append_only(fam, conversations, allow=declared_rewrites(fam))

A *request* is a conversation prefix that ends before an assistant turn (and the whole
conversation when it does not end with one), rendered with the generation prompt on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from boundary.audit.template_check import RequestCheck, TemplateCheck, check, requests_of
from boundary.audit.template_corpus import CorpusEntry, builtin_corpus
from boundary.family.facade import Family
from boundary.renderer import Renderer
from boundary.verify.horizon import active_rewrites

__all__ = [
    "CorpusEntry",
    "RequestCheck",
    "TemplateCheck",
    "assert_exposes_u_end",
    "assert_renders_append_only",
    "builtin_conversations",
    "builtin_corpus",
    "check",
    "declared_rewrites",
    "requests_of",
]

Corpus = Sequence[CorpusEntry | Sequence[Mapping[str, Any]]]


def builtin_conversations(limit: int | None = None) -> list[list[dict[str, Any]]]:
    """The messages of ``builtin_corpus`` (tau-bench and MT-bench alternating, then BFCL, then
    the edge cases), the first ``limit`` of them. Fresh lists: callers may change them."""
    return [e.messages for e in builtin_corpus()][:limit]


def declared_rewrites(fam: Family | Renderer, **template_kwargs: Any) -> list[str]:
    """The history-rewrite kinds the family declares (``history_rewrites`` in its spec) that
    ``template_kwargs`` leave on: what ``allow`` may excuse in ``assert_renders_append_only``."""
    return [r.kind for r in active_rewrites(fam, template_kwargs)]


def assert_exposes_u_end(
    fam: Family | Renderer,
    conversations: Corpus,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    **render_options: Any,
) -> TemplateCheck:
    """Every request of ``conversations`` renders and has U_end FOUND; else an
    ``AssertionError`` listing each failing request (conversation index, message count) with
    the UNAVAILABLE reason or the render's error. Returns the check it made."""
    result = check(fam, conversations, tools=tools, **render_options)
    if result.missing_u_end or result.errors:
        raise AssertionError(result.u_end_report())
    return result


def assert_renders_append_only(
    fam: Family | Renderer,
    conversations: Corpus,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    allow: Collection[str] = (),
    **render_options: Any,
) -> TemplateCheck:
    """Each request's token ids start with the previous request's ids up to that request's
    U_end (so the state kept at U_end is reusable); else an ``AssertionError`` naming each
    request, the message where the renderings first differ and whether P_end is reachable.
    A difference the family's rule table predicts with a kind in ``allow`` (e.g.
    ``declared_rewrites(fam)``) is excused. A request after one without U_end is not held to
    this (``assert_exposes_u_end`` is). Returns the check it made."""
    result = check(fam, conversations, tools=tools, **render_options)
    if result.undeclared_rewrites(tuple(allow)):
        raise AssertionError(result.append_report(tuple(allow)))
    return result
