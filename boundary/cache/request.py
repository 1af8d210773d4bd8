"""A request as the cache model sees it: prefix ids, lengths, times, and what to retain.

Where it sits: in the cache model, above ``hashing``: what ``hybrid`` admits.

This is the plain, replayable stream a fidelity test can feed to both this model and vLLM's
``KVCacheManager``: token ids (hashed here into prefix ids), the prompt length, the request's
time in flight. What to keep comes from the policy (``boundary.checkpoints.policies``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from boundary.cache.hashing import PrefixHasher, PrefixId, PrefixReuse


@dataclass(frozen=True, slots=True)
class CacheRequest:
    """One request. ``prefix[i]`` names ``tokens[:(i + 1) * unit]`` over the prompt *and* the
    output the request ends with (vLLM keeps hashing as output tokens are appended);
    ``num_tokens`` counts both. The request is in flight over ``[arrival, finish)``.

    Invariants: ``0 < num_prompt_tokens <= num_tokens``; ``len(prefix) == num_tokens // unit``.
    """

    rid: int
    prefix: Sequence[PrefixId]
    num_prompt_tokens: int
    num_tokens: int
    arrival: float = 0.0
    finish: float = 0.0

    @classmethod
    def from_tokens(
        cls,
        rid: int,
        tokens: Sequence[int],
        num_prompt_tokens: int,
        hasher: PrefixHasher,
        *,
        arrival: float = 0.0,
        finish: float = 0.0,
        reuse: PrefixReuse | None = None,
    ) -> CacheRequest:
        """``tokens`` = prompt ids followed by the output ids (stop token included)."""
        if not 0 < num_prompt_tokens <= len(tokens):
            raise ValueError(f"request {rid}: prompt length {num_prompt_tokens} outside 1..{len(tokens)}")
        return cls(
            rid, hasher.prefix_ids(tokens, reuse=reuse), num_prompt_tokens, len(tokens), arrival, finish
        )
