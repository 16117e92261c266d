// The sidebar's list of threads: the newest pages (refreshed every few seconds, keeping as many
// threads as were loaded), more on demand ("More threads", following `nextCursor`), and a search
// over titles and messages (`q`), whose results come best match first.

import { api, NetworkError } from './api.js';

const PAGE = 50;
const MAX_PAGE = 500;
const hook = (id) => document.querySelector(`[data-testid="${id}"]`);

function ago(iso) {
  const seconds = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)}h ago`;
  return `${Math.round(seconds / 86400)}d ago`;
}

/**
 * `open(id)` opens a thread, `openId()` names the open one, `showError(text)` reports a
 * failure. Returns `{ refresh, render, add }`.
 */
export function threadList({ open, openId, showError }) {
  const ui = { list: hook('thread-list'), more: hook('more-threads'), search: hook('thread-search') };
  let threads = [];
  let nextCursor = null;
  let query = '';

  const path = (extra) => {
    const params = new URLSearchParams(extra);
    if (query) params.set('q', query);
    return `/api/threads?${params}`;
  };

  function render() {
    const items = threads.map((thread) => {
      const li = document.createElement('li');
      li.dataset.threadId = thread.id;
      li.dataset.state = thread.running ? 'running' : 'idle';
      if (openId() === thread.id) li.classList.add('open');
      const button = document.createElement('button');
      button.type = 'button';
      const title = document.createElement('span');
      title.className = 'title';
      title.textContent = thread.title || `Untitled ${thread.id.slice(-6)}`;
      const meta = document.createElement('span');
      meta.className = 'meta';
      const activity = thread.lastActivityAt || thread.updatedAt;
      const tags = (thread.tags || []).map((tag) => ` #${tag}`).join('');
      meta.textContent = `${thread.running ? 'running' : 'idle'} · ${ago(activity)}${tags}`;
      meta.title = new Date(activity).toLocaleString();
      button.append(title, meta);
      button.addEventListener('click', () => open(thread.id));
      li.append(button);
      return li;
    });
    ui.list.replaceChildren(...items);
    ui.more.hidden = !nextCursor;
  }

  /** The first pages again, as many threads as are shown (at least one page). */
  async function refresh() {
    const limit = Math.min(MAX_PAGE, Math.max(PAGE, threads.length));
    try {
      const answer = await api('GET', path({ limit }));
      threads = answer.threads;
      nextCursor = answer.nextCursor;
      render();
    } catch (err) {
      if (!(err instanceof NetworkError)) showError(`Could not list threads: ${err.message}`);
    }
  }

  ui.more.addEventListener('click', async () => {
    if (!nextCursor) return;
    try {
      const answer = await api('GET', path({ limit: PAGE, cursor: nextCursor }));
      const known = new Set(threads.map((t) => t.id));
      threads = threads.concat(answer.threads.filter((t) => !known.has(t.id)));
      nextCursor = answer.nextCursor;
      render();
    } catch (err) {
      showError(`Could not list more threads: ${err.message}`);
    }
  });

  let typing = null;
  ui.search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      query = ui.search.value.trim();
      threads = [];
      refresh();
    }, 250);
  });

  return {
    refresh,
    render,
    /** A thread just made, shown first at once. */
    add(thread) {
      threads.unshift({ ...thread, running: false, lastActivityAt: thread.updatedAt });
      render();
    },
  };
}
