"""The public Mooncake trace format, converted into boundary's trace format.

Where it sits: in the experiment's workloads, beside ``trace``: it reads a Mooncake JSONL trace
and writes production records (``boundary.trace.records``) that ``boundary experiment`` replays with
their real arrival times; it imports only ``boundary.trace.records`` and ``boundary.trace.writer``.

A Mooncake line is ``{"timestamp": ms since the first request, "input_length": tokens,
"output_length": tokens, "hash_ids": [one id per block of 512 prompt tokens]}``: equal ids
are equal blocks (equal prefixes, as ids are given in prefix order), the last block may be
partial. No text, no sessions, no outputs. The conversion:

- prompt tokens: each block id stands for ``block_tokens`` token ids drawn once for that id
  (seeded by the id), so equal ids give equal tokens; the prompt is its blocks' tokens cut at
  ``input_length``;
- sessions: a request continues the session whose latest request's whole blocks are the
  deepest prefix of its ids (a conversation resends its history); when that latest request
  ended in a partial block, the block that replaces it starts with the same tokens (the
  history grew, it was not rewritten); a request that continues none opens a session
  (``mooncake-<n>``). A short prompt whose whole blocks are another conversation's opening
  chains that conversation into its session, as a shared opening would in a real deployment;
- outputs: ``output_length`` token ids; where the session's next prompt extends this prompt
  by at least that many tokens, they are those tokens (history carries the reply verbatim),
  else drawn fresh (``echo_outputs=False`` draws them always);
- arrival: ``arrival_s`` = ``timestamp / 1000``.

Invariants: a session's requests keep the trace's order; a request's prompt starts with its
session's previous prompt's whole blocks; equal ``hash_ids`` prefixes give equal token prefixes.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boundary.trace.records import TraceRequest, production_record
from boundary.trace.writer import write_trace

BLOCK_TOKENS = 512  # the Mooncake traces' block size
VOCABULARY = (1000, 150_000)  # drawn token ids (clear of the low control ids)


class MooncakeError(ValueError):
    """A Mooncake line that is not in the format, named by line number."""


@dataclass(frozen=True, slots=True)
class MooncakeLine:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def parse_line(raw: dict[str, Any], number: int, block_tokens: int) -> MooncakeLine:
    """One line, checked: the fields' types, and one id per block of the prompt."""

    def need(name: str, kind: type | tuple[type, ...]) -> Any:
        value = raw.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise MooncakeError(f"line {number}: {name!r} missing or not {getattr(kind, '__name__', kind)}")
        return value

    stamp, length, output = (
        need("timestamp", (int, float)),
        need("input_length", int),
        need("output_length", int),
    )
    ids = need("hash_ids", list)
    if stamp < 0 or length <= 0 or output < 0:
        raise MooncakeError(f"line {number}: timestamp and output_length must be >= 0, input_length > 0")
    if any(not isinstance(h, int) or isinstance(h, bool) or h < 0 for h in ids):
        raise MooncakeError(f"line {number}: hash_ids must be non-negative integers")
    blocks = -(-length // block_tokens)
    if len(ids) != blocks:
        raise MooncakeError(
            f"line {number}: {len(ids)} hash_ids for input_length {length} "
            f"({blocks} blocks of {block_tokens})"
        )
    return MooncakeLine(float(stamp), length, output, tuple(ids))


class _Blocks:
    """Each block id's tokens, drawn once (a replacing block may start from a partial one's)."""

    def __init__(self, block_tokens: int, seed: int) -> None:
        self.block_tokens = block_tokens
        self.seed = seed
        self.tokens: dict[int, list[int]] = {}

    def of(self, block: int, start: list[int]) -> list[int]:
        if block not in self.tokens:
            rng = random.Random(f"{self.seed}:{block}")
            fill = self.block_tokens - len(start)
            self.tokens[block] = start + [rng.randrange(*VOCABULARY) for _ in range(fill)]
        return self.tokens[block]


def _sessions(lines: list[MooncakeLine], block_tokens: int, blocks: _Blocks) -> list[tuple[int, list[int]]]:
    """Each line's session number and prompt tokens (see the module docstring)."""
    latest: dict[tuple[int, ...], int] = {}  # a session's latest whole blocks -> the session
    last: dict[int, int] = {}  # session -> its latest line
    out: list[tuple[int, list[int]]] = []
    for i, line in enumerate(lines):
        ids = line.hash_ids
        session = next((latest[ids[:k]] for k in range(len(ids), 0, -1) if ids[:k] in latest), None)
        starts: dict[int, list[int]] = {}  # block index -> the tokens that block starts with
        if session is None:
            session = len(last)
        else:
            prev = lines[last[session]]
            whole = prev.input_length // block_tokens
            if latest.get(prev.hash_ids[:whole]) == session:
                del latest[prev.hash_ids[:whole]]
            tail = out[last[session]][1][whole * block_tokens :]  # its partial block's tokens
            if tail and len(ids) > whole and ids[whole] != prev.hash_ids[whole]:
                starts[whole] = tail
        prompt = [t for k, block in enumerate(ids) for t in blocks.of(block, starts.get(k, []))]
        latest[ids[: line.input_length // block_tokens]] = session
        last[session] = i
        out.append((session, prompt[: line.input_length]))
    return out


def _reply(prompt: list[int], later: list[int] | None, length: int, rng: random.Random) -> list[int]:
    """The output: the next prompt's tokens after this prompt when it carries them, else drawn."""
    if later is not None and len(later) >= len(prompt) + length and later[: len(prompt)] == prompt:
        return later[len(prompt) : len(prompt) + length]
    return [rng.randrange(*VOCABULARY) for _ in range(length)]


def convert(
    raw_lines: Iterable[dict[str, Any]],
    *,
    block_tokens: int = BLOCK_TOKENS,
    seed: int = 0,
    echo_outputs: bool = True,
) -> Iterator[TraceRequest]:
    """Mooncake lines (parsed JSON objects, in trace order) as production records."""
    lines = [parse_line(raw, n, block_tokens) for n, raw in enumerate(raw_lines, 1)]
    placed = _sessions(lines, block_tokens, _Blocks(block_tokens, seed))
    following: dict[int, int] = {}  # line -> the next line of its session
    seen: dict[int, int] = {}
    for i in range(len(lines) - 1, -1, -1):
        if placed[i][0] in seen:
            following[i] = seen[placed[i][0]]
        seen[placed[i][0]] = i
    for i, line in enumerate(lines):
        session, prompt = placed[i]
        later = placed[following[i]][1] if echo_outputs and i in following else None
        reply = _reply(prompt, later, line.output_length, random.Random(f"{seed}:output:{i}"))
        yield production_record(
            f"mooncake-{session}", prompt, reply or None, arrival_s=line.timestamp_ms / 1000.0
        )


def convert_file(source: Path, target: Path, **options: Any) -> int:
    """Convert ``source`` (Mooncake JSONL) into ``target`` (boundary's trace); records written."""
    with source.open(encoding="utf-8") as f:
        raw = [json.loads(text) for text in f if text.strip()]
    records = list(convert(raw, **options))
    write_trace(target, records)
    return len(records)


if __name__ == "__main__":  # python -m boundary.experiment.workloads.mooncake IN OUT
    if len(sys.argv) != 3:
        sys.exit("usage: python -m boundary.experiment.workloads.mooncake MOONCAKE.jsonl OUT.jsonl")
    print(f"{convert_file(Path(sys.argv[1]), Path(sys.argv[2]))} records written to {sys.argv[2]}")
