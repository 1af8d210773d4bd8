"""No state keyed before it exists: vLLM's async scheduler (hand-driven, real classes) schedules a
chunk ending at a kept sub-block U_end state, whose key is published while the step is
scheduled; the request is then aborted, or preempted, before that step's output arrives. The
next request must not hit that state (the step may never have written it): it computes from
where caching off would, and the resumed request does not read its own unconfirmed state either.
Without the abort or preemption the same state is served once the output arrives."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.compat import runner_output
from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from vllm.v1.request import RequestStatus

from boundary.checkpoints.retention import Variant
from tests.vllm.streams import BLOCK, turn

pytestmark = pytest.mark.vllm

UNIT = 4
SHAPE = EngineShape(policy=Variant.INPUT_END, prefix_match_unit=UNIT, async_scheduling=True)


def _schedule_the_u_end_chunk():
    """A replay whose first step schedules the chunk that ends at turn (11, 2)'s U_end, inside a
    block, and keys its state; the step's output has not arrived."""
    a = turn(11, 2)
    u_end = a.prompt.u_end // UNIT * UNIT
    assert u_end % BLOCK  # a sub-block state
    run = Replay(SHAPE)
    request = run.request(ReplayRequest.from_turn(a))
    run.scheduler.add_request(request)
    step = run.scheduler.schedule()
    assert step.num_scheduled_tokens[request.request_id] == u_end  # the chunk ends at U_end
    return run, request, step, u_end


def _admit_the_next_request(run):
    """The user's next message arrives; the step admitting it is scheduled (async: before the
    earlier step's output is processed)."""
    b = run.request(ReplayRequest.from_turn(turn(11, 4)))
    run.scheduler.add_request(b)
    step = run.scheduler.schedule()
    new = {n.req_id: n.num_computed_tokens for n in step.scheduled_new_reqs}
    return new, b, step


def _output(step):
    ids = list(step.num_scheduled_tokens)
    return runner_output(ids, [[] for _ in ids])


def test_an_aborted_requests_unconfirmed_sub_block_state_is_not_hit():
    run, a, step, u_end = _schedule_the_u_end_chunk()
    run.scheduler.finish_requests(a.request_id, RequestStatus.FINISHED_ABORTED)
    new, b, _ = _admit_the_next_request(run)
    assert new[b.request_id] < u_end  # would be u_end: the state keyed before its step ran
    assert new[b.request_id] == 0  # what caching off computes from (nothing else is cached)
    run.scheduler.update_from_output(step, _output(step))  # the late output changes nothing


def test_a_preempted_requests_unconfirmed_sub_block_state_is_read_by_nobody():
    run, a, step, u_end = _schedule_the_u_end_chunk()
    scheduler = run.scheduler
    scheduler.running.remove(a)
    scheduler._preempt_request(a, time.monotonic())
    new, b, second = _admit_the_next_request(run)
    assert new[b.request_id] < u_end
    assert new[b.request_id] == 0  # as caching off
    scheduler.update_from_output(step, _output(step))
    scheduler.update_from_output(second, _output(second))
    while a.request_id not in new:  # the preempted request resumes: from nothing of its own
        again = scheduler.schedule()
        new = {n.req_id: n.num_computed_tokens for n in again.scheduled_new_reqs}
        scheduler.update_from_output(again, _output(again))
    assert new[a.request_id] < u_end


def test_once_the_steps_output_arrives_the_state_is_served():
    run, a, step, u_end = _schedule_the_u_end_chunk()
    assert run.scheduler.boundary_retention.unconfirmed  # keyed, not yet written
    run.scheduler.update_from_output(step, _output(step))
    assert not run.scheduler.boundary_retention.unconfirmed
    run.scheduler.finish_requests(a.request_id, RequestStatus.FINISHED_ABORTED)
    new, b, _ = _admit_the_next_request(run)
    assert new[b.request_id] == u_end
    assert run.scheduler.boundary_retention.unconfirmed_unkeyed == 0
