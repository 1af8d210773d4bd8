"""The start-up warning when boundary's metrics cannot reach the server's ``/metrics``: the
checks the scheduler runs when vLLM builds it, in a process started the way vLLM starts its
engine core (a ``multiprocessing`` child) and in the server's own process."""

from __future__ import annotations

import multiprocessing

from boundary_vllm.engine_checks import METRICS_DIR_ENV, EngineFacts, check_engine
from boundary_vllm.settings import read_settings

FACTS = EngineFacts("boundary_vllm.scheduler.BoundaryScheduler", False, False, block_size=256, hit_unit=16)


def _checked_in_child(environ: dict[str, str], out: multiprocessing.Queue) -> None:
    out.put(check_engine(FACTS, read_settings({}), environ=environ))


def warnings_in_child(environ: dict[str, str]) -> list[str]:
    """``check_engine``'s warnings in a child process (its own detection of being one)."""
    context = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = context.Queue()
    child = context.Process(target=_checked_in_child, args=(environ, out))
    child.start()
    found = out.get(timeout=60)
    child.join(timeout=60)
    return found


def test_a_child_process_without_a_metrics_directory_warns_at_start_up():
    (warning,) = warnings_in_child({})
    assert warning.startswith("boundary_* metrics cannot be exported: the scheduler runs in a child process")
    assert f"set {METRICS_DIR_ENV} to an empty directory" in warning
    assert "they are still logged every 30 s" in warning
    assert warnings_in_child({METRICS_DIR_ENV: "/tmp/metrics"}) == []


def test_the_server_process_itself_exports_them_without_a_directory():
    assert check_engine(FACTS, read_settings({}), environ={}) == []  # pytest is no multiprocessing child


def test_with_logging_off_the_warning_says_nothing_reports_them():
    (warning,) = check_engine(
        FACTS, read_settings({"boundary": {"log_interval_s": 0}}), environ={}, child_process=True
    )
    assert "log_interval_s is 0: nothing logs them" in warning
