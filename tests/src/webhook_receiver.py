"""A webhook receiver for the tests: verifies every delivery with the Standard Webhooks
reference library (PyPI `standardwebhooks`), and answers 500 to a share of them.

Usage: webhook_receiver.py SECRET OUT_FILE FAIL_RATE SEED [FAIL_WHILE_FILE]

SECRET `@PATH` reads the secret from PATH at each request (one the daemon hands out later, such
as a thread's own `callbackSecret`).

Prints its port on the first line of stdout. Appends one JSON line per request to OUT_FILE:
{"id", "type", "data", "path", "payload", "verified", "answered"}. A request fails (500) with probability
FAIL_RATE, and always while FAIL_WHILE_FILE exists. A bad signature is answered 400.
"""

import json
import os
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

secret, out_file, fail_rate, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
fail_while = sys.argv[5] if len(sys.argv) > 5 else None


def verifier():
    if secret.startswith("@"):
        with open(secret[1:], encoding="utf-8") as f:
            return Webhook(f.read().strip())
    return Webhook(secret)

rng = random.Random(seed)
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            payload = verifier().verify(body, headers)
            verified = True
        except Exception as err:  # the library raises its own error types
            payload, verified = {"error": str(err)}, False
        with lock:
            if not verified:
                answered = 400
            elif (fail_while and os.path.exists(fail_while)) or rng.random() < fail_rate:
                answered = 500
            else:
                answered = 204
            with open(out_file, "a", encoding="utf-8") as out:
                out.write(json.dumps({
                    "id": headers.get("webhook-id"),
                    "type": payload.get("type"),
                    "data": payload.get("data"),
                    "path": self.path,
                    "payload": payload,
                    "verified": verified,
                    "answered": answered,
                }) + "\n")
        self.send_response(answered)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
