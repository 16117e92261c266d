// An MCP client with tasks: the official TypeScript SDK (npm `@modelcontextprotocol/client`, the
// 2026-07-28 protocol) and the official Tasks extension package (npm
// `@modelcontextprotocol/ext-tasks`), which drives the whole task lifecycle: the `tools/call`
// that answers with a task, `tasks/get` polling, input answered with `tasks/update`,
// `tasks/cancel`, and a task resumed from its serialized reference.
//
// The package asks its host for the one thing the SDK's public API cannot do yet, a raw
// request path for task wire shapes (`rawDispatch`): a plain POST of the framed request with
// the headers a 2026-07-28 Streamable HTTP client sends.
//
// argv[2]: {"url", "token"?, "mode", "threadId"?, "text"?, "answers"?, "reference"?}
//   mode "send":   calls threads__send, settles the task; prints its outcome.
//   mode "ask":    the same, answering each elicitation with the next of `answers`
//                  ("accept" | "decline"); prints the outcome and the elicitations seen.
//   mode "cancel": calls, waits until the task is seen working, cancels it; prints the outcome.
//   mode "start":  calls, hands the task off (a serialized reference) and exits, dropping the
//                  connection; prints the reference.
//   mode "resume": resumes `reference` on a new connection and settles it.
//   mode "discover": connects; prints the server's capabilities.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from '@modelcontextprotocol/ext-tasks/client';

const cfg = JSON.parse(process.argv[2]);
const VERSION = '2026-07-28';
const CAPABILITIES = {
  extensions: { 'io.modelcontextprotocol/tasks': {} },
  elicitation: { form: {} },
};
const CLIENT_INFO = { name: 'harness-tests-tasks', version: '0' };
const auth = cfg.token ? { authorization: `Bearer ${cfg.token}` } : {};

let nextId = 1000;
// A POST of one framed request, answered as JSON (or as SSE, whose last message is the answer).
async function rawDispatch(request) {
  const method = request.method;
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': VERSION,
    'mcp-method': method,
    ...auth,
  };
  const name = method === 'tools/call' ? request.params?.name : request.params?.taskId;
  if (name !== undefined) headers['mcp-name'] = name;
  const body = JSON.stringify({ jsonrpc: '2.0', id: nextId++, ...request });
  const response = await fetch(cfg.url, { method: 'POST', headers, body });
  const text = await response.text();
  const messages = (response.headers.get('content-type') ?? '').startsWith('text/event-stream')
    ? text
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => JSON.parse(line.slice(5)))
    : [JSON.parse(text)];
  const answer = messages[messages.length - 1];
  return answer.error !== undefined
    ? { kind: 'error', error: answer.error }
    : { kind: 'result', result: answer.result };
}

async function connect() {
  const client = new Client(CLIENT_INFO, {
    capabilities: CAPABILITIES,
    versionNegotiation: { mode: { pin: VERSION } },
  });
  const transport = new StreamableHTTPClientTransport(new URL(cfg.url), {
    requestInit: { headers: auth },
  });
  await client.connect(transport);
  return client;
}

const elicitations = [];
const answers = [...(cfg.answers ?? [])];

function session(client) {
  return createTaskSessionFromClient(client, {
    endpointId: 'harness-tests',
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: VERSION,
      clientInfo: CLIENT_INFO,
      clientCapabilities: CAPABILITIES,
    },
    onInputRequest: async (request) => {
      if (request.kind !== 'elicitation') throw new Error(`unexpected input ${request.kind}`);
      elicitations.push(request.params);
      const action = answers.shift() ?? 'decline';
      return action === 'accept'
        ? { action, content: { allow: true } }
        : { action: 'decline' };
    },
  });
}

function summary(outcome, seen, taskId) {
  const out = { status: outcome.status, seen, elicitations, taskId };
  if (outcome.status === 'completed') out.result = resultFromTaskOutcome(outcome);
  if (outcome.status === 'failed') out.error = String(outcome.error?.message ?? outcome.error);
  if (outcome.task !== undefined) out.task = outcome.task;
  return out;
}

const client = await connect();
let printed;
try {
  if (cfg.mode === 'discover') {
    printed = { capabilities: client.getServerCapabilities(), era: client.getProtocolEra() };
  } else {
    const tasks = session(client);
    const args = { threadId: cfg.threadId, content: cfg.text };
    if (cfg.mode === 'resume') {
      const execution = await tasks.resumeTask(cfg.reference);
      const { outcome } = await execution.settle();
      printed = summary(outcome, [], execution.handle?.taskId);
    } else {
      const execution = await tasks.callTool('threads__send', args);
      if (cfg.mode === 'start') {
        let reference;
        await execution.handoff((r) => {
          reference = r;
        });
        // Gone without a goodbye, as a client that crashed: closing the session would cancel
        // what it still holds (the package cancels unsettled executions on close).
        console.log(JSON.stringify({ kind: execution.kind, reference }));
        process.exit(0);
      } else {
        const seen = [];
        let cancelled = false;
        const { outcome } = await execution.settle({
          onEvent: async (event) => {
            if (event.type !== 'task') return;
            seen.push(event.task.status);
            if (cfg.mode === 'cancel' && !cancelled && event.task.status === 'working') {
              cancelled = true;
              await execution.cancel();
            }
          },
        });
        printed = { kind: execution.kind, ...summary(outcome, seen, execution.handle?.taskId) };
      }
    }
    await tasks.close();
  }
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(printed));
