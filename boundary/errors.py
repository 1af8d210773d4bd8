"""The exceptions boundary raises, one small tree, and its one warning.

Where it sits: beside every stage: each raises from this one tree; it imports nothing.

    BoundaryError                 base; ``location`` names where, ``detail`` says what
    ├── RequestError              bad request input: ``messages[3].tool_call_id: ...``
    ├── TemplateError
    │   ├── TemplateLoadError     a template, family or spec cannot be found or compiled
    │   │   └── ModelNotFoundError    a model directory or hub id is not there (also FileNotFoundError)
    │   ├── TemplateRenderError   the template raised (``raise_exception``) or failed while rendering
    │   └── SandboxViolation      the template reached for something unsafe
    │       └── RenderLimitExceeded   ... or ran past a render limit (time, loop steps, output size)
    └── TokenizerError            a tokenizer cannot be loaded or disagrees with its reference

    InputWarning                  a ``UserWarning``, not an error: a flaw in the input skipped
                                  (a trace's cut-off last line); the message starts with the location

Expected outcomes are not exceptions: a template whose history end cannot be located
renders fine and reports ``BoundaryStatus.UNAVAILABLE`` with a reason.
"""

from __future__ import annotations


class BoundaryError(Exception):
    """Base class. The message starts with the location when there is one."""

    def __init__(self, detail: str, *, location: str | None = None) -> None:
        self.location = location
        self.detail = detail
        super().__init__(f"{location}: {detail}" if location else detail)


class RequestError(BoundaryError, ValueError):
    """The request is malformed; ``location`` is a path such as ``messages[2].content``."""


class TemplateError(BoundaryError):
    """A chat template could not be loaded or rendered."""


class TemplateLoadError(TemplateError):
    """A template, family spec or model directory cannot be found, read or compiled."""


class ModelNotFoundError(TemplateLoadError, FileNotFoundError):
    """A model directory (or hub id) does not exist, or the hub is offline and has no copy."""


class TemplateRenderError(TemplateError):
    """The template raised while rendering; ``detail`` carries the template's own message."""


class SandboxViolation(TemplateError):
    """The template tried an operation the sandbox forbids (attribute escapes, file or OS access)."""


class RenderLimitExceeded(SandboxViolation):
    """The render ran past one of the documented limits in ``boundary.render.sandbox.RenderLimits``."""


class TokenizerError(BoundaryError):
    """A tokenizer cannot be loaded, or a converted vocabulary disagrees with its reference."""


class InputWarning(UserWarning):
    """Input read with a flaw skipped; the message starts with the location
    (``trace.jsonl:9: the last line is cut off ...``). The CLIs print each as one line."""


__all__ = [
    "BoundaryError",
    "InputWarning",
    "ModelNotFoundError",
    "RenderLimitExceeded",
    "RequestError",
    "SandboxViolation",
    "TemplateError",
    "TemplateLoadError",
    "TemplateRenderError",
    "TokenizerError",
]
