"""The request: typed OpenAI-style chat requests, validated and normalized for templates.

Where it sits: the first stage, before render; ``validation`` turns untrusted input into the
typed ``models`` (or a ``RequestError`` naming the message index and field) and those into
the dicts a template reads, ``limits`` refuses input nested too deeply or holding lone
surrogates, and ``identity`` says whether a message or tool list is exactly one seen before.
This package re-exports the public names of its modules; each name lives in one of them.
"""

from boundary.request.identity import ContentKey, content_key, item_key, items_key
from boundary.request.limits import MAX_NESTING
from boundary.request.models import (
    AssistantMessage,
    Content,
    ContentPart,
    DeveloperMessage,
    FunctionCall,
    FunctionDefinition,
    Message,
    SystemMessage,
    TextPart,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from boundary.request.validation import (
    ArgumentsForm,
    parse_messages,
    parse_tools,
    to_template_messages,
)

# The public names of the modules above, listed again so that ``boundary.request`` is the one
# import for the request stage (each name is defined once, in its module).
__all__ = [
    "MAX_NESTING",
    "ArgumentsForm",
    "AssistantMessage",
    "Content",
    "ContentKey",
    "ContentPart",
    "DeveloperMessage",
    "FunctionCall",
    "FunctionDefinition",
    "Message",
    "SystemMessage",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "content_key",
    "item_key",
    "items_key",
    "parse_messages",
    "parse_tools",
    "to_template_messages",
]
