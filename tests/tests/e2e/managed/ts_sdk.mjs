// Drives Harness's Managed Agents API with Anthropic's TypeScript SDK (npm `@anthropic-ai/sdk`),
// as a user would.
//
// argv[2]: a JSON object with `base` (the daemon), `key`, `scenario` and its fields. Prints one
// JSON line: what the scenario saw. The SDK does not validate what it reads at run time, so
// `events` (and `listed`) record each event's `type`, and `shapes` (events read on a stream) and
// `listed_shapes` (events listed) its fields: the test checks them against the types the
// installed package declares.
import Anthropic, {
  AuthenticationError,
  BadRequestError,
  NotFoundError,
  toFile,
} from '@anthropic-ai/sdk';

const cfg = JSON.parse(process.argv[2]);
const client = new Anthropic({ apiKey: cfg.key, baseURL: cfg.base, maxRetries: 0 });
const beta = client.beta;
const report = { events: [], shapes: [], listed_shapes: [] };

const textOf = (event) =>
  event.content
    .filter((block) => block.type === 'text')
    .map((block) => block.text)
    .join('');

const shape = (event) => ({ type: event.type, fields: Object.keys(event) });

// A span event as read: its id, and for an end its start's id, is_error and usage.
const spanOf = (event) => {
  if (event.type === 'span.model_request_start') {
    return { type: event.type, id: event.id };
  }
  const usage = event.model_usage;
  return {
    type: event.type,
    id: event.id,
    start: event.model_request_start_id,
    is_error: event.is_error,
    usage: [
      usage.input_tokens,
      usage.output_tokens,
      usage.cache_read_input_tokens,
      usage.cache_creation_input_tokens,
    ],
  };
};

async function agentAndEnvironment(tools = [{ type: 'agent_toolset_20260401' }]) {
  const environment = await beta.environments.create({
    name: 'dev',
    config: { type: 'cloud', networking: { type: 'unrestricted' } },
  });
  const agent = await beta.agents.create({
    name: 'Assistant',
    model: 'claude-sonnet-4-6',
    system: 'Be brief.',
    tools,
  });
  return { agent, environment };
}

async function say(sessionId, text) {
  await beta.sessions.events.send(sessionId, {
    events: [{ type: 'user.message', content: [{ type: 'text', text }] }],
  });
}

// Opens the stream, then runs `start()`, and reads until an idle that needs nothing, calling
// `onEvent` on each event; returns the idle (or the termination).
async function untilIdle(sessionId, start, onEvent = async () => {}) {
  const stream = await beta.sessions.events.stream(sessionId);
  await start();
  for await (const event of stream) {
    report.events.push(event.type);
    report.shapes.push(shape(event));
    await onEvent(event);
    if (event.type === 'agent.message') {
      (report.messages ??= []).push(textOf(event));
    }
    if (event.type === 'session.status_idle' && event.stop_reason.type !== 'requires_action') {
      return event;
    }
    if (event.type === 'session.status_terminated') {
      return event;
    }
  }
  return null;
}

async function quickstart() {
  const { agent, environment } = await agentAndEnvironment();
  report.agent = { id: agent.id, version: agent.version };
  const session = await beta.sessions.create({
    agent: agent.id,
    environment_id: environment.id,
    title: 'quickstart',
  });
  report.session = session.id;
  report.status_before = session.status;
  const idle = await untilIdle(session.id, () => say(session.id, cfg.prompt));
  report.stop_reason = idle.stop_reason.type;
  const after = await beta.sessions.retrieve(session.id);
  report.status_after = after.status;
  report.objects = {
    agent: Object.keys(agent),
    environment: Object.keys(environment),
    session: Object.keys(after),
  };
  report.usage_output_tokens = after.usage?.output_tokens;
  // Every event, a page of `page_size` at a time, as the SDK pages on its own.
  const limit = cfg.page_size ?? 2;
  const listed = [];
  for await (const event of beta.sessions.events.list(session.id, { limit })) {
    listed.push(event);
  }
  report.listed = listed.map((e) => e.type);
  report.listed_ids = listed.map((e) => e.id);
  report.listed_shapes.push(...listed.map(shape));
  report.listed_spans = listed.filter((e) => e.type.startsWith('span.')).map(spanOf);
  const end = listed.find((e) => e.type === 'span.model_request_end');
  report.objects.model_usage = Object.keys(end?.model_usage ?? {});
  const first = await beta.sessions.events.list(session.id, { limit });
  report.first_page = first.data.length;
  report.has_next = first.hasNextPage();
  const only = await beta.sessions.events.list(session.id, { types: ['agent.message'] });
  report.only_messages = only.data.map((e) => e.type);
  if (cfg.second_prompt) {
    await resumeDropped(session.id, cfg.second_prompt);
  }
  report.archived = (await beta.sessions.archive(session.id)).status;
}

