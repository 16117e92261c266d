"""Drives Harness's ACP agent with the official ACP Python SDK (`agent-client-protocol`), as an
editor would, over stdio (`harness acp` spawned) or over the network (the daemon's `/acp`
WebSocket, the SDK's own WebSocket transport), and prints one JSON line of what it saw.

argv[1]: {bin, url, wsUrl?, token?, transport: "stdio" | "ws", cwd, scenario, prompt?, option?,
sessionId?}; scenarios as the TypeScript client's: "prompt" (answering a permission with
`option`), "cancel" (cancels once the first chunk came), "load" (loads `sessionId`)."""

import asyncio
import contextlib
import json
import sys

from acp import PROTOCOL_VERSION, connect_to_agent, spawn_agent_process, text_block
from acp.schema import AllowedOutcome, RequestPermissionResponse


class Client:
    def __init__(self, option):
        self.option = option
        self.updates = []
        self.permissions = []
        self.first_chunk = asyncio.Event()

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append({
            "toolCall": tool_call.model_dump(by_alias=True, exclude_none=True),
            "options": [o.model_dump(by_alias=True, exclude_none=True) for o in options],
        })
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.option))

    async def session_update(self, session_id, update, **kwargs):
        shown = update.model_dump(by_alias=True, exclude_none=True)
        self.updates.append(shown)
        if shown.get("sessionUpdate") == "agent_message_chunk":
            self.first_chunk.set()


@contextlib.asynccontextmanager
async def connected(client, config):
    if config["transport"] == "ws":
        from acp.ws.client import create_websocket_stream

        headers = {"Authorization": f"Bearer {config['token']}"} if config.get("token") else None
        transport = await create_websocket_stream(config["wsUrl"], headers=headers)
        conn = connect_to_agent(client, transport)
        try:
            yield conn
        finally:
            await conn.close()
    else:
        async with spawn_agent_process(client, config["bin"], "acp", "--url", config["url"]) as (conn, _proc):
            yield conn


async def scenario(conn, client, config):
    init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
    seen = {"init": {"protocolVersion": init.protocol_version}}
    if config["scenario"] == "load":
        try:
            await conn.load_session(cwd=config["cwd"], session_id=config["sessionId"], mcp_servers=[])
        except Exception as error:  # the agent's JSON-RPC error
            seen["loadError"] = {"message": str(error), "data": getattr(error, "data", None)}
        seen["updates"] = client.updates
        return seen
    try:
        session = await conn.new_session(cwd=config["cwd"], mcp_servers=[])
    except Exception as error:  # the agent's JSON-RPC error
        seen["newError"] = {"message": str(error)}
        return seen
    seen["sessionId"] = session.session_id
    prompt = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[text_block(config["prompt"])]))
    if config["scenario"] == "cancel":
        await client.first_chunk.wait()
        await conn.cancel(session_id=session.session_id)
    answer = await prompt
    seen.update({
        "stopReason": answer.stop_reason,
        "updatesAtAnswer": len(client.updates),
        "updates": client.updates,
        "permissions": client.permissions,
    })
    return seen


async def main():
    config = json.loads(sys.argv[1])
    client = Client(config.get("option", "reject_once"))
    async with connected(client, config) as conn:
        seen = await scenario(conn, client, config)
    print(json.dumps(seen))


asyncio.run(main())
