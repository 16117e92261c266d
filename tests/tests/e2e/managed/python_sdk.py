"""Drives Harness's Managed Agents API with Anthropic's Python SDK, as a user would.

Argument: a JSON object with `base` (the daemon), `key`, `scenario` and its fields. Prints one
JSON line: what the scenario saw. Every event is parsed by the SDK itself; `classes` lists the
class each parsed as, so the test can tell a typed event from an unknown-type fallback.
"""

import json
import sys

import anthropic

cfg = json.loads(sys.argv[1])
client = anthropic.Anthropic(api_key=cfg["key"], base_url=cfg["base"], max_retries=0)
beta = client.beta
report = {"events": [], "classes": []}


def text_of(event):
    return "".join(block.text for block in event.content if block.type == "text")


def span_of(event):
    """A span event as the SDK parsed it: its id, and for an end its start's id, is_error and
    usage (with the class the usage parsed as)."""
    if event.type == "span.model_request_start":
        return {"type": event.type, "id": event.id}
    usage = event.model_usage
    report["classes"].append(type(usage).__name__)
    return {"type": event.type, "id": event.id, "start": event.model_request_start_id,
            "is_error": event.is_error,
            "usage": [usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens,
                      usage.cache_creation_input_tokens]}


def agent_and_environment(tools=None):
    environment = beta.environments.create(
        name="dev", config={"type": "cloud", "networking": {"type": "unrestricted"}}
    )
    agent = beta.agents.create(
        name="Assistant",
        model="claude-sonnet-4-6",
        system="Be brief.",
        tools=tools or [{"type": "agent_toolset_20260401"}],
    )
    return agent, environment


def until_idle(session_id, on_event=None):
    """Opens the stream, runs `on_event(None)` to send, and reads until an idle that needs
    nothing; returns the idle event."""
    with beta.sessions.events.stream(session_id) as stream:
        if on_event:
            on_event(None)
        for event in stream:
            report["events"].append(event.type)
            report["classes"].append(type(event).__name__)
            if on_event:
                on_event(event)
            if event.type == "agent.message":
                report.setdefault("messages", []).append(text_of(event))
            if event.type == "session.status_idle" and event.stop_reason.type != "requires_action":
                return event
            if event.type == "session.status_terminated":
                return event
    return None


def say(session_id, text):
    beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
    )


def quickstart():
    agent, environment = agent_and_environment()
    report["agent"] = {"id": agent.id, "version": agent.version}
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id, title="quickstart")
    report["session"] = session.id
    report["status_before"] = session.status
    idle = until_idle(session.id, lambda e: e is None and say(session.id, cfg["prompt"]))
    report["stop_reason"] = idle.stop_reason.type
    after = beta.sessions.retrieve(session.id)
    report["status_after"] = after.status
    report["usage_output_tokens"] = after.usage.output_tokens
    # Every event, a page of `page_size` at a time, as the SDK pages.
    listed = [e for e in beta.sessions.events.list(session.id, limit=cfg.get("page_size", 2))]
    report["listed"] = [e.type for e in listed]
    report["listed_ids"] = [e.id for e in listed]
    report["listed_classes"] = [type(e).__name__ for e in listed]
    report["listed_spans"] = [span_of(e) for e in listed if e.type.startswith("span.")]
    first = beta.sessions.events.list(session.id, limit=cfg.get("page_size", 2))
    report["first_page"] = len(first.data)
    report["has_next"] = first.next_page is not None
    only = beta.sessions.events.list(session.id, types=["agent.message"])
    report["only_messages"] = [e.type for e in only.data]
    # A stream dropped after its first event, then resumed as the SDKs do: a new stream
    # first, then the history, skipping on the stream what the history holds.
    before = {e.id for e in beta.sessions.events.list(session.id)}
    with beta.sessions.events.stream(session.id) as dropped:
        say(session.id, cfg["second_prompt"])
        for event in dropped:
            report["dropped_after"] = event.type
            break
    with beta.sessions.events.stream(session.id) as stream:
        history = [e for e in beta.sessions.events.list(session.id) if e.id not in before]
        known = {e.id for e in history}
        ended = lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn"
        if not any(ended(e) for e in history):
            for event in stream:
                if event.id in known:
                    continue
                history.append(event)
                if ended(event):
                    break
    report["resumed"] = [e.type for e in history]
    report["resumed_messages"] = [text_of(e) for e in history if e.type == "agent.message"]
    report["archived"] = beta.sessions.archive(session.id).status


