"""The check request sent after a load point with server failures speaks the run's API and prompt form: the chat API
takes text, not token ids, so a check built from ids would fail on a healthy server and every failed point would end
as server_broken (issue: what servers and users really send, item 5)."""

from __future__ import annotations

import asyncio
import threading

from grid.loadgen.client import ENDPOINTS
from grid.loadgen.dataset import PromptForm
from grid.loadgen.runner import Target
from grid.sweep.measure import CHECK_OUTPUT_TOKENS, check_request

from tests.loadgen.scripted import DONE, Reply, ScriptedServer, chat_event, usage


class _Background:
    """A ScriptedServer on its own event loop in a thread (check_request runs its own loop)."""

    def __init__(self, script) -> None:
        self.server = ScriptedServer(script)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.__aenter__())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.__aexit__(None, None, None))

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        assert self.ready.wait(10)
        return self.server

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _chat(index: int, body: dict) -> Reply:
    if not isinstance(body["messages"][0]["content"], str):  # SGLang and vLLM refuse anything but text here
        return Reply(status=400, body=b'{"error": {"message": "the chat api needs text prompts"}}')
    return Reply([(0.0, chat_event({"role": "assistant", "content": "hello"})),
                  (0.0, chat_event(finish="length")),
                  (0.0, chat_event(usage=usage(4, CHECK_OUTPUT_TOKENS), choices=False)), (0.0, DONE)])


def test_the_check_request_under_the_chat_api_is_text():
    form = PromptForm.choose("random", ENDPOINTS["chat"].accepts, vocab_size=2000)
    assert form.text
    with _Background(_chat) as srv:
        record = check_request(Target(srv.url, api="chat"), 2000, seed=7, form=form)
    assert record.status == "ok", (record.error_class, record.error_message)
    assert isinstance(srv.requests[0]["messages"][0]["content"], str)
