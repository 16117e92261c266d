// The Harness page: threads, live replies, tool calls and the pool, over the daemon's HTTP API.
//
// Nothing sent is lost: a message goes to an outbox (kept in sessionStorage) with a
// clientMessageId before any request, and leaves it only when the daemon answered 202; a
// network failure keeps it queued and it is sent again (same clientMessageId, so never twice)
// when the daemon is reachable; a refusal (4xx) puts the text back in the composer with the
// daemon's reason. The chat is rebuilt from the stored messages plus the thread's event log, read
// from the start and then live with Last-Event-ID, so a reload mid-turn shows the reply so far
// and goes on with no gap and no repeat. Model output only reaches the DOM as text.

import {
  api, ApiError, authHeaders, NetworkError, showCaller, tokenRefused,
} from './api.js';
import { StreamRenderer } from './markdown.js';
import { poolPanel } from './pool.js';
import { deliveriesPanel, schedulesPanel } from './automation.js';
import { workspaceControls } from './workspace.js';
import { threadList } from './threadlist.js';
import { permissionBox, showDecision } from './permissions.js';
import {
  composerAttachments, forApi, linkWrittenFile, showMedia, textOf,
} from './attachments.js';

const OUTBOX_KEY = 'harness.outbox';
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 8000;
const THREADS_REFRESH_MS = 5000;
const PREWARM_AGAIN_MS = 30000;

