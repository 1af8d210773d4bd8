"""Long plain segments are kept across requests by exact text, and kept ids are the encoder's own.

The cache alone: admitted on the second sighting, bounded by characters and by ids (least
recently used dropped first), a segment too large never kept, the once-seen hashes bounded. Through the
tiktoken path: a long segment that NFC rewrites encodes as ``tokenizers`` does on every
sighting (kept or not), tau-bench renders that share a system prompt hit the cache and still
give transformers' ids, and threads sharing one encoder get the same ids.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import boundary
from boundary.shipped.datasets import tau_bench_airline
from boundary.tokenize.segment_cache import SegmentCache


def test_a_segment_is_kept_the_second_time_it_is_seen() -> None:
    cache = SegmentCache(min_chars=1)
    cache.put("a system prompt", [1, 2, 3])
    assert cache.get("a system prompt") is None
    cache.put("a system prompt", [1, 2, 3])
    assert cache.get("a system prompt") == (1, 2, 3)
    assert cache.get("a system prompt ") is None
    assert cache.hits == 1


def test_the_least_recently_used_segment_goes_first_when_characters_run_over() -> None:
    cache = SegmentCache(min_chars=1, max_chars=160)

    def keep(text: str) -> None:
        cache.put(text, [len(text)])
        cache.put(text, [len(text)])

    for letter in "abcdefghijklmnop":  # 16 segments of 10 characters: exactly the bound
        keep(letter * 10)
    assert len(cache) == 16
    assert cache.get("a" * 10) == (10,)  # now the most recently used
    keep("q" * 10)  # 170 characters: the least recently used, "b", goes
    assert cache.get("b" * 10) is None
    assert cache.get("a" * 10) == (10,)
    assert len(cache) == 16


def test_the_ids_held_are_bounded_as_the_characters_are() -> None:
    """Text with many ids a character (emoji) is bounded by its ids."""
    cache = SegmentCache(min_chars=1, max_ids=64)
    for letter in "abcdefghijklmnopqr":  # 18 one-character segments of 4 ids each: 72 ids
        cache.put(letter, [ord(letter)] * 4)
        cache.put(letter, [ord(letter)] * 4)
    assert len(cache) == 16  # 64 ids held: the two least recently used went
    assert cache.get("a") is None and cache.get("b") is None
    assert cache.get("c") == (ord("c"),) * 4


def test_a_segment_over_a_sixteenth_of_either_bound_is_never_kept() -> None:
    cache = SegmentCache(min_chars=1, max_chars=160, max_ids=160)
    for _ in range(3):
        cache.put("z" * 11, [1])
        cache.put("y", [1] * 11)
    assert cache.get("z" * 11) is None and cache.get("y") is None
    cache.put("z" * 10, [1] * 10)
    cache.put("z" * 10, [1] * 10)
    assert cache.get("z" * 10) == (1,) * 10


def test_the_segments_seen_once_are_bounded() -> None:
    cache = SegmentCache(min_chars=1, max_seen=2)
    for text in ("first", "second", "third", "first"):
        cache.put(text, [1])
    assert cache.get("first") is None  # forgotten before its second sighting
    cache.put("third", [3])
    assert cache.get("third") == (3,)


def test_a_long_segment_nfc_rewrites_encodes_as_tokenizers_does_on_every_sighting() -> None:
    """The key is the segment as rendered, the ids those of its normalized form."""
    tok = boundary.load_family("qwen3_5").tokenizer
    assert tok.segments is not None
    body = "e\u0301cole, \u00e9cole. " * 120  # NFC composes the first
    assert len(body) >= tok.segments.cache.min_chars
    text = f"<|im_start|>user\n{body}<|im_end|>\n"
    expected = tok.backend.encode(text, add_special_tokens=False).ids
    hits = tok.segments.cache.hits
    for _ in range(3):
        assert tok.encode(text).ids == expected
    assert tok.segments.cache.hits == hits + 1


def test_renders_that_share_a_system_prompt_hit_the_cache_and_give_transformers_ids() -> None:
    fam = boundary.load_family("qwen3_5")
    hf = fam.tokenizer.to_transformers(fam.template())
    cache = fam.tokenizer.segments.cache  # type: ignore[union-attr]
    hits = cache.hits
    for trajectory in tau_bench_airline()[:3]:
        request = trajectory[:2]
        assert len(request[0]["content"]) >= cache.min_chars
        prepared, _ = fam.prepare(request)
        expected = hf.apply_chat_template(
            prepared, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert fam.render(request).token_ids == list(expected)
    assert cache.hits > hits


def test_threads_sharing_one_encoder_get_the_same_ids() -> None:
    tok = boundary.load_family("qwen3_5").tokenizer
    texts = [f"<|im_start|>system\n{f'policy line {k % 3}. ' * 200}<|im_end|>\n" for k in range(24)]
    expected = [tok.backend.encode(t, add_special_tokens=False).ids for t in texts]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda t: tok.encode(t).ids, texts)) == expected


def test_a_cache_bounded_to_nothing_keeps_nothing() -> None:
    """``SegmentCache(max_chars=0)`` is how a deployment turns the cache off."""
    cache = SegmentCache(min_chars=1, max_chars=0)
    for _ in range(3):
        cache.put("a system prompt", [1, 2, 3])
    assert cache.get("a system prompt") is None and len(cache) == 0
