// The daemon's HTTP API for the page: the bearer token or API key (asked for on 401, or when
// the person switches keys; kept in sessionStorage), who the daemon takes the page for, JSON
// bodies, and errors that say whether a retry can help.

const TOKEN_KEY = 'harness.token';

const hook = (id) => document.querySelector(`[data-testid="${id}"]`);
const ui = {
  tokenDialog: hook('token-dialog'),
  tokenForm: hook('token-form'),
  tokenInput: hook('token-input'),
  tokenError: hook('token-error'),
  caller: hook('caller'),
  switchKey: hook('switch-key'),
};

/** The daemon answered with an error: `retryable` when trying again later may succeed. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryable = status === 408 || status === 429 || status >= 500;
  }
}

/** The request never got an answer: the daemon or the network is down. */
export class NetworkError extends Error {}

let tokenWaiters = [];

/** The bearer header, when a token was given. */
export function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** Shows the token dialog; resolves once a token was entered. */
function askForToken(reason) {
  ui.tokenDialog.hidden = false;
  ui.tokenError.hidden = !reason;
  ui.tokenError.textContent = reason || '';
  ui.tokenInput.focus();
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

ui.tokenForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const token = ui.tokenInput.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  ui.tokenInput.value = '';
  ui.tokenDialog.hidden = true;
  const waiters = tokenWaiters;
  tokenWaiters = [];
  waiters.forEach((resolve) => resolve());
});

/** One API call. Asks for the token on 401 and tries again; throws ApiError or NetworkError. */
export async function api(method, path, body, options = {}) {
  for (;;) {
    const headers = { ...authHeaders() };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: options.signal,
      });
    } catch (err) {
      if (err.name === 'AbortError') throw err;
      throw new NetworkError(`no answer from the daemon (${err.message})`);
    }
    if (response.status === 401) {
      const hadToken = sessionStorage.getItem(TOKEN_KEY) !== null;
      sessionStorage.removeItem(TOKEN_KEY);
      await askForToken(hadToken ? 'That token was refused.' : '');
      continue;
    }
    const text = await response.text();
    if (response.ok && options.text) return text;
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (!response.ok) {
      const error = json && json.error ? json.error : {};
      throw new ApiError(response.status, error.code || 'http_error',
        error.message || `HTTP ${response.status}`);
    }
    return json;
  }
}

/** A 401 outside `api` (the event stream): forgets the token and asks for another. */
export function tokenRefused() {
  sessionStorage.removeItem(TOKEN_KEY);
  return askForToken('');
}

/**
 * Shows who the daemon takes the page for (`GET /api/me`: the operator, or a key's tenant), and
 * lets the person use another token or key; `changed` runs once one was entered (the threads
 * listed are that tenant's).
 */
export async function showCaller(changed) {
  const render = async () => {
    try {
      const me = await api('GET', '/api/me');
      ui.caller.textContent = me.tenant ? `${me.tenant} · ${me.subject}` : me.subject;
      ui.caller.title = `scopes: ${me.scopes.join(', ')}`;
      ui.caller.dataset.tenant = me.tenant || '';
    } catch {
      ui.caller.textContent = '';
    }
  };
  ui.switchKey.addEventListener('click', async () => {
    sessionStorage.removeItem(TOKEN_KEY);
    await askForToken('');
    await render();
    changed();
  });
  await render();
}