def confirmations():
    tools = [
        {
            "type": "agent_toolset_20260401",
            "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
        }
    ]
    agent, environment = agent_and_environment(tools)
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    report["session"] = session.id
    outcomes = []
    for prompt, result in [(cfg["allow_prompt"], "allow"), (cfg["deny_prompt"], "deny")]:
        asked = []

        def on_event(event, prompt=prompt, result=result, asked=asked):
            if event is None:
                say(session.id, prompt)
            elif event.type == "agent.tool_use":
                asked.append({"name": event.name, "permission": event.evaluated_permission})
            elif event.type == "session.status_idle" and event.stop_reason.type == "requires_action":
                answer = {"type": "user.tool_confirmation", "tool_use_id": event.stop_reason.event_ids[0], "result": result}
                if result == "deny":
                    answer["deny_message"] = "not this one"
                beta.sessions.events.send(session.id, events=[answer])

        idle = until_idle(session.id, on_event)
        outcomes.append({"asked": asked, "stop": idle.stop_reason.type})
    report["outcomes"] = outcomes


def interrupt():
    agent, environment = agent_and_environment()
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    report["session"] = session.id

    def on_event(event):
        if event is None:
            say(session.id, cfg["prompt"])
        elif event.type == "session.status_running":
            beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])

    idle = until_idle(session.id, on_event)
    report["stop_reason"] = idle.stop_reason.type


def refused():
    """Another tenant's agent and session are not found; an unknown key is refused."""
    other = anthropic.Anthropic(api_key=cfg["other_key"], base_url=cfg["base"], max_retries=0)
    for name, call in [
        ("agent", lambda: other.beta.agents.retrieve(cfg["agent"])),
        ("session", lambda: other.beta.sessions.retrieve(cfg["session"])),
        ("events", lambda: other.beta.sessions.events.send(cfg["session"], events=[{"type": "user.interrupt"}])),
    ]:
        try:
            call()
            report[name] = "served"
        except anthropic.NotFoundError as err:
            report[name] = "not_found:" + err.body["type"] if isinstance(err.body, dict) and "type" in err.body else "not_found"
    report["listed_agents"] = [a.id for a in other.beta.agents.list()]
    bad = anthropic.Anthropic(api_key="hk_nonsense", base_url=cfg["base"], max_retries=0)
    try:
        bad.beta.agents.list()
        report["bad_key"] = "served"
    except anthropic.AuthenticationError:
        report["bad_key"] = "authentication_error"


def say_and_wait():
    """One message to an existing session, read until its turn ends."""
    session = cfg["session"]
    idle = until_idle(session, lambda e: e is None and say(session, cfg["prompt"]))
    report["stop_reason"] = idle.stop_reason.type
    listed = [e for e in beta.sessions.events.list(session, types=["agent.thinking"])]
    report["listed_classes"] = [type(e).__name__ for e in listed]


def with_file():
    """A file uploaded, then a session that starts with it in its folder."""
    agent, environment = agent_and_environment()
    uploaded = beta.files.upload(file=("input.csv", cfg["csv"].encode(), "text/csv"))
    report["file"] = {"id": uploaded.id, "mime_type": uploaded.mime_type, "size": uploaded.size_bytes,
                      "filename": uploaded.filename}
    session = beta.sessions.create(
        agent=agent.id, environment_id=environment.id,
        resources=[{"type": "file", "file_id": uploaded.id, "mount_path": "/data/input.csv"}],
    )
    report["resources"] = [(r.type, r.file_id, r.mount_path) for r in session.resources]
    report["session"] = session.id
    until_idle(session.id, lambda e: e is None and say(session.id, cfg["prompt"]))


