# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""A model of how vLLM's worker moves recurrent states between Mamba blocks in align mode, and
a check that every state a request reads is the state of exactly its own tokens.

The runner modelled is **Model Runner V2**, the only GPU runner in vLLM 0.34.0 and the default
on 0.33.0 (``vllm/v1/worker/gpu/model_runner.py: GPUModelRunner`` with
``gpu/model_states/mamba_hybrid.py: MambaHybridModelState``, the same code in both wheels for
what is modelled here). Not modelled: Model Runner V1 (0.33.0's ``gpu_model_runner.py``, gone in
0.34.0) and the CPU build's runner; for chunk-end checkpoints without speculative decoding they
move states by the same rule.

Where it sits: the engine end, under ``replay`` (which alone calls it): a check of vLLM's worker
that no model needs; it imports only ``pin``, ``compat`` and vLLM.

No model runs on CPU, so each Mamba state block holds a *tag* instead of tensors: the token
prefix ``tokens[0:n]`` the state represents (``Prefix``: ``n`` and a digest of those tokens).
Per ``SchedulerOutput``, in the order the V2 runner applies it (``execute_model``:
``finish_requests``, ``add_requests``, ``update_requests``, then
``MambaHybridModelState.preprocess_state`` and the forward):

1. finished and preempted requests drop their request slot and running-state index
   (``finish_requests``);
2. ``new_block_ids_to_zero`` are zeroed (no state) and ``kv_cache_block_copies`` run
   (copy-on-write: a sub-block hit's private copy, a producer's sub-block state saved before the
   next chunk overwrites it), all sources read first (``update_requests``);
3. a new request, or one resumed after preemption (re-sent as new under V2), has its running
   index seeded at ``(computed - 1) // B`` (``MambaHybridModelState.add_request``; -1: fresh);
4. per scheduled request the running state moves to block ``cdiv(computed + scheduled, B) - 1``;
   when that index differs from the previous one (and that is not -1), the state is copied there
   (``preprocess_mamba_align_fused_kernel`` + ``precopy_mamba_align_fused_kernel``);
5. the request **reads** that block: it must hold ``tokens[0:computed]`` (nothing when
   ``computed == 0``), else a ``read`` violation;
6. the forward writes ``tokens[0:computed + scheduled]`` into it.

After each step every Mamba cache key (``BlockPool.cached_block_hash_to_block``) must answer
with a block holding exactly the prefix its hash names, else a ``rest`` violation: a kept
state labelled at a position it does not hold is caught before anyone reads it.

Not modelled: speculative decoding (accepted-token bias), and kernels that export the prompt
checkpoint from inside a chunk (``num_prefill_checkpoint_blocks > 0``); the model refuses them.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # reads non-public vLLM scheduler output

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import BlockHash, get_block_hash, get_group_id
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_cache_interface import KVCacheConfig, MambaSpec
from vllm.v1.request import Request

from boundary_vllm.compat import cached_blocks, resumed_request_ids


@dataclass(frozen=True, slots=True)
class Prefix:
    """The state after exactly ``tokens[0:length]`` (``digest`` tells token sequences apart)."""

    length: int
    digest: int


ZERO = Prefix(0, 0)  # a zeroed block, or the initial state


@dataclass(frozen=True, slots=True)
class StateViolation:
    """``kind``: ``read`` (a request started from a state not of its own prefix) or ``rest`` (a
    cache key answers with a state of another prefix)."""

    step: int
    kind: str
    request_id: str | None
    expected: Prefix
    found: Prefix | None

    def __str__(self) -> str:
        who = f" request {self.request_id}" if self.request_id else ""
        return f"step {self.step}{who}: {self.kind}: expected {self.expected}, found {self.found}"


@dataclass(slots=True)
class _Running:
    blocks: dict[int, list[int]]  # Mamba group id -> the request's block ids
    state_index: int | None = None  # where the running state sits (None: new or resumed)


