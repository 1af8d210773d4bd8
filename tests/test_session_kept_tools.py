"""Tools kept across sessions (``boundary.session.kept_tools``): a tool list validated by one
session serves the first request of the next session that sends exactly the same content,
under the same ``strict_request`` and target; the kept form is a private copy, so editing the
caller's objects changes nothing kept; a list that fails validation is never kept; and every
render equals a cold one, from many threads at once."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from boundary.errors import BoundaryError
from boundary.render.target import resolve_target
from boundary.request.identity import items_key
from boundary.session.kept_tools import TOOLS, ToolsMemo
from boundary.session.session import Session
from boundary.shipped.datasets import tau_bench_airline, tau_bench_airline_tools
from tests.support import family

MESSAGES = [{"role": "user", "content": "Change my flight, please."}]


def tools_with(description: str) -> list[dict[str, Any]]:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    function = {"name": "get_weather", "description": description, "parameters": parameters}
    return [{"type": "function", "function": function}]


def cold(
    fam: Any, messages: list[dict[str, Any]], tools: Any, **kwargs: Any
) -> tuple[str, list[int], int | None]:
    r = fam.render(copy.deepcopy(messages), copy.deepcopy(tools), **kwargs)
    return r.text, r.token_ids, r.u_end


def warm(
    session: Session, messages: list[dict[str, Any]], tools: Any, **kwargs: Any
) -> tuple[str, list[int], int | None]:
    r = session.render(messages, tools, **kwargs)
    return r.text, r.token_ids, r.u_end


@pytest.mark.parametrize("target", ["vllm-0.33", "transformers"])
def test_the_next_sessions_first_request_reuses_the_tools_and_renders_as_cold(target: str) -> None:
    fam = family("qwen3_5")
    first, second = Session(fam.renderer), Session(fam.renderer)
    tools = tau_bench_airline_tools()
    warm(first, MESSAGES, tools, target=target)
    hits = TOOLS.hits
    same_content = copy.deepcopy(tools)  # other objects, the same content
    assert warm(second, MESSAGES, same_content, target=target) == cold(fam, MESSAGES, tools, target=target)
    assert TOOLS.hits == hits + 1
    assert second._tools is first._tools  # one kept form, shared
    assert second.nbytes == first.nbytes  # each session counts what it holds


def test_editing_the_callers_tools_changes_nothing_kept() -> None:
    fam = family("qwen3_5")
    tools = tools_with("Current weather, kept.")
    warm(Session(fam.renderer), MESSAGES, tools)
    original = copy.deepcopy(tools)
    tools[0]["function"]["description"] = "Edited after the render."  # the caller's own objects
    assert "Current weather, kept." in warm(Session(fam.renderer), MESSAGES, original)[0]
    edited = warm(Session(fam.renderer), MESSAGES, tools)
    assert edited == cold(fam, MESSAGES, tools) and "Edited after the render." in edited[0]


def test_strict_request_and_target_keep_entries_apart() -> None:
    fam = family("qwen3_5")
    tools = tools_with("Weather for strictness.")
    for strict in (False, True):
        for target in ("vllm-0.33", "transformers"):
            session = Session(fam.renderer)
            got = warm(session, MESSAGES, tools, strict_request=strict, target=target)
            assert got == cold(fam, MESSAGES, tools, strict_request=strict, target=target)
            assert session._tools_key == (strict, resolve_target(target).name, items_key(tools))


def test_a_tool_list_that_fails_validation_raises_on_every_request_and_is_not_kept() -> None:
    fam = family("qwen3_5")
    bad = [{"type": "function", "function": {"description": "no name"}}]
    for _ in range(2):
        misses = TOOLS.misses
        with pytest.raises(BoundaryError):
            Session(fam.renderer).render(MESSAGES, bad)
        assert TOOLS.misses == misses + 1  # validated again: nothing was kept


def test_the_memo_keeps_at_most_its_entries_least_recently_used_dropped_first() -> None:
    memo, target = ToolsMemo(max_entries=2), resolve_target(None)
    lists = [tools_with(f"tool {k}") for k in range(3)]
    keys = [items_key(t) for t in lists]
    kept = [memo.get(t, k, False, target) for t, k in zip(lists, keys, strict=True)]
    assert memo.misses == 3 and memo.hits == 0
    assert memo.get(lists[2], keys[2], False, target) is kept[2]  # still held
    assert memo.get(lists[0], keys[0], False, target) is not kept[0]  # dropped, made again
    assert memo.misses == 4 and memo.hits == 1


def test_sessions_on_many_threads_sharing_one_tool_list_each_render_as_cold() -> None:
    fam = family("qwen3_5")
    tools = tau_bench_airline_tools()
    conversations = [
        c[: next(k for k, m in enumerate(c) if m["role"] == "assistant")] for c in tau_bench_airline()[:16]
    ]
    expected = [cold(fam, c, tools) for c in conversations]
    got: list[Any] = [None] * len(conversations)
    start = threading.Barrier(8)

    def serve(worker: int) -> None:
        start.wait()
        for k in range(worker, len(conversations), 8):
            got[k] = warm(Session(fam.renderer), conversations[k], copy.deepcopy(tools))

    threads = [threading.Thread(target=serve, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected
