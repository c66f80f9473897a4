"""A standalone streaming server for the client-overhead test (run in its own process).

``python stream_server.py PORT_FILE EVENTS GAP_S``: serves /v1/completions; every request gets EVENTS one-token
events GAP_S apart (absolute deadlines from receipt), each carrying the server's ``perf_counter_ns`` at write time as
its text (``"<ns>|"``), then [DONE]. perf_counter is CLOCK_MONOTONIC, shared by processes on one Linux machine,
so the client can subtract the stamps from its arrival times.
"""

import asyncio
import json
import sys
import time

from aiohttp import web


async def main(port_file: str, events: int, gap: float) -> None:
    loop = asyncio.get_running_loop()

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        t0 = loop.time()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k in range(events):
            delay = t0 + (k + 1) * gap - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            obj = {"choices": [{"index": 0, "text": f"{time.perf_counter_ns()}|", "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        await resp.write(b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": %d}}\n\n'
                         b"data: [DONE]\n\n" % events)
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    with open(port_file, "w") as f:
        f.write(str(site._server.sockets[0].getsockname()[1]))
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
