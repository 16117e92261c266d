// Where a thread works and what kind of agent it is: the profile and workspace a new thread
// asks for, the open thread's workspace with its diff, archiving, and a turn's options within
// its profile (a narrower permission mode, fewer of the profile's MCP servers). The patch is
// the model's work: it reaches the DOM only as text.

const hook = (id) => document.querySelector(`[data-testid="${id}"]`);

/**
 * Wires the controls. `deps`: `api(method, path, body, options)`, `showError(text)`,
 * `current()` (the open thread's state, or null), `composer` (the form an archived thread hides)
 * and `refreshThreads()`.
 */
export function workspaceControls(deps) {
  const ui = {
    input: hook('workspace-input'),
    worktree: hook('workspace-worktree'),
    profile: hook('profile-select'),
    retry: hook('new-retry'),
    workspace: hook('workspace'),
    diffToggle: hook('diff-toggle'),
    diff: hook('diff'),
    diffSummary: hook('diff-summary'),
    diffPatch: hook('diff-patch'),
    archive: hook('archive'),
    delete: hook('delete-thread'),
    archived: hook('archived'),
    turnMode: hook('turn-mode'),
    turnServers: hook('turn-servers'),
  };
  /** The profiles by name, once read. */
  const profiles = new Map();

  /** What `POST /api/threads` gets beside the title: the workspace and profile asked for, and
   * whether a turn a restart cuts runs again (`onInterrupt`). */
  function newThreadBody() {
    const body = {};
    const where = ui.input.value.trim();
    if (where) body.workspace = ui.worktree.checked ? { repo: where, worktree: true } : { path: where };
    if (ui.profile.value) body.profile = ui.profile.value;
    if (ui.retry.checked) body.onInterrupt = 'retry';
    return body;
  }

  function clearNewThread() {
    ui.input.value = '';
  }

  /** Where the open thread works, with the diff button when it has a workspace. */
  function showWorkspace(workspace) {
    ui.workspace.hidden = !workspace;
    ui.diffToggle.hidden = !workspace;
    ui.diff.hidden = true;
    ui.diffToggle.setAttribute('aria-expanded', 'false');
    if (!workspace) return;
    ui.workspace.textContent = workspace.kind === 'worktree'
      ? `worktree ${workspace.branch} of ${workspace.repo}`
      : `folder ${workspace.path}`;
    ui.workspace.title = workspace.path;
  }

  /** An archived thread takes no more messages: no composer, no archive button. `null`: no
   * thread open. */
  function showArchived(archived) {
    ui.archived.hidden = archived !== true;
    ui.archive.hidden = archived !== false;
    ui.delete.hidden = archived === null;
    if (archived !== null) deps.composer.hidden = archived;
  }

  ui.archive.addEventListener('click', async () => {
    const state = deps.current();
    if (!state) return;
    if (!window.confirm('Archive this thread? It takes no more messages.')) return;
    try {
      const path = `/api/threads/${encodeURIComponent(state.id)}/archive`;
      const answer = await deps.api('POST', path);
      state.thread = { ...state.thread, ...answer.thread };
      showArchived(true);
      if (answer.worktree && answer.worktree.keptDirty) {
        deps.showError('Archived. Its worktree holds uncommitted work, so it was kept.');
      }
      deps.refreshThreads();
    } catch (err) {
      deps.showError(`Could not archive the thread: ${err.message}`);
    }
  });

  ui.delete.addEventListener('click', async () => {
    const state = deps.current();
    if (!state) return;
    if (!window.confirm('Delete this thread and everything of it? This cannot be undone.')) return;
    try {
      await deps.api('DELETE', `/api/threads/${encodeURIComponent(state.id)}`);
      showArchived(null);
      deps.closeThread();
    } catch (err) {
      deps.showError(`Could not delete the thread: ${err.message}`);
    }
  });

  ui.diffToggle.addEventListener('click', async () => {
    if (!ui.diff.hidden) {
      ui.diff.hidden = true;
      ui.diffToggle.setAttribute('aria-expanded', 'false');
      return;
    }
    const state = deps.current();
    if (!state) return;
    const path = `/api/threads/${encodeURIComponent(state.id)}/diff`;
    try {
      const [summary, patch] = await Promise.all([
        deps.api('GET', `${path}?format=json`),
        deps.api('GET', `${path}?format=patch`, undefined, { text: true }),
      ]);
      const files = summary.files.length;
      ui.diffSummary.textContent = files === 0
        ? `No changes since ${summary.base.slice(0, 10)}.`
        : `${files} file${files === 1 ? '' : 's'} changed since ${summary.base.slice(0, 10)}: `
          + `+${summary.additions} −${summary.deletions}`;
      ui.diffPatch.textContent = patch;
      ui.diff.hidden = false;
      ui.diffToggle.setAttribute('aria-expanded', 'true');
    } catch (err) {
      deps.showError(`Could not read the diff: ${err.message}`);
    }
  });

  /** The open thread's turn options: its profile's MCP servers, each on; the profile's mode. */
  function showTurnOptions() {
    const state = deps.current();
    const name = state && state.thread && state.thread.profile;
    const profile = profiles.get(name) || [...profiles.values()].find((p) => p.default);
    const servers = profile ? profile.mcpServers : [];
    ui.turnMode.value = '';
    ui.turnServers.hidden = servers.length === 0;
    ui.turnServers.replaceChildren(ui.turnServers.firstElementChild || document.createElement('legend'),
      ...servers.map((server) => {
        const label = document.createElement('label');
        const box = document.createElement('input');
        box.type = 'checkbox';
        box.checked = true;
        box.value = server.name;
        box.dataset.testid = 'turn-server';
        label.append(box, ` ${server.name}`);
        return label;
      }));
  }

  /** What `POST …/messages` gets beside the content: the mode and servers chosen, if any. */
  function turnOptions() {
    const options = {};
    if (ui.turnMode.value) options.permissionMode = ui.turnMode.value;
    const boxes = [...ui.turnServers.querySelectorAll('input[type="checkbox"]')];
    if (boxes.some((box) => !box.checked)) {
      options.mcpServers = boxes.filter((box) => box.checked).map((box) => box.value);
    }
    return options;
  }

  /** The profiles a new thread can take, the default one first. */
  async function loadProfiles() {
    try {
      const { profiles: listed } = await deps.api('GET', '/api/profiles');
      for (const profile of listed) profiles.set(profile.name, profile);
      showTurnOptions();
      const ordered = [...listed.filter((p) => p.default), ...listed.filter((p) => !p.default)];
      ui.profile.replaceChildren(...ordered.map((profile) => {
        const option = document.createElement('option');
        option.value = profile.default ? '' : profile.name;
        option.dataset.profile = profile.name;
        option.textContent = profile.description
          ? `${profile.name}: ${profile.description}` : profile.name;
        return option;
      }));
    } catch (err) {
      deps.showError(`Could not read the profiles: ${err.message}`);
    }
  }

  return {
    newThreadBody, clearNewThread, showWorkspace, showArchived, loadProfiles,
    showTurnOptions, turnOptions,
  };
}
