"""Option values shared by the commands, and the options choosing the family they render with.

Where it sits: the top, with the commands: option parsing only.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from boundary.family.facade import Family


# Alike in shape to the request models' JSON-object check of tool-call arguments, by design: the
# two report in their own terms (an option's column here, a message field's char there).
def template_kwargs(text: str) -> dict[str, Any]:
    """``--template-kwargs``: a JSON object of template variables."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--template-kwargs: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"--template-kwargs: expected a JSON object, got {type(value).__name__}")
    return value


def refuse_overwriting(inputs: Mapping[str, Path | None], outputs: Mapping[str, Path | None]) -> None:
    """``ValueError`` naming the option and the file when an output option (``{"--json": path}``)
    names an input (``{"trace": path}``): the same file by ``os.path.samefile`` where both exist,
    else the same resolved path. Options not given and ``-`` are never compared. Called before
    anything is read or written, so a report never replaces what it was made from."""
    for flag, out in outputs.items():
        for what, given in inputs.items():
            if out is not None and given is not None and _same_file(given, out):
                raise ValueError(
                    f"{flag} {out}: the same file as the {what} ({given}); refusing to overwrite it"
                )


def _same_file(a: Path, b: Path) -> bool:
    if "-" in (str(a), str(b)):  # stdin or stdout
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is not there (yet)
        return a.resolve() == b.resolve()


FAMILY_FLAGS = "--family NAME, --model DIR or --template FILE --tokenizer PATH"
OFFLINE = "boundary runs offline; download the model and pass its directory"


def add_family_arguments(
    p: argparse.ArgumentParser,
    *,
    default_family: str | None,
    model_help: str | None = None,
    model_metavar: str = "DIR",
) -> None:
    """``--family``, ``--model``, ``--template`` and ``--tokenizer``: the family a command renders
    with (read back by ``family_source``). ``--family`` has no parser default, so a family
    given alongside ``--model`` or ``--template`` is seen; ``default_family`` names the one used
    when none of them is given."""
    default = f" (default: {default_family})" if default_family else ""
    group = p.add_argument_group(
        "family", f"the template and tokenizer to render with: {FAMILY_FLAGS} (one of them)"
    )
    group.add_argument("--family", metavar="NAME", help=f"shipped family, e.g. qwen3_5{default}")
    group.add_argument(
        "--model",
        metavar=model_metavar,
        help=model_help
        or "a local model directory: its chat template(s) (tokenizer_config.json or "
        "chat_template.jinja, named templates as variants) and tokenizer files (a hub id is refused: "
        "boundary runs offline)",
    )
    group.add_argument(
        "--template", type=Path, metavar="FILE", help="a Jinja chat template file (with --tokenizer)"
    )
    group.add_argument(
        "--tokenizer",
        type=Path,
        metavar="PATH",
        help="with --template: a tokenizer.json file or a directory of tokenizer files",
    )
    group.add_argument(
        "--like",
        metavar="NAME",
        help="with --model or --template: read turns and history as shipped family NAME does (its "
        "tool-call and reasoning format, its declared history rewrites), e.g. a fine-tuned qwen3_5",
    )


