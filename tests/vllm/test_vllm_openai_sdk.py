"""The OpenAI SDK sends a ``chat_request`` body unchanged: ``openai_arguments`` moves every field
the SDK does not take by name into ``extra_body``, checked against the JSON the real ``openai``
package sends to a local HTTP server (127.0.0.1, no network)."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from boundary_vllm.client import OPENAI_CREATE_FIELDS, chat_request, openai_arguments

from boundary.shipped.datasets import tau_bench_airline
from tests.support import family

openai = pytest.importorskip("openai", reason="the openai package is in the test extra")

MODEL = "Qwen/Qwen3.5-4B"
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ok"},
            "finish_reason": "stop",
            "token_ids": [9],
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": MODEL,
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
}


class _Server(ThreadingHTTPServer):
    bodies: list[dict[str, Any]]


class _Handler(BaseHTTPRequestHandler):
    """Keeps each POSTed JSON body; answers a completion, or a one-chunk stream when asked."""

    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        if body.get("stream"):
            payload = f"data: {json.dumps(CHUNK)}\n\ndata: [DONE]\n\n".encode()
            kind = "text/event-stream"
        else:
            payload, kind = json.dumps(COMPLETION).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.bodies = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _client(server: _Server) -> Any:
    host, port = server.server_address[:2]
    return openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="unused", max_retries=0, timeout=30)


def _request(**kw: Any):
    return chat_request(
        family("qwen3_5"),
        tau_bench_airline()[11][:4],
        model=MODEL,
        template_kwargs={"enable_thinking": True},
        session="s1",
        record=True,
        max_tokens=64,
        **kw,
    )


def test_the_sdk_sends_exactly_the_body_with_every_vllm_field():
    req = _request()
    arguments = req.openai_arguments()
    moved = {"kv_transfer_params", "vllm_xargs", "chat_template_kwargs", "return_token_ids"}
    assert set(arguments["extra_body"]) == moved
    assert set(arguments) == {"model", "messages", "max_tokens", "extra_body"}


def test_the_sdk_posts_the_chat_request_body_unchanged(server):
    req = _request()
    reply = _client(server).chat.completions.create(**req.openai_arguments())
    assert reply.choices[0].message.content == "ok"
    (sent,) = server.bodies
    assert sent == req.body


def test_a_streaming_request_is_sent_unchanged_and_streams(server):
    req = _request(stream=True, stream_options={"include_usage": True})
    stream = _client(server).chat.completions.create(**req.openai_arguments())
    assert [c.choices[0].delta.content for c in stream] == ["ok"]
    (sent,) = server.bodies
    assert sent == req.body


def test_every_field_kept_by_name_is_one_the_sdk_takes_by_name():
    from openai.resources.chat.completions import Completions

    assert set(inspect.signature(Completions.create).parameters) >= OPENAI_CREATE_FIELDS


def test_sdk_arguments_given_in_place_of_a_body_are_refused():
    with pytest.raises(ValueError, match="give the request body itself"):
        openai_arguments(_request().openai_arguments())
