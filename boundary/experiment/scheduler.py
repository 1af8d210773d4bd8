"""One engine replica's scheduler: continuous batching with chunked prefill, as vLLM's does.

Where it sits: under ``serving`` (which routes requests to replicas and runs the clock);
imports nothing of the experiment but the step cost model.

Each step has a token budget (``max_num_batched_tokens``) and a cap on running sequences
(``max_num_seqs``). A step is planned as vLLM 0.33.0's scheduler plans it with chunked
prefill on: first every running sequence that has finished its prefill decodes one token
(one token of the budget each); then running sequences still prefilling get their next
chunk, oldest first; then waiting requests are admitted first come, first served while the
budget and the sequence cap allow, each getting a first chunk. A request's prefix-cache
lookup happens when it is admitted (the caller's ``admit`` returns the cached tokens), so
its prefill starts at the joint hit. The step that computes a request's last prompt token
samples its first token (TTFT ends there); each later step samples one more, and the request
finishes with its last output token. A chunk also ends at every position the caller's
``admit`` names (a kept state copied out there: the cache model's forced splits), so a policy
that splits a prefill pays the extra steps in TTFT and throughput.

Memory: a request reserves its blocks and running states when admitted and holds them until
it finishes (the cache model allocates a request whole); one that does not fit waits.
Not modelled: preemption, incremental block allocation,
align-mode chunk ends at block boundaries, speculative decoding, a step's CPU overlap.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SchedulerConfig(BaseModel):
    """vLLM's ``max_num_batched_tokens`` and ``max_num_seqs`` (its defaults on an H200)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_batched_tokens: int = Field(8192, gt=0)
    max_num_seqs: int = Field(256, gt=0)

    @model_validator(mode="after")
    def _decode_fits(self) -> SchedulerConfig:
        if self.max_num_seqs > self.max_num_batched_tokens:
            raise ValueError("max_num_seqs must not exceed max_num_batched_tokens (one decode token each)")
        return self


@dataclass(slots=True)
class Running:
    """One request on a replica. ``reserve``: the cache bytes it holds while running (its
    blocks and running states); ``computed``: prompt tokens cached or computed so far;
    ``produced``: output tokens sampled (the first by the step that ends the prefill);
    ``stops``: prompt positions a chunk must end at (a kept state copied out there: a forced
    split, so one more step)."""

    index: int
    arrival: float
    prompt: int
    output: int
    reserve: float = 0.0
    computed: int = 0
    produced: int = 0
    first_token: float | None = None
    stops: tuple[int, ...] = ()

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt


@dataclass(slots=True)
class Step:
    """One planned step: who decodes, which prefill chunks ``(sequence, start, end)``, and how
    many identical decode-only steps it stands for (``repeat``, set by the caller)."""

    decode: list[Running] = field(default_factory=list)
    chunks: list[tuple[Running, int, int]] = field(default_factory=list)
    repeat: int = 1

    def __bool__(self) -> bool:
        return bool(self.decode or self.chunks)


# (request index, now) -> (cached prompt tokens, the chunk ends its kept states force)
Admit = Callable[[int, float], tuple[int, tuple[int, ...]]]


class Replica:
    """Waiting requests (FIFO) and running sequences (admission order) of one engine.
    ``memory``: the cache bytes running requests may hold together; a waiting request whose
    ``reserve`` does not fit waits (vLLM stops admitting when it cannot allocate), unless
    nothing runs (it is admitted and the cache model counts the overcommit).
    Invariant: ``reserved`` is the sum of the running sequences' ``reserve``."""

    def __init__(self, config: SchedulerConfig, admit: Admit, memory: float = math.inf) -> None:
        self.config = config
        self.admit = admit
        self.memory = memory
        self.reserved = 0.0
        self.waiting: deque[Running] = deque()
        self.running: list[Running] = []
        self.busy = False

    def plan(self, now: float) -> Step:
        """The next step (decode first, then running chunks, then admissions, FCFS)."""
        budget = self.config.max_num_batched_tokens
        step = Step(decode=[s for s in self.running if not s.prefilling])
        budget -= len(step.decode)
        for s in self.running:
            if s.prefilling and budget > 0:
                budget -= self._chunk(step, s, budget)
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            if self.running and self.reserved + self.waiting[0].reserve > self.memory:
                break
            s = self.waiting.popleft()
            self.reserved += s.reserve
            s.computed, s.stops = self.admit(s.index, now)
            self.running.append(s)
            budget -= self._chunk(step, s, budget)
        return step

    @staticmethod
    def _chunk(step: Step, s: Running, budget: int) -> int:
        end = min(s.prompt, s.computed + budget)
        end = min((p for p in s.stops if s.computed < p < end), default=end)  # a forced split
        step.chunks.append((s, s.computed, end))
        return end - s.computed

    def complete(self, step: Step, end: float) -> list[Running]:
        """Apply ``step`` (ending at ``end``); return the sequences it finished."""
        for s in step.decode:
            s.produced += step.repeat
        for s, _, stop in step.chunks:
            s.computed = stop
            if not s.prefilling:
                s.produced, s.first_token = 1, end
        done = [s for s in self.running if not s.prefilling and s.produced >= s.output]
        if done:
            self.running = [s for s in self.running if s not in done]
            self.reserved -= sum(s.reserve for s in done)
        return done
