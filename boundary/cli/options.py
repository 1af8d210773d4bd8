"""Option values shared by the commands.

Where it sits: the top, with the commands: option parsing only.
"""

from __future__ import annotations

import json
from typing import Any


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
