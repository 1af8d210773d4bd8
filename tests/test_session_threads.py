"""Sessions shared between threads: each render gives exactly the cold render's result however
many threads render one conversation or one cache at once; a template's incremental form is
compiled once however many first requests arrive together."""

from __future__ import annotations

import asyncio
import random
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import boundary
from boundary.session.incremental.store import compile_incremental
from boundary.session.session import MIN_INCREMENTAL_MESSAGES
from boundary.shipped.datasets import mt_bench_questions, mt_bench_reference_answers, tau_bench_airline
from tests.support import family, keyed_session

Result = tuple[str, list[int], int | None, int]
Request = list[dict[str, Any]]


pytestmark = pytest.mark.usefixtures("switch_often")


def _result(r: boundary.Rendering) -> Result:
    return r.text, r.token_ids, r.u_end, r.p_end


def _requests(trajectory: list[dict[str, Any]]) -> list[Request]:
    """Every prefix before an assistant turn, and each again with its last message changed
    (a regenerate, an edited question)."""
    prefixes = [trajectory[:i] for i, m in enumerate(trajectory) if m["role"] == "assistant"]
    edited = [[*p[:-1], {**p[-1], "content": f"{p[-1]['content']} (edited)"}] for p in prefixes]
    return prefixes + edited


def _cold(fam: boundary.Family, requests: list[Request]) -> list[Result]:
    return [_result(fam.render(r)) for r in requests]


def _hammer(threads: int, work: Callable[[random.Random], list[str]]) -> list[str]:
    """Run ``work`` on ``threads`` threads released together; their failures, joined."""
    start = threading.Barrier(threads)
    failures: list[str] = []

    def one(seed: int) -> None:
        start.wait()
        try:
            failures.extend(work(random.Random(seed)))
        except Exception as exc:  # a race that raises is a failure like a wrong result
            failures.append(f"raised {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=one, args=(seed,)) for seed in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return failures


def _render_all(
    render: Callable[[Request], boundary.Rendering], requests: list[Request], cold: list[Result]
) -> Callable[[random.Random], list[str]]:
    def work(rng: random.Random) -> list[str]:
        order = list(range(len(requests)))
        rng.shuffle(order)
        return [f"request {i} differs from cold" for i in order if _result(render(requests[i])) != cold[i]]

    return work


CASES = [pytest.param("qwen3_5", 5, id="qwen3_5"), pytest.param("deepseek_v3", 6, id="deepseek_v3")]


@pytest.mark.parametrize(("name", "trajectory"), CASES)
def test_one_session_rendered_by_many_threads_gives_every_request_its_cold_result(
    name: str, trajectory: int
) -> None:
    fam = family(name)
    requests = _requests(tau_bench_airline()[trajectory])
    cold = _cold(fam, requests)
    session = keyed_session(fam)
    assert _hammer(16, _render_all(session.render, requests, cold)) == []


@pytest.mark.parametrize(("name", "trajectory"), CASES)
def test_one_conversation_rendered_by_many_threads_through_a_cache_gives_its_cold_result(
    name: str, trajectory: int
) -> None:
    fam = family(name)
    requests = _requests(tau_bench_airline()[trajectory])
    cold = _cold(fam, requests)
    cache = fam.sessions()
    failures = _hammer(16, _render_all(lambda r: cache.render("c", r), requests, cold))
    assert failures == []
    assert cache.stats.sessions == 1


def _sharegpt_like(seed: int, turns: int = 8) -> list[dict[str, Any]]:
    """A prose chat as ShareGPT traffic looks: MT-bench questions drawn at random, each answered
    with a reference answer (earlier answers with reasoning, as a client that keeps it sends)."""
    rng = random.Random(seed)
    answers = mt_bench_reference_answers()
    questions = [q for q in mt_bench_questions() if q["question_id"] in answers]
    messages: list[dict[str, Any]] = []
    for k in range(turns):
        q = rng.choice(questions)
        t = rng.randrange(len(q["turns"]))
        messages.append({"role": "user", "content": q["turns"][t]})
        reasoning = {"reasoning_content": f"Step {k}: read the question, then answer."} if k % 2 else {}
        messages.append({"role": "assistant", "content": answers[q["question_id"]][t], **reasoning})
    return messages


@pytest.mark.parametrize("name", ["qwen3_5", "qwen3_6", "deepseek_v3"])
def test_sharegpt_like_conversations_rendered_by_many_threads_give_their_cold_results(name: str) -> None:
    """Prose traffic through one shared cache: three conversations, each rendered by several
    threads at once, in random order."""
    fam = family(name)
    conversations = {f"c{seed}": _requests(_sharegpt_like(seed)) for seed in range(3)}
    cold = {c: _cold(fam, rs) for c, rs in conversations.items()}
    cache = fam.sessions()

    def work(rng: random.Random) -> list[str]:
        jobs = [(c, i) for c, rs in conversations.items() for i in range(len(rs))]
        rng.shuffle(jobs)
        return [
            f"{c} request {i} differs from cold"
            for c, i in jobs
            if _result(cache.render(c, conversations[c][i])) != cold[c][i]
        ]

    assert _hammer(12, work) == []
    assert cache.stats.sessions == 3


def test_renders_awaited_from_an_event_loop_through_a_thread_pool_give_cold_results() -> None:
    fam = family("qwen3_5")
    requests = _requests(tau_bench_airline()[7])
    cold = _cold(fam, requests)
    cache = fam.sessions()

    async def serve() -> list[Result]:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=16) as pool:
            order = [i for _ in range(8) for i in range(len(requests))]
            random.Random(3).shuffle(order)
            jobs = [loop.run_in_executor(pool, cache.render, "c", requests[i]) for i in order]
            done = await asyncio.gather(*jobs)
        return [_result(r) for r in done]

    order = [i for _ in range(8) for i in range(len(requests))]
    random.Random(3).shuffle(order)
    results = asyncio.run(serve())
    assert [i for i, got in zip(order, results, strict=True) if got != cold[i]] == []