const hook = (id) => document.querySelector(`[data-testid="${id}"]`);
const ui = {
  threadList: hook('thread-list'),
  newThread: hook('new-thread'),
  connection: hook('connection'),
  title: hook('thread-title'),
  model: hook('model'),
  empty: hook('empty'),
  messages: hook('messages'),
  sendError: hook('send-error'),
  form: hook('composer-form'),
  composer: hook('composer'),
  send: hook('send'),
  interrupt: hook('interrupt'),
  attachments: hook('attachments'),
  older: hook('older-messages'),
  compacted: hook('compacted'),
  attach: hook('attach-input'),
};
const attachments = composerAttachments({
  composer: ui.composer, tray: ui.attachments, picker: ui.attach, showError,
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function backoff(attempt) {
  const base = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** attempt);
  return base / 2 + Math.random() * (base / 2);
}

/** A clientMessageId; crypto.randomUUID needs a secure context, getRandomValues does not. */
function newClientId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `web-${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

function setConnection(state, text) {
  ui.connection.dataset.state = state;
  ui.connection.textContent = text;
}

// ---------------------------------------------------------------------------------------------
// Threads.

const list = threadList({
  open: (id) => openThread(id, true),
  openId: () => current && current.id,
  showError,
});
const refreshThreads = () => list.refresh();
const renderThreads = () => list.render();

function threadIdFromUrl() {
  return new URLSearchParams(window.location.search).get('thread');
}

ui.newThread.addEventListener('click', async () => {
  try {
    const thread = await api('POST', '/api/threads', place.newThreadBody());
    place.clearNewThread();
    list.add(thread);
    await openThread(thread.id, true);
    ui.composer.focus();
  } catch (err) {
    showError(`Could not make a thread: ${err.message}`);
  }
});

window.addEventListener('popstate', () => {
  const id = threadIdFromUrl();
  if (id) openThread(id, false);
});

// ---------------------------------------------------------------------------------------------
// The open thread: its turns (a user message and its reply), built from stored messages and
// then from events.

/** The open thread, or null. */
let current = null;

/**
 * @typedef Turn
 * @property {string|null} messageId the user message's id, once the daemon stored it
 * @property {string|null} clientId
 * @property {HTMLElement} userEl
 * @property {HTMLElement|null} replyEl
 * @property {boolean} final the reply is complete (or failed); events of this turn change nothing but tool calls
 */

async function openThread(id, push) {
  if (current) current.abort.abort();
  const abort = new AbortController();
  current = {
    id,
    abort,
    thread: null,
    turns: new Map(), // messageId → Turn
    pending: new Map(), // clientMessageId → Turn not yet stored
    permissions: new Map(), // requestId → its box in the turn
    lastEventId: 0,
    model: null,
  };
  const state = current;
  if (push && threadIdFromUrl() !== id) {
    window.history.pushState({}, '', `?thread=${encodeURIComponent(id)}`);
  }
  hideError();
  ui.messages.replaceChildren();
  delete ui.messages.dataset.lastEventId;
  ui.empty.hidden = true;
  ui.form.hidden = false;
  ui.title.textContent = 'Loading…';
  ui.model.textContent = '';
  place.showWorkspace(null);
  place.showArchived(null);
  renderThreads();
  let answer;
  try {
    answer = await api('GET', `/api/threads/${encodeURIComponent(id)}`, undefined,
      { signal: abort.signal });
  } catch (err) {
    if (err.name === 'AbortError') return;
    ui.title.textContent = 'Thread not available';
    showError(err instanceof ApiError && err.status === 404
      ? `There is no thread ${id}.` : `Could not open the thread: ${err.message}`);
    ui.form.hidden = true;
    return;
  }
  if (current !== state) return;
  state.thread = answer;
  ui.title.textContent = answer.title || `Untitled ${answer.id.slice(-6)}`;
  place.showWorkspace(answer.workspace || null);
  place.showArchived(Boolean(answer.archivedAt));
  place.showTurnOptions();
  // The thread shows its last page; "Older messages" asks for more, page by page.
  let { messages, messagesCursor: older } = answer;
  while (older && messages.length < answer.messages.length + (olderWanted.get(id) || 0)) {
    const page = await api('GET', `/api/threads/${encodeURIComponent(id)}/messages?limit=100&before=${older}`);
    messages = page.messages.reverse().concat(messages);
    older = page.nextCursor;
  }
  if (current !== state) return;
  ui.older.hidden = !older;
  // The event log replays from the start (or from where retention cut it): what it says of
  // messages older than those shown is skipped.
  const firstShown = messages.find((m) => m.role === 'user');
  state.shownSince = older && firstShown ? Date.parse(firstShown.createdAt) : null;
  ui.compacted.hidden = true;
  const replies = new Map();
  for (const message of messages) {
    if (message.role === 'assistant' && message.replyTo) replies.set(message.replyTo, message);
  }
  for (const message of messages) {
    if (message.role !== 'user') continue;
    const turn = addTurn(state, message.id, message.clientMessageId, message.content, message.origin);
    showMedia(turn.userEl, message.blocks);
    if (message.model) state.model = message.model;
    const reply = replies.get(message.id);
    if (reply) {
      finishReply(turn, reply.content, 'done');
      if (reply.model) state.model = reply.model;
    } else if (message.status === 'pending') {
      ensureReply(turn);
    } else {
      failReply(turn, message.status, message.error);
    }
  }
  showModel(state);
  // Messages of this thread still in the outbox (a reload while offline).
  for (const item of outbox.filter((entry) => entry.threadId === id)) {
    if (!state.pending.has(item.clientMessageId)) showQueued(state, item);
  }
  updateInterrupt();
  scrollToEnd();
  followEvents(state);
  flushOutbox();
}

const olderWanted = new Map(); // thread id → how many older messages to show
ui.older.addEventListener('click', () => {
  if (!current) return;
  olderWanted.set(current.id, (olderWanted.get(current.id) || 0) + 50);
  openThread(current.id, false);
});

function showModel(state) {
  const model = (state.thread && state.thread.model) || state.model;
  const profile = state.thread && state.thread.profile;
  ui.model.textContent = `model: ${model || 'default'}${profile ? ` · profile: ${profile}` : ''}`;
}

/** A turn: the message that starts it (a person's, or, with origin `cli`, one the CLI started by
 * itself: a cron, a wake-up, a background task's notice) and the place for its reply. */
function addTurn(state, messageId, clientId, content, origin) {
  const userEl = document.createElement('article');
  userEl.className = origin === 'cli' ? 'message user cli' : 'message user';
  userEl.dataset.testid = 'message';
  userEl.dataset.role = 'user';
  userEl.dataset.origin = origin || 'user';
  userEl.dataset.status = messageId ? 'sent' : 'sending';
  if (messageId) userEl.dataset.messageId = messageId;
  const body = document.createElement('div');
  body.className = 'text';
  body.textContent = content;
  const note = document.createElement('div');
  note.className = 'note';
  userEl.append(body, note);
  ui.messages.append(userEl);
  const turn = {
    messageId, clientId, userEl, replyEl: null, parts: null, text: '', textEl: null,
    sawDelta: false, tools: new Map(), final: false,
  };
  if (messageId) state.turns.set(messageId, turn);
  else state.pending.set(clientId, turn);
  return turn;
}

/** A stored message id for a turn the page made before the daemon named it. */
function bindTurn(state, clientId, messageId) {
  const turn = state.pending.get(clientId);
  if (!turn) return state.turns.get(messageId) || null;
  state.pending.delete(clientId);
  const known = state.turns.get(messageId);
  if (known && known !== turn) {
    turn.userEl.remove(); // the daemon already told us about it through an event
    return known;
  }
  turn.messageId = messageId;
  turn.userEl.dataset.messageId = messageId;
  turn.userEl.dataset.status = 'sent';
  turn.userEl.querySelector('.note').textContent = '';
  state.turns.set(messageId, turn);
  return turn;
}

function ensureReply(turn) {
  if (turn.replyEl) return turn.replyEl;
  const replyEl = document.createElement('article');
  replyEl.className = 'message assistant';
  replyEl.dataset.testid = 'message';
  replyEl.dataset.role = 'assistant';
  replyEl.dataset.status = 'streaming';
  if (turn.messageId) replyEl.dataset.replyTo = turn.messageId;
  const parts = document.createElement('div');
  parts.className = 'parts';
  const note = document.createElement('div');
  note.className = 'note';
  replyEl.append(parts, note);
  turn.userEl.after(replyEl);
  turn.replyEl = replyEl;
  turn.parts = parts;
  return replyEl;
}

function appendText(turn, text) {
  ensureReply(turn);
  if (!turn.textEl) {
    turn.textEl = document.createElement('div');
    turn.textEl.className = 'text md';
    // The text so far, on the element (an attribute would be copied whole on every delta).
    turn.textEl.raw = '';
    turn.textEl.renderer = new StreamRenderer(turn.textEl);
    turn.parts.append(turn.textEl);
  }
  turn.textEl.raw += text;
  turn.textEl.renderer.update(turn.textEl.raw);
}

function streamedText(turn) {
  if (!turn.parts) return '';
  return Array.from(turn.parts.querySelectorAll('.text'), (node) => node.raw || '').join('');
}

function finishReply(turn, content, status) {
  ensureReply(turn);
  const squash = (text) => text.replace(/\s+/g, ' ').trim();
  if (squash(streamedText(turn)) !== squash(content)) {
    // What streamed is not the stored reply (a lean daemon sends no deltas, or a block was
    // missed): the stored text wins.
    turn.parts.querySelectorAll('.text').forEach((node) => node.remove());
    turn.textEl = null;
    appendText(turn, content);
  }
  // Each text part once more in one piece: what spans a blank line joins up.
  turn.parts.querySelectorAll('.text').forEach((node) => node.renderer.finish(node.raw));
  turn.final = true;
  turn.replyEl.dataset.status = status;
}

function failReply(turn, status, error) {
  ensureReply(turn);
  turn.final = true;
  turn.replyEl.dataset.status = status || 'error';
  const why = { interrupted: 'Interrupted', refused: 'Refused' }[status] || 'Failed';
  turn.replyEl.querySelector('.note').textContent = error ? `${why}: ${error}` : `${why}.`;
}

function toolStarted(turn, data) {
  ensureReply(turn);
  const id = data.tool_use_id || `tool-${turn.tools.size}`;
  if (turn.tools.has(id)) return;
  const details = document.createElement('details');
  details.className = 'tool-call';
  details.dataset.testid = 'tool-call';
  details.dataset.status = 'running';
  const summary = document.createElement('summary');
  const name = document.createElement('span');
  name.className = 'tool-name';
  name.textContent = data.name;
  const state = document.createElement('span');
  state.className = 'tool-state';
  state.textContent = 'running';
  summary.append('Tool ', name, ' ', state);
  const input = labelled('input', JSON.stringify(data.input, null, 2));
  details.append(summary, input);
  details.call = data;
  // A finished reply (opened from history) shows its text already: its calls go before it.
  const firstText = turn.final ? turn.parts.querySelector('.text') : null;
  turn.parts.insertBefore(details, firstText);
  turn.textEl = null; // text after the call starts a new part
  turn.tools.set(id, details);
}

function toolFinished(turn, data) {
  const details = turn.tools.get(data.tool_use_id);
  if (!details || details.querySelector('.tool-result')) return;
  const isError = Boolean(data.is_error);
  details.dataset.status = isError ? 'error' : 'ok';
  details.querySelector('.tool-state').textContent = isError ? 'error' : 'done';
  const content = typeof data.content === 'string' ? data.content : JSON.stringify(data.content, null, 2);
  const result = labelled(isError ? 'error' : 'result', content);
  result.classList.add('tool-result');
  details.append(result);
  if (!isError && current && details.call) linkWrittenFile(details, current.id, details.call);
}

/** A tool permission waiting for a person: shown in its turn with its buttons. */
function permissionRequested(state, turn, data) {
  if (state.permissions.has(data.requestId)) return;
  ensureReply(turn);
  const input = labelled('input', JSON.stringify(data.input, null, 2));
  const box = permissionBox(state.id, data, input);
  const firstText = turn.final ? turn.parts.querySelector('.text') : null;
  turn.parts.insertBefore(box, firstText);
  turn.textEl = null;
  state.permissions.set(data.requestId, box);
}

function permissionDecided(state, data) {
  const box = state.permissions.get(data.requestId);
  if (box) showDecision(box, data.decision, data.decidedBy);
}

function labelled(label, text) {
  const box = document.createElement('div');
  box.className = `tool-${label}`;
  const head = document.createElement('div');
  head.className = 'label';
  head.textContent = label;
  const pre = document.createElement('pre');
  pre.textContent = text;
  box.append(head, pre);
  return box;
}

/** The thread's walls stopped a process: a line among the thread's turns, as text. */
function limitReached(data) {
  const note = document.createElement('div');
  note.className = 'limit-reached';
  note.setAttribute('data-testid', 'limit-reached');
  const limit = data.limit === 'memory'
    ? `memory limit of ${data.max} MiB` : `limit of ${data.max} processes`;
  const after = data.processStopped
    ? ' Its turn ended; the next one starts a fresh process.' : '';
  note.textContent = `The walls stopped ${data.command || 'a process'} (pid ${data.pid}): `
    + `this thread's ${limit} was reached.${after}`;
  ui.messages.append(note);
}

/** Applies one event of the open thread's log; events already seen are skipped by id. */
function applyEvent(state, event) {
  if (event.id <= state.lastEventId) return;
  state.lastEventId = event.id;
  ui.messages.dataset.lastEventId = event.id; // how far into the log the page is
  const data = event.data || {};
  const messageId = event.messageId;
  if (event.kind === 'message_received') {
    if (state.turns.has(messageId) || Date.parse(event.at) < state.shownSince) return;
    const turn = data.clientMessageId && state.pending.has(data.clientMessageId)
      ? bindTurn(state, data.clientMessageId, messageId)
      : addTurn(state, messageId, data.clientMessageId, data.content, data.origin);
    if (turn && !turn.userEl.querySelector('.media')) showMedia(turn.userEl, data.blocks);
    if (turn && !turn.final) ensureReply(turn);
    updateInterrupt();
    scrollToEnd();
    return;
  }
  if (event.kind === 'log_compacted') {
    ui.compacted.hidden = false; // the stored messages above are whole; older tool calls are gone
    return;
  }
  if (event.kind === 'permission_decided') {
    // Carries no message id: the request it answers is found by its own id.
    permissionDecided(state, data);
    return;
  }
  if (event.kind === 'limit_reached') {
    // Carries no message id: the walls stopped a process of the thread's tree.
    limitReached(data);
    scrollToEnd();
    return;
  }
  const turn = messageId ? state.turns.get(messageId) : null;
  if (!turn) return;
  switch (event.kind) {
    case 'permission_requested':
      permissionRequested(state, turn, data);
      break;
    case 'tool_call_started':
      toolStarted(turn, data);
      break;
    case 'tool_call_finished':
      toolFinished(turn, data);
      break;
    case 'text_delta':
      if (!turn.final) {
        turn.sawDelta = true;
        appendText(turn, data.text || '');
      }
      break;
    case 'assistant_text':
      // Deltas carry the same text; without them (a lean daemon) the block comes whole.
      if (!turn.final && !turn.sawDelta) appendText(turn, data.text || '');
      break;
    case 'turn_started':
      if (!turn.final) ensureReply(turn);
      refreshThreads();
      break;
    case 'turn_finished':
      if (!turn.final) {
        const reply = data.reply || {};
        finishReply(turn, reply.content || '', 'done');
        if (reply.model) {
          state.model = reply.model;
          showModel(state);
        }
        refreshThreads();
      }
      break;
    case 'turn_failed':
      if (!turn.final) {
        failReply(turn, data.status, data.error);
        refreshThreads();
      }
      break;
    default:
      break;
  }
  updateInterrupt();
  scrollToEnd();
}