def previews():
    """A message streamed with its previews, folded by the SDK's own accumulator."""
    from anthropic.lib.sessions import accumulate_managed_agents_event

    agent, environment = agent_and_environment()
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    snapshots, started, kinds = [], [], []
    snapshot = None
    with beta.sessions.events.stream(session.id, event_deltas=["agent.message"]) as stream:
        say(session.id, cfg["prompt"])
        for event in stream:
            kinds.append(event.type)
            report["classes"].append(type(event).__name__)
            if event.type == "event_start":
                started.append(event.event.id)
            snapshot = accumulate_managed_agents_event(snapshot, event)
            if event.type == "event_delta":
                snapshots.append(text_of(snapshot))
            if event.type == "agent.message":
                report["message"] = {"id": event.id, "text": text_of(event)}
            if event.type == "session.status_idle":
                break
    report["kinds"] = kinds
    report["started"] = started
    report["snapshots"] = snapshots
    listed = [e for e in beta.sessions.events.list(session.id, types=["agent.message"])]
    report["listed_ids"] = [e.id for e in listed]


def outcome():
    """An outcome worked on, graded, revised and graded again, read on one stream until the
    session is idle; then the session's evaluations and the listed events."""
    agent, environment = agent_and_environment()
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    report["session"] = session.id
    ends = []
    starts = []

    def on_event(event):
        if event is None:
            sent = beta.sessions.events.send(session.id, events=[{
                "type": "user.define_outcome", "description": cfg["description"],
                "rubric": {"type": "text", "content": cfg["rubric"]}, "max_iterations": 3,
            }])
            report["sent"] = {"id": sent.data[0].id, "outcome_id": sent.data[0].outcome_id,
                              "class": type(sent.data[0]).__name__}
        elif event.type == "span.outcome_evaluation_start":
            starts.append({"id": event.id, "iteration": event.iteration})
        elif event.type == "span.outcome_evaluation_end":
            ends.append({"iteration": event.iteration, "result": event.result,
                         "explanation": event.explanation, "start": event.outcome_evaluation_start_id,
                         "outcome_id": event.outcome_id, "output_tokens": event.usage.output_tokens})

    idle = until_idle(session.id, on_event)
    report["stop_reason"] = idle.stop_reason.type
    report["starts"] = starts
    report["ends"] = ends
    after = beta.sessions.retrieve(session.id)
    report["status_after"] = after.status
    report["outcome_evaluations"] = [
        {"outcome_id": e.outcome_id, "result": e.result, "iteration": e.iteration,
         "explanation": e.explanation, "completed": e.completed_at is not None}
        for e in after.outcome_evaluations
    ]
    listed = [e for e in beta.sessions.events.list(session.id)]
    report["listed"] = [e.type for e in listed]
    report["listed_classes"] = [type(e).__name__ for e in listed]


def define(session_id):
    beta.sessions.events.send(session_id, events=[{
        "type": "user.define_outcome", "description": cfg["description"],
        "rubric": {"type": "text", "content": cfg["rubric"]},
    }])


def outcome_interrupted():
    """An outcome interrupted while its grader grades: its evaluation ends `interrupted`."""
    agent, environment = agent_and_environment()
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    report["session"] = session.id

    def on_event(event):
        if event is None:
            define(session.id)
        elif event.type == "span.outcome_evaluation_start":
            report["start"] = event.id
            beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
        elif event.type == "span.outcome_evaluation_end":
            report["end"] = {"result": event.result, "start": event.outcome_evaluation_start_id}

    idle = until_idle(session.id, on_event)
    report["stop_reason"] = idle.stop_reason.type
    after = beta.sessions.retrieve(session.id)
    report["outcome_evaluations"] = [e.result for e in after.outcome_evaluations]


def outcome_left():
    """An outcome set, read until its grading starts; the daemon is then restarted."""
    agent, environment = agent_and_environment()
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    report["session"] = session.id
    with beta.sessions.events.stream(session.id) as stream:
        define(session.id)
        for event in stream:
            if event.type == "span.outcome_evaluation_start":
                break
    report["status"] = beta.sessions.retrieve(session.id).outcome_evaluations[0].result


