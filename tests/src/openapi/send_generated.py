"""Sends requests that Harness's own OpenAPI document allows to Harness; prints what came back as
one JSON line.

The requests are Schemathesis's (PyPI `schemathesis`, pinned by the tests): for each operation
of the plan, in the plan's order, `examples` schema-valid cases (path, query, headers and body,
`GenerationMode.POSITIVE`) drawn with Hypothesis from the served document, derandomized so a run
sends the same requests each time. The plan fixes what must name a real resource (path
parameters) and leaves out what only the daemon can give (the cursors of its lists).

argv[1]: {"base": "http://127.0.0.1:PORT", "token": ... or null,
          "operations": [{"method": "POST", "path": "/api/threads", "examples": 25,
                          "pathParameters": {...}, "omitQuery": [...], "headers": {...}}]}
Prints: {"sent": {"POST /api/threads": 25, ...}, "answers": [{"operation", "status",
          "answer", "request"}, ...]}: `answers` holds every answer but a 2xx, 3xx, 404 or 409
          (about the request's target or the daemon's state, never its shape); the caller
          decides which are refusals.
"""

import json
import sys

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.core import NOT_SET

# Answers about the request's target or the daemon's state, never about the request's shape.
QUIET = {404, 409}


def without(case, omit_query):
    """`case` less the query parameters the plan leaves out."""
    for name in omit_query:
        if case.query:
            case.query.pop(name, None)
    return case


def described(case, kwargs):
    """The request, as the report shows it (no credentials)."""
    headers = {
        k: v for k, v in (kwargs.get("headers") or {}).items() if k.lower() != "authorization"
    }
    return {
        "url": kwargs["url"],
        "query": kwargs.get("params"),
        "headers": headers,
        "body": None if case.body is NOT_SET else case.body,
    }


def run_operation(schema, plan, base, session, report):
    """Draws and sends `plan["examples"]` cases of one operation."""
    label = f"{plan['method']} {plan['path']}"
    operation = schema[plan["path"]][plan["method"]]
    strategy = operation.as_strategy(
        GenerationMode.POSITIVE,
        path_parameters=plan.get("pathParameters") or None,
    )
    sent = 0

    @settings(
        max_examples=plan["examples"],
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def send(case):
        nonlocal sent
        case = without(case, plan.get("omitQuery", []))
        kwargs = case.as_transport_kwargs(base_url=base, headers=plan.get("headers") or None)
        # A stream (`…/events`) never ends: read the status and the head, and only an error's body.
        response = session.request(**kwargs, timeout=60, stream=True)
        sent += 1
        status = response.status_code
        if status < 400 or status in QUIET:
            response.close()
            return
        try:
            answer = json.loads(response.content)
        except ValueError:
            answer = response.content[:500].decode("utf-8", "replace")
        report["answers"].append(
            {"operation": label, "status": status, "answer": answer,
             "request": described(case, kwargs)}
        )

    send()
    report["sent"][label] = sent


def main():
    config = json.loads(sys.argv[1])
    base = config["base"]
    session = requests.Session()
    if config.get("token"):
        session.headers["Authorization"] = f"Bearer {config['token']}"
    raw = session.get(f"{base}/api/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(raw)
    report = {"sent": {}, "answers": []}
    for plan in config["operations"]:
        run_operation(schema, plan, base, session, report)
    print(json.dumps(report))


main()
