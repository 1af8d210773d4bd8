"""Fidelity: the experiment harness's cache model (``boundary.cache``) and vLLM 0.33.0's real
KV-cache manager, fed the same request streams, agree on every request's joint hit.

vLLM side: ``boundary_vllm.replay`` (the boundary scheduler over the real ``Scheduler`` and
``KVCacheManager``). Model side: ``HybridPrefixCache`` with the same geometry and no capacity
limit (the replay's block pool never evicts on these streams), retaining P_end always and U_end
/ D_end as the policy asks.
"""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from boundary_vllm.decode_end import committed_end
from boundary_vllm.replay import EngineShape, ReplayRequest, replay
from boundary_vllm.settings import Policy

from boundary.cache import CacheConfig, CacheGeometry, CacheRequest, HybridPrefixCache, PrefixHasher, Retain
from boundary.checkpoints import CheckpointKind
from tests.vllm.streams import BLOCK, turn, turns

pytestmark = pytest.mark.vllm

STREAMS = {
    # one session: reasoning turns, tool loops, a user turn after a tool loop
    "session": lambda: turns(11),
    # another session, whose first continuation keeps P_end reachable
    "session-2": lambda: turns(0),
    # four conversations sharing the airline policy prompt: a reactive junction
    "junction": lambda: tuple(turn(c, 2) for c in (0, 1, 2, 3)),
    # two sessions interleaved
    "interleaved": lambda: tuple(itertools.chain.from_iterable(zip(turns(5), turns(7), strict=False))),
}


@cache
def stream(name: str) -> tuple[ReplayRequest, ...]:
    return tuple(ReplayRequest.from_turn(t) for t in STREAMS[name]())


def model_hits(requests: tuple[ReplayRequest, ...], policy: Policy, unit: int) -> list[int]:
    geometry = CacheGeometry(
        block_size=BLOCK, unit=unit, page_bytes=4096, group_size=1, attention_groups=1, recurrent_groups=1
    )
    model = HybridPrefixCache(CacheConfig(geometry, capacity_bytes=float("inf")))
    hasher = PrefixHasher(unit)
    joint = []
    for rid, r in enumerate(requests):
        prompt = len(r.prompt_token_ids)
        retain = [Retain(CheckpointKind.PROMPT_END, prompt)]
        if policy.retains(CheckpointKind.INPUT_END) and r.input_end is not None:
            retain.append(Retain(CheckpointKind.INPUT_END, r.input_end))
        if policy.retains(CheckpointKind.DECODE_END):
            d_end = committed_end(prompt, r.output_token_ids, set(r.stop_token_ids))
            retain.append(Retain(CheckpointKind.DECODE_END, d_end))
        request = CacheRequest.from_tokens(rid, [*r.prompt_token_ids, *r.output_token_ids], prompt, hasher)
        joint.append(model.admit(request, retain, now=float(rid)).hit.joint)
        model.finish(rid, now=rid + 0.5)
    model.check_invariants()
    return joint


CASES = [(name, BLOCK, policy) for name in STREAMS for policy in Policy] + [
    # Sub-block hits: vLLM keeps D_end only block-aligned (a decode state exists at a unit
    # boundary only for the one step that computes it), so those policies are compared at the block.
    (name, 4, policy)
    for name in STREAMS
    for policy in (Policy.MAIN_SPARSE, Policy.INPUT_END)
]


@pytest.mark.parametrize(
    ("name", "unit", "policy"), CASES, ids=[f"{n}-unit{u}-{p.value}" for n, u, p in CASES]
)
def test_the_cache_model_and_vllm_agree_on_every_joint_hit(name, unit, policy):
    requests = stream(name)
    vllm = [o.hit_tokens for o in replay(requests, EngineShape(policy=policy, prefix_match_unit=unit))]
    assert vllm == model_hits(requests, policy, unit)
    assert any(vllm)  # the stream exercises reuse at all
