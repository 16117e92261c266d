// Work that runs without anyone waiting: the schedules (create, run now, pause, resume, delete,
// their last runs) and the webhook deliveries (each one's state, and sending a dead one again).
// Both panels refresh while open; everything shown is set as text.

const REFRESH_MS = 2000;
const RUNS_SHOWN = 5;

const hook = (id) => document.querySelector(`[data-testid="${id}"]`);

function element(tag, text, attrs = {}) {
  const el = document.createElement(tag);
  if (text !== undefined) el.textContent = text;
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, value);
  return el;
}

function button(testid, text, onClick) {
  const b = element('button', text, { type: 'button', 'data-testid': testid });
  b.addEventListener('click', onClick);
  return b;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : '–';
}

/** A toggle that shows `panel` and calls `refresh` every few seconds while it is open. */
function openable(toggle, panel, refresh) {
  let timer = null;
  toggle.addEventListener('click', () => {
    const open = panel.hidden;
    panel.hidden = !open;
    toggle.setAttribute('aria-expanded', String(open));
    clearInterval(timer);
    timer = null;
    if (open) {
      refresh();
      timer = setInterval(refresh, REFRESH_MS);
    }
  });
}

/** Wires the schedules panel; `api(method, path, body)` calls the daemon. */
export function schedulesPanel(api) {
  const ui = {
    toggle: hook('schedules-toggle'),
    panel: hook('schedules'),
    summary: hook('schedules-summary'),
    form: hook('schedule-form'),
    cron: hook('schedule-cron'),
    timezone: hook('schedule-timezone'),
    prompt: hook('schedule-prompt'),
    thisThread: hook('schedule-this-thread'),
    error: hook('schedule-error'),
    list: hook('schedule-list'),
  };
  openable(ui.toggle, ui.panel, refresh);

  ui.form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = { cron: ui.cron.value.trim(), prompt: ui.prompt.value };
    if (ui.timezone.value.trim()) body.timezone = ui.timezone.value.trim();
    const thread = new URLSearchParams(location.search).get('thread');
    if (ui.thisThread.checked && thread) body.threadId = thread;
    else body.thread = {};
    try {
      await api('POST', '/api/schedules', body);
      ui.error.hidden = true;
      ui.prompt.value = '';
    } catch (err) {
      ui.error.textContent = err.message;
      ui.error.hidden = false;
    }
    refresh();
  });

  async function act(method, path) {
    try {
      await api(method, path);
      ui.error.hidden = true;
    } catch (err) {
      ui.error.textContent = err.message;
      ui.error.hidden = false;
    }
    refresh();
  }

  async function refresh() {
    let schedules;
    try {
      ({ schedules } = await api('GET', '/api/schedules'));
    } catch (err) {
      ui.summary.textContent = `unavailable: ${err.message}`;
      return;
    }
    const running = schedules.filter((s) => s.enabled).length;
    ui.summary.textContent = `${schedules.length} schedules · ${running} running`;
    const items = await Promise.all(schedules.map(async (s) => {
      const li = element('li', undefined, { 'data-schedule-id': s.id });
      li.dataset.enabled = String(s.enabled);
      const target = s.threadId ? `→ ${s.threadId}` : '→ a fresh thread per run';
      li.append(
        element('div', `${s.name || s.cron} (${s.cron}, ${s.timezone}) ${target}`, { class: 'schedule-head' }),
        element('div', s.enabled ? `next ${when(s.nextRunAt)}` : 'paused', {
          'data-testid': 'schedule-state', class: 'schedule-state',
        }),
        element('div', s.prompt, { class: 'schedule-prompt' }),
      );
      const path = `/api/schedules/${encodeURIComponent(s.id)}`;
      const actions = element('div', undefined, { class: 'schedule-actions' });
      actions.append(
        button('schedule-run', 'Run now', () => act('POST', `${path}/run`)),
        button('schedule-toggle', s.enabled ? 'Pause' : 'Resume',
          () => act('POST', `${path}/${s.enabled ? 'pause' : 'resume'}`)),
        button('schedule-delete', 'Delete', () => act('DELETE', path)),
      );
      li.append(actions);
      let runs = [];
      try {
        ({ runs } = await api('GET', `${path}/runs?limit=${RUNS_SHOWN}`));
      } catch (err) {
        li.append(element('div', `runs unavailable: ${err.message}`));
      }
      const list = element('ol', undefined, { 'data-testid': 'schedule-runs', class: 'schedule-runs' });
      list.append(...runs.map((r) => {
        const outcome = r.status === 'started' ? (r.outcome || 'sending') : r.status;
        const row = element('li', `${r.trigger} · ${when(r.dueAt)} · ${outcome}${r.reason ? ` (${r.reason})` : ''}`);
        row.dataset.trigger = r.trigger;
        row.dataset.outcome = outcome;
        return row;
      }));
      li.append(list);
      return li;
    }));
    ui.list.replaceChildren(...items);
  }
}

/** Wires the deliveries panel. */
export function deliveriesPanel(api) {
  const ui = {
    toggle: hook('deliveries-toggle'),
    panel: hook('deliveries'),
    summary: hook('deliveries-summary'),
    rows: hook('delivery-rows'),
  };
  openable(ui.toggle, ui.panel, refresh);

  async function refresh() {
    let deliveries;
    try {
      ({ deliveries } = await api('GET', '/api/webhooks/deliveries?limit=50'));
    } catch (err) {
      ui.summary.textContent = `unavailable: ${err.message}`;
      return;
    }
    const dead = deliveries.filter((d) => d.status === 'dead').length;
    ui.summary.textContent = `${deliveries.length} latest · ${dead} dead`;
    ui.rows.replaceChildren(...deliveries.map((d) => {
      const tr = element('tr', undefined, { 'data-delivery-id': d.id });
      tr.dataset.status = d.status;
      for (const text of [d.type, d.threadId, d.status, String(d.attempts), d.lastError || '']) {
        tr.append(element('td', text));
      }
      const cell = element('td');
      if (d.status === 'dead') {
        cell.append(button('redeliver', 'Send again', async () => {
          try {
            await api('POST', `/api/webhooks/deliveries/${encodeURIComponent(d.id)}/redeliver`);
          } catch (err) {
            ui.summary.textContent = err.message;
          }
          refresh();
        }));
      }
      tr.append(cell);
      return tr;
    }));
  }
}
