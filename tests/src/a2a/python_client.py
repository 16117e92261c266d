"""Drives Harness's A2A door with the official A2A Python SDK (a2a-sdk 1.3.0), as an agent
framework would, and prints one JSON report on its last line; the Rust test asserts on it.

The one argument is a JSON object: `base` (the daemon's URL), `token` (its bearer token),
`pushTokens` (two tokens for the push notification configs), and `dialect`: `"1.0"`, or `"0.3"`
to speak A2A v0.3's JSON-RPC (the card's v0.3 interface, which the SDK answers with its v0.3
compatibility transport; the card is also checked against the SDK's v0.3 model). In order:

1. discovery: the Agent Card read anonymously and with the token (A2ACardResolver);
2. send: a blocking `SendMessage` on a new context, whose task completes with the reply;
3. stream: `SendStreamingMessage` on the same context, every event until the stream ends;
4. get: `GetTask` of the first task;
5. input-required: a send whose turn asks for Bash (approvals `ask`), carrying a push config;
   a second push config registered on the task (`CreateTaskPushNotificationConfig`); the task
   answered `allow` with a data part; the pushes the receiver got, their tokens and signatures;
   the config read back (`GetTaskPushNotificationConfig`, `ListTaskPushNotificationConfigs`);
   another permission answered `deny` with a text part;
6. cancel: a send that returns at once on a slow turn, followed with `SubscribeToTask`, then
   `CancelTask` once the subscription has its first event; the subscription's last state;
7. errors: an unknown task, a cancel of an ended task.

Every wait is bounded: the pushes are awaited with a timeout, never slept for.
"""

import asyncio
import base64
import hashlib
import hmac
import json
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version

import httpx
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.compat.v0_3.types import AgentCard as AgentCardV03
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

CONFIG = json.loads(sys.argv[1])
DIALECT = CONFIG.get("dialect", "1.0")
PUSH_WAIT = 60


def pushed(body):
    """(task id, v1.0 state) of a push: v1.0 sends a status update, v0.3 the task."""
    body = json.loads(body)
    if "statusUpdate" in body:
        update = body["statusUpdate"]
        return update.get("taskId"), update.get("status", {}).get("state")
    if body.get("kind") == "task":
        state = body.get("status", {}).get("state", "")
        return body.get("id"), "TASK_STATE_" + state.upper().replace("-", "_")
    return None, None


class Pushes:
    """What the receiver got: each POST's headers and body, and a condition to wait on."""

    def __init__(self):
        self.got = []
        self.changed = threading.Condition()

    def add(self, headers, body):
        with self.changed:
            self.got.append((headers, body))
            self.changed.notify_all()

    def wait_for(self, task, state):
        """The first push for `task` in `state`, within PUSH_WAIT seconds; None if none came."""

        def found():
            for headers, body in self.got:
                if pushed(body) == (task, state):
                    return headers, body
            return None

        with self.changed:
            self.changed.wait_for(found, timeout=PUSH_WAIT)
            return found()


PUSHES = Pushes()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
        PUSHES.add({k.lower(): v for k, v in self.headers.items()}, body)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def verified(headers, body, token):
    """Whether the Standard Webhooks signature holds with `token` as the key."""
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{body}".encode()
    digest = hmac.new(token.encode(), signed, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(digest).decode()
    return expected in headers.get("webhook-signature", "").split(" ")


def message(text=None, data=None, context=None, task=None):
    part = {"text": text} if text is not None else {"data": data}
    out = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [part]}
    if context:
        out["contextId"] = context
    if task:
        out["taskId"] = task
    return out


def request(msg, **configuration):
    return ParseDict({"message": msg, "configuration": configuration}, SendMessageRequest())


def state(task):
    return MessageToDict(task)["status"]["state"]


async def last_task(client, req):
    """The task of a non-streaming send (the SDK yields one `task`)."""
    events = [event async for event in client.send_message(req)]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


