"""Per-format handling of what a model generates: writing an assistant message the way the
model emits it (``format_output``) and reading generated text or ids back into the message a
frontend appends (``parse_output``).

Where it sits: after render and boundaries, before the round trip: the generated turn written
out and read back.

    out = format_output(fam, prompt, {"role": "assistant", "content": "Hi."})
    out.text, out.token_ids, out.stop_token
    parsed = parse_output(fam, out.token_ids, prompt)
    parsed.status, parsed.message
"""

from boundary.outputs.codec import OutputFormat, format_output, generation_suffix, output_format
from boundary.outputs.model import (
    GeneratedOutput,
    OutputStatus,
    ParsedOutput,
    Region,
    RegionKind,
    WrittenCall,
)
from boundary.outputs.reading import parse_output

__all__ = [
    "GeneratedOutput",
    "OutputFormat",
    "OutputStatus",
    "ParsedOutput",
    "Region",
    "RegionKind",
    "WrittenCall",
    "format_output",
    "generation_suffix",
    "output_format",
    "parse_output",
]