// Every event of the session, listed (each one's shape in `listed_shapes`).
async function history(sessionId) {
  const events = [];
  for await (const event of beta.sessions.events.list(sessionId)) {
    report.listed_shapes.push(shape(event));
    events.push(event);
  }
  return events;
}

// A turn whose stream dropped after its first event, then resumed as the SDKs do: a new stream
// first, then the history, skipping on the stream what the history holds.
async function resumeDropped(sessionId, prompt) {
  const before = new Set((await history(sessionId)).map((e) => e.id));
  const dropped = await beta.sessions.events.stream(sessionId);
  await say(sessionId, prompt);
  for await (const event of dropped) {
    report.shapes.push(shape(event));
    report.dropped_after = event.type;
    break;
  }
  const stream = await beta.sessions.events.stream(sessionId);
  const seen = (await history(sessionId)).filter((e) => !before.has(e.id));
  const known = new Set(seen.map((e) => e.id));
  const ended = (e) => e.type === 'session.status_idle' && e.stop_reason.type === 'end_turn';
  if (!seen.some(ended)) {
    for await (const event of stream) {
      report.shapes.push(shape(event));
      if (known.has(event.id)) {
        continue;
      }
      seen.push(event);
      if (ended(event)) {
        break;
      }
    }
  } else {
    stream.controller.abort();
  }
  report.resumed = seen.map((e) => e.type);
  report.resumed_messages = seen.filter((e) => e.type === 'agent.message').map(textOf);
}

async function confirmations() {
  const tools = [
    {
      type: 'agent_toolset_20260401',
      configs: [{ name: 'bash', permission_policy: { type: 'always_ask' } }],
    },
  ];
  const { agent, environment } = await agentAndEnvironment(tools);
  const session = await beta.sessions.create({ agent: agent.id, environment_id: environment.id });
  report.session = session.id;
  report.outcomes = [];
  for (const [prompt, result] of [
    [cfg.allow_prompt, 'allow'],
    [cfg.deny_prompt, 'deny'],
  ]) {
    const asked = [];
    const onEvent = async (event) => {
      if (event.type === 'agent.tool_use') {
        asked.push({ name: event.name, permission: event.evaluated_permission });
      } else if (event.type === 'session.status_idle' && event.stop_reason.type === 'requires_action') {
        const answer = {
          type: 'user.tool_confirmation',
          tool_use_id: event.stop_reason.event_ids[0],
          result,
        };
        if (result === 'deny') {
          answer.deny_message = 'not this one';
        }
        await beta.sessions.events.send(session.id, { events: [answer] });
      }
    };
    const idle = await untilIdle(session.id, () => say(session.id, prompt), onEvent);
    report.outcomes.push({ asked, stop: idle.stop_reason.type });
  }
}

async function interrupt() {
  const { agent, environment } = await agentAndEnvironment();
  const session = await beta.sessions.create({ agent: agent.id, environment_id: environment.id });
  report.session = session.id;
  const onEvent = async (event) => {
    if (event.type === 'session.status_running') {
      await beta.sessions.events.send(session.id, { events: [{ type: 'user.interrupt' }] });
    }
  };
  const idle = await untilIdle(session.id, () => say(session.id, cfg.prompt), onEvent);
  report.stop_reason = idle.stop_reason.type;
}

// What the error of `call` is: `not_found:<body's type>`, `authentication_error`, or `served`.
async function outcome(call) {
  try {
    await call();
    return 'served';
  } catch (err) {
    if (err instanceof NotFoundError) {
      return `not_found:${err.error?.type}:${err.type}`;
    }
    if (err instanceof AuthenticationError) {
      return 'authentication_error';
    }
    throw err;
  }
}

// Another tenant's agent and session are not found; an unknown key is refused.
async function refused() {
  const other = new Anthropic({ apiKey: cfg.other_key, baseURL: cfg.base, maxRetries: 0 });
  report.agent = await outcome(() => other.beta.agents.retrieve(cfg.agent));
  report.session = await outcome(() => other.beta.sessions.retrieve(cfg.session));
  report.events = await outcome(() =>
    other.beta.sessions.events.send(cfg.session, { events: [{ type: 'user.interrupt' }] }),
  );
  report.listed_agents = [];
  for await (const agent of other.beta.agents.list()) {
    report.listed_agents.push(agent.id);
  }
  const bad = new Anthropic({ apiKey: 'hk_nonsense', baseURL: cfg.base, maxRetries: 0 });
  report.bad_key = await outcome(() => bad.beta.agents.list());
}

// A file uploaded, then a session that starts with it in its folder.
async function withFile() {
  const { agent, environment } = await agentAndEnvironment();
  const file = await toFile(Buffer.from(cfg.csv), 'input.csv', { type: 'text/csv' });
  const uploaded = await beta.files.upload({ file });
  report.file = {
    id: uploaded.id,
    mime_type: uploaded.mime_type,
    size: uploaded.size_bytes,
    filename: uploaded.filename,
  };
  const session = await beta.sessions.create({
    agent: agent.id,
    environment_id: environment.id,
    resources: [{ type: 'file', file_id: uploaded.id, mount_path: '/data/input.csv' }],
  });
  report.resources = session.resources.map((r) => [r.type, r.file_id, r.mount_path]);
  report.objects = {
    file: Object.keys(uploaded),
    resource: Object.keys(session.resources[0] ?? {}),
    session: Object.keys(session),
  };
  report.session = session.id;
  await untilIdle(session.id, () => say(session.id, cfg.prompt));
}

// An outcome whose rubric is an uploaded file, graded, revised and graded again, read on one
// stream until the session is idle; then the session's evaluations.
async function outcomeGraded() {
  const { agent, environment } = await agentAndEnvironment();
  const session = await beta.sessions.create({ agent: agent.id, environment_id: environment.id });
  report.session = session.id;
  const rubric = await beta.files.upload({
    file: await toFile(Buffer.from(cfg.rubric), 'rubric.md', { type: 'text/markdown' }),
  });
  const ends = [];
  const idle = await untilIdle(
    session.id,
    async () => {
      const sent = await beta.sessions.events.send(session.id, {
        events: [
          {
            type: 'user.define_outcome',
            description: cfg.description,
            rubric: { type: 'file', file_id: rubric.id },
          },
        ],
      });
      report.sent = { id: sent.data[0].id, outcome_id: sent.data[0].outcome_id };
    },
    async (event) => {
      if (event.type === 'span.outcome_evaluation_end') {
        ends.push({ iteration: event.iteration, result: event.result, start: event.outcome_evaluation_start_id });
      }
    },
  );
  report.stop_reason = idle.stop_reason.type;
  report.ends = ends;
  const after = await beta.sessions.retrieve(session.id);
  report.outcome_evaluations = after.outcome_evaluations.map((e) => ({
    outcome_id: e.outcome_id,
    result: e.result,
    iteration: e.iteration,
  }));
  report.objects = { outcome_evaluation: Object.keys(after.outcome_evaluations[0] ?? {}) };
}