/** Reads the thread's event stream for as long as it is open, reconnecting with backoff. */
async function followEvents(state) {
  let attempt = 0;
  while (!state.abort.signal.aborted) {
    try {
      const headers = { ...authHeaders() };
      if (state.lastEventId > 0) headers['last-event-id'] = String(state.lastEventId);
      const response = await fetch(`/api/threads/${encodeURIComponent(state.id)}/events`,
        { headers, signal: state.abort.signal });
      if (response.status === 401) {
        await tokenRefused();
        continue;
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      attempt = 0;
      setConnection('online', 'connected');
      flushOutbox();
      await readEvents(response.body, (event) => applyEvent(state, event));
    } catch (err) {
      if (state.abort.signal.aborted) return;
    }
    if (state.abort.signal.aborted) return;
    setConnection('offline', 'reconnecting…');
    await sleep(backoff(attempt));
    attempt += 1;
  }
}

/** Parses a Server-Sent Events body, calling `onEvent` with each event's JSON data. */
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, '\n');
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data) onEvent(JSON.parse(data));
      end = buffer.indexOf('\n\n');
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Sending: the outbox.

/** Messages not yet accepted by the daemon, oldest first: {threadId, clientMessageId, content}. */
let outbox = loadOutbox();
let flushing = false;
let retryTimer = null;
let retryAttempt = 0;