async def main():
    base, token = CONFIG["base"], CONFIG["token"]
    report = {"sdkVersion": version("a2a-sdk")}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    receiver = f"http://127.0.0.1:{server.server_address[1]}/a2a-push"
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=120) as anonymous, httpx.AsyncClient(
        headers=auth, timeout=120
    ) as http:
        # 1. Discovery.
        public = await A2ACardResolver(anonymous, base).get_agent_card()
        card = await A2ACardResolver(http, base).get_agent_card()
        if DIALECT == "0.3":
            # A v0.3 reader parses the same card with its own model.
            raw = (await http.get(f"{base}/.well-known/agent-card.json")).json()
            legacy = AgentCardV03.model_validate(raw)
            report["cardV03"] = {"url": legacy.url, "version": legacy.protocol_version}
            # The v0.3 interface only: the SDK then speaks v0.3.
            chosen = [i for i in card.supported_interfaces if i.protocol_version.startswith("0.3")]
            kept = [type(i)() for i in chosen]
            for copy, interface in zip(kept, chosen):
                copy.CopyFrom(interface)
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(kept)
        report["card"] = {
            "url": card.supported_interfaces[0].url,
            "binding": card.supported_interfaces[0].protocol_binding,
            "streaming": card.capabilities.streaming,
            "push": card.capabilities.push_notifications,
            "schemes": list(card.security_schemes.keys()),
            "skills": [skill.id for skill in card.skills],
            "anonymousSkills": [skill.id for skill in public.skills],
        }
        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        polling = ClientFactory(
            ClientConfig(streaming=False, polling=True, httpx_client=http)
        ).create(card)
        report["transport"] = type(blocking._transport).__name__

        # 2. A blocking send on a new context.
        first = await last_task(blocking, request(message("hello over a2a")))
        report["send"] = {
            "state": state(first),
            "taskId": first.id,
            "contextId": first.context_id,
            "reply": first.artifacts[0].parts[0].text if first.artifacts else None,
        }

        # 3. A stream on the same context.
        frames = []
        async for event in streaming.send_message(
            request(message("stream this one", context=first.context_id))
        ):
            frames.append(MessageToDict(event))
        kinds = [next(iter(frame)) for frame in frames]
        states = [
            frame.get("task", frame.get("statusUpdate", {})).get("status", {}).get("state")
            for frame in frames
        ]
        texts = [
            part.get("text")
            for frame in frames
            for artifact in [frame.get("artifactUpdate", {}).get("artifact", {})]
            + frame.get("task", {}).get("artifacts", [])
            for part in artifact.get("parts", [])
        ]
        report["stream"] = {
            "kinds": kinds,
            "states": [s for s in states if s],
            "contextIds": sorted(
                {
                    (frame.get("task") or next(iter(frame.values()))).get("contextId")
                    for frame in frames
                }
            ),
            "texts": [t for t in texts if t],
        }

        # 4. The first task, read back.
        got = await blocking.get_task(GetTaskRequest(id=first.id))
        report["get"] = {"state": state(got), "id": got.id}

        # 5. Input required: a permission, answered; pushes to the receiver.
        one, two = CONFIG["pushTokens"]
        asked = await last_task(
            blocking,
            request(
                message("please run the tool"),
                taskPushNotificationConfig={"url": receiver, "token": one},
            ),
        )
        asked_push = PUSHES.wait_for(asked.id, "TASK_STATE_INPUT_REQUIRED")
        registered = await blocking.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=asked.id, url=receiver, token=two)
        )
        answered = await last_task(
            blocking,
            request(message(data={"decision": "allow"}, context=asked.context_id, task=asked.id)),
        )
        done_push = PUSHES.wait_for(asked.id, "TASK_STATE_COMPLETED")
        read_back = await blocking.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=asked.id, id=registered.id)
        )
        listed = await blocking.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=asked.id)
        )
        report["inputRequired"] = {
            "askedState": state(asked),
            "askedText": MessageToDict(asked)["status"].get("message", {}).get("parts", [{}])[0].get("text"),
            "registeredUrl": registered.url,
            "readBackUrl": read_back.url,
            "listedUrls": [config.url for config in listed.configs],
            "answeredState": state(answered),
            "answeredId": answered.id,
            "taskId": asked.id,
            "reply": answered.artifacts[0].parts[0].text if answered.artifacts else None,
            "askedPush": asked_push is not None
            and asked_push[0].get("x-a2a-notification-token") == one
            and verified(*asked_push, one),
            "donePush": done_push is not None
            and done_push[0].get("x-a2a-notification-token") == two
            and verified(*done_push, two),
            "donePushForgedFails": done_push is not None and not verified(*done_push, one),
            "pushKinds": sorted(
                {
                    "statusUpdate" if "statusUpdate" in push else push.get("kind")
                    for push in (json.loads(body) for _, body in PUSHES.got)
                }
            ),
        }

        # 5b. Input required, answered `deny` with a text part.
        refused = await last_task(blocking, request(message("please run the other tool")))
        denied = await last_task(
            blocking,
            request(message("deny", context=refused.context_id, task=refused.id)),
        )
        report["deny"] = {
            "askedState": state(refused),
            "state": state(denied),
            "contextId": refused.context_id,
        }

        # 6. Cancel mid-turn, while a subscription follows the task.
        slow = await last_task(polling, request(message("take your time")))
        subscribed = asyncio.Event()

        async def follow():
            frames = []
            async for event in streaming.subscribe(SubscribeToTaskRequest(id=slow.id)):
                frames.append(MessageToDict(event))
                subscribed.set()
            return frames

        follower = asyncio.create_task(follow())
        await asyncio.wait_for(subscribed.wait(), timeout=60)
        canceled = await blocking.cancel_task(CancelTaskRequest(id=slow.id))
        followed = await asyncio.wait_for(follower, timeout=60)
        report["cancel"] = {
            "startedState": state(slow),
            "state": state(canceled),
            "subscribedKinds": [next(iter(frame)) for frame in followed],
            "subscribedLast": followed[-1].get("statusUpdate", followed[-1].get("task", {}))
            .get("status", {})
            .get("state"),
        }

        # 7. Errors.
        errors = {}
        try:
            await blocking.get_task(GetTaskRequest(id="msg_nosuchtask"))
        except TaskNotFoundError:
            errors["unknownTask"] = "TaskNotFound"
        try:
            await blocking.cancel_task(CancelTaskRequest(id=first.id))
        except TaskNotCancelableError:
            errors["cancelEnded"] = "TaskNotCancelable"
        report["errors"] = errors
    server.shutdown()
    print(json.dumps(report))


asyncio.run(main())
