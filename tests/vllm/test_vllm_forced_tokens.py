"""``forced_tokens.ForcedTokens`` through Model Runner V2's logits-processor interface (the only
runner of vLLM 0.34.0, the default of 0.33.0), driven with vLLM's own ``LogitsContext`` on CPU
tensors: a forced request writes exactly its tokens (also after a preemption resumes it), then
samples freely; other rows and a recycled slot are untouched. The engine tier runs the V1
adapter on the CPU build; the GPU check runs this one in a real engine."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

VOCAB = 32


def _v2():
    from boundary_vllm.compat import DIFF

    if DIFF.logits_processor != "v2":
        pytest.skip("the CPU build runs V1 logits processors (the engine tier covers them)")
    import torch
    from boundary_vllm.engine_run import EngineRequest
    from boundary_vllm.forced_tokens import ForcedTokens
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcessor

    assert issubclass(ForcedTokens, LogitsProcessor)
    return torch, EngineRequest, ForcedTokens, LogitsContext


def _context(torch, LogitsContext, slots: list[int], positions: list[int]):
    idx = torch.tensor(slots, dtype=torch.int32)
    return LogitsContext(
        expanded_idx_mapping=idx,
        idx_mapping=idx,
        idx_mapping_np=np.array(slots, dtype=np.int32),
        expanded_local_pos=torch.zeros(len(slots), dtype=torch.int32),
        input_ids=torch.zeros(len(slots), dtype=torch.int32),
        pos=torch.tensor(positions, dtype=torch.int64),
        seq_lens_upper_bound_np=np.array([p + 1 for p in positions], dtype=np.int32),
    )


def test_a_forced_request_writes_its_tokens_then_samples_freely_and_other_rows_are_untouched():
    torch, EngineRequest, ForcedTokens, LogitsContext = _v2()
    prompt = tuple(range(10))
    forced = EngineRequest(prompt, forced=(5, 7, 9))
    free = EngineRequest(prompt)
    proc = ForcedTokens(None, None)  # it reads nothing of the runner's request state
    ForcedTokens.validate_params(forced.sampling_params())
    assert proc.add_request(3, forced.sampling_params()) is True
    assert proc.add_request(1, free.sampling_params()) is False
    logits = torch.randn(2, VOCAB, generator=torch.Generator().manual_seed(0))
    best_free = int(logits[1].argmax())
    written = []
    for pos in range(len(prompt) - 1, len(prompt) + 4):  # output k is sampled after input position 9 + k
        step = logits.clone()
        out = proc.apply(step, _context(torch, LogitsContext, [3, 1], [pos, pos]))
        written.append(int(out[0].argmax()))
        assert int(out[1].argmax()) == best_free and torch.equal(out[1], logits[1])
    assert written[:3] == [5, 7, 9]
    assert written[3:] == [int(logits[0].argmax())] * 2  # then free: the model's own choice
    # the forced token keeps its own logit (logprobs are reported from the raw logits anyway)
    step = logits.clone()
    assert proc.apply(step, _context(torch, LogitsContext, [3], [9]))[0, 5] == logits[0, 5]


def test_a_resumed_request_continues_its_forced_tokens_and_a_recycled_slot_forgets_them():
    torch, EngineRequest, ForcedTokens, LogitsContext = _v2()
    prompt = tuple(range(10))
    proc = ForcedTokens(None, None)
    proc.add_request(0, EngineRequest(prompt, forced=(5, 7, 9, 11)).sampling_params())
    # preempted after two outputs, re-sent as new (V2) with prompt + outputs refilled: its last
    # input position is 11, so output 2 is due
    proc.add_request(2, EngineRequest(prompt, forced=(5, 7, 9, 11)).sampling_params())
    logits = torch.zeros(1, VOCAB)
    assert int(proc.apply(logits.clone(), _context(torch, LogitsContext, [2], [11]))[0].argmax()) == 9
    proc.add_request(2, EngineRequest(prompt).sampling_params())  # the slot now holds a free request
    step = logits.clone()
    assert torch.equal(proc.apply(step, _context(torch, LogitsContext, [2], [11])), logits)


def test_forced_tokens_without_the_prompt_length_are_refused_at_admission():
    _torch, _EngineRequest, ForcedTokens, _LogitsContext = _v2()
    from vllm.sampling_params import SamplingParams

    with pytest.raises(ValueError, match="boundary_forced_from"):
        ForcedTokens.validate_params(SamplingParams(extra_args={"boundary_forced_tokens": [1, 2]}))


def test_vllms_own_v2_loader_takes_forced_tokens_and_admits_the_gpu_checks_forced_requests():
    """What ``LLM(logits_processors=[ForcedTokens])`` runs in the frontend before any GPU work:
    vLLM's V2 loader accepts the class and its validator admits every request the GPU check's
    scenarios send (the forced tool-loop turns included)."""
    _torch, _EngineRequest, ForcedTokens, _LogitsContext = _v2()
    from boundary_vllm.scenarios import DEFAULT_SLICE, sessions
    from vllm.v1.worker.gpu.sample.logits_processor import build_custom_logits_processors_params_validator

    validate = build_custom_logits_processors_params_validator([ForcedTokens])
    requests = [r for session in sessions(DEFAULT_SLICE) for r in session]
    forced = [r for r in requests if r.forced]
    assert forced and len(forced) < len(requests)
    for request in requests:
        validate(request.sampling_params())
        validate(request.sampling_params(skip_cache=True))
