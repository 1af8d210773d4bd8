"""The head of the message loop replayed as one chain (``boundary.session.incremental.chain``): when the
loop starts as it started last render and its first items are the same objects, their entries
are replayed in one pass, checking only the reads that can differ. Each turn gives exactly what
a full render gives, including where a limit stops it.
"""

from __future__ import annotations

from typing import Any

import pytest

from boundary.render.sandbox import RenderLimits
from boundary.session.incremental.chain import split_reads
from boundary.session.incremental.store import Incremental
from boundary.session.session import Session
from boundary.shipped.datasets import tau_bench_airline
from tests.support import FIXED_NOW, family
from tests.test_incremental import GROWING
from tests.test_incremental_scan import SCAN, _full, _render

# Each body reads something a chain must not take as stable.
READS_PAST_THE_HEAD = {
    "last": "{% for m in messages %}{{ m.content }}{% if loop.last %}!{% endif %};{% endfor %}",
    "nextitem": (
        "{% for m in messages %}{{ m.content }}>"
        "{{ loop.nextitem.role if loop.nextitem is defined else 'end' }};{% endfor %}"
    ),
    "not last and nextitem": (
        "{% for m in messages %}{{ m.content }}{% if not loop.last and loop.nextitem.role != m.role %}|"
        "{% endif %};{% endfor %}"
    ),
    "length": "{% for m in messages %}{{ m.content }}/{{ loop.length }}/{{ loop.revindex0 }};{% endfor %}",
    "revindex": "{% for m in messages %}{% if loop.revindex <= 2 %}*{% endif %}{{ m.content }};{% endfor %}",
    "sequence length": (
        "{% for m in messages %}{% if loop.index0 >= messages|length - 2 %}*{% endif %}{{ m.content }};"
        "{% endfor %}"
    ),
    "sequence item": "{% for m in messages %}{{ m.content }}{{ messages[-1].role }};{% endfor %}",
    "namespace at the start": (
        "{% set ns = namespace(k=messages|length) %}{% for m in messages %}"
        "{% if loop.index0 > ns.k - 3 %}*{% endif %}{{ m.content }};{% endfor %}"
    ),
    "namespace written in the loop": (
        "{% set ns = namespace(n=0, k=messages|length) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{% if ns.n > ns.k - 2 %}*{% endif %}{{ ns.n }};{% endfor %}"
    ),
    "namespace and loop as a whole": (  # a probe's arguments: the generation flag flips the test
        "{% set ns = namespace(k=messages|length) %}{% for m in messages %}{{ m.content }}"
        "{% if add_generation_prompt and ns.k > loop.index0 + 2 %}+{% endif %};{% endfor %}"
    ),
    "last user query": SCAN,
    "a slice of the messages": (  # items not the messages list itself: output joined per iteration
        "{% for m in messages[1:] %}{{ m.content }}{% if loop.last %}!{% endif %};{% endfor %}"
    ),
}


def _turns() -> list[list[dict[str, Any]]]:
    """Growing by one message, then shrinking, with edits, and a request sent again: slices of
    one list, so unchanged messages are the same objects from turn to turn, as a session's are."""
    history = list(GROWING)
    edited = [*history[:3], {**history[3], "content": "Q2"}, *history[4:]]
    growing = [history[:n] for n in range(1, len(history) + 1)]
    return [*growing, edited, edited[:6], history[:4], history, history]


@pytest.mark.parametrize("source", READS_PAST_THE_HEAD.values(), ids=READS_PAST_THE_HEAD.keys())
def test_each_turn_equals_a_full_render_when_the_head_is_replayed_as_a_chain(source: str) -> None:
    incremental = Incremental()
    limits = RenderLimits()
    for i, messages in enumerate(_turns()):
        assert _render(incremental, source, messages, limits) == _full(source, messages, limits), i
    assert incremental.chained > 0


