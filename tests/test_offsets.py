"""Char -> token flooring over raw token offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundary.offsets import OffsetsTokenMap, PiecewiseTokenMap
from boundary.tokenize.tokenizer import EncodingTokenMap, load_vocabulary


def test_floor_lands_on_the_deepest_clean_boundary() -> None:
    # "ab" "c" "d" over "abcd"
    m = OffsetsTokenMap([(0, 2), (2, 3), (3, 4)], 4)
    assert m.floor(0) == (0, 0)
    assert m.floor(1) == (0, 0)  # inside "ab"
    assert m.floor(2) == (1, 2)
    assert m.floor(3) == (2, 3)
    assert m.floor(4) == (3, 4)
    assert m.floor(99) == (3, 4)


def test_a_character_split_over_two_tokens_has_no_boundary_inside() -> None:
    # " 😀" is two byte-level tokens over chars [1, 3) and [2, 3): no prefix ends between them
    m = OffsetsTokenMap([(0, 1), (1, 3), (2, 3), (3, 5)], 5)
    assert m.floor(3) == (3, 3)
    assert m.floor(2) == (1, 1)


def test_pieces_are_hard_cuts() -> None:
    a = OffsetsTokenMap([(0, 3), (3, 5)], 5)
    b = OffsetsTokenMap([(0, 2)], 2)
    m = PiecewiseTokenMap([(0, 0, a), (5, 2, b)], 7, 3)
    assert m.floor(4) == (1, 3)
    assert m.floor(5) == (2, 5)
    assert m.floor(6) == (2, 5)
    assert m.floor(7) == (3, 7)


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(list("ab \n\tüé日本😀👩‍👧<|>"))
        | st.characters(codec="utf-8", exclude_categories=("Cs",)),
        max_size=40,
    )
)
def test_the_lazy_encoding_map_agrees_with_the_offsets_map(text: str) -> None:
    backend = load_vocabulary("qwen3")
    enc = backend.encode(text + "<|im_end|>", add_special_tokens=False)
    n = len(text) + len("<|im_end|>")
    lazy, full = EncodingTokenMap(enc, n), OffsetsTokenMap(enc.offsets, n)
    for char in range(n + 1):
        assert lazy.floor(char) == full.floor(char), char


@pytest.mark.slow  # a mypy run
def test_the_type_checker_refuses_a_char_offset_where_a_token_offset_is_meant(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    api = pytest.importorskip("mypy.api")
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the project's mypy config
    mixed = tmp_path / "mixed.py"
    mixed.write_text(
        "from boundary.checkpoints.kinds import Checkpoint, CheckpointKind\n"
        "from boundary.offsets import CharOffset, OffsetsTokenMap, TokenOffset, locate\n"
        "Checkpoint.at(CheckpointKind.INPUT_END, TokenOffset(3), 1, p_end=TokenOffset(4))\n"
        "locate(OffsetsTokenMap([], 0), CharOffset(0))\n"
        "Checkpoint.at(CheckpointKind.INPUT_END, CharOffset(3), 1, p_end=TokenOffset(4))\n"
        "locate(OffsetsTokenMap([], 0), TokenOffset(0))\n"
    )
    out, _, status = api.run([str(mixed), "--follow-imports=silent", f"--cache-dir={tmp_path / 'cache'}"])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1
    assert [e.split(":")[1] for e in errors] == ["5", "6"], out
    assert '"CharOffset"; expected "TokenOffset"' in errors[0]
    assert '"TokenOffset"; expected "CharOffset"' in errors[1]
