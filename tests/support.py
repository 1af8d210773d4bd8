"""Shared test data: the fixture corpus, shipped families and transformers references.

Imported by tests as ``tests.support``."""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import boundary

ROOT = Path(__file__).resolve().parents[1]
CONVERSATIONS = ROOT / "fixtures" / "conversations"
FIXED_NOW = datetime(2026, 5, 15, 12, 0, 0)


def fixture_cases() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(CONVERSATIONS.glob("*.json"))]


def shipped_variants() -> list[tuple[str, str]]:
    out = []
    for name in boundary.family_names():
        spec = boundary.family_spec(name)
        out.extend((name, v.name) for v in spec.variants)
    return out


def kwarg_settings(family: str) -> list[dict[str, Any]]:
    """The template defaults, plus each boolean template kwarg flipped from its default."""
    settings: list[dict[str, Any]] = [{}]
    for key, kw in boundary.family_spec(family).template_kwargs.items():
        if kw.type == "bool":
            settings.append({key: not kw.default})
    return settings


@cache
def family(name: str, variant: str | None = None) -> boundary.Family:
    return boundary.load_family(name, variant=variant)


@cache
def reference_tokenizer(name: str, variant: str) -> Any:
    """transformers' fast tokenizer over the same vocabulary, with the variant's template."""
    fam = family(name)
    return fam.tokenizer.to_transformers(fam.template(variant))


def fixed_strftime(fmt: str) -> str:
    return FIXED_NOW.strftime(fmt)
