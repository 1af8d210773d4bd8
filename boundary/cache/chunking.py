"""Where vLLM's align-mode scheduler ends prefill chunks, and what a checkpoint adds.

Where it sits: in the cache model, beside ``accounting``: ``hybrid`` asks it where prefill
chunks end.

A recurrent state exists only where a scheduler step ends, so every retained position inside
a prompt must be a chunk end. ``Scheduler._mamba_block_aligned_split`` already ends chunks at
block boundaries (and the chunk-size limit, aligned down to a block), at the last cacheable
block boundary, at the prompt's unit-aligned tail (fine-grained), and at a detected junction
(block-floored). A policy that retains other prompt positions adds stops; the extra chunks are
the *forced splits* that checkpoint costs (one more kernel launch, a less full batch).
"""

from __future__ import annotations

from collections.abc import Iterable

from boundary.cache.accounting import CacheGeometry


def prompt_checkpoint_position(num_tokens: int, unit: int) -> int:
    """``get_mamba_prefill_checkpoint_position`` without EAGLE: the deepest multiple of
    ``unit`` strictly before the last token (which is recomputed for logits)."""
    return max((num_tokens - 1) // unit * unit, 0)


def prefill_chunk_ends(
    start: int,
    num_prompt_tokens: int,
    geometry: CacheGeometry,
    *,
    junction: int = 0,
    stops: Iterable[int] = (),
    max_chunk_tokens: int = 8192,
) -> list[int]:
    """Chunk ends for a prefill resuming at ``start``; ``stops`` are extra positions a
    retention policy needs states at. Without internal-checkpoint kernels (the backend cannot
    export a state from inside a chunk)."""
    n, block = num_prompt_tokens, geometry.block_size
    last_cache = prompt_checkpoint_position(n, block)
    tail = prompt_checkpoint_position(n, geometry.unit) if geometry.fine_grained else 0
    if not last_cache < tail < n:
        tail = 0
    extra = sorted(set(stops))
    ends: list[int] = []
    pos = start
    while pos < n:
        end = min(pos + max_chunk_tokens, n)
        if end < n:
            aligned = end // block * block
            if aligned > pos or block <= max_chunk_tokens:
                end = aligned
        next_boundary = (pos // block + 1) * block if pos % block else 0
        junction_stop = pos + (junction - pos) // block * block if pos < junction < end else 0
        end = min(
            (s for s in (next_boundary, last_cache, tail, junction_stop, *extra) if pos < s < end),
            default=end,
        )
        if end <= pos:  # a zero-length chunk cannot happen in vLLM; guard the loop anyway
            end = n
        ends.append(end)
        pos = end
    return ends
