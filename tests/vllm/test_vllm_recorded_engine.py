"""The header a recording engine writes, read from vLLM's real scheduler and KV-cache config, and
``boundary experiment`` replaying such a recording at the engine's geometry by default."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.recorded_engine import recording_header
from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from vllm.v1.kv_cache_interface import MambaSpec

from boundary.checkpoints.retention import Variant
from boundary.cli.main import main as boundary_main
from boundary.trace.reader import read_header, read_trace
from boundary.trace.writer import TraceWriter
from tests.vllm.streams import turns

pytestmark = pytest.mark.vllm


def test_the_header_holds_the_engines_geometry():
    shape = EngineShape(
        block_size=32, prefix_match_unit=8, num_blocks=300, mamba_groups=3, policy=Variant.INPUT_END
    )
    run = Replay(shape)
    header = recording_header(run.scheduler)
    assert header is not None
    g = header.geometry
    specs = [group.kv_cache_spec for group in run.kv_cache_config.kv_cache_groups]
    mamba = next(s for s in specs if isinstance(s, MambaSpec))
    assert (g.block_size, g.prefix_match_unit, g.num_pages) == (32, 8, 300)
    assert (g.attention_groups, g.recurrent_groups, g.group_size) == (1, 3, 1)
    assert g.page_bytes == max(s.page_size_bytes for s in specs)
    assert g.state_bytes == mamba.real_page_size_bytes
    assert header.policy == "input_end" and header.engine.startswith("vllm")
    assert header.records == "production"


def test_without_sub_block_hits_the_unit_is_the_block():
    header = recording_header(Replay(EngineShape(block_size=32)).scheduler)
    assert header is not None and header.geometry.prefix_match_unit == 32


def test_a_model_without_recurrent_layers_has_no_geometry_to_replay_at():
    assert recording_header(Replay(EngineShape(block_size=32, mamba_layers=0)).scheduler) is None


def test_the_experiment_replays_a_recording_at_the_served_geometry_with_the_served_hits(tmp_path):
    raw, path, out = tmp_path / "raw.jsonl", tmp_path / "rec.jsonl", tmp_path / "r.json"
    shape = EngineShape(
        block_size=16, prefix_match_unit=4, policy=Variant.BOTH, settings={"record_path": str(raw)}
    )
    run = Replay(shape)
    sessions = [
        [dataclasses.replace(ReplayRequest.from_turn(t), session=f"tau-{c}") for t in turns(c)[:4]]
        for c in (11, 5)
    ]
    run.run_sessions(sessions, concurrency=1)
    run.scheduler.shutdown()
    with TraceWriter(path, header=recording_header(run.scheduler)) as writer:
        for record in read_trace(raw):
            writer.write(record)
    assert read_header(path) is not None
    args = ["experiment", "--workload", str(path), "--policies", "both", "--budget", "equal_capacity"]
    # byte_lru: the page-by-page model (the default) caches no attention block of the output
    # unless the engine's steps are fed to it, so decode_end hits floor at the prompt there
    assert boundary_main([*args, "--eviction", "byte_lru", "--no-cache", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (unit,) = result["units"]
    assert (unit["block_size"], unit["unit"]) == (16, 4)
    (both,) = unit["runs"]
    served = sum(r.hit_tokens or 0 for r in read_trace(path))
    assert served > 0 and both["joint_matched_tokens"] == served
