"""boundary's checkpoints in vLLM's align-mode prefix cache (0.34.0; also 0.33.0 and the CPU build 0.32.0).

Where it sits: the engine end's front door, after render and boundaries: it re-exports the frontend
side (``client``, ``hints``) and the version pin (``pin``); users and
``integrations/vllm/examples`` import it, while vLLM loads the engine side by module path
(``boundary_vllm.scheduler``).

Frontend side (no vLLM needed): ``chat_request`` renders with boundary and builds the
OpenAI-compatible chat body that sends vLLM exactly those tokens
(``kv_transfer_params["prompt_token_ids"]``) plus the U_end / P_end hints (``vllm_xargs``).

Engine side (``--scheduler-cls boundary_vllm.scheduler.AutoBoundaryScheduler``): see
``boundary_vllm.scheduler``. It extends non-public vLLM classes, so importing the engine side
(``boundary_vllm.scheduler``, ``boundary_vllm.retention``, ``boundary_vllm.replay``) with any
vLLM other than the supported builds (``pin``) fails there, with the reason; the frontend side
works with any vLLM or none.
"""

from boundary_vllm.client import ChatRequest, chat_request, post_chat
from boundary_vllm.hints import HORIZON_KEY, INPUT_END_KEY, PROMPT_END_KEY, ROUND_TRIP_KEY
from boundary_vllm.pin import VLLM_VERSION, VllmVersionError

__all__ = [
    "HORIZON_KEY",
    "INPUT_END_KEY",
    "PROMPT_END_KEY",
    "ROUND_TRIP_KEY",
    "VLLM_VERSION",
    "ChatRequest",
    "VllmVersionError",
    "chat_request",
    "post_chat",
]
