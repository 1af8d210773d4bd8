"""boundary: where a chat request's stable history ends.

Where it sits: the front door, above every stage (request -> render -> tokenize -> checkpoints ->
engine | report; ``docs/layout.md`` maps the packages): it re-exports what users call and get
back; users and ``integrations/vllm`` import it.

    fam = boundary.load_family("qwen3_5")
    r = fam.render(messages, tools=None, add_generation_prompt=True, enable_thinking=True)
    r.token_ids, r.u_end, r.p_end, r.checkpoint(unit=64)

Data flows one way, and imports follow it (``tests/test_imports.py`` fails on any cycle):

    shipped (family.toml data)  ->  request (models, validation, limits, identity)  ->  render
    (options, target, template_run: the instrumented template run sandboxed; marks: read into
    positions)  ->  tokenize (vocabularies; encode: ids, U_end, P_end as a ``Rendering``)  ->
    checkpoints (kinds, retention)  ->  renderer (one pass)  ->  session  ->  outputs  ->
    verify (round trip, divergence, horizon)  ->  trace  ->  cache / experiment / audit  ->
    cli; family (registry, facade) on top; integrations/vllm beside.

``Family`` (``boundary.family.facade``) is a thin facade that wraps a ``Renderer`` and adds sessions
and the round trip; nothing below it imports it. ``import boundary`` never imports vllm.
"""

from boundary.checkpoints.kinds import Checkpoint, CheckpointKind, materialize
from boundary.errors import (
    BoundaryError,
    ModelNotFoundError,
    RenderLimitExceeded,
    RequestError,
    SandboxViolation,
    TemplateError,
    TemplateLoadError,
    TemplateRenderError,
    TokenizerError,
)
from boundary.family.facade import Family, FamilySpec, family_names, family_spec, load_family
from boundary.offsets import Boundary, BoundaryStatus, CharOffset, Span, TokenOffset
from boundary.outputs import GeneratedOutput, OutputStatus, ParsedOutput, format_output, parse_output
from boundary.render.options import RenderOptions
from boundary.render.sandbox import RenderLimits
from boundary.renderer import Renderer
from boundary.session.cache import SessionCache
from boundary.session.session import Session, SessionStats
from boundary.tokenize.rendering import Rendering
from boundary.tokenize.tokenizer import Tokenizer
from boundary.verify.divergence import Cause
from boundary.verify.horizon import Horizon, stability_horizon
from boundary.verify.roundtrip import ClientHabits, ContinuationCheck, RoundTrip, Tail, verify_round_trip

__version__ = "0.1.0"

__all__ = [
    "Boundary",
    "BoundaryError",
    "BoundaryStatus",
    "Cause",
    "CharOffset",
    "Checkpoint",
    "CheckpointKind",
    "ClientHabits",
    "ContinuationCheck",
    "Family",
    "FamilySpec",
    "GeneratedOutput",
    "Horizon",
    "ModelNotFoundError",
    "OutputStatus",
    "ParsedOutput",
    "RenderLimitExceeded",
    "RenderLimits",
    "RenderOptions",
    "Renderer",
    "Rendering",
    "RequestError",
    "RoundTrip",
    "SandboxViolation",
    "Session",
    "SessionCache",
    "SessionStats",
    "Span",
    "Tail",
    "TemplateError",
    "TemplateLoadError",
    "TemplateRenderError",
    "TokenOffset",
    "Tokenizer",
    "TokenizerError",
    "family_names",
    "family_spec",
    "format_output",
    "load_family",
    "materialize",
    "parse_output",
    "stability_horizon",
    "verify_round_trip",
]
