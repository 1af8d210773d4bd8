"""Template kwargs: which of a request's ``chat_template_kwargs`` reach the template.

Where it sits: the render stage's entry, just before the template runs — it checks the kwargs against the
family's declared ``template_kwargs`` (``boundary.shipped.spec``) and against the variables the
compiled template reads, and drops the rest as vLLM's ``resolve_chat_template_kwargs`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from boundary.errors import RequestError
from boundary.request.limits import check_value
from boundary.shipped.spec import FamilySpec

# vLLM refuses these in a request's chat_template_kwargs (resolve_chat_template_kwargs).
_REFUSED = frozenset({"chat_template", "tokenize"})
# apply_chat_template's own parameters: consumed by it, never passed to the template.
_APPLY_OPTIONS = frozenset(
    {
        "conversation",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
_IDS_UNCHANGED = frozenset({"return_tensors", "return_dict", "return_assistant_tokens_mask"})
_TYPES = {"bool": bool, "str": str, "int": int}


@dataclass(frozen=True, slots=True)
class ResolvedKwargs:
    """The kwargs passed to the template, and the names of those dropped."""

    kept: dict[str, Any]
    ignored: tuple[str, ...]


def resolve_kwargs(
    spec: FamilySpec,
    special_tokens: Mapping[str, str],
    kwargs: Mapping[str, Any],
    reads: frozenset[str],
    *,
    strict: bool = False,
) -> ResolvedKwargs:
    """Split ``kwargs`` into those passed to a template that reads ``reads`` and the names
    dropped. ``chat_template`` / ``tokenize`` are refused as vLLM refuses them;
    apply_chat_template's own options never reach the template and are refused where they
    would change the ids; a declared kwarg of the wrong type, or a value past the request
    limits, is a ``RequestError``. ``strict`` refuses, instead of dropping, a kwarg that is
    neither read nor declared by the family nor a special token."""
    kept: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in kwargs.items():
        where = f"template_kwargs.{key}"
        if key in _REFUSED:
            raise RequestError("not a template variable; a request may not set it", location=where)
        if key in _APPLY_OPTIONS:
            if value and key not in _IDS_UNCHANGED:
                raise RequestError(
                    "an apply_chat_template option that changes the ids; not supported", location=where
                )
            ignored.append(key)
            continue
        declared = spec.template_kwargs.get(key)
        if strict and declared is None and key not in reads and key not in special_tokens:
            raise RequestError(f"the {spec.name} template does not read this variable", location=where)
        if declared is not None and value is not None and (strict or key in reads):
            expected = _TYPES[declared.type]
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise RequestError(f"expected {declared.type}, got {type(value).__name__}", location=where)
        if key not in reads:
            ignored.append(key)
            continue
        check_value(value, where)
        kept[key] = value
    return ResolvedKwargs(kept, tuple(ignored))
