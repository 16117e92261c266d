"""Times the official Python claude-agent-sdk against the same claude CLI and mock as the Harness bench.

Written to target/bench/ and run by `just bench` in a venv there. Reads one JSON object on argv[1]:
{"cli": path, "cwd": dir, "env": {...}, "samples": n, "tools": [...]}; `tools` (optional) are
MCP tools as Harness lists them (`GET /api/tools`: name, description, inputSchema), served with
the same names and schemas by stubs, so the model sees what a Harness thread's model sees. Prints one JSON object on stdout:
{"sdk_version", "cli_version", "fresh_ms": [...], "warm_ms": [...]}. With "turn_by_turn": true
in the config it runs one turn per command on stdin instead (see `turn_by_turn`), so the bench
can alternate them with Harness's.

- fresh: a new `query()` per message (spawn, initialize, one turn, exit), timed to the ResultMessage.
- warm: one `ClaudeSDKClient`, one untimed turn, then `samples` turns, each timed from `query()` to the
  ResultMessage.

Both run with what Harness runs with: the CLI's Claude Code system prompt, no built-in tools, one in-process
MCP server `harness` (with Harness's tools when given, else one), no settings files, partial messages on.
"""

import asyncio
import json
import sys
import time

import claude_agent_sdk
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ResultMessage,
    create_sdk_mcp_server,
    query,
    tool,
)


@tool("current_time", "Returns the current Unix time in seconds.", {})
async def current_time(_args):
    return {"content": [{"type": "text", "text": str(int(time.time()))}]}


def stub(listed):
    """A tool with `listed`'s name, description and schema; the bench never calls it."""

    async def handler(_args):
        return {"content": [{"type": "text", "text": "stub"}]}

    schema = listed.get("inputSchema") or {"type": "object", "properties": {}}
    return tool(listed["name"], listed.get("description") or listed["name"], schema)(handler)


def options(config):
    listed = config.get("tools")
    tools = [stub(t) for t in listed] if listed else [current_time]
    return ClaudeAgentOptions(
        cli_path=config["cli"],
        cwd=config["cwd"],
        env=config["env"],
        system_prompt={"type": "preset", "preset": "claude_code"},
        tools=[],
        setting_sources=[],
        mcp_servers={"harness": create_sdk_mcp_server("harness", tools=tools)},
        allowed_tools=["mcp__harness"],
        include_partial_messages=True,
    )


async def fresh_queries(config, n):
    times = []
    for i in range(n):
        start = time.perf_counter()
        result = None
        async for message in query(prompt=f"sdk fresh {i}", options=options(config)):
            if isinstance(message, ResultMessage):
                result = message
                elapsed = time.perf_counter() - start
        if result is None or result.is_error:
            raise RuntimeError(f"fresh query {i} failed: {result}")
        times.append(elapsed * 1000)
    return times


async def warm_client(config, n):
    times = []
    async with ClaudeSDKClient(options=options(config)) as client:
        for i in range(n + 1):
            start = time.perf_counter()
            await client.query(f"sdk warm {i}")
            result = None
            async for message in client.receive_response():
                if isinstance(message, ResultMessage):
                    result = message
            elapsed = time.perf_counter() - start
            if result is None or result.is_error:
                raise RuntimeError(f"warm turn {i} failed: {result}")
            if i > 0:
                times.append(elapsed * 1000)
    return times


async def receive_result(messages, what):
    result = None
    async for message in messages:
        if isinstance(message, ResultMessage):
            result = message
    if result is None or result.is_error:
        raise RuntimeError(f"{what} failed: {result}")


async def turn_by_turn(config):
    """Commands on stdin, one per line: `warm` runs a turn on one kept ClaudeSDKClient, `fresh` a
    new query(); each is answered with one line of JSON, {"ms": ...}. The first line says the
    client is ready."""
    loop = asyncio.get_running_loop()
    async with ClaudeSDKClient(options=options(config)) as client:
        print(json.dumps({"sdk_version": getattr(claude_agent_sdk, "__version__", None)}), flush=True)
        i = 0
        while True:
            command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if not command:
                return
            i += 1
            start = time.perf_counter()
            if command == "warm":
                await client.query(f"sdk warm {i}")
                await receive_result(client.receive_response(), f"warm turn {i}")
            elif command == "fresh":
                await receive_result(query(prompt=f"sdk fresh {i}", options=options(config)), f"fresh query {i}")
            else:
                raise RuntimeError(f"unknown command {command!r}")
            print(json.dumps({"ms": (time.perf_counter() - start) * 1000}), flush=True)


async def main():
    config = json.loads(sys.argv[1])
    if config.get("turn_by_turn"):
        try:
            await turn_by_turn(config)
        except Exception as error:  # the bench reads the error from stdout
            print(json.dumps({"error": repr(error)}), flush=True)
        return
    n = int(config["samples"])
    fresh = await fresh_queries(config, n)
    warm = await warm_client(config, n)
    try:
        from claude_agent_sdk._cli_version import __cli_version__ as bundled_cli
    except ImportError:
        bundled_cli = None
    print(
        json.dumps(
            {
                "sdk_version": getattr(claude_agent_sdk, "__version__", None),
                "bundled_cli_version": bundled_cli,
                "fresh_ms": fresh,
                "warm_ms": warm,
            }
        )
    )


asyncio.run(main())
