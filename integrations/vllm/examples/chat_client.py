"""Send a conversation to a vLLM server as boundary renders it.

    python integrations/vllm/examples/chat_client.py --url http://localhost:8000 \\
        --model Qwen/Qwen3.5-4B --family qwen3_5 --messages conversation.json

Where it sits: outside the packages, the whole flow from the user's side: a script nobody imports;
it renders with ``boundary`` and sends with ``boundary_vllm.client``.

Without ``--messages`` the conversation is boundary's default one (a tau-bench airline session up
to its 6th user turn). ``--dry-run`` prints the request body instead of sending it. The server runs
``vllm serve MODEL --enable-prompt-tokens-details --scheduler-cls
boundary_vllm.scheduler.AutoBoundaryScheduler``; without ``--enable-prompt-tokens-details`` vLLM
reports no cached tokens (printed as unknown, not 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from boundary_vllm import chat_request, post_chat
from boundary_vllm.client import reported_cached_tokens

import boundary
from boundary.shipped.datasets import default_conversation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://localhost:8000")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--family", default="qwen3_5", help="boundary family of the served model")
    parser.add_argument("--variant", default=None)
    parser.add_argument("--messages", type=Path, help="a JSON list of OpenAI-format messages")
    parser.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)

    family = boundary.load_family(args.family, variant=args.variant)
    messages = json.loads(args.messages.read_text()) if args.messages else default_conversation()
    kwargs = {} if args.thinking is None else {"enable_thinking": args.thinking}
    request = chat_request(
        family,
        messages,
        model=args.model,
        variant=args.variant,
        template_kwargs=kwargs,
        max_tokens=args.max_tokens,
    )
    r = request.rendering
    print(f"prompt: {r.p_end} tokens, U_end {r.u_end}, P_end {r.p_end}", file=sys.stderr)
    if args.dry_run:
        json.dump(request.body, sys.stdout)
        return 0
    reply = post_chat(args.url, request)
    message = reply["choices"][0]["message"]
    cached = reported_cached_tokens(reply)
    if cached is None:
        print(
            "cached prompt tokens: unknown (start vLLM with --enable-prompt-tokens-details)", file=sys.stderr
        )
    else:
        print(f"cached prompt tokens: {cached}", file=sys.stderr)
    json.dump(message, sys.stdout, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