// A session archived, then another deleted, each while a stream is open on it.
async function terminated() {
  const { agent, environment } = await agentAndEnvironment();
  for (const how of ['archive', 'delete']) {
    const session = await beta.sessions.create({ agent: agent.id, environment_id: environment.id });
    const ended = await untilIdle(session.id, () => beta.sessions[how](session.id));
    report[how] = ended?.type ?? null;
    if (how === 'archive') {
      report.status = (await beta.sessions.retrieve(session.id)).status;
      report.listed_last = (await history(session.id)).map((e) => e.type).slice(-1);
    }
  }
}

// An agent with a custom tool: the model's call to it waits for the client's result, which the
// turn goes on with; then an answer to what no longer waits, or to no tool use, is refused.
async function customTool() {
  const tools = [
    {
      type: 'custom',
      name: 'get_weather',
      description: 'The weather in a city.',
      input_schema: {
        type: 'object',
        properties: { city: { type: 'string' } },
        required: ['city'],
      },
    },
  ];
  const { agent, environment } = await agentAndEnvironment(tools);
  report.agent_tools = agent.tools;
  report.objects = { custom_tool: Object.keys(agent.tools[0] ?? {}) };
  const session = await beta.sessions.create({ agent: agent.id, environment_id: environment.id });
  report.session = session.id;
  const [uses, waited, echoed] = [[], [], []];
  const answer = async (id) => {
    const sent = await beta.sessions.events.send(session.id, {
      events: [
        {
          type: 'user.custom_tool_result',
          custom_tool_use_id: id,
          content: [{ type: 'text', text: cfg.result }],
        },
      ],
    });
    report.sent = sent.data.map((e) => ({ id: e.id, type: e.type }));
  };
  // With `early`, the result goes as soon as the tool use is read, as the API allows.
  const onEvent = async (event) => {
    if (event.type === 'agent.custom_tool_use') {
      uses.push({ id: event.id, name: event.name, input: event.input });
      if (cfg.early) {
        await answer(event.id);
      }
    } else if (event.type === 'user.custom_tool_result') {
      echoed.push({
        id: event.id,
        custom_tool_use_id: event.custom_tool_use_id,
        text: textOf(event),
      });
    } else if (event.type === 'session.status_idle' && event.stop_reason.type === 'requires_action') {
      waited.push(event.stop_reason.event_ids);
      if (!cfg.early) {
        await answer(event.stop_reason.event_ids[0]);
      }
    }
  };
  const idle = await untilIdle(session.id, () => say(session.id, cfg.prompt), onEvent);
  report.stop_reason = idle.stop_reason.type;
  Object.assign(report, { uses, waited, echoed });
  report.listed = (await history(session.id)).map((e) => e.type);
  report.refusals = [];
  for (const id of [uses[0]?.id ?? 'sevt_tu_none', 'sevt_nothing']) {
    try {
      await beta.sessions.events.send(session.id, {
        events: [
          {
            type: 'user.custom_tool_result',
            custom_tool_use_id: id,
            content: [{ type: 'text', text: 'late' }],
          },
        ],
      });
      report.refusals.push('served');
    } catch (err) {
      if (!(err instanceof BadRequestError)) {
        throw err;
      }
      report.refusals.push({
        status: err.status,
        type: err.error?.error?.type,
        message: err.error?.error?.message,
      });
    }
  }
}

// What the owner makes, for `refused`.
async function made() {
  const { agent, environment } = await agentAndEnvironment();
  const session = await beta.sessions.create({ agent: agent.id, environment_id: environment.id });
  report.agent = agent.id;
  report.session = session.id;
}

const scenarios = {
  quickstart,
  confirmations,
  interrupt,
  refused,
  made,
  terminated,
  file: withFile,
  outcome: outcomeGraded,
  custom_tool: customTool,
};
await scenarios[cfg.scenario]();
console.log(JSON.stringify(report));
