"""Family specs: the per-family facts boundary needs, as data (``templates/<family>/family.toml``).

Where it sits: the bottom of the data flow, beside ``request`` — every later stage (render,
outputs, round trip, horizon, audit) reads these models; they import nothing of boundary's
but the request vocabulary. Per-family differences live here as data, never in subclasses:
reasoning tags, tool-call format, output quirks (``OutputSpec``) and the history-rewrite rule
table (``HistoryRewrite``) that ``boundary.verify.horizon`` applies with generic code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from boundary.request.validation import ArgumentsForm


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OutputSpec(_Spec):
    """How the model itself writes an assistant turn (``boundary.outputs``), where the family
    departs from its tool-call format's defaults. Every string is literal output text."""

    reasoning_open: str | None = None  # the opener the model writes (default: open tag + "\n")
    reasoning_close: str | None = None  # written after the reasoning (default: "\n" + close tag + "\n\n")
    before_tool_calls: str | None = None  # between non-empty content and the first tool call
    between_tool_calls: str | None = None
    after_tool_calls: str | None = None  # after the last tool call, before the stop token
    before_stop: str = ""  # after a plain answer, before the stop token
    stop_token: str | None = None  # the token that ends a turn (default: the first of stop_tokens)
    # The vLLM 0.33.0 parser pair the family's reader mirrors (``--tool-call-parser`` /
    # ``--reasoning-parser``); None where vLLM has no parser for that part.
    vllm_tool_parser: str | None = None
    vllm_reasoning_parser: str | None = None
    # Who reads generated turns: boundary's own readers, or vLLM's parsers (needs vllm installed).
    parser_backend: Literal["boundary", "vllm"] = "boundary"
    # Message-header markers, for formats whose turns carry headers (gpt-oss's harmony):
    # ``header_marker`` opens a message header (a divergence where both texts show one is a
    # header written differently); ``reasoning_header`` opens an earlier turn's reasoning.
    header_marker: str | None = None
    reasoning_header: str | None = None


class TemplateVariant(_Spec):
    """One verbatim chat template file and where it came from."""

    name: str
    file: str
    source: str
    license: str
    sha256: str | None = None
    models: list[str] = []
    tool_call_format: str | None = None  # overrides the family's for this variant
    output: OutputSpec | None = None  # overrides the family's for this variant
    tool_arguments: ArgumentsForm | None = None  # overrides the family's for this variant


class TemplateKwarg(_Spec):
    """A variable the family's templates read beyond messages/tools (e.g. ``enable_thinking``)."""

    type: Literal["bool", "str", "int"]
    default: bool | str | int | None = None  # the template's behaviour when it is not passed
    doc: str


RewriteTrigger = Literal["next_request", "new_user_message", "final_answer", "tools_change", "new_day"]
RewritePart = Literal[
    "reasoning",  # the turn's reasoning text (a turn without reasoning is untouched)
    "think_block",  # the think block, empty or not
    "empty_think_block",  # a think block with nothing in it
    "analysis",  # a tool-call turn's reasoning, or its content where the format writes it there
    "arguments",  # tool-call arguments the template re-serializes
    "tool_call_header",  # the header of a tool call (channel and recipient order)
    "tool_list",  # the tool list, which moves to the latest user message
    "stop_token",  # the turn's trailing stop token
    "system_prompt",  # the system prompt (a date or a default prompt)
    "content_whitespace",  # whitespace around the turn's content, which the template trims
]


class HistoryRewrite(_Spec):
    """One row of a family's history-rewrite rule table: a way the template renders earlier
    turns differently once the conversation moves on. ``boundary.verify.horizon`` reads the table
    with one generic rule, so a new family's rewrite is a new row, not new code.

    ``trigger`` says when it happens: as soon as the turn is history (``next_request``: only
    the newest turn is affected), once a new user message arrives (``new_user_message``:
    every assistant turn after the last user message), once a later final answer follows
    (``final_answer``: every assistant turn after the last final answer), when the tools
    change (``tools_change``) or when the date changes (``new_day``); the last two are
    conditions the prediction holds under, not positions. ``part`` is what is re-written,
    ``turns`` narrows which assistant turns it touches, and ``limit`` says where the newest
    turn stops being kept: at its start (``turn_start``, the whole turn is re-rendered) or
    where the re-written part starts (``part_start``). ``kind`` names the rewrite in reports.
    """

    kind: Literal[
        "drop_reasoning_before_last_user",
        "drop_all_reasoning",
        "drop_tool_call_content",
        "trim_content",
        "empty_think_block",
        "reserialize_tool_arguments",
        "default_system_prompt",
        "date_in_system_prompt",
        "rewrite_stop_token",
        "reorder_channels",
        "tools_before_last_user",
    ]
    trigger: RewriteTrigger
    part: RewritePart
    limit: Literal["turn_start", "part_start"] = "part_start"
    unless: dict[str, bool | str] = {}  # template kwargs that switch the rewrite off
    turns: Literal["any", "answers", "tool_calls"] = "any"
    doc: str


class FamilySpec(_Spec):
    """``templates/<family>/family.toml``."""

    name: str
    display_name: str
    hybrid: bool
    architecture: str
    variants: list[TemplateVariant] = []
    default_variant: str | None = None
    vocabulary: str | None = None  # a shipped vocabulary name
    stand_in_vocabulary: str | None = None  # base vocabulary of a labelled test tokenizer
    control_tokens: list[str] = []  # registered on the stand-in tokenizer
    special_tokens: dict[str, str] = {}  # template variables: bos_token, eos_token, ...
    stop_tokens: list[str] = []
    reasoning_field: str = "reasoning_content"
    reasoning_tags: list[str] = Field(default_factory=list, max_length=2)
    tool_call_format: str | None = None
    content_parts: Literal["keep", "join"] = "keep"
    tool_arguments: ArgumentsForm = "object"  # how the template wants tool-call arguments
    template_kwargs: dict[str, TemplateKwarg] = {}
    history_rewrites: list[HistoryRewrite] = []
    output: OutputSpec = OutputSpec()
    notes: str = ""