@dataclass(slots=True)
class WorkerStates:
    """The worker's Mamba blocks as prefix tags; ``violations`` collects every mismatch.

    ``tokens(request_id)``: the request's whole token sequence (prompt and the outputs it will
    sample), known in advance in a replay, so async steps whose sampled tokens are not yet
    processed by the scheduler are tagged correctly.
    """

    kv_cache_config: KVCacheConfig
    pool: BlockPool
    tokens: Callable[[str], Sequence[int]]
    violations: list[StateViolation] = field(default_factory=list)
    steps: int = 0
    reads: int = 0  # states read from a block (computed > 0)
    checked_keys: int = 0
    groups: tuple[int, ...] = field(init=False)  # the Mamba group ids
    block_size: int = field(init=False)
    _content: dict[int, Prefix] = field(default_factory=dict)  # block id -> tag
    _running: dict[str, _Running] = field(default_factory=dict)
    _hash_prefix: dict[BlockHash, tuple[str, int]] = field(default_factory=dict)
    _hashed: dict[str, int] = field(default_factory=dict)
    _digests: dict[tuple[str, int], Prefix] = field(default_factory=dict)
    _reported: set[tuple[bytes, int]] = field(default_factory=set)  # (key, block id) found wrong

    def __post_init__(self) -> None:
        specs = {
            gid: g.kv_cache_spec
            for gid, g in enumerate(self.kv_cache_config.kv_cache_groups)
            if isinstance(g.kv_cache_spec, MambaSpec)
        }
        for spec in specs.values():
            if spec.mamba_cache_mode != "align":
                raise ValueError("only align mode is modelled")
            if spec.num_speculative_blocks or spec.num_prefill_checkpoint_blocks:
                raise ValueError("speculative blocks and exported prompt checkpoints are not modelled")
        if not specs:
            raise ValueError("no Mamba group")
        self.groups = tuple(specs)
        self.block_size = next(iter(specs.values())).block_size

    def prefix(self, request_id: str, length: int) -> Prefix:
        key = (request_id, length)
        tag = self._digests.get(key)
        if tag is None:
            tag = ZERO if length == 0 else Prefix(length, hash(tuple(self.tokens(request_id)[:length])))
            self._digests[key] = tag
        return tag

    # -- one step --------------------------------------------------------------------------------
    def step(self, out: SchedulerOutput, requests: Mapping[str, Request]) -> None:
        """Apply one scheduler step as the worker runs it, then check every cached state."""
        self.steps += 1
        for rid in (*out.finished_req_ids, *(out.preempted_req_ids or ())):
            running = self._running.get(rid)
            if running is not None:
                running.state_index = None
        for rid in out.finished_req_ids:
            self._running.pop(rid, None)
        for block_id in out.new_block_ids_to_zero or ():
            self._content[block_id] = ZERO
        copies = [
            (c.dst_block_id, self._content.get(c.src_block_id)) for c in out.kv_cache_block_copies or ()
        ]
        for dst, tag in copies:
            if tag is None:
                self._content.pop(dst, None)
            else:
                self._content[dst] = tag
        computed: dict[str, int] = {}
        for new in out.scheduled_new_reqs:
            self._running[new.req_id] = _Running({g: list(new.block_ids[g]) for g in self.groups})
            computed[new.req_id] = new.num_computed_tokens
        cached = out.scheduled_cached_reqs
        resumed = resumed_request_ids(cached)
        for i, rid in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            if rid in resumed:
                assert new_ids is not None
                self._running[rid] = _Running({g: list(new_ids[g]) for g in self.groups})
            elif new_ids is not None:
                for g in self.groups:
                    self._running[rid].blocks[g].extend(new_ids[g])
            computed[rid] = cached.num_computed_tokens[i]
        for rid, num_scheduled in out.num_scheduled_tokens.items():
            self._run(rid, computed[rid], num_scheduled)
        for request in requests.values():
            self._learn_hashes(request)
        self._check_at_rest()

    def _run(self, rid: str, num_computed: int, num_scheduled: int) -> None:
        running = self._running[rid]
        block = self.block_size
        prev = running.state_index if running.state_index is not None else (num_computed - 1) // block
        curr = -(-(num_computed + num_scheduled) // block) - 1
        running.state_index = curr
        for g in self.groups:
            ids = running.blocks[g]
            if prev != -1 and prev != curr:
                tag = self._content.get(ids[prev])
                if tag is None:
                    self._content.pop(ids[curr], None)
                else:
                    self._content[ids[curr]] = tag
            if num_computed > 0:
                self.reads += 1
                expected = self.prefix(rid, num_computed)
                found = self._content.get(ids[curr])
                if found != expected:
                    self.violations.append(StateViolation(self.steps, "read", rid, expected, found))
            self._content[ids[curr]] = self.prefix(rid, num_computed + num_scheduled)

    # -- the cache, at rest ----------------------------------------------------------------------
    def _learn_hashes(self, request: Request) -> None:
        rid = request.request_id
        done = self._hashed.get(rid, 0)
        unit = self.pool.hash_block_size
        for i in range(done, len(request.block_hashes)):
            self._hash_prefix[request.block_hashes[i]] = (rid, (i + 1) * unit)
        self._hashed[rid] = len(request.block_hashes)

    def _check_at_rest(self) -> None:
        for key, block_id in cached_blocks(self.pool):
            if get_group_id(key) not in self.groups:
                continue
            origin = self._hash_prefix.get(get_block_hash(key))
            if origin is None:
                continue  # a hash no replayed request produced
            expected = self.prefix(*origin)
            self.checked_keys += 1
            found = self._content.get(block_id)
            if found != expected and (key, block_id) not in self._reported:
                self._reported.add((key, block_id))
                self.violations.append(StateViolation(self.steps, "rest", None, expected, found))