def test_renders_drops_and_clears_racing_on_overlapping_ids_raise_nothing_and_give_cold_results() -> None:
    fam = family("qwen3_5")
    conversations = [_requests(tau_bench_airline()[t])[:6] for t in (1, 2, 3)]
    cold = [_cold(fam, requests) for requests in conversations]
    cache = fam.sessions(capacity=2)

    def work(rng: random.Random) -> list[str]:
        failures = []
        for _ in range(30):
            c = rng.randrange(len(conversations))
            action = rng.random()
            if action < 0.15:
                cache.drop(str(c))
            elif action < 0.2:
                cache.clear()
            else:
                i = rng.randrange(len(conversations[c]))
                if _result(cache.render(str(c), conversations[c][i])) != cold[c][i]:
                    failures.append(f"conversation {c}, request {i} differs from cold")
        return failures

    assert _hammer(16, work) == []
    stats = cache.stats
    assert stats.sessions == len(cache) <= 2
    assert stats.bytes <= stats.max_bytes


def test_gets_drops_and_clears_racing_on_one_cache_raise_nothing_and_keep_its_bounds() -> None:
    cache = family("qwen3_5").sessions(capacity=3)
    ids = [str(i) for i in range(5)]

    def work(rng: random.Random) -> list[str]:
        for _ in range(2000):
            session_id, action = rng.choice(ids), rng.random()
            if action < 0.6:
                cache.get(session_id)
            elif action < 0.95:
                cache.drop(session_id)
            else:
                cache.clear()
        return []

    assert _hammer(16, work) == []
    stats = cache.stats
    assert stats.sessions == len(cache.ids()) <= 3
    assert stats.bytes == sum(cache.get(i).nbytes for i in cache.ids())


def test_first_requests_arriving_together_compile_the_incremental_template_once() -> None:
    base = family("qwen3_5")
    # a source no earlier test compiled: a fresh template, as a newly loaded model's
    source = base.template() + "{#- " + secrets.token_hex(8) + " #}"
    fam = boundary.Family.from_template(source, base.tokenizer, name="fresh")
    requests = [r for r in _requests(tau_bench_airline()[4]) if len(r) >= MIN_INCREMENTAL_MESSAGES][:8]
    cold = _cold(fam, requests)
    before = compile_incremental.cache_info().misses

    def first(rng: random.Random) -> list[str]:
        i = rng.randrange(len(requests))
        session = keyed_session(fam)
        got = _result(session.render(requests[i]))
        failures = [] if got == cold[i] else [f"request {i} differs from cold"]
        if session.stats.full_render_reason is not None:
            failures.append(f"request {i} ran in full: {session.stats.full_render_reason}")
        return failures

    assert _hammer(8, first) == []
    assert compile_incremental.cache_info().misses - before == 1
