# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""The scheduler's step log: ``StepLog`` (per request, the steps that admitted, advanced and freed
it, as ``LoggedRequest``), the ``StepLogging`` mixin that fills it, and the logged schedulers
(boundary's and vLLM's own, sync and async) an ``EngineRun`` starts.

Where it sits: the engine end, under ``engine_run``: ``EngineRun`` picks one of the logged
schedulers here (``boundary_vllm.scheduler``'s or vLLM's) and reads each finished request's
``LoggedRequest`` into its ``EngineOutcome``, so a cache model (``prediction``) can be fed the
engine's own event order and ``scenarios`` can count prefill chunks.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # extends non-public vLLM classes

from dataclasses import dataclass, field
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from boundary_vllm.scheduler import AsyncBoundaryScheduler, BoundaryScheduler


@dataclass(slots=True)
class LoggedRequest:
    """One request as the scheduler saw it: ``steps`` holds (step, order in the step, computed
    tokens after it) for each step that scheduled it; ``finished`` is the number of steps
    scheduled when it was freed."""

    hit: int
    kind: str
    admitted: int
    num_prompt_tokens: int
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    prefill_chunks: list[int] = field(default_factory=list)
    finished: int | None = None
    output_token_ids: tuple[int, ...] = ()
    preemptions: int = 0


@dataclass(slots=True)
class StepLog:
    """What the scheduler did, step by step (schedules counted from 1)."""

    step_no: int = 0
    requests: dict[str, LoggedRequest] = field(default_factory=dict)  # by the engine's request id

    def find(self, request_id: str) -> LoggedRequest | None:
        """The entry for a request id as the caller gave it (the engine appends a suffix)."""
        return self.requests.get(request_id) or next(
            (v for k, v in self.requests.items() if k.rsplit("-", 1)[0] == request_id), None
        )

    def scheduled(self, scheduler: Any, out: SchedulerOutput) -> None:
        self.step_no += 1
        retention = getattr(scheduler, "boundary_retention", None)
        for new in out.scheduled_new_reqs:
            if new.req_id not in self.requests:
                request = scheduler.requests[new.req_id]
                kind = (
                    "n/a"
                    if retention is None
                    else str(retention.classify_hit(request, new.num_computed_tokens))
                )
                self.requests[new.req_id] = LoggedRequest(
                    new.num_computed_tokens, kind, self.step_no, request.num_prompt_tokens
                )
        for order, (rid, n) in enumerate(out.num_scheduled_tokens.items()):
            entry = self.requests.get(rid)
            if entry is None:
                continue
            computed = scheduler.requests[rid].num_computed_tokens
            entry.steps.append((self.step_no, order, computed))
            if computed - n < entry.num_prompt_tokens:
                entry.prefill_chunks.append(n)

    def freed(self, request: Request) -> None:
        entry = self.requests.get(request.request_id)
        if entry is not None:
            entry.finished = self.step_no
            entry.output_token_ids = tuple(request.output_token_ids)
            entry.preemptions = request.num_preemptions


class StepLogging:
    """Mixed in front of a scheduler: logs every step into ``step_log``."""

    step_log: StepLog

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_log = StepLog()

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        self.step_log.scheduled(self, out)
        return out

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        self.step_log.freed(request)
        return super()._free_request(request, *args, **kwargs)  # type: ignore[misc]


class LoggedAsyncBoundaryScheduler(StepLogging, AsyncBoundaryScheduler):
    """``AsyncBoundaryScheduler`` with a step log."""


class LoggedBoundaryScheduler(StepLogging, BoundaryScheduler):
    """``BoundaryScheduler`` with a step log."""


class LoggedAsyncScheduler(StepLogging, AsyncScheduler):
    """vLLM's own ``AsyncScheduler`` with a step log (the upstream baseline)."""


class LoggedScheduler(StepLogging, Scheduler):
    """vLLM's own ``Scheduler`` with a step log."""
