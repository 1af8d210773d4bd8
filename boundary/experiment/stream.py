"""A rendered request stream: what every policy replays, rendered once.

Where it sits: in the experiment, after render and boundaries: what the workloads produce and
every replay reads (``replay``, ``policies``, ``arrivals``, ``harness``).

Each ``StreamRequest`` is one model call: its prompt token ids followed by the ids the model
committed, the three boundaries (P_end = the prompt length, U_end from the rendering, D_end =
the end of the committed output without its trailing stop token), and the facts the metrics
group by (session, turn, how the request continues the previous one). Streams are cached on
disk as JSON lines, token ids packed as base64 ``uint32``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from boundary.cache.hashing import PrefixHasher, PrefixReuse
from boundary.cache.request import CacheRequest

STREAM_FORMAT = 5


class Continuation(StrEnum):
    FIRST = "first"  # the session's first request
    TOOL = "tool"  # continues after tool results, no new user message (a tool loop)
    USER = "user"  # continues after a new user message


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """One request. ``tokens[:num_prompt_tokens]`` is the prompt, the rest what the model
    committed (stop token included). ``u_end``: None when the template cannot expose it.
    ``tool_call``: the output calls a tool (the next request continues the tool loop).
    ``round_trip``: a verifier's prediction, made without the next request, that the
    output re-renders token for token into the next request (None: no verifier ran).
    ``horizon``: the stability horizon (``boundary.verify.horizon``) for the next request, tokens of
    prompt + output predicted to stay a prefix of it (None: not predicted).
    ``recorded_arrival``: the trace's ``arrival_s`` (None: the trace has none); ``arrival`` /
    ``finish``: the schedule the replay uses (``arrivals``).

    Invariants: ``u_end <= num_prompt_tokens <= d_end <= len(tokens)``; ``turn`` counts the
    session's requests from 0; ``arrival <= finish``.
    """

    rid: int
    session: str
    turn: int
    tokens: array[int]
    num_prompt_tokens: int
    u_end: int | None
    d_end: int
    continuation: Continuation
    tool_call: bool = False
    round_trip: bool | None = None
    horizon: int | None = None
    recorded_arrival: float | None = None
    arrival: float = 0.0
    finish: float = 0.0

    def __post_init__(self) -> None:
        n = self.num_prompt_tokens
        if not (0 < n <= self.d_end <= len(self.tokens)) or (
            self.u_end is not None and not 0 <= self.u_end <= n
        ):
            raise ValueError(
                f"request {self.rid} ({self.session} turn {self.turn}): boundaries out of order: "
                f"U_end={self.u_end} P_end={n} D_end={self.d_end} tokens={len(self.tokens)}"
            )

    @property
    def p_end(self) -> int:
        return self.num_prompt_tokens

    @property
    def output_tokens(self) -> int:
        return len(self.tokens) - self.num_prompt_tokens


@dataclass
class Stream:
    """Requests in arrival order, plus how they were made (``provenance``: workload, family,
    variant, template kwargs, client behaviour, seed, where outputs came from...)."""

    name: str
    provenance: dict[str, Any]
    requests: list[StreamRequest] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[StreamRequest]:
        return iter(self.requests)

    def sessions(self) -> dict[str, list[StreamRequest]]:
        out: dict[str, list[StreamRequest]] = {}
        for r in self.requests:
            out.setdefault(r.session, []).append(r)
        return out

    def key(self) -> str:
        text = json.dumps({"format": STREAM_FORMAT, "name": self.name, **self.provenance}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    # -- disk -----------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(
                json.dumps({"format": STREAM_FORMAT, "name": self.name, "provenance": self.provenance}) + "\n"
            )
            for r in self.requests:
                row = {k: getattr(r, k) for k in StreamRequest.__slots__ if k != "tokens"}
                row["tokens"] = base64.b64encode(_uint32(r.tokens).tobytes()).decode()
                f.write(json.dumps(row) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Stream:
        with path.open(encoding="utf-8") as f:
            head = json.loads(f.readline())
            if head.get("format") != STREAM_FORMAT:
                raise ValueError(f"{path}: stream format {head.get('format')} (expected {STREAM_FORMAT})")
            requests = []
            for line in f:
                row = json.loads(line)
                tokens = array("I")
                tokens.frombytes(base64.b64decode(row.pop("tokens")))
                row["continuation"] = Continuation(row["continuation"])
                requests.append(StreamRequest(tokens=tokens, **row))
        return cls(head["name"], head["provenance"], requests)


def _uint32(tokens: Sequence[int]) -> array[int]:
    return tokens if isinstance(tokens, array) and tokens.typecode == "I" else array("I", tokens)


def cache_requests(stream: Stream, unit: int) -> list[CacheRequest]:
    """The stream as the cache model sees it at ``unit``: one hasher for the whole stream, so
    equal prefixes get equal ids across sessions; each request reuses the ids its session's
    previous request already computed for their shared prefix."""
    hasher = PrefixHasher(unit)
    last: dict[str, PrefixReuse] = {}
    out = []
    for r in stream.requests:
        request = CacheRequest.from_tokens(
            r.rid,
            r.tokens,
            r.num_prompt_tokens,
            hasher,
            arrival=r.arrival,
            finish=r.finish,
            reuse=last.get(r.session),
        )
        last[r.session] = PrefixReuse(r.tokens, request.prefix)
        out.append(request)
    return out
