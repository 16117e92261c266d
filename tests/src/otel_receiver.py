"""An OTLP/HTTP trace receiver nobody here wrote: the OpenTelemetry project's own test sink
(PyPI `oteltest`, `oteltest.sink.HttpSink`), which parses each export request (protobuf or
JSON) with the official OTLP protobuf definitions. Every span it receives is appended to the
file named by argv[1] as one JSON line: ids in hex, times in nanoseconds, attributes by key.
Prints its port, then serves until killed."""

import json
import logging
import sys
import threading
import time

from google.protobuf.json_format import MessageToDict
from oteltest.sink import HttpSink
from oteltest.sink.handler import RequestHandler

OUT = sys.argv[1]
LOCK = threading.Lock()


def value_of(any_value):
    """An attribute's value as plain JSON (`{"intValue": "3"}` becomes 3)."""
    as_dict = MessageToDict(any_value)
    for kind, value in as_dict.items():
        if kind == "intValue":
            return int(value)
        return value
    return None


class Spans(RequestHandler):
    def handle_trace(self, request, headers):
        lines = []
        for resource_spans in request.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "traceId": span.trace_id.hex(),
                        "spanId": span.span_id.hex(),
                        "parentSpanId": span.parent_span_id.hex(),
                        "name": span.name,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "status": span.status.code,
                        "attributes": {a.key: value_of(a.value) for a in span.attributes},
                        "service": resource.get("service.name"),
                    }))
        with LOCK, open(OUT, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")

    def handle_metrics(self, request, headers):
        pass

    def handle_logs(self, request, headers):
        pass


def main():
    sink = HttpSink(Spans(), logging.getLogger("otel-receiver"), port=0, daemon=True)
    sink.start()
    while sink.httpd is None:
        time.sleep(0.01)
    print(sink.httpd.server_address[1], flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