function loadOutbox() {
  try {
    const stored = JSON.parse(sessionStorage.getItem(OUTBOX_KEY) || '[]');
    return Array.isArray(stored) ? stored : [];
  } catch {
    return [];
  }
}

function saveOutbox() {
  sessionStorage.setItem(OUTBOX_KEY, JSON.stringify(outbox));
}

function showQueued(state, item) {
  const turn = addTurn(state, null, item.clientMessageId, textOf(item.content));
  showMedia(turn.userEl, Array.isArray(item.content) ? item.content : null);
  turn.userEl.dataset.status = 'queued';
  return turn;
}

let taking = false;
async function send() {
  const state = current;
  const text = ui.composer.value;
  if (taking || !state || !state.thread || (!text.trim() && attachments.count() === 0)) return;
  hideError();
  taking = true;
  const content = await attachments.take(text).finally(() => { taking = false; });
  if (!Array.isArray(content) && !content.trim()) return; // its only file failed to upload
  const item = { threadId: state.id, clientMessageId: newClientId(), content, ...place.turnOptions() };
  outbox.push(item);
  saveOutbox();
  if (ui.composer.value === text) ui.composer.value = '';
  if (current === state) showQueued(state, item).userEl.dataset.status = 'sending';
  scrollToEnd();
  flushOutbox();
}

