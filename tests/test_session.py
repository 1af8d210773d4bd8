"""Sessions give exactly what a cold render gives, request after request, while tokenizing
only what changed; history rewrites move the reuse point back instead of breaking results."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

import boundary
from boundary.shipped.datasets import tau_bench_airline
from tests.support import FIXED_NOW, family, fixture_cases, keyed_session, kwarg_settings, shipped_variants


def _requests(trajectories: list[list[dict]]) -> list[tuple[int, list[dict]]]:
    return [
        (t, traj[:i])
        for t, traj in enumerate(trajectories)
        for i, m in enumerate(traj)
        if m["role"] == "assistant"
    ]


def _with_reasoning(trajectories: list[list[dict]], seed: int = 7) -> list[list[dict]]:
    """tau-bench has no reasoning text; add seeded synthetic reasoning to assistant turns."""
    rng = random.Random(seed)
    words = ["check", "the", "policy", "user", "booking", "flight", "refund", "then", "confirm", "first"]
    out = []
    for traj in trajectories:
        out.append(
            [
                {**m, "reasoning_content": " ".join(rng.choices(words, k=rng.randint(5, 40)))}
                if m["role"] == "assistant"
                else m
                for m in traj
            ]
        )
    return out


def _assert_replay_matches(
    fam: boundary.Family, trajectories, variant: str, kwargs: dict
) -> boundary.Rendering:
    cache = fam.sessions(capacity=8)
    for t, request in _requests(trajectories):
        try:
            cold = fam.render(request, variant=variant, now=FIXED_NOW, **kwargs)
        except boundary.TemplateRenderError as exc:
            with pytest.raises(type(exc)):
                cache.render(str(t), request, variant=variant, now=FIXED_NOW, **kwargs)
            continue
        warm = cache.render(str(t), request, variant=variant, now=FIXED_NOW, **kwargs)
        assert warm.token_ids == cold.token_ids, (t, len(request))
        assert warm.text == cold.text
        assert warm.input_end == cold.input_end
        assert warm.message_starts == cold.message_starts
    return warm


def _settings():
    params = []
    for name, variant in shipped_variants():
        for kwargs in kwarg_settings(name):
            label = ",".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults"
            params.append(pytest.param(name, variant, kwargs, id=f"{name}-{variant}-{label}"))
    return params


@pytest.mark.parametrize(("name", "variant", "kwargs"), _settings())
def test_sessions_equal_cold_renders_on_a_tau_bench_slice_with_reasoning(
    name: str, variant: str, kwargs
) -> None:
    trajectories = _with_reasoning(tau_bench_airline()[::40])  # 5 trajectories, ~60 requests
    _assert_replay_matches(family(name), trajectories, variant, kwargs)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "variant", "kwargs"),
    [
        ("qwen3_5", "think", {}),
        ("qwen3_6", "default", {"preserve_thinking": True}),
        ("nemotron_3", "nano", {}),
    ],
)
def test_sessions_equal_cold_renders_on_the_whole_tau_bench_replay(name: str, variant: str, kwargs) -> None:
    _assert_replay_matches(family(name), _with_reasoning(tau_bench_airline()), variant, kwargs)


@pytest.mark.parametrize(("name", "variant"), shipped_variants())
def test_sessions_equal_cold_renders_over_the_fixture_corpus(name: str, variant: str) -> None:
    fam = family(name)
    session = keyed_session(fam)
    for case in fixture_cases():
        for cut in range(1, len(case["messages"]) + 1):
            request = case["messages"][:cut]
            try:
                cold = fam.render(request, case.get("tools"), variant=variant, now=FIXED_NOW)
            except boundary.BoundaryError as exc:
                with pytest.raises(type(exc)):
                    session.render(request, case.get("tools"), variant=variant, now=FIXED_NOW)
                continue
            warm = session.render(request, case.get("tools"), variant=variant, now=FIXED_NOW)
            assert warm.token_ids == cold.token_ids and warm.input_end == cold.input_end


def test_dropped_reasoning_moves_the_reuse_point_back_to_where_the_texts_differ() -> None:
    fam = family("qwen3_5")
    traj = _with_reasoning([tau_bench_airline()[0]])[0]
    users = [i for i, m in enumerate(traj) if m["role"] == "user"]
    session = keyed_session(fam)
    in_loop = traj[: users[2] + 1]  # reasoning of the turn after users[1] is rendered
    session.render(in_loop[:-1])
    first = session.render(in_loop)  # a new user message: earlier reasoning disappears
    assert first.token_ids == fam.render(in_loop).token_ids
    reused = session.stats.reused_tokens
    assert 0 < reused < len(first.token_ids)


def test_a_new_date_reencodes_from_the_date_on() -> None:
    fam = family("gpt_oss")
    session = keyed_session(fam)
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and now?"},
    ]
    session.render(msgs[:1], now=FIXED_NOW)
    tomorrow = FIXED_NOW + timedelta(days=1)
    r = session.render(msgs, now=tomorrow)
    assert r.token_ids == fam.render(msgs, now=tomorrow).token_ids
    assert tomorrow.strftime("%Y-%m-%d") in r.text


def test_messages_mutated_in_place_between_turns_are_seen() -> None:
    fam = family("qwen3_5")
    session = keyed_session(fam)
    msgs = [{"role": "user", "content": "first"}]
    session.render(msgs)
    msgs[0]["content"] = "changed"
    assert session.render(msgs).token_ids == fam.render(msgs).token_ids


def test_a_caller_changing_the_ids_it_was_given_leaves_the_session_right() -> None:
    """A rendering's ids are the caller's own list: cutting, clearing or overwriting them (say,
    to strip the generation prompt) changes nothing a later request reuses, nor the map of
    a rendering given before."""
    fam = family("qwen3_5")
    trajectory = tau_bench_airline()[0]
    requests = [trajectory[:i] for i, m in enumerate(trajectory) if m["role"] == "assistant"]
    for change in (
        lambda ids: ids.clear(),
        lambda ids: ids.__delitem__(slice(-3, None)),
        lambda ids: ids.reverse(),
    ):
        session = keyed_session(fam)
        earlier = None
        for request in requests:
            warm = session.render(request)
            cold = fam.render(request)
            assert warm.token_ids == cold.token_ids
            if earlier is not None:  # the earlier rendering's own map still reads its own text
                assert earlier[0].boundary_at(earlier[1]) == earlier[2]
            earlier = (warm, warm.input_end.char, warm.input_end)
            change(warm.token_ids)


def test_tools_and_sanitizing_can_change_mid_session() -> None:
    fam = family("qwen3_5")
    case = next(c for c in fixture_cases() if c["name"] == "tool_loop_two_steps")
    session = keyed_session(fam)
    for cut in range(2, len(case["messages"]) + 1):
        tools = case["tools"] if cut % 2 else case["tools"][:1]
        sanitize = cut % 3 == 0
        request = case["messages"][:cut]
        assert (
            session.render(request, tools, sanitize_control_tokens=sanitize).token_ids
            == fam.render(request, tools, sanitize_control_tokens=sanitize).token_ids
        )


def test_bad_messages_in_a_session_name_their_absolute_index() -> None:
    session = keyed_session(family("qwen3_5"))
    ok = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    session.render(ok[:1])
    with pytest.raises(boundary.RequestError, match=r"messages\[2\]\.tool_call_id"):
        session.render([*ok, {"role": "tool", "tool_call_id": "nope", "content": "x"}])


def test_the_session_cache_is_bounded_and_least_recently_used_goes_first() -> None:
    cache = family("qwen3_5").sessions(capacity=2)
    msgs = [{"role": "user", "content": "hi"}]
    cache.render("a", msgs)
    cache.render("b", msgs)
    cache.render("a", msgs)
    cache.render("c", msgs)
    assert "b" not in cache and "a" in cache and "c" in cache
    assert len(cache) == 2 and cache.evictions == 1
    assert cache.drop("a") and not cache.drop("a")
    with pytest.raises(ValueError):
        family("qwen3_5").sessions(capacity=0)


def test_later_turns_reuse_most_tokens() -> None:
    fam = family("qwen3_5")
    cache = fam.sessions()
    for _, request in _requests([tau_bench_airline()[3]]):
        cache.render("s", request)
    stats = cache.get("s").stats
    assert stats.reused_tokens > 4 * stats.encoded_tokens
