// An outside OAuth 2.0 / OpenID Connect server for the tests: npm `oauth2-mock-server` (RS256
// keys, discovery, /authorize with PKCE, /token). Its tokens carry what a real issuer would:
// `aud` is the resource the client asked for (RFC 8707 `resource`), `sub` and `tenant` the
// subject named by SUBJECT, `scope` what was asked (or SCOPE).
// Prints {"issuer": …} once listening; stops when stdin closes.
import { OAuth2Server } from 'oauth2-mock-server';

const server = new OAuth2Server();
await server.issuer.keys.generate('RS256');
server.service.on('beforeTokenSigning', (token, req) => {
  const body = req.body || {};
  if (body.resource) token.payload.aud = body.resource;
  token.payload.sub = process.env.SUBJECT || 'alice';
  token.payload.tenant = process.env.SUBJECT || 'alice';
  token.payload.scope = body.scope || process.env.SCOPE || 'threads:read threads:write';
});
await server.start(0, '127.0.0.1');
console.log(JSON.stringify({ issuer: server.issuer.url }));
process.stdin.resume();
process.stdin.on('end', async () => {
  await server.stop();
  process.exit(0);
});
