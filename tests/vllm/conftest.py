"""Fixtures of the hand-driven vLLM tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """The plugin's log lines (its logger sits under vLLM's, which does not propagate, so
    pytest's ``caplog`` sees them only until vLLM configures its logging)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("vllm.boundary_vllm.scheduler")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
