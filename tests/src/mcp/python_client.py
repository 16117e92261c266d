"""Drives Harness's /mcp with the official MCP Python SDK; prints what it saw as one JSON line.

argv[1]: {"url": ..., "token": ... or null, "modes": ["legacy", "auto"]}
For each mode: connect (legacy: `initialize`; auto: `server/discover`), list tools, call the time
tool and check its structuredContent against its outputSchema, create a thread and send a message
in it (with a progress callback). Also reports the Mcp-Session-Id the server handed out and
whether every later POST of the SDK carried it back.
"""

import asyncio
import importlib.metadata
import json
import sys

import jsonschema
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def checked(result, tool):
    """The structured content, after checking it against the tool's advertised output schema."""
    if result.is_error:
        raise RuntimeError(f"{tool.name} failed: {result.content}")
    jsonschema.validate(result.structured_content, tool.output_schema)
    return result.structured_content


def watch_sessions(http):
    """Records the Mcp-Session-Id answers hand out, and the one each POST carries."""
    seen = {"issued": None, "sent": []}

    async def on_request(request):
        if request.method == "POST":
            seen["sent"].append(request.headers.get("mcp-session-id"))

    async def on_response(response):
        seen["issued"] = seen["issued"] or response.headers.get("mcp-session-id")

    http.event_hooks = {"request": [on_request], "response": [on_response]}
    return seen


async def run(cfg, mode):
    headers = {"Authorization": f"Bearer {cfg['token']}"} if cfg.get("token") else None
    http = create_mcp_http_client(headers=headers)
    sessions = watch_sessions(http)
    transport = streamable_http_client(cfg["url"], http_client=http)
    async with Client(transport, mode=mode) as client:
        out = {
            "protocolVersion": client.protocol_version,
            "serverName": client.server_info.name if client.server_info else None,
        }
        tools = {t.name: t for t in (await client.list_tools()).tools}
        out["tools"] = sorted(tools)
        out["withOutputSchema"] = sorted(n for n, t in tools.items() if t.output_schema)
        time_tool = tools["time__current_time"]
        out["time"] = checked(
            await client.call_tool("time__current_time", {"timezone": "UTC"}), time_tool
        )
        created = checked(
            await client.call_tool("threads__create", {"title": f"python {mode}"}),
            tools["threads__create"],
        )
        progress = []

        async def on_progress(value, total, message):
            progress.append(message)

        out["send"] = checked(
            await client.call_tool(
                "threads__send",
                {"threadId": created["threadId"], "content": f"hello from python {mode}"},
                progress_callback=on_progress,
            ),
            tools["threads__send"],
        )
        out["progress"] = progress
        got = checked(
            await client.call_tool("threads__get", {"threadId": created["threadId"]}),
            tools["threads__get"],
        )
        out["messages"] = [m["content"] for m in got["messages"]]
        issued, later = sessions["issued"], sessions["sent"][1:]
        out["sessionIssued"] = issued is not None
        out["sessionEchoed"] = issued is not None and bool(later) and all(s == issued for s in later)
        return out


async def main():
    cfg = json.loads(sys.argv[1])
    report = {"sdkVersion": importlib.metadata.version("mcp")}
    for mode in cfg["modes"]:
        report[mode] = await run(cfg, mode)
    print(json.dumps(report))


asyncio.run(main())
