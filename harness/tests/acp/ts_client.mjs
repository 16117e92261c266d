// Drives Harness's ACP agent with the official ACP TypeScript SDK (`@agentclientprotocol/sdk`),
// as an editor would, over stdio (spawns `harness acp`) or over the network (the daemon's `/acp`
// WebSocket through the SDK's own WebSocket transport, `ws` as Node's WebSocket), and prints one
// JSON line of what it saw.
// argv[2]: {bin, url, wsUrl?, token?, transport: "stdio" | "ws", cwd, scenario, sessionId?,
// prompt?, option?}.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import { WebSocket } from "ws";

const config = JSON.parse(process.argv[2]);
let agentProcess;
let stream;
if (config.transport === "ws") {
  const headers = config.token ? { Authorization: `Bearer ${config.token}` } : {};
  stream = createWebSocketStream(config.wsUrl, { WebSocket, headers });
} else {
  agentProcess = spawn(config.bin, ["acp", "--url", config.url], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  stream = acp.ndJsonStream(
    Writable.toWeb(agentProcess.stdin),
    Readable.toWeb(agentProcess.stdout),
  );
}

const updates = [];
const permissions = [];
let firstChunk;
const chunkSeen = new Promise((resolve) => (firstChunk = resolve));

const app = acp
  .client({ name: "harness-e2e" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params.update);
    if (params.update.sessionUpdate === "agent_message_chunk") firstChunk();
  })
  .onRequest("session/request_permission", async ({ params }) => {
    permissions.push(params);
    return { outcome: { outcome: "selected", optionId: config.option } };
  });

async function scenario(ctx) {
  const init = await ctx.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  if (config.scenario === "load") {
    await ctx.request("session/load", { sessionId: config.sessionId, cwd: config.cwd, mcpServers: [] });
    return { init, updates };
  }
  let sessionId;
  let created;
  try {
    created = await ctx.request("session/new", { cwd: config.cwd, mcpServers: [] });
    ({ sessionId } = created);
  } catch (error) {
    return { init, newError: { code: error.code, message: error.message } };
  }
  const chosen = {};
  if (config.scenario === "choose") {
    try {
      await ctx.request("session/set_mode", { sessionId, modeId: "acceptEdits" });
    } catch (error) {
      chosen.wideModeError = error.message;
    }
    await ctx.request("session/set_mode", { sessionId, modeId: config.mode });
    chosen.options = await ctx.request("session/set_config_option", {
      sessionId,
      configId: "model",
      value: config.model,
    });
  }
  const prompt = ctx.request("session/prompt", {
    sessionId,
    prompt: [{ type: "text", text: config.prompt }],
  });
  if (config.scenario === "cancel") {
    await chunkSeen;
    await ctx.notify("session/cancel", { sessionId });
  }
  try {
    const answer = await prompt;
    const updatesAtAnswer = updates.length;
    return {
      init, sessionId, created, chosen, stopReason: answer.stopReason, updatesAtAnswer, updates,
      permissions,
    };
  } catch (error) {
    return { init, sessionId, promptError: { code: error.code, message: error.message }, updates };
  }
}

let result;
try {
  result = await app.connectWith(stream, scenario);
} catch (error) {
  result = { connectError: String(error?.message ?? error) };
} finally {
  agentProcess?.stdin.end();
  agentProcess?.kill();
}
console.log(JSON.stringify(result));
process.exit(0);