@dataclass(frozen=True, slots=True)
class FamilySource:
    """Where a command's family comes from: exactly one of a shipped family ``name``, a local
    ``model_dir``, or a ``template`` file with its ``tokenizer`` (a ``tokenizer.json`` or a
    directory); with either of the last two, ``like`` names the shipped family whose
    conventions (``boundary.family.facade.conventions_of``) it takes. Paths are checked to exist
    when made (``family_source``); nothing is read until ``load``."""

    name: str | None = None
    model_dir: Path | None = None
    template: Path | None = None
    tokenizer: Path | None = None
    like: str | None = None

    @property
    def label(self) -> str:
        """The family's name in reports: the shipped name, the model directory's name or the
        template file's name."""
        if self.model_dir is not None:
            return self.model_dir.resolve().name or str(self.model_dir)
        if self.template is not None:
            return self.template.name
        assert self.name is not None
        return self.name

    def flags(self) -> list[str]:
        """The options that choose this family, as typed on a command line."""
        like = [] if self.like is None else ["--like", self.like]
        if self.model_dir is not None:
            return ["--model", str(self.model_dir), *like]
        if self.template is not None:
            return ["--template", str(self.template), "--tokenizer", str(self.tokenizer), *like]
        assert self.name is not None
        return ["--family", self.name]

    def input_files(self) -> dict[str, Path | None]:
        """The files read, by option, for ``refuse_overwriting``."""
        return {"--template": self.template, "--tokenizer": self.tokenizer}

    def load(self, variant: str | None = None) -> Family:
        """The family, ``variant`` its default template; a variant it lacks is a
        ``TemplateLoadError`` naming those it has."""
        from boundary.errors import TemplateLoadError
        from boundary.family.facade import Family, conventions_of, load_family

        if self.name is not None:
            return load_family(self.name, variant=variant)
        conventions = {} if self.like is None else conventions_of(self.like)
        if self.model_dir is not None:
            fam = Family.from_pretrained(self.model_dir, name=self.label, **conventions)
        else:
            assert self.template is not None and self.tokenizer is not None
            template = _read_template(self.template)
            fam = Family.from_template(template, self.tokenizer, name=self.label, **conventions)
        if variant is None or variant == fam.default_variant:
            return fam
        if variant not in fam.templates:
            have = ", ".join(fam.templates)
            raise TemplateLoadError(f"unknown variant {variant!r} (have: {have})", location=self.label)
        return Family(fam.spec, fam.templates, fam.tokenizer, default_variant=variant, limits=fam.limits)


def family_source(
    args: argparse.Namespace, *, default_family: str | None, presets: Collection[str] = ()
) -> FamilySource:
    """The family ``args`` choose (see ``add_family_arguments``); ``default_family`` when they
    choose none, ``ValueError`` asking for one when that is None too. A ``--model`` value in
    ``presets`` names a cache-model preset, not a directory, and leaves the family to
    ``--family``. ``ValueError`` (one line) for two choices at once, ``--template`` without
    ``--tokenizer`` or the reverse, and a path that is not there; a hub id is refused, never
    looked up."""
    model_dir = None if args.model is None or args.model in presets else _model_dir(args.model, presets)
    given = [
        flag
        for flag, value in (("--family", args.family), ("--model", model_dir), ("--template", args.template))
        if value is not None
    ]
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)}: give one of them ({FAMILY_FLAGS})")
    if (args.template is None) != (args.tokenizer is None):
        raise ValueError(
            "--template needs --tokenizer (a tokenizer.json file or a tokenizer directory)"
            if args.tokenizer is None
            else "--tokenizer goes with --template (a model directory brings its own: --model DIR)"
        )
    like = getattr(args, "like", None)
    if like is not None and model_dir is None and args.template is None:
        raise ValueError("--like goes with --model DIR or --template FILE (a shipped family has its own)")
    if args.template is not None:
        if not args.template.is_file():
            raise ValueError(f"--template {args.template}: no such file")
        if not args.tokenizer.exists():
            raise ValueError(
                f"--tokenizer {args.tokenizer}: no such file or directory (a tokenizer.json or a "
                f"directory of tokenizer files; {OFFLINE})"
            )
        return FamilySource(template=args.template, tokenizer=args.tokenizer, like=like)
    if model_dir is not None:
        return FamilySource(model_dir=model_dir, like=like)
    name = args.family or default_family
    if name is None:
        raise ValueError(
            "--family is required (e.g. --family qwen3_5), or --model DIR, "
            "or --template FILE --tokenizer PATH"
        )
    return FamilySource(name=name)


def _model_dir(value: str, presets: Collection[str]) -> Path:
    path = Path(value).expanduser()
    if path.is_dir():
        return path
    what = f"neither a model preset ({', '.join(presets)}) nor a local directory" if presets else None
    if path.exists():
        raise ValueError(f"--model {value}: {what or 'not a directory'} (pass the model's directory)")
    raise ValueError(f"--model {value}: {what or 'not a local directory'} ({OFFLINE})")


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--template {path}: not UTF-8 text") from None
