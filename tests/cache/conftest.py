"""Cache-model fixtures: every cache a test makes has its invariants checked at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from boundary.cache import CacheConfig, CacheGeometry, HybridPrefixCache, OracleCache


def geometry(block: int = 8, unit: int = 8, *, state_pages: int = 2, page: int = 100) -> CacheGeometry:
    """A small layout: a block costs ``page`` bytes, a state ``state_pages * page``."""
    return CacheGeometry(
        block_size=block,
        unit=unit,
        page_bytes=page,
        group_size=1,
        attention_groups=1,
        recurrent_groups=state_pages,
    )


@pytest.fixture
def make_cache() -> Iterator[Callable[..., HybridPrefixCache]]:
    made: list[HybridPrefixCache | OracleCache] = []

    def make(
        geom: CacheGeometry | None = None, capacity: float = float("inf"), **options
    ) -> HybridPrefixCache:
        cache = HybridPrefixCache(CacheConfig(geom or geometry(), capacity, **options))
        made.append(cache)
        return cache

    yield make
    for cache in made:
        cache.check_invariants()
