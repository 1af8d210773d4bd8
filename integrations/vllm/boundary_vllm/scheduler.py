# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""vLLM schedulers that keep boundary's checkpoints. Load them with

    vllm serve MODEL --scheduler-cls boundary_vllm.scheduler.AutoBoundaryScheduler \\
        --additional-config '{"boundary": {"policy": "both"}}'

``AutoBoundaryScheduler`` builds ``AsyncBoundaryScheduler`` or ``BoundaryScheduler`` as the
engine's resolved ``scheduler_config.async_scheduling`` says (a platform may have turned async
scheduling off itself, as vLLM's CPU build does). Per request, from the hints in
``vllm_xargs`` (or, for server-rendered prompts, the recognised generation prompt), the
configured policy variant of ``boundary.checkpoints.retention`` decides which states to keep
(``retention`` executes it):

- a prefill chunk ends at a kept prompt-side position only where vLLM would not produce that
  state itself (never at P_end's own checkpoint, never when the kernels export it);
- at finish the decision with D_end known may keep the aligned decode-end state, unless
  decode-side states cannot serve a later prefill here (then it is reported non-consumable).

Requests without checkpoints are scheduled and cached exactly as upstream. At construction the
configuration is cross-checked (``engine_checks``, ``state_export``): a scheduler class that does
not match async scheduling, speculative decoding or an unverified state-export mode (ReplaySSM)
unless opted in, is refused; the retention interval is read where vLLM applies it (the KV-cache
coordinator, which a connector may have rewritten) and a rewrite is logged. Nothing in vLLM is
edited: the split, admission, scheduling and finish hooks are overrides of ``Scheduler`` (the
same signatures in every supported build, ``boundary_vllm.compat``), and retention wraps each
Mamba manager's ``cache_blocks``.

Where it sits: the engine end, after checkpoints: vLLM loads it by name (``--scheduler-cls``); it
reads ``hints`` and ``settings``, decides through ``boundary.checkpoints.retention`` and executes
through ``retention``, recording with ``recording`` and counting with ``counters``. ``engine_run``
(through ``step_log``'s logged schedulers) and ``replay`` drive it in tests and benchmarks.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # the engine side extends non-public vLLM classes

import functools
import time
from collections.abc import Collection, Sequence
from typing import Any

from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from boundary.checkpoints.retention import RequestBoundaries, Variant
from boundary_vllm.compat import applied_retention_interval, restore_block_size
from boundary_vllm.counters import CheckpointCounters, PrometheusExport
from boundary_vllm.decode_end import DecodeEndAvailability, decode_end_availability, final_d_end
from boundary_vllm.engine_checks import EngineFacts, check_engine
from boundary_vllm.hints import SESSION_KEY, CheckpointHints, HintStatus, decode_hints
from boundary_vllm.ledger import RequestCheckpoints
from boundary_vllm.recorded_engine import recording_header
from boundary_vllm.recording import FinishedRequest, TraceRecorder, recorder_from
from boundary_vllm.retention import CheckpointRetention, install
from boundary_vllm.server_render import GenerationSuffixes, load_server_family
from boundary_vllm.settings import IntegrationSettings, read_settings
from boundary_vllm.state_export import check_state_export

logger = init_logger(f"vllm.{__name__}")  # under vLLM's logger, so its handlers and level apply

DERIVED = "derived"  # hint label: U_end recognised from a server-rendered generation prompt
_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


class BoundaryCheckpointsMixin:
    """The hooks; mixed in front of vLLM's ``Scheduler`` or ``AsyncScheduler``."""

    boundary_settings: IntegrationSettings
    boundary_counters: CheckpointCounters
    boundary_retention: CheckpointRetention | None
    decode_end: DecodeEndAvailability

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._resolved_block_size = int(self.cache_config.block_size)  # from the KV-cache groups
        self.boundary_settings = read_settings(self.vllm_config.additional_config)
        self.boundary_counters = CheckpointCounters()
        self.boundary_metric_labels = {
            "model_name": str(self.vllm_config.model_config.served_model_name),
            "engine": str(self.vllm_config.parallel_config.data_parallel_index),
        }
        self._rejected_reasons: set[str] = set()
        self.decode_end = decode_end_availability(
            self.vllm_config.kv_transfer_config, decode_to_prefill=self.boundary_settings.decode_to_prefill
        )
        self.boundary_retention = None
        # the interval the KV-cache coordinator applies: a connector may have rewritten it
        # (MooncakeStore's save_decode_cache sets the block size) after cache_config was read
        self.boundary_retention_interval = applied_retention_interval(self)
        inactive = self._inactive_reason()
        if inactive is None:
            self.boundary_retention = install(
                self,
                self.boundary_counters,
                ledger_capacity=self.boundary_settings.ledger_capacity,
                upstream_twin=self.boundary_settings.upstream_twin,
                offer_decode_states=self.decode_end.consumable and self.boundary_settings.decode_to_prefill,
            )
        warnings = check_engine(self._engine_facts(), self.boundary_settings)
        warnings += check_state_export(self.cache_config, self.boundary_settings)
        configured = self.cache_config.prefix_cache_retention_interval
        if self.boundary_retention_interval != configured:
            warnings.append(
                f"the retention interval vLLM applies is {self.boundary_retention_interval}, not the "
                f"configured {configured}: a KV connector rewrote it (MooncakeStore's save_decode_cache "
                "keeps a state at every block); boundary plans with the applied value: vLLM keeps the "
                "block-aligned and decode states itself, boundary adds its sub-block states"
            )
        for warning in warnings:
            logger.warning("boundary checkpoints: %s", warning)
        self._suffixes: GenerationSuffixes | None = None
        if self.boundary_settings.server_family and self.boundary_retention is not None:
            family = load_server_family(
                self.boundary_settings.server_family,
                model_tokenizer=self.vllm_config.model_config.tokenizer,
                variant=self.boundary_settings.server_family_variant,
            )
            self._suffixes = GenerationSuffixes.from_family(
                family,
                self.boundary_settings.server_family_variant,
                self.boundary_settings.server_template_kwargs,
            )
        self._pending_hits: dict[str, int] = {}
        self._pending_splits: dict[str, int] = {}
        self.boundary_recorder: TraceRecorder | None = recorder_from(
            self.boundary_settings.record_path,
            max_records=self.boundary_settings.record_max_records,
            max_bytes=self.boundary_settings.record_max_bytes,
            header=recording_header(self),
        )
        self._served: dict[str, tuple[int, str]] = {}  # request -> (hit, kind), kept while recording
        self._exported = CheckpointCounters()
        self._last_log = self._last_export = time.monotonic()
        logger.info(
            "boundary checkpoints: policy=%s, %s; decode_end %s (%s)",
            self.boundary_settings.policy.value,
            "active" if inactive is None else f"inactive: {inactive}",
            self.decode_end.status.value,
            self.decode_end.reason,
        )

    def _engine_facts(self) -> EngineFacts:
        speculative = self.vllm_config.speculative_config
        retention = self.boundary_retention
        return EngineFacts(
            scheduler_class=f"{type(self).__module__}.{type(self).__qualname__}",
            scheduler_is_async=isinstance(self, AsyncScheduler),
            async_scheduling=bool(self.scheduler_config.async_scheduling),
            speculative=None if speculative is None else str(speculative.method),
            platform=str(current_platform.device_type),
            block_size=retention.block_size if retention is not None else None,
            hit_unit=retention.hit_unit if retention is not None else None,
        )

    def _inactive_reason(self) -> str | None:
        if not self.cache_config.enable_prefix_caching:
            return "prefix caching is off"
        if not self.need_mamba_block_aligned_split:
            return "no Mamba layers in align cache mode (nothing recurrent to checkpoint)"
        return None

    # -- admission -------------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        is_new = request.request_id not in self.requests
        super().add_request(request)
        if is_new and self.boundary_retention is not None:
            self._admit(request)

    def _admit(self, request: Request) -> None:
        extra_args = request.sampling_params.extra_args if request.sampling_params is not None else None
        allowed = [p.value for p in Variant] if self.boundary_settings.request_policy else []
        hints = decode_hints(extra_args, request.num_prompt_tokens, policies=allowed)
        label = hints.status.value
        if hints.status is HintStatus.ABSENT and self._suffixes is not None and request.prompt_token_ids:
            derived = self._suffixes.input_end(request.prompt_token_ids)
            if derived is not None:
                hints, label = CheckpointHints(HintStatus.ACCEPTED, input_end=derived), DERIVED
        self.boundary_counters.hints[label] += 1
        if hints.status is HintStatus.REJECTED:
            self._warn_rejected(request.request_id, hints)
        elif hints.reason is not None:
            self._note_ignored(request.request_id, hints)
        if hints.status is not HintStatus.ACCEPTED:
            return
        variant = Variant(hints.policy) if hints.policy else self.boundary_settings.policy
        assert self.boundary_retention is not None
        boundaries = RequestBoundaries(
            request.num_prompt_tokens, hints.input_end, None, hints.round_trip, hints.horizon
        )
        self.boundary_retention.admit(
            request,
            variant,
            boundaries,
            decode_states=self.decode_end.consumable and self.boundary_retention_interval == 0,
        )

    def _warn_rejected(self, request_id: str, hints: CheckpointHints) -> None:
        """Log rejected hints once per distinct reason (every rejection is counted)."""
        key = hints.reason_key or str(hints.reason)
        if key in self._rejected_reasons:
            return
        self._rejected_reasons.add(key)
        logger.warning(
            "request %s: boundary hints ignored: %s (logged once per reason; every rejection is "
            'counted in boundary_requests_total{hints="rejected"})',
            request_id,
            hints.reason,
        )

    def _note_ignored(self, request_id: str, hints: CheckpointHints) -> None:
        """Log once per kind what an accepted request asked for and did not get (a per-request
        policy this engine does not allow); its boundaries are kept under the engine's policy."""
        key = hints.reason_key or str(hints.reason)
        if key in self._rejected_reasons:
            return
        self._rejected_reasons.add(key)
        logger.info(
            "request %s: %s; its boundaries are kept under the engine's policy (logged once)",
            request_id,
            hints.reason,
        )

    def _get_local_prefix_cache_hit(self, request: Request, *args: Any):
        result = super()._get_local_prefix_cache_hit(request, *args)  # max_cache_hit_length since 0.33.0
        if self.boundary_retention is not None:
            self._pending_hits[request.request_id] = result[1]
        return result

    # -- scheduling --------------------------------------------------------------------------------
    def _mamba_block_aligned_split(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_local_computed_tokens: int = 0,
        num_external_computed_tokens: int = 0,
    ) -> int:
        """Upstream's split, then also end the chunk where the request keeps a state that vLLM
        would not produce itself (``RequestCheckpoints.stops``)."""
        num_new_tokens = super()._mamba_block_aligned_split(
            request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens
        )
        plan = self.boundary_retention.plan(request.request_id) if self.boundary_retention else None
        if plan is None:
            return num_new_tokens
        start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
        stop = next((s for s in plan.stops if start < s < start + num_new_tokens), None)
        if stop is not None:
            num_new_tokens = stop - start
            self._pending_splits[request.request_id] = num_new_tokens
        return num_new_tokens

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        retention = self.boundary_retention
        if retention is not None:
            for req_id, num_scheduled in scheduler_output.num_scheduled_tokens.items():
                request = self.requests[req_id]
                hit = self._pending_hits.pop(req_id, None)
                if hit is not None and request.num_preemptions == 0:
                    kind = retention.classify_hit(request, hit)
                    self.boundary_counters.record_hit(kind, hit)
                    if self.boundary_recorder is not None:
                        self._served[req_id] = (hit, str(kind))
                if self._pending_splits.get(req_id) == num_scheduled:
                    self.boundary_counters.forced_splits += 1
        self._pending_hits.clear()  # lookups of requests that were not scheduled are redone next step
        self._pending_splits.clear()
        super()._update_after_schedule(scheduler_output)
        self._report()

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        reset = restore_block_size(self, self._resolved_block_size)
        if reset is not None:
            logger.warning(
                "boundary checkpoints: vLLM reset the block size from %d to %d after start-up (the "
                "CPU build 0.32.0 re-applies its platform defaults in the engine core's handshake); "
                "restored to %d, so that prefill chunks end where the KV-cache manager keeps states",
                self._resolved_block_size,
                reset,
                self._resolved_block_size,
            )
        out: SchedulerOutput = super().schedule(*args, **kwargs)  # type: ignore[misc]
        if self.boundary_retention is not None:
            self.boundary_retention.seal(out)  # what this step keyed is unwritten until its output
        return out

    def update_from_output(self, scheduler_output: SchedulerOutput, *args: Any, **kwargs: Any) -> Any:
        if self.boundary_retention is not None:
            self.boundary_retention.confirm(scheduler_output)  # before requests finish inside
        return super().update_from_output(scheduler_output, *args, **kwargs)  # type: ignore[misc]

    # -- finish ----------------------------------------------------------------------------------
    def _free_request_blocks(self, request: Request) -> Any:
        """Finish, abort and preemption all free here: first un-key the sub-block states the
        request keyed in steps whose output has not arrived (``discard_unconfirmed``)."""
        if self.boundary_retention is not None:
            self.boundary_retention.discard_unconfirmed(request)
        return super()._free_request_blocks(request)  # type: ignore[misc]

    def _free_request(self, request: Request, delay_free_blocks: bool = False):
        if self.boundary_recorder is not None:
            self._record(request)
        if self.boundary_retention is not None:
            self.boundary_retention.finish(request, completed=request.status in _COMPLETED)
        return super()._free_request(request, delay_free_blocks)

    def _record(self, request: Request) -> None:
        """Hand a completed request to the recorder: references and ints only; the record is
        assembled, validated and serialized on the writer thread (``_finished``)."""
        served = self._served.pop(request.request_id, None)
        params = request.sampling_params
        if request.status not in _COMPLETED or params is None or served is None:
            return
        plan = self.boundary_retention.plan(request.request_id) if self.boundary_retention else None
        assert self.boundary_recorder is not None
        self.boundary_recorder.submit(
            functools.partial(
                _finished,
                request.request_id,
                params.extra_args,
                request.prompt_token_ids or (),
                request.output_token_ids,
                (request.num_prompt_tokens, request.num_tokens),
                params.all_stop_token_ids,
                plan,
                served,
                request.arrival_time,
            )
        )

    def shutdown(self) -> None:
        if self.boundary_recorder is not None:
            self.boundary_recorder.close()
        super().shutdown()

    # -- counters --------------------------------------------------------------------------------
    def boundary_report(self) -> CheckpointCounters:
        """The counters now (retained bytes recomputed), also pushed to the metrics."""
        self._report(force=True)
        return self.boundary_counters

    def _report(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.boundary_retention is not None and (force or now - self._last_export >= 1.0):
            self._last_export = now
            self.boundary_counters.retained_bytes = self.boundary_retention.retained_bytes()
            _prometheus().add(
                self.boundary_counters,
                self._exported,
                decode_end_consumable=self.decode_end.consumable,
                labels=self.boundary_metric_labels,
            )
            self._exported = self.boundary_counters.snapshot()
        interval = self.boundary_settings.log_interval_s
        if interval and now - self._last_log >= interval:
            self._last_log = now
            logger.info("boundary %s", self.boundary_counters.summary())


def _finished(
    request_id: str,
    extra_args: dict[str, Any] | None,
    prompt_token_ids: Sequence[int],
    output_token_ids: Sequence[int],
    lengths: tuple[int, int],
    stop_token_ids: Collection[int],
    plan: RequestCheckpoints | None,
    served: tuple[int, str],
    arrival_s: float | None = None,
) -> FinishedRequest:
    """The record of a finished request (built on the recorder's thread); ``lengths``: its
    prompt and total token counts at finish; ``arrival_s``: vLLM's ``Request.arrival_time``."""
    num_prompt_tokens, num_tokens = lengths
    named = (extra_args or {}).get(SESSION_KEY)
    return FinishedRequest(
        session=str(named or request_id),
        session_named=bool(named),
        prompt_token_ids=prompt_token_ids,
        output_token_ids=output_token_ids,
        u_end=plan.request.u_end if plan is not None else None,
        d_end=final_d_end(num_prompt_tokens, output_token_ids, stop_token_ids, num_tokens),
        hit_tokens=served[0],
        served=served[1],
        policy=plan.variant.value if plan is not None else None,
        arrival_s=arrival_s,
    )


_EXPORT: PrometheusExport | None = None


def _prometheus() -> PrometheusExport:
    """One set of metric families per process (several schedulers add their own deltas)."""
    global _EXPORT
    if _EXPORT is None:
        _EXPORT = PrometheusExport()
    return _EXPORT


def scheduler_class_for(vllm_config: Any) -> type[BoundaryCheckpointsMixin]:
    """The boundary scheduler class matching ``vllm_config.scheduler_config.async_scheduling``
    as vLLM resolved it (the platform hook and the executor have had their say by then)."""
    asynchronous = bool(vllm_config.scheduler_config.async_scheduling)
    return AsyncBoundaryScheduler if asynchronous else BoundaryScheduler


class AutoBoundaryScheduler:
    """The one class to name in ``--scheduler-cls``: building it builds ``AsyncBoundaryScheduler``
    when the engine schedules asynchronously and ``BoundaryScheduler`` when it does not. The object
    vLLM gets is an instance of that class, never of this one (so ``__init__`` runs once, the
    chosen class's, and every configuration check sees the real scheduler)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0] if args else None
        if vllm_config is None:
            raise TypeError("AutoBoundaryScheduler needs vLLM's vllm_config, as vLLM's engine core passes it")
        return scheduler_class_for(vllm_config)(*args, **kwargs)


class BoundaryScheduler(BoundaryCheckpointsMixin, Scheduler):
    """``Scheduler`` with boundary checkpoints, for engines with async scheduling off."""


class AsyncBoundaryScheduler(BoundaryCheckpointsMixin, AsyncScheduler):
    """``AsyncScheduler`` with boundary checkpoints, for async scheduling (vLLM's default)."""