/** Sends what the outbox holds, in order; stops at the first message that must wait. */
async function flushOutbox() {
  if (flushing) return;
  flushing = true;
  clearTimeout(retryTimer);
  retryTimer = null;
  try {
    while (outbox.length > 0) {
      const item = outbox[0];
      try {
        const accepted = await api('POST',
          `/api/threads/${encodeURIComponent(item.threadId)}/messages?wait=false`,
          {
            content: forApi(item.content),
            clientMessageId: item.clientMessageId,
            permissionMode: item.permissionMode,
            mcpServers: item.mcpServers,
          });
        outbox.shift();
        saveOutbox();
        retryAttempt = 0;
        if (current && current.id === item.threadId) {
          const turn = bindTurn(current, item.clientMessageId, accepted.messageId);
          if (turn && !turn.final) ensureReply(turn);
          updateInterrupt();
        }
      } catch (err) {
        if (err instanceof NetworkError || err.retryable) {
          markQueued(item, err);
          retryTimer = setTimeout(flushOutbox, backoff(retryAttempt));
          retryAttempt += 1;
          return;
        }
        // Refused for good: the text goes back to the composer, with the reason.
        outbox.shift();
        saveOutbox();
        giveBack(item, err);
      }
    }
  } finally {
    flushing = false;
  }
}

function markQueued(item, err) {
  if (!current || current.id !== item.threadId) return;
  const turn = current.pending.get(item.clientMessageId);
  if (!turn) return;
  turn.userEl.dataset.status = 'queued';
  turn.userEl.querySelector('.note').textContent = err instanceof NetworkError
    ? 'Queued: the daemon is not reachable; it is sent when it is back.'
    : `Queued: ${err.message}; trying again.`;
}

function giveBack(item, err) {
  if (current && current.id === item.threadId) {
    const turn = current.pending.get(item.clientMessageId);
    if (turn) {
      turn.userEl.remove();
      current.pending.delete(item.clientMessageId);
    }
    const draft = ui.composer.value;
    const text = textOf(item.content);
    ui.composer.value = draft ? `${text}\n${draft}` : text;
  }
  showError(`Not sent: ${err.message}`);
}

window.addEventListener('online', () => flushOutbox());

ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  send();
});

ui.composer.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});

// Prewarm: a thread with no warm process gets one while the person types.
const prewarmedAt = new Map();
ui.composer.addEventListener('focus', async () => {
  const state = current;
  if (!state || !state.thread) return;
  const last = prewarmedAt.get(state.id) || 0;
  if (Date.now() - last < PREWARM_AGAIN_MS) return;
  prewarmedAt.set(state.id, Date.now());
  try {
    const pool = await api('GET', '/api/pool');
    const warm = pool.processes.some((p) => p.threadId === state.id && !p.spare && !p.retired);
    const busy = Array.from(state.turns.values()).some((turn) => !turn.final && turn.replyEl);
    if (!warm && !busy) await api('POST', '/api/prewarm', { threadId: state.id });
  } catch (err) {
    prewarmedAt.delete(state.id); // only a hint; try again on the next focus
  }
});

// Interrupt: shown while a turn of the open thread runs.
function runningTurn() {
  if (!current) return null;
  for (const turn of current.turns.values()) {
    if (!turn.final && turn.replyEl) return turn;
  }
  return null;
}

function updateInterrupt() {
  ui.interrupt.hidden = runningTurn() === null;
}

ui.interrupt.addEventListener('click', async () => {
  if (!current) return;
  try {
    await api('POST', `/api/threads/${encodeURIComponent(current.id)}/interrupt`);
  } catch (err) {
    showError(`Could not interrupt: ${err.message}`);
  }
});

function showError(text) {
  ui.sendError.textContent = text;
  ui.sendError.hidden = false;
}

function hideError() {
  ui.sendError.hidden = true;
  ui.sendError.textContent = '';
}

function scrollToEnd() {
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

// ---------------------------------------------------------------------------------------------
// Start.

poolPanel(api);
schedulesPanel(api);
deliveriesPanel(api);
const place = workspaceControls({
  api,
  showError,
  current: () => current,
  composer: ui.form,
  refreshThreads,
  closeThread: () => {
    if (current) current.abort.abort();
    current = null;
    window.history.pushState({}, '', window.location.pathname);
    ui.messages.replaceChildren();
    ui.older.hidden = true;
    ui.form.hidden = true;
    ui.empty.hidden = false;
    ui.title.textContent = '';
    refreshThreads();
  },
});

setConnection('idle', '');
showCaller(() => {
  refreshThreads();
  place.loadProfiles();
});
place.loadProfiles();
refreshThreads();
setInterval(refreshThreads, THREADS_REFRESH_MS);
const initial = threadIdFromUrl();
if (initial) openThread(initial, false);
else flushOutbox();
