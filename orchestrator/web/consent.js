// The built-in authorization server's consent page (`GET /oauth/authorize`): the operator
// names the tenant the client acts for and unlocks the grant with an admin key or the operator
// token; the daemon answers with where to send the browser back to (with the code).

const hook = (id) => document.querySelector(`[data-testid="${id}"]`);
const form = hook('consent-form');
const error = hook('consent-error');

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  error.hidden = true;
  const request = Object.fromEntries(new URLSearchParams(window.location.search));
  const body = {
    request,
    tenant: hook('consent-tenant').value.trim(),
    adminKey: hook('consent-key').value.trim(),
  };
  let answer;
  try {
    answer = await fetch('/oauth/consent', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  } catch (err) {
    error.textContent = `No answer from the daemon (${err.message}).`;
    error.hidden = false;
    return;
  }
  const json = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    error.textContent = (json.error && json.error.message) || `HTTP ${answer.status}`;
    error.hidden = false;
    return;
  }
  window.location.assign(json.redirectTo);
});
