"""U_end for prompts that vLLM renders itself (``vllm serve`` users who send messages, not tokens).

Where it sits: between render and the engine, for prompts vLLM rendered: it renders probe
conversations with ``boundary`` (render, boundaries) once; ``boundary_vllm.scheduler`` matches
prompts against what it records.

vLLM 0.33.0's renderer returns token ids only, and ``EngineCoreRequest`` carries nothing else a
renderer could set (``cache_salt`` enters the first block hash), so positions cannot travel from
a server-side renderer to the scheduler. But for a chat template the text after U_end is the
generation prompt alone, and it does not depend on the conversation: boundary renders probe
conversations with the family's templates (every boolean template flag both ways), records the
token ids after U_end, and the scheduler recognises them at the end of a prompt. A prompt that
ends otherwise gets no U_end; a wrong guess could only misplace a checkpoint, never reuse state
beyond the exact token prefix it represents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import boundary
from boundary.errors import BoundaryError
from boundary.shipped.datasets import default_conversation


@dataclass(frozen=True, slots=True)
class GenerationSuffixes:
    """The token sequences a family's templates append after U_end, longest first."""

    family: str
    suffixes: tuple[tuple[int, ...], ...]

    @classmethod
    def from_family(
        cls,
        family: boundary.Family,
        variant: str | None = None,
        template_kwargs: Sequence[Mapping[str, Any]] = (),
    ) -> GenerationSuffixes:
        """Probe every boolean template flag of the family's spec flipped, plus each of
        ``template_kwargs`` (a family loaded from a model directory declares no flags)."""
        found: set[tuple[int, ...]] = set()
        for kwargs in (*_flag_settings(family), *template_kwargs):
            for probe in _probes():
                try:
                    r = family.render(probe, add_generation_prompt=True, variant=variant, **kwargs)
                except BoundaryError:
                    continue
                if r.u_end is not None and r.u_end < r.p_end:
                    found.add(tuple(r.token_ids[r.u_end :]))
        return cls(family.name, tuple(sorted(found, key=len, reverse=True)))

    def input_end(self, prompt_token_ids: Sequence[int]) -> int | None:
        """U_end of a prompt that ends with one of the suffixes, else None."""
        n = len(prompt_token_ids)
        for suffix in self.suffixes:
            k = len(suffix)
            if n > k and tuple(prompt_token_ids[n - k :]) == suffix:
                return n - k
        return None


def load_server_family(name: str, *, model_tokenizer: str | None, variant: str | None) -> boundary.Family:
    """``name`` is a shipped family, or ``"model"`` for the served model's own tokenizer files."""
    if name == "model":
        if not model_tokenizer:
            raise ValueError("server_family='model' needs the served model's tokenizer path")
        return boundary.Family.from_pretrained(model_tokenizer)
    return boundary.load_family(name, variant=variant)


def _flag_settings(family: boundary.Family) -> Iterable[dict[str, bool]]:
    yield {}
    for key, kwarg in family.spec.template_kwargs.items():
        if kwarg.type == "bool":
            yield {key: not kwarg.default}


def _probes() -> Iterable[list[dict]]:
    """Real conversation prefixes ending on a user turn and on a tool result."""
    conversation = default_conversation()
    for role in ("user", "tool"):
        ends = [i for i, m in enumerate(conversation) if m["role"] == role]
        if ends:
            yield conversation[: ends[0] + 1]
