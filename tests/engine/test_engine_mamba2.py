"""A real vLLM engine (CPU build) over a tiny Mamba-2 model (``NemotronHForCausalLM``, the block
vLLM derives), unit 16: every variant's reused states give the outputs of computing from
scratch, and every hit is the one the cache model predicts.

**A workaround for a CPU-kernel limitation, in this test's engine setup only**: in align mode
vLLM's Mamba-2 layer asks its kernel to export the prompt-end state from inside the last chunk
(prefill checkpoint blocks), which the CPU kernel ignores (the first prefill fails with
``IndexError``). Replacing ``MambaMixer2.get_kv_cache_spec`` with ``MambaBase``'s (no export
blocks) makes the scheduler end a chunk there instead. So this module checks the chunk-split
path; the kernel-exported path, which Mamba-2 always uses on GPU, stays a GPU-only check.
"""

from __future__ import annotations

import pytest

from tests.engine.support import UNIT, VARIANTS, Runs, engine_shape, sessions

pytestmark = pytest.mark.engine

SESSIONS = 2  # the tool loop and U_end's case


@pytest.fixture(scope="module")
def engine():
    from boundary_vllm.engine_run import EngineRun
    from boundary_vllm.tiny_models import model_dir
    from vllm.model_executor.layers.mamba.abstract import MambaBase
    from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MambaMixer2, "get_kv_cache_spec", MambaBase.get_kv_cache_spec)  # the workaround
        run = EngineRun(model_dir("mamba2"), engine_shape(prefix_match_unit=UNIT, max_num_seqs=4))
        assert not run.scheduler.mamba_has_prefill_checkpoint_blocks
        yield run
        run.close()


@pytest.fixture(scope="module")
def runs(engine):
    return Runs(engine, in_flight=SESSIONS, chosen=sessions()[:SESSIONS])


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_mamba2_reused_states_give_the_outputs_of_computing_from_scratch(runs, variant):
    assert not runs.outputs_disagreeing(variant)
    assert runs.reused_requests(variant) >= 4


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_mamba2_every_hit_is_the_one_the_cache_model_predicts(engine, runs, variant):
    from boundary_vllm.prediction import ModelShape

    assert not runs.hits_unpredicted(variant, ModelShape(engine.block_size, UNIT))
