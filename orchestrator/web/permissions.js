// A tool permission waiting for a person, as its turn shows it: the tool, its input, and Allow,
// Allow always (a rule for this thread: the narrowest that names the call) and Deny; once
// decided, how and by whom.

import { api, ApiError } from './api.js';

/** The box of one pending request of thread `threadId`; `input` shows the tool's input. */
export function permissionBox(threadId, data, input) {
  const box = document.createElement('div');
  box.className = 'permission';
  box.dataset.testid = 'permission';
  box.dataset.status = 'pending';
  box.dataset.requestId = data.requestId;
  const head = document.createElement('div');
  head.className = 'permission-head';
  const name = document.createElement('span');
  name.className = 'tool-name';
  name.textContent = data.toolName;
  head.append('May the agent use ', name, '?');
  const actions = document.createElement('div');
  actions.className = 'permission-actions';
  const button = (testid, className, text, title) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = className;
    b.dataset.testid = testid;
    b.textContent = text;
    if (title) b.title = title;
    return b;
  };
  const allow = button('allow', 'primary', 'Allow');
  const always = button('allow-always', '', 'Allow always',
    'Allow this call, and the same call again on this thread without asking');
  const deny = button('deny', 'danger', 'Deny');
  const buttons = [allow, always, deny];
  const note = document.createElement('span');
  note.className = 'permission-note';
  actions.append(...buttons, note);
  box.append(head, input, actions);
  const answer = async (body) => {
    buttons.forEach((b) => { b.disabled = true; });
    note.textContent = 'sending…';
    try {
      const path = `/api/threads/${encodeURIComponent(threadId)}`
        + `/permissions/${encodeURIComponent(data.requestId)}`;
      const decided = await api('POST', path, body);
      showDecision(box, decided.status === 'allowed' ? 'allow' : 'deny', decided.decidedBy);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) {
        // Decided already (the timeout, an interrupt): its event says how.
        note.textContent = err.message;
        return;
      }
      buttons.forEach((b) => { b.disabled = false; });
      note.textContent = `Not sent: ${err.message}`;
    }
  };
  allow.addEventListener('click', () => answer({ decision: 'allow' }));
  always.addEventListener('click', () => answer({ decision: 'allow', always: true }));
  deny.addEventListener('click', () => answer({ decision: 'deny' }));
  return box;
}

/** Replaces the box's buttons with its decision. */
export function showDecision(box, decision, by) {
  box.dataset.status = decision === 'allow' ? 'allowed' : 'denied';
  const actions = box.querySelector('.permission-actions');
  const verdict = document.createElement('span');
  verdict.className = 'permission-verdict';
  verdict.dataset.testid = 'permission-verdict';
  verdict.textContent = `${decision === 'allow' ? 'Allowed' : 'Denied'}${by ? ` (${by})` : ''}`;
  actions.replaceChildren(verdict);
}
