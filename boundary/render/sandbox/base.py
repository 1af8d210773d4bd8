"""What the sandbox's parts (operators, formatting, checked filters, size estimates) may use
of the ``Sandbox`` they are mixed into or are passed: its limits and checks, declared for the
type checker so that no part imports the environment back.

Where it sits: at the bottom of the render stage's sandbox: the mixins (``operators``,
``formatting``, ``filters``) and estimates type against it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

if TYPE_CHECKING:
    from boundary.errors import RenderLimitExceeded
    from boundary.render.sandbox.limits import RenderLimits
    from boundary.render.sandbox.sizes import Measure


class SandboxBase(ImmutableSandboxedEnvironment):
    """The environment the sandbox's mixins extend; ``Sandbox`` defines what is declared here."""

    if TYPE_CHECKING:
        limits: RenderLimits
        _cap: int
        _small_int: int
        _small_int_bits: int

        def _too_big(self, what: str, size: int) -> RenderLimitExceeded: ...
        def check(self, what: str, size: int, built: int = 0, steps: int = 0) -> None: ...
        def check_int_bits(self, what: str, bits: int) -> None: ...
        def measure(self) -> Measure: ...
        def measured(self, measure: Measure, how: Callable[..., int], *args: Any) -> int: ...
        def text(self, value: Any) -> int: ...
        def stepped(self, value: Any) -> Any: ...
        def percent_size(self, fmt: str | bytes | bytearray, values: Any) -> tuple[int, int]: ...
        def materialized(self, value: Any) -> Any: ...
        def key_chars(self, items: Any, attribute: Any, multi: bool = False, default: Any = None) -> int: ...
