// An MCP client with no token, as the official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`)
// runs its OAuth flow against Harness's /mcp with the built-in authorization server.
//
// argv[2]: {"url": the /mcp URL, "consent": {"adminKey", "tenant"}}
// The SDK meets a 401, discovers the protected resource and the authorization server, registers
// itself (RFC 7591) and sends the "browser" to the consent page; the browser is scripted: it
// loads the page and sends what its script sends when the operator allows (the page's own
// request, with the operator's key), and reads the code from where it is sent back. The SDK then
// exchanges the code (PKCE) and connects again. Prints one JSON line.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const cfg = JSON.parse(process.argv[2]);
const REDIRECT = 'http://127.0.0.1:9/callback';
const seen = {};
let clientInfo;
let tokens;
let verifier;

const provider = {
  get redirectUrl() {
    return REDIRECT;
  },
  get clientMetadata() {
    return {
      client_name: 'harness-tests (TypeScript)',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  },
  state() {
    return 'ts-state';
  },
  clientInformation() {
    return clientInfo;
  },
  saveClientInformation(info) {
    clientInfo = info;
  },
  tokens() {
    return tokens;
  },
  saveTokens(saved) {
    tokens = saved;
  },
  async redirectToAuthorization(url) {
    seen.authorize = url;
    const page = await fetch(url);
    seen.consentPage = page.status;
    const request = Object.fromEntries(url.searchParams);
    const answer = await fetch(new URL('/oauth/consent', url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ request, ...cfg.consent }),
    });
    if (!answer.ok) throw new Error(`consent: ${answer.status} ${await answer.text()}`);
    const back = new URL((await answer.json()).redirectTo);
    seen.code = back.searchParams.get('code');
    seen.state = back.searchParams.get('state');
  },
  saveCodeVerifier(saved) {
    verifier = saved;
  },
  codeVerifier() {
    return verifier;
  },
};

const url = new URL(cfg.url);
const connect = async () => {
  const client = new Client({ name: 'harness-tests', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
  return client;
};

let client;
try {
  client = await connect();
} catch (err) {
  if (!(err instanceof UnauthorizedError)) throw err;
  const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
  await transport.finishAuth(seen.code);
  client = await connect();
}
const created = await client.callTool({
  name: 'threads__create',
  arguments: { title: 'made over oauth (typescript)' },
});
const listed = await client.callTool({ name: 'threads__list', arguments: {} });
await client.close();
console.log(
  JSON.stringify({
    created: created.structuredContent,
    listed: listed.structuredContent,
    clientId: clientInfo ? clientInfo.client_id : null,
    accessToken: tokens ? tokens.access_token : null,
    state: seen.state,
    consentPage: seen.consentPage,
    resource: seen.authorize ? seen.authorize.searchParams.get('resource') : null,
    codeChallengeMethod: seen.authorize
      ? seen.authorize.searchParams.get('code_challenge_method')
      : null,
  }),
);
