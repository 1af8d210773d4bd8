"""What transformers gives chat templates besides jinja2's own: ``raise_exception``,
``strftime_now``, a non-escaping ``tojson`` and the ``{% generation %}`` tag.

Where it sits: inside the render stage's sandbox: ``environment`` installs these globals, as
transformers does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes


class TemplateRaised(jinja2.exceptions.TemplateError):
    """Raised by the template's own ``raise_exception(message)``."""


def raise_exception(message: str) -> None:
    raise TemplateRaised(message)


# The signature mirrors transformers' ``tojson`` (and ``filters.checked_tojson`` repeats it, as
# the checked version of this one must take the same arguments).
def tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    # Like transformers: no HTML escaping, and the json.dumps options exposed.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def fixed_clock(now: datetime) -> Callable[[str], str]:
    """A ``strftime_now`` that always reads ``now``, for reproducible date-stamped prompts."""

    def strftime_fixed(format: str) -> str:
        return now.strftime(format)

    return strftime_fixed


class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` as transformers defines it: a call block whose
    body renders unchanged (so its scoping is transformers'). The instrumentation brackets the
    body with marks when it prints to direct output (``boundary.render.instrumentation``)."""

    tags = {"generation"}  # noqa: RUF012 (jinja2's attribute)

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @staticmethod
    def _generation_support(caller: Any) -> str:
        body: str = caller()
        return body


FIXED_CLOCK_CODE = fixed_clock(datetime(2000, 1, 1)).__code__
