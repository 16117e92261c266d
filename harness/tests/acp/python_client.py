"""Drives `harness acp` with the official ACP Python SDK (`agent-client-protocol`): spawns the
agent, makes a session in `cwd`, sends `prompt`, and prints one JSON line of what it saw.
argv[1]: {bin, url, cwd, prompt}."""

import asyncio
import json
import sys

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block


class Client:
    def __init__(self):
        self.updates = []

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        raise RuntimeError("no permission was expected")

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update.model_dump(by_alias=True, exclude_none=True))


async def main():
    config = json.loads(sys.argv[1])
    client = Client()
    async with spawn_agent_process(client, config["bin"], "acp", "--url", config["url"]) as (conn, _proc):
        init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=config["cwd"], mcp_servers=[])
        answer = await conn.prompt(session_id=session.session_id, prompt=[text_block(config["prompt"])])
        updates_at_answer = len(client.updates)
    print(json.dumps({
        "protocolVersion": init.protocol_version,
        "sessionId": session.session_id,
        "stopReason": answer.stop_reason,
        "updatesAtAnswer": updates_at_answer,
        "updates": client.updates,
    }))


asyncio.run(main())
