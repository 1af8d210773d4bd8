"""The joint hit: the deepest position where attention blocks and a recurrent state agree.

Where it sits: in the cache model, above ``blocks`` and ``states``; ``hybrid`` calls it.

``HybridKVCacheCoordinator.find_longest_cache_hit`` is a fixed point over groups: each group
accepts the current candidate length or shrinks it, and the loop restarts until none shrinks.
It terminates because the length only decreases and is bounded by 0. With one full-attention
group and one recurrent group (every model here; several recurrent groups of one spec are
looked up together) it settles in one round: attention is downward-closed, so it accepts any
length below its own match, and the recurrent scan is bounded by that match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from boundary.cache.accounting import cdiv
from boundary.cache.blocks import AttentionBlocks
from boundary.cache.memory import Entry
from boundary.cache.states import RecurrentStates


@dataclass(frozen=True, slots=True)
class Hit:
    """One lookup. ``attention``: tokens full attention matched; ``recurrent``: the deepest
    matching state, attention aside; ``joint``: where the request resumes (``<= attention``);
    ``junction``: vLLM's ``shared_prefix_boundary``, the attention match when it reaches past
    the joint hit (a shared prefix no state covers yet), else 0. ``blocks`` are the attention
    blocks covering ``[0, joint)``; ``state`` is the state at ``joint``.

    Invariants: ``joint <= attention``; ``joint <= recurrent``; ``joint > 0`` iff ``state``;
    ``junction == attention`` when ``attention > joint``, else ``junction == 0``.
    """

    attention: int
    recurrent: int
    joint: int
    junction: int
    blocks: tuple[Entry, ...]
    state: Entry | None


def find_joint_hit(
    prefix: Sequence[int], num_prompt_tokens: int, blocks: AttentionBlocks, states: RecurrentStates
) -> Hit:
    """Look a prompt up. A hit never covers the whole prompt: the last token is recomputed
    for its logits (``max_cache_hit_length = num_prompt_tokens - 1``)."""
    limit = num_prompt_tokens - 1
    attention = blocks.match(prefix, limit)
    recurrent = states.match(prefix, limit, attention.length)
    joint = recurrent.joint
    keep = cdiv(joint, blocks.geometry.block_size)
    return Hit(
        attention=attention.length,
        recurrent=recurrent.recurrent,
        joint=joint,
        junction=attention.length if attention.length > joint else 0,
        blocks=tuple(attention.blocks[:keep]),
        state=recurrent.state,
    )
