"""U_end for prompts vLLM renders itself: recognised from the family's generation prompt."""

from __future__ import annotations

import pytest
from boundary_vllm.server_render import GenerationSuffixes

from tests.support import family
from tests.vllm.streams import turns


@pytest.fixture(scope="module")
def suffixes() -> GenerationSuffixes:
    return GenerationSuffixes.from_family(family("qwen3_5"))


def test_every_thinking_mode_has_its_generation_prompt(suffixes):
    fam = family("qwen3_5")
    texts = {fam.tokenizer.decode(list(s)) for s in suffixes.suffixes}
    assert texts == {"<|im_start|>assistant\n<think>\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n"}


def test_the_recognised_u_end_equals_the_rendered_one(suffixes):
    for c in (0, 11):
        for t in turns(c):
            assert suffixes.input_end(t.prompt.token_ids) == t.prompt.u_end


def test_a_prompt_without_a_generation_prompt_gets_no_u_end(suffixes):
    t = turns(11)[1]
    assert suffixes.input_end(t.tokens) is None  # prompt plus the model's answer
    assert suffixes.input_end(t.prompt.token_ids[: t.prompt.u_end]) is None


@pytest.mark.vllm
def test_a_server_rendered_stream_gets_the_same_hits_as_a_hinted_one():
    from boundary_vllm.replay import EngineShape, Replay, ReplayRequest, replay

    stream = turns(11)
    hinted = replay([ReplayRequest.from_turn(t) for t in stream], EngineShape())
    server = Replay(EngineShape(settings={"server_family": "qwen3_5"}))
    derived = server.run_all([ReplayRequest.from_turn(t, hints=False) for t in stream])
    assert [o.hit_tokens for o in derived] == [o.hit_tokens for o in hinted]
    assert [o.hit_kind for o in derived] == [o.hit_kind for o in hinted]
    assert server.counters.hints == {"derived": len(stream)}


@pytest.mark.slow
def test_the_served_models_own_tokenizer_files_give_the_same_generation_prompts(tmp_path, suffixes):
    from boundary_vllm.server_render import load_server_family

    from tests.support import reference_tokenizer

    reference_tokenizer("qwen3_5", "think").save_pretrained(tmp_path)  # what a model directory holds
    served = load_server_family("model", model_tokenizer=str(tmp_path), variant=None)
    derived = GenerationSuffixes.from_family(served, template_kwargs=[{"enable_thinking": False}])
    assert derived.suffixes == suffixes.suffixes
