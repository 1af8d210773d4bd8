"""The header of a recording: the engine's geometry and what the recording's lines hold.

Where it sits: under the trace's reader and writer (``boundary.trace.reader.read_recording``
reads it from a trace's first line, ``boundary.trace.writer.TraceWriter`` writes it there); the
vLLM recorder fills it from the engine's real config (``boundary_vllm.recorded_engine``) and
``boundary experiment`` replays at its geometry. It imports only pydantic.

A header is the first line of a trace, one JSON object with the single key ``recording``::

    {"recording": {"records": "production", "engine": "vllm 0.34.0", "policy": "both",
                   "sessions": "...", "geometry": {"block_size": 256, "prefix_match_unit": 16,
                   "page_bytes": 65536, "group_size": 1, "attention_groups": 1,
                   "recurrent_groups": 3, "state_bytes": 52224, "num_pages": 600}}}

``geometry`` is the KV-cache layout vLLM derived: the align-mode block (tokens) and
``prefix_match_unit``, the bytes of one page of one layer (every group's page is padded to the
same size), the layers a KV-cache group holds (a block id spans a page of each), how many
groups hold attention and how many a recurrent state, one layer's recurrent state before
padding, and the pool's pages (vLLM's null page included). Invariant: the unit divides the
block. A trace without a header is read as before.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HEADER_KEY = "recording"
"""The one key of a header line."""


class RecordedGeometry(BaseModel):
    """The KV-cache layout of the engine that recorded the trace (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_size: int = Field(gt=0, strict=True)
    prefix_match_unit: int = Field(gt=0, strict=True)
    page_bytes: int = Field(gt=0, strict=True)
    group_size: int = Field(gt=0, strict=True)
    attention_groups: int = Field(ge=0, strict=True)
    recurrent_groups: int = Field(ge=1, strict=True)
    state_bytes: int = Field(ge=0, strict=True)
    num_pages: int = Field(ge=2, strict=True)

    @model_validator(mode="after")
    def _unit_divides_block(self) -> RecordedGeometry:
        if self.block_size % self.prefix_match_unit:
            raise ValueError(
                f"prefix_match_unit {self.prefix_match_unit} does not divide block_size {self.block_size}"
            )
        return self

    @property
    def pool_page_bytes(self) -> int:
        """One block id of the pool: a page in each of the group's layers."""
        return self.page_bytes * self.group_size

    @property
    def capacity_bytes(self) -> int:
        """The pool's bytes, vLLM's null page left out (it never holds a block)."""
        return (self.num_pages - 1) * self.pool_page_bytes


class RecordingHeader(BaseModel):
    """What a recording holds: ``records`` (production records: token ids as the engine ran
    them, nothing to render), the engine and its policy, how sessions were named, and the
    engine's geometry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    records: Literal["production"] = "production"
    engine: str = Field(min_length=1)
    policy: str | None = None
    sessions: str = Field(min_length=1)
    geometry: RecordedGeometry

    def line(self) -> str:
        """The header as a trace's first line (no newline)."""
        return '{"' + HEADER_KEY + '":' + self.model_dump_json() + "}"