@pytest.mark.parametrize("source", READS_PAST_THE_HEAD.values(), ids=READS_PAST_THE_HEAD.keys())
def test_limits_stop_a_chain_exactly_where_they_stop_a_full_render(source: str) -> None:
    outcomes = set()
    for limits in [
        *(RenderLimits(max_loop_steps=n) for n in range(1, 2 * len(GROWING) + 2)),
        *(RenderLimits(max_output_chars=n) for n in range(4, 60, 3)),
    ]:
        incremental = Incremental()
        for i, messages in enumerate(_turns()):
            full = _full(source, messages, limits)
            assert _render(incremental, source, messages, limits) == full, (limits, i)
            outcomes.add(isinstance(full, tuple))
    assert outcomes == {True, False}


def test_a_chain_stops_at_the_first_item_that_is_not_the_same_object() -> None:
    source = READS_PAST_THE_HEAD["last"]
    incremental, limits = Incremental(), RenderLimits()
    _render(incremental, source, GROWING[:6], limits)
    chained = incremental.chained
    copy = [*GROWING[:2], dict(GROWING[2]), *GROWING[3:7]]  # equal content, another object
    assert _render(incremental, source, copy, limits) == _full(source, copy, limits)
    assert incremental.chained - chained == 2
    assert incremental.reused - chained > 0  # the rest replayed one by one


def test_a_tau_bench_session_replays_most_of_its_history_as_a_chain() -> None:
    conversation = next(t for t in tau_bench_airline() if len(t) >= 30)
    requests = [conversation[:i] for i, m in enumerate(conversation) if m["role"] == "assistant"]
    fam = family("qwen3_5")
    session = Session(fam.renderer, min_messages=1)  # every request incremental
    for request in requests:
        warm = session.render(request, now=FIXED_NOW)
        cold = fam.render(request, now=FIXED_NOW)
        assert (warm.text, warm.token_ids, warm.u_end, warm.p_end) == (
            cold.text,
            cold.token_ids,
            cold.u_end,
            cold.p_end,
        )
    stats = session.stats
    assert stats.chained_iterations > 0.7 * stats.reused_iterations > 0


def test_reading_the_marks_skips_the_head_only_where_its_only_marks_are_message_marks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The head's text without marks comes from the last render (``marks.Splice``) when the
    head holds no mark but its iterations' message marks; a head with a probe's mark inside
    is read mark by mark. Either way the reading equals a full render's."""
    import boundary.session.incremental.store as incremental_module

    spliced: list[bool] = []
    real = incremental_module.read_marks

    def recording(*args: Any, **kwargs: Any) -> Any:
        spliced.append(kwargs.get("splice") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(incremental_module, "read_marks", recording)
    for name, expected in [("last", True), ("namespace and loop as a whole", False)]:
        source, incremental, limits = READS_PAST_THE_HEAD[name], Incremental(), RenderLimits()
        spliced.clear()
        for i, messages in enumerate(_turns()):
            assert _render(incremental, source, messages, limits) == _full(source, messages, limits), (
                name,
                i,
            )
        assert any(spliced) is expected, name


def test_reads_are_split_by_what_they_rest_on() -> None:
    cmp_ns = ("cmp", (("loop", "index0"), ("gt", ("ns", "ns", "k"))))
    cmp_len = ("cmp", (("loop", "index0"), ("gteq", ("len", "messages"))))
    cmp_pos = ("cmp", (("loop", "index0"), ("gt", ("const", 3))))
    reads = (
        (("loop", "index0"), 1),
        (("loop", "previtem"), 2),
        (("loop", "last"), 3),
        (("loop", "nextitem"), 4),
        (("loop", "length"), 5),
        (("loop", "revindex"), 6),
        (("item", "messages", -1), 7),
        (("len", "messages"), 8),
        (("seqall", "messages"), 9),
        (("loopall",), 10),
        (("ns", "ns", "k"), 11),
        (("nsall", "ns"), 12),
        (cmp_ns, 13),
        (cmp_len, 14),
        (cmp_pos, 15),
    )
    edge, volatile, namespace = split_reads(reads)
    assert [v for _, v in edge] == [3, 4]
    assert [v for _, v in volatile] == [5, 6, 7, 8, 9, 10, 14]
    assert [(on, v) for on, _, v in namespace] == [
        ((("ns", "k"),), 11),
        ((("ns", None),), 12),
        ((("ns", "k"),), 13),
    ]
