"""Content keys tell apart every two values a template can tell apart (key order, ``1`` /
``1.0`` / ``True``, list / tuple, ``str`` / a subclass), give equal values equal keys however
they share references, and give none to values that are not plain builtins."""

from __future__ import annotations

import enum
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from boundary.request.identity import SeenPrefix, content_key, content_keys, item_key, item_keys, items_key

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, width=16),
    st.text(max_size=4),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 2)), inner, max_size=3),
    ),
    max_leaves=8,
)


def _same_tree(a: Any, b: Any) -> bool:
    """Equal as a template sees them: exact types, and dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return (
            list(a) == list(b)
            and all(_same_tree(k, j) for k, j in zip(a, b, strict=True))
            and all(_same_tree(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_tree(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a.hex() == b.hex()
    return bool(a == b)


@given(_VALUES, _VALUES)
def test_equal_keys_mean_the_same_tree_of_the_same_types(a: Any, b: Any) -> None:
    assert content_key(a) is not None
    assert (content_key(a) == content_key(b)) == _same_tree(a, b)


def test_values_python_holds_equal_get_different_keys() -> None:
    assert content_key(1) != content_key(1.0) != content_key(True) != content_key(1)
    assert content_key({"a": 1, "b": 2}) != content_key({"b": 2, "a": 1})
    assert content_key([1]) != content_key((1,))
    assert content_key({1: "x"}) != content_key({"1": "x"})
    assert content_key(0.0) != content_key(-0.0)


_REFUSED = st.sampled_from([object(), {"a": object()}, [1, {"b": object()}], ["x" * 200_000, object()]])


@given(_VALUES, _REFUSED, _VALUES)
def test_keys_taken_together_are_the_keys_taken_one_by_one(a: Any, refused: Any, b: Any) -> None:
    """One pickler for many values, recovering from a refused one mid-way: the same bytes."""
    first, none, second, again = content_keys([a, refused, b, a])
    assert none is None and first is not None and second is not None
    assert (first == second) == _same_tree(a, b)
    assert first == again == content_key(a) and second == content_key(b)
    assert item_keys([a, refused, b]) == [item_key(a), None, item_key(b)]


def test_shared_references_serialize_like_equal_copies() -> None:
    part = {"type": "text", "text": "hi"}
    assert content_key([part, part]) == content_key([{"type": "text", "text": "hi"}, dict(part)])


def test_values_that_are_not_plain_builtins_have_no_key() -> None:
    class Kind(enum.IntEnum):
        ONE = 1

    class Text(str):
        pass

    cycle: list[Any] = []
    cycle.append(cycle)
    for value in [Kind.ONE, Text("x"), {"a": object()}, cycle]:
        assert content_key(value) is None


def test_a_value_nested_deeper_than_the_recursion_limit_has_no_key_or_an_exact_one() -> None:
    # whether pickling 5,000 levels recurses too deep depends on the interpreter's recursion
    # limit (other code may raise it); either way the session never sees a stale message
    def nested(leaf: object) -> list[Any]:
        value: list[Any] = [leaf]
        for _ in range(5000):
            value = [value]
        return value

    key = content_key(nested(1))
    if key is not None:
        assert key == content_key(nested(1)) and key != content_key(nested(1.0))


def test_a_key_is_a_copy_later_edits_do_not_reach() -> None:
    message = {"role": "user", "content": "first"}
    key = item_key(message)
    message["content"] = "changed"
    assert item_key(message) != key
    message["content"] = "first"
    assert item_key(message) == key


class _Message(BaseModel):
    role: str
    content: str | None = None


def test_pydantic_items_are_keyed_by_what_the_request_stage_reads() -> None:
    assert item_key(_Message(role="user", content="hi")) == item_key({"role": "user", "content": "hi"})
    assert item_key(_Message(role="user")) == item_key({"role": "user"})  # unset fields left out
    assert items_key(None) != items_key([])
    assert items_key([_Message(role="user")]) == items_key([{"role": "user"}])


def _seen(prefix: SeenPrefix, items: list[Any]) -> int:
    common = prefix.common(items)
    prefix.accept()
    return common


@settings(max_examples=1000, deadline=None, derandomize=True, database=None)
@example([None, []], 1, [[None]])  # `]` is the start of `] N a`: a bare item can be continued
@example([None, None], 1, [(None,)])  # `N` then TUPLE1 twice: so can an item in a 1-tuple
@example([0, {}], 1, [{"a": 1}])  # `}` is the start of `} X K s`
@example([None, "a"], 1, [("a", 1)])
@given(
    st.lists(_VALUES, min_size=1, max_size=6),
    st.integers(0, 6),
    st.lists(_VALUES, max_size=4),
)
def test_a_seen_prefix_is_the_leading_items_with_equal_keys(
    before: list[Any], cut: int, more: list[Any]
) -> None:
    """One serialization of the whole list gives what comparing the items' keys one by one gives
    (plain items): the next list keeps some of the last one's items and adds others, which
    often begin like the items they replace."""
    after = [*before[:cut], *more]
    prefix = SeenPrefix()
    assert _seen(prefix, before) == 0
    expected = 0
    while expected < min(len(before), len(after)) and content_key(before[expected]) == content_key(
        after[expected]
    ):
        expected += 1
    assert _seen(prefix, after) == expected


def test_a_seen_prefix_tells_apart_what_python_holds_equal() -> None:
    prefix = SeenPrefix()
    _seen(prefix, [{"a": 1, "b": 2}, 1, "x"])
    assert _seen(prefix, [{"a": 1, "b": 2}, 1.0, "x"]) == 1
    assert _seen(prefix, [{"a": 1, "b": 2}, True, "x"]) == 1
    assert _seen(prefix, [{"b": 2, "a": 1}, True, "x"]) == 0
    assert _seen(prefix, [{"b": 2, "a": 1}, True, "x", "y"]) == 3


def test_a_seen_prefix_counts_across_the_picklers_batches_of_a_thousand() -> None:
    items = [{"i": i} for i in range(2500)]
    prefix = SeenPrefix()
    for n, expected in [(999, 0), (1000, 999), (1001, 1000), (2001, 1001), (2500, 2001), (2500, 2500)]:
        assert _seen(prefix, items[:n]) == expected, n
    edited = [*items[:1500], {"i": 1500.0}, *items[1501:]]
    assert _seen(prefix, edited) == 1500
    assert _seen(prefix, items[:1000]) == 1000


def test_a_seen_prefix_keeps_nothing_of_a_list_holding_a_value_without_a_key() -> None:
    prefix = SeenPrefix()
    _seen(prefix, [1, 2, 3])
    assert _seen(prefix, [1, 2, object()]) == 0
    assert _seen(prefix, [1, 2, 3]) == 0  # nothing was kept of the refused list
    assert _seen(prefix, [1, 2, 3]) == 3


def test_a_seen_prefix_moves_on_only_when_accepted() -> None:
    prefix = SeenPrefix()
    _seen(prefix, ["a", "b", "c"])
    assert prefix.common(["a", "x", "y", "z"]) == 1  # not accepted: the last sequence stays
    assert prefix.common(["a", "b", "c", "d"]) == 3
    prefix.accept()
    assert prefix.common(["a", "b", "c", "d"]) == 4
