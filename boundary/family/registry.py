"""The registry of shipped families: ``templates/<family>/`` folders, each a ``family.toml``
spec, its verbatim template files and (through ``vocabulary`` / ``stand_in_vocabulary``) the
tokenizer it renders with.

Where it sits: the family stage, at the end of the flow — it reads shipped data into a
``FamilySpec``, template sources and a ``Tokenizer``; ``boundary.family.facade.load_family`` hands
them to the ``Family`` facade. Nothing here renders.
"""

from __future__ import annotations

import tomllib
from functools import cache

from pydantic import ValidationError

from boundary.errors import TemplateLoadError
from boundary.shipped.resources import data_dir
from boundary.shipped.spec import FamilySpec
from boundary.tokenize.tokenizer import Tokenizer, load_vocabulary, rank_source, stand_in_backend


def family_names() -> list[str]:
    """Every family in the registry, including those that need a user-supplied template."""
    return sorted(p.parent.name for p in data_dir("templates").glob("*/family.toml"))


@cache
def family_spec(name: str) -> FamilySpec:
    """The validated ``templates/<name>/family.toml``; cached, one per shipped family (an
    unknown name raises and is not kept)."""
    path = data_dir("templates") / name / "family.toml"
    if not path.is_file():
        raise TemplateLoadError(
            f"unknown family {name!r} (known: {', '.join(family_names())})", location="family"
        )
    try:
        with path.open("rb") as f:
            return FamilySpec.model_validate(tomllib.load(f))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise TemplateLoadError(f"invalid spec: {exc}", location=str(path)) from None


def shipped_templates(name: str) -> dict[str, str]:
    """The family's verbatim template sources by variant name (empty for families shipped
    without a template, such as Jamba and Falcon-H1)."""
    folder = data_dir("templates") / name
    return {v.name: (folder / v.file).read_text(encoding="utf-8") for v in family_spec(name).variants}


@cache
def shipped_tokenizer(name: str) -> Tokenizer:
    """The family's shipped vocabulary, or its labelled stand-in test tokenizer; cached, one
    per shipped family."""
    spec = family_spec(name)
    if spec.vocabulary:
        rank_file, pattern = rank_source(spec.vocabulary) or (None, None)
        return Tokenizer(
            load_vocabulary(spec.vocabulary),
            special_tokens=spec.special_tokens,
            source=f"shipped vocabulary {spec.vocabulary!r}",
            rank_file=rank_file,
            split_pattern=pattern,
        )
    if spec.stand_in_vocabulary:
        rank_file, pattern = rank_source(spec.stand_in_vocabulary) or (None, None)
        return Tokenizer(
            stand_in_backend(spec.stand_in_vocabulary, spec.control_tokens),
            special_tokens=spec.special_tokens,
            rank_file=rank_file,
            split_pattern=pattern,
            source=(
                f"stand-in test tokenizer: {spec.stand_in_vocabulary} BPE + {spec.display_name} "
                f"control tokens (no {spec.display_name} vocabulary is available offline; "
                "ids are not the model's)"
            ),
            stand_in=True,
        )
    raise TemplateLoadError(f"family {name!r} ships no vocabulary; pass tokenizer=", location="family")
