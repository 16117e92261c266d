"""An MCP client with no token, as the official Python SDK's OAuth flow runs it against /mcp.

argv[1]: {"url": the /mcp URL, and either "clientId" + "issuer" (a client registered there
beforehand), "clientMetadataUrl" (the client's own metadata document, which the server
fetches), or nothing (the SDK registers one itself, RFC 7591); "consent": {"adminKey",
"tenant"} when the authorization server is Harness's own}
The SDK meets a 401, follows its `resource_metadata` to the protected resource metadata, then
to the authorization server, authorizes with PKCE, exchanges the code for a token naming this
resource, and retries. The "browser" is scripted: it follows an outside issuer's redirect (it
approves at once), or gives Harness's consent as its consent page does (the page's own request,
with the operator's key). Prints one JSON line: the threads it listed, the thread it made, and
the client and tokens it ended with.
"""

import asyncio
import json
import sys
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
)

REDIRECT = "http://127.0.0.1:9/callback"


class Memory:
    """Token storage: starts empty but for the client's registration."""

    def __init__(self, client_id, issuer):
        self.tokens = None
        self.client = None
        if client_id:
            self.client = OAuthClientInformationFull(
                client_id=client_id,
                redirect_uris=[REDIRECT],
                token_endpoint_auth_method="none",
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                issuer=issuer,
            )

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


async def main():
    cfg = json.loads(sys.argv[1])
    seen = {}

    async def redirect_handler(url):
        seen["authorize"] = url
        async with httpx2.AsyncClient() as browser:
            if "consent" in cfg:
                # Harness's consent page, and what its script sends when the operator allows.
                page = await browser.get(url)
                seen["consentPage"] = page.status_code
                request = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
                origin = "{0.scheme}://{0.netloc}".format(urlparse(url))
                answer = await browser.post(
                    f"{origin}/oauth/consent",
                    json={"request": request, **cfg["consent"]},
                )
                if answer.status_code != 200:
                    raise RuntimeError(f"consent: {answer.status_code} {answer.text}")
                location = urlparse(answer.json()["redirectTo"])
            else:
                # An outside issuer answers with a redirect carrying the code; it is read here
                # instead of followed.
                answer = await browser.get(url, follow_redirects=False)
                location = urlparse(answer.headers["location"])
        query = parse_qs(location.query)
        seen["code"] = query["code"][0]
        seen["state"] = query.get("state", [None])[0]
        seen["iss"] = query.get("iss", [None])[0]

    async def callback_handler():
        return AuthorizationCodeResult(code=seen["code"], state=seen["state"], iss=seen["iss"])

    storage = Memory(cfg.get("clientId"), cfg.get("issuer"))
    auth = OAuthClientProvider(
        server_url=cfg["url"],
        client_metadata=OAuthClientMetadata(
            redirect_uris=[REDIRECT],
            client_name="harness-tests",
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=cfg.get("clientMetadataUrl"),
    )
    http = create_mcp_http_client(auth=auth)
    transport = streamable_http_client(cfg["url"], http_client=http)
    async with Client(transport, mode="legacy") as client:
        created = await client.call_tool("threads__create", {"title": "made over oauth"})
        listed = await client.call_tool("threads__list", {})
    authorize = parse_qs(urlparse(seen["authorize"]).query)
    print(json.dumps({
        "created": created.structured_content,
        "listed": listed.structured_content,
        "resource": authorize.get("resource", [None])[0],
        "codeChallengeMethod": authorize.get("code_challenge_method", [None])[0],
        "accessToken": storage.tokens.access_token if storage.tokens else None,
        "refreshToken": storage.tokens.refresh_token if storage.tokens else None,
        "clientId": storage.client.client_id if storage.client else None,
        "consentPage": seen.get("consentPage"),
    }))


asyncio.run(main())
