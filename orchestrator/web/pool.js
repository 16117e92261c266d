// The pool panel: the daemon's live processes and counters, refreshed while the panel is open.

const POOL_REFRESH_MS = 2000;

const hook = (id) => document.querySelector(`[data-testid="${id}"]`);

/** Wires the panel's toggle; `api(method, path)` reads `/api/pool`. */
export function poolPanel(api) {
  const ui = {
    poolToggle: hook('pool-toggle'),
    pool: hook('pool'),
    poolSummary: hook('pool-summary'),
    poolProcesses: hook('pool-processes'),
  };
  let poolTimer = null;

  ui.poolToggle.addEventListener('click', () => {
    const open = ui.pool.hidden;
    ui.pool.hidden = !open;
    ui.poolToggle.setAttribute('aria-expanded', String(open));
    clearInterval(poolTimer);
    poolTimer = null;
    if (open) {
      refreshPool();
      poolTimer = setInterval(refreshPool, POOL_REFRESH_MS);
    }
  });

  async function refreshPool() {
    let pool;
    try {
      pool = await api('GET', '/api/pool');
    } catch (err) {
      ui.poolSummary.textContent = `unavailable: ${err.message}`;
      return;
    }
    const stats = pool.stats || {};
    const rate = pool.hitRate === null || pool.hitRate === undefined
      ? '–' : `${Math.round(pool.hitRate * 100)}%`;
    ui.poolSummary.textContent = `${pool.live}/${pool.capacity} live · hits ${stats.hits} · `
      + `misses ${stats.misses} · hit rate ${rate}`;
    const rows = pool.processes.map((p) => {
      const tr = document.createElement('tr');
      tr.dataset.threadId = p.threadId;
      tr.dataset.pid = String(p.pid);
      const state = p.spare ? 'spare' : p.busy ? 'busy' : p.retired ? 'retired' : 'idle';
      const cells = [
        p.spare ? '(spare)' : p.threadId,
        String(p.pid),
        seconds(p.ageMs),
        seconds(p.idleMs),
        String(p.turnsServed),
        p.rssBytes ? `${Math.round(p.rssBytes / 1048576)} MiB` : '–',
        p.privateBytes ? `${Math.round(p.privateBytes / 1048576)} MiB` : '–',
        walls(p.walls),
        state,
      ];
      tr.append(...cells.map((text) => {
        const td = document.createElement('td');
        td.textContent = text;
        return td;
      }));
      return tr;
    });
    ui.poolProcesses.replaceChildren(...rows);
  }

  /** A tree's walls: its memory and tasks against their limits, or `off`. */
  function walls(w) {
    if (!w) return 'off';
    const mib = (bytes) => (bytes === null || bytes === undefined
      ? '–' : String(Math.round(bytes / 1048576)));
    const tasks = w.processes === null || w.processes === undefined ? '–' : String(w.processes);
    return `${mib(w.memoryBytes)}/${w.memoryMaxMb ?? '∞'} MiB · ${tasks}/${w.maxProcesses ?? '∞'} tasks`;
  }

  function seconds(ms) {
    return `${Math.round(ms / 1000)}s`;
  }
}
