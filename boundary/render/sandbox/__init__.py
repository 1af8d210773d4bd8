"""The Jinja environment chat templates run in.

Where it sits: inside the render stage: ``boundary.render.template_run`` runs every template in it;
``renderer`` and ``family`` pass its ``RenderLimits`` through.

Templates are untrusted code. They run in jinja2's ``ImmutableSandboxedEnvironment`` with
exactly the globals and filters transformers gives them (``raise_exception``,
``strftime_now``, a non-escaping ``tojson``, loop controls, ``trim_blocks`` /
``lstrip_blocks``), so the text is byte-for-byte what ``apply_chat_template`` renders.

On top of the sandbox (which refuses ``__class__``, ``__globals__``, other unsafe attributes
and mutation of inputs — here with an error at the first unsafe access, where jinja2 alone
would render an empty string — and gives templates no file, import or OS access; include /
import / extends are refused when compiling) every render runs under ``RenderLimits``.
Running past one raises ``RenderLimitExceeded`` — never ``MemoryError``, ``RecursionError``
or a hang:

- ``max_string_chars``: what one operation may build, **estimated from its arguments before
  it runs**: ``+``, ``~``, ``*``, ``%`` (field widths and precisions, ``*`` ones too), every
  builtin filter, the ``str`` / ``bytes`` / ``int`` / ``list`` / ``dict`` methods,
  ``str.format`` / ``format_map`` (widths and precisions, nested ``{:{}}`` ones too),
  ``dict()``, ``namespace()``, ``lipsum()``, ``strftime_now()``, the output of a macro,
  ``caller()``, ``{% set %}`` or ``{% filter %}`` block, and the text of ``{{ value }}``,
  ``string``, ``~``, ``join``, ``tojson`` or ``pprint`` of a container (a value shared in
  several places counts as often as it prints). Sizes are characters; a list or tuple slot
  counts as 8, a dict entry as 32 and a fresh object as 64, so a size is close to bytes;
- ``max_total_chars``: those sizes summed over the render (results under 256 one by one
  excepted), so what a template keeps from one loop step to the next adds up to no more;
- ``max_loop_steps``: ``{% for %}`` iterations; and, counted apart, the items filters work
  through in Python (``map``, ``select``, ``sort``, ``unique``, ``groupby``, ``wordwrap``
  chunks, ``lipsum`` words, the values ``tojson`` / ``pprint`` / ``{{ }}`` walk ...);
- ``max_int_bits``: integers built by ``+``, ``*``, ``**``, ``round``, ``int`` and
  ``int.from_bytes``; ``*``, ``**``, ``//`` and ``%`` refuse larger operands, and printing
  refuses integers over 16 times it;
- ``max_output_chars``: size of the rendered text, set so that tokenizing it stays in a stated
  memory bound (600 bytes a character: 1.2 GiB at the default 2 Mi; see ``docs/limits.md``);
- ``max_seconds``: wall time, read at every 16th loop step, every 16th call, every 64 items a
  lazy filter draws and every ~1M characters built. Every operation between two readings is
  bounded by the sizes above, so a render overruns its deadline by no more than they take.
  The same deadline goes on through tokenizing the output (``TextRendering.deadline``): read
  between tiktoken segments (at least every 64 Ki characters that have a safe cut between
  them) and around each ``tokenizers`` call, so tokenizing overruns it by at most one encode
  of text between two safe cuts, itself bounded by ``max_output_chars``.

What is not checked one by one is bounded otherwise: a slice ``x[a:b]`` is never larger than
``x`` (``checked_slice`` counts it, once the instrumentation routes slices through it); ``-``
on integers adds at most a bit; list, tuple and dict displays hold what the template spells
out. Each runs once per loop step or call at most, so a render keeps at most
``max_loop_steps`` times what one of them builds that way. Inside ``{% autoescape true %}``
jinja2 escapes what it prints, up to 5 times the size measured.

The package, one concept a module: ``limits`` (``RenderLimits``, the ``Deadline``, the
sizes), ``sizes`` (measuring without building), ``filter_estimates`` / ``text_estimates`` /
``call_estimates`` (what an operation would build), ``operators``, ``formatting`` (``%`` and
``str.format``), ``filters`` (the checked filters and output), ``template_globals`` (what
transformers adds), ``base`` (what those parts may use of the sandbox), ``environment`` (the
``Sandbox`` itself) and ``trusted`` (``TrustedSandbox``: for shipped templates, the attribute
checks their spelled-out names cannot fail skipped, everything above kept).
"""

from boundary.render.sandbox.environment import Sandbox
from boundary.render.sandbox.limits import (
    DEFAULT_LIMITS,
    Deadline,
    LimitedTemplate,
    RenderLimits,
    active_deadline,
)
from boundary.render.sandbox.template_globals import (
    GenerationTag,
    TemplateRaised,
    fixed_clock,
    raise_exception,
    strftime_now,
    tojson,
)

__all__ = [
    "DEFAULT_LIMITS",
    "Deadline",
    "GenerationTag",
    "LimitedTemplate",
    "RenderLimits",
    "Sandbox",
    "TemplateRaised",
    "active_deadline",
    "fixed_clock",
    "raise_exception",
    "strftime_now",
    "tojson",
]
