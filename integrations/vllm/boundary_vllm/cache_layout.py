"""The KV-cache geometry a running vLLM engine derived (``CacheLayout``): its attention block,
page bytes, attention and recurrent groups, a recurrent state's bytes and the pool's pages.

Where it sits: the engine end, beside ``engine_run``: ``EngineRun.layout`` reads it from the
engine's scheduler (``engine_run.probe_layout`` from an engine started only for that);
``engine_experiment`` builds its cache model from it and the engine test tier sizes pools and
expectations from it, never from a constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class CacheLayout:
    """The KV-cache geometry a running engine derived: its attention block (tokens), the bytes of
    one page (every group's page is padded to the same size), how many KV-cache groups hold
    attention and how many a recurrent state, the pages one recurrent group holds for a running
    request (align mode: the running state and the one before it), the bytes of one layer's
    recurrent state before padding, the pool's pages (one is vLLM's null block), and whether
    the recurrent groups come before attention in the groups' order (the order vLLM lets a
    step's copy-on-write endpoints go in).

    vLLM derives the block from the recurrent page's bytes and the platform (the state's dtype
    differs by CPU), so tests size pools and expectations from this, never from a constant."""

    block_size: int
    page_bytes: int
    attention_groups: int
    recurrent_groups: int
    recurrent_pages_per_request: int
    state_bytes: int
    num_blocks: int
    recurrent_groups_first: bool = True

    @classmethod
    def of(cls, scheduler: Any) -> CacheLayout:
        from vllm.v1.kv_cache_interface import MambaSpec

        config = scheduler.kv_cache_config
        specs = [g.kv_cache_spec for g in config.kv_cache_groups]
        recurrent = [s for s in specs if isinstance(s, MambaSpec)]
        vllm_config = scheduler.vllm_config
        return cls(
            block_size=int(scheduler.cache_config.block_size),
            page_bytes=int(specs[0].page_size_bytes),
            attention_groups=len(specs) - len(recurrent),
            recurrent_groups=len(recurrent),
            recurrent_pages_per_request=max(
                (s.max_memory_usage_bytes(vllm_config) // s.page_size_bytes for s in recurrent), default=0
            ),
            state_bytes=max((int(s.real_page_size_bytes) for s in recurrent), default=0),
            num_blocks=int(config.num_blocks),
            recurrent_groups_first=bool(recurrent) and isinstance(specs[0], MambaSpec),
        )

    def pages_per_request(self, tokens: int) -> int:
        """Pages one running request of ``tokens`` tokens holds, as vLLM counts them when it
        checks that the pool serves one request of ``max_model_len``."""
        return self.attention_groups * -(-tokens // self.block_size) + (
            self.recurrent_groups * self.recurrent_pages_per_request
        )