def outcome_awaited():
    """Waits, polling the session, until its outcome has a result; then lists the events."""
    import time

    session = cfg["session"]
    for _ in range(600):
        evaluations = beta.sessions.retrieve(session).outcome_evaluations
        if evaluations and evaluations[0].completed_at is not None:
            break
        time.sleep(0.1)
    report["outcome_evaluations"] = [(e.result, e.iteration) for e in evaluations]
    listed = [e for e in beta.sessions.events.list(session)]
    report["listed"] = [e.type for e in listed]
    report["listed_classes"] = [type(e).__name__ for e in listed]


def terminated():
    """A session archived, then another deleted, each while a stream is open on it."""
    agent, environment = agent_and_environment()
    for how in ["archive", "delete"]:
        session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
        end = getattr(beta.sessions, how)
        ended = until_idle(session.id, lambda e, s=session.id, end=end: e is None and end(s))
        report[how] = ended.type if ended else None
        if how == "archive":
            report["status"] = beta.sessions.retrieve(session.id).status
            report["listed_last"] = [e.type for e in beta.sessions.events.list(session.id)][-1:]


WEATHER = [{"type": "custom", "name": "get_weather", "description": "The weather in a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]


def custom_tool():
    """An agent with a custom tool: the model's call to it waits for the client's result, which
    the turn goes on with (or, with `interrupt`, for an interrupt that ends the turn); then a bad
    answer is refused."""
    agent, environment = agent_and_environment(WEATHER)
    report["agent_tools"] = [t.model_dump() for t in agent.tools]
    report["agent_tool_classes"] = [type(t).__name__ for t in agent.tools]
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    report["session"] = session.id
    uses, waited, echoed = [], [], []

    def on_event(event):
        if event is None:
            say(session.id, cfg["prompt"])
        elif event.type == "agent.custom_tool_use":
            uses.append({"id": event.id, "name": event.name, "input": event.input})
        elif event.type == "user.custom_tool_result":
            echoed.append({"id": event.id, "custom_tool_use_id": event.custom_tool_use_id,
                           "text": text_of(event)})
        elif event.type == "session.status_idle" and event.stop_reason.type == "requires_action":
            waited.append(event.stop_reason.event_ids)
            if cfg.get("interrupt"):
                beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
                return
            sent = beta.sessions.events.send(session.id, events=[{
                "type": "user.custom_tool_result", "custom_tool_use_id": event.stop_reason.event_ids[0],
                "content": [{"type": "text", "text": cfg["result"]}]}])
            report["sent"] = [{"id": e.id, "type": e.type, "class": type(e).__name__} for e in sent.data]

    idle = until_idle(session.id, on_event)
    report["stop_reason"] = idle.stop_reason.type
    report["uses"], report["waited"], report["echoed"] = uses, waited, echoed
    listed = [e for e in beta.sessions.events.list(session.id)]
    report["listed"] = [e.type for e in listed]
    report["listed_classes"] = [type(e).__name__ for e in listed]
    # An answer to what no longer waits, or to what is not a tool use, is refused.
    refusals = []
    for tool_use_id in [uses[0]["id"] if uses else "sevt_tu_none", "sevt_nothing"]:
        try:
            beta.sessions.events.send(session.id, events=[{
                "type": "user.custom_tool_result", "custom_tool_use_id": tool_use_id,
                "content": [{"type": "text", "text": "late"}]}])
            refusals.append("served")
        except anthropic.BadRequestError as err:
            refusals.append({"status": err.status_code, "type": err.body["error"]["type"],
                             "message": err.body["error"]["message"]})
    report["refusals"] = refusals


def repository():
    """A session in a worktree of a repository under the roots, with a file put in it; then
    what is refused: a repository to clone, a token."""
    agent, environment = agent_and_environment()
    uploaded = beta.files.upload(file=("notes.txt", b"remember the milk", "text/plain"))
    session = beta.sessions.create(
        agent=agent.id, environment_id=environment.id,
        resources=[{"type": "github_repository", "url": "file://" + cfg["repo"],
                    "checkout": {"type": "branch", "name": "main"}},
                   {"type": "file", "file_id": uploaded.id, "mount_path": "/docs/notes.txt"}],
    )
    report["session"] = session.id
    report["resources"] = [r.model_dump(exclude={"created_at", "updated_at", "id"}) for r in session.resources]
    report["resource_classes"] = [type(r).__name__ for r in session.resources]
    idle = until_idle(session.id, lambda e: e is None and say(session.id, cfg["prompt"]))
    report["stop_reason"] = idle.stop_reason.type
    refusals = []
    for resource in [{"type": "github_repository", "url": "https://github.com/example/app"},
                     {"type": "github_repository", "url": "file://" + cfg["repo"], "authorization_token": "ghp_x"},
                     {"type": "github_repository", "url": cfg["outside"]}]:
        try:
            beta.sessions.create(agent=agent.id, environment_id=environment.id, resources=[resource])
            refusals.append("served")
        except anthropic.BadRequestError as err:
            refusals.append(err.body["error"]["message"])
    report["refusals"] = refusals


def mcp_tool():
    """An agent with an MCP server (`url`) and its `mcp_toolset` (`policy` by default): the model
    calls one of its tools; the client confirms it when asked; then the agent's versions."""
    environment = beta.environments.create(
        name="dev", config={"type": "cloud", "networking": {"type": "unrestricted"}}
    )
    agent = beta.agents.create(
        name="Peer user",
        model="claude-sonnet-4-6",
        mcp_servers=[{"type": "url", "name": "peer", "url": cfg["url"]}],
        tools=[{"type": "mcp_toolset", "mcp_server_name": "peer",
                "default_config": {"permission_policy": {"type": cfg["policy"]}}}],
    )
    report["agent_servers"] = [s.model_dump() for s in agent.mcp_servers]
    report["agent_tools"] = [t.model_dump() for t in agent.tools]
    report["agent_classes"] = [type(x).__name__ for x in agent.mcp_servers + agent.tools]
    updated = beta.agents.update(agent.id, version=agent.version, description="v2")
    report["versions"] = [
        {"version": v.version, "servers": [s.name for s in v.mcp_servers],
         "tools": [t.type for t in v.tools]}
        for v in beta.agents.versions.list(agent.id)
    ]
    session = beta.sessions.create(agent={"type": "agent", "id": agent.id, "version": updated.version},
                                   environment_id=environment.id)
    report["session"] = session.id
    uses, results, waited = [], [], []

    def on_event(event):
        if event is None:
            say(session.id, cfg["prompt"])
        elif event.type == "agent.mcp_tool_use":
            uses.append({"id": event.id, "name": event.name, "server": event.mcp_server_name,
                         "permission": event.evaluated_permission})
        elif event.type == "agent.mcp_tool_result":
            results.append({"id": event.id, "mcp_tool_use_id": event.mcp_tool_use_id,
                            "is_error": event.is_error, "text": text_of(event)})
        elif event.type == "session.status_idle" and event.stop_reason.type == "requires_action":
            waited.append(event.stop_reason.event_ids)
            beta.sessions.events.send(session.id, events=[{
                "type": "user.tool_confirmation", "tool_use_id": event.stop_reason.event_ids[0],
                "result": "allow"}])

    idle = until_idle(session.id, on_event)
    report["stop_reason"] = idle.stop_reason.type
    report["uses"], report["results"], report["waited"] = uses, results, waited
    listed = [e for e in beta.sessions.events.list(session.id)]
    report["listed"] = [e.type for e in listed]
    report["listed_classes"] = [type(e).__name__ for e in listed]


def made():
    """What the owner makes, for `refused` (with `tools`, its agent's)."""
    agent, environment = agent_and_environment(WEATHER if cfg.get("weather") else None)
    session = beta.sessions.create(agent=agent.id, environment_id=environment.id)
    report["agent"] = agent.id
    report["session"] = session.id


{"quickstart": quickstart, "confirmations": confirmations, "interrupt": interrupt,
 "refused": refused, "made": made, "say": say_and_wait, "file": with_file,
 "previews": previews, "outcome": outcome, "outcome_interrupted": outcome_interrupted,
 "outcome_left": outcome_left, "outcome_awaited": outcome_awaited,
 "terminated": terminated, "custom_tool": custom_tool, "repository": repository,
 "mcp_tool": mcp_tool}[cfg["scenario"]]()
print(json.dumps(report))
