"""A Kickoff worker in Python: Kickoff's `webhook` jobs call it, it verifies each call's
Standard Webhooks signature with the published library (`pip install standardwebhooks`), does
the job and answers what became of it (docs/workers.md):

- 2xx: done (the job completes);
- 429 or 503 with `Retry-After`: not now, ask again then (a snooze: no attempt spent);
- anything else: failed, retried with backoff (another attempt, the same `webhook-id`);
- with `kickoff-no-retry: true` on the answer: failed for good (the job is discarded).

Run:  KICKOFF_WEBHOOK_SECRET=whsec_... python3 worker.py [port]   (0: any free port)
It prints `listening <port>`, then one JSON line per call it answered.
"""

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

WEBHOOK = Webhook(os.environ["KICKOFF_WEBHOOK_SECRET"])
# The calls done, by `webhook-id` (the same on every attempt of a job): a call repeated after a
# lost answer is answered again without doing the work twice. Keep it in your database, written
# in the transaction that does the work.
DONE = {}
ASKED_TO_WAIT = set()
LOCK = threading.Lock()
PRINTING = threading.Lock()


def work(task, attempt, call_id):
    """What the job asks for: (status, headers, answer)."""
    kind = task.get("task")
    if kind == "greet":
        return 200, {}, {"greeting": f"hello {task['name']}"}
    if kind == "flaky" and attempt == 1:
        return 500, {}, {"error": "the first attempt fails (retried)"}
    if kind == "flaky":
        return 200, {}, {"done": "at the second attempt"}
    if kind == "busy" and call_id not in ASKED_TO_WAIT:
        ASKED_TO_WAIT.add(call_id)
        return 429, {"Retry-After": "1"}, {"error": "busy: ask again in a second"}
    if kind == "busy":
        return 200, {}, {"done": "after waiting"}
    # A job this worker will never do: no retry can help.
    return 422, {"kickoff-no-retry": "true"}, {"error": f"no such task: {kind!r}"}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            task = WEBHOOK.verify(body, headers)
        except WebhookVerificationError as e:
            # Not from Kickoff, or changed on the way (or signed with a secret rotated away):
            # refused, and retried, so a call signed right goes through once the secret is.
            return self.answer(401, {}, {"error": f"signature: {e}"}, None, None)
        except ValueError:
            task = None
        if not isinstance(task, dict):
            # Signed, but not a JSON object (a job without a body): no retry will change it.
            return self.answer(422, {"kickoff-no-retry": "true"},
                               {"error": "the body is not a JSON object"}, None, None)
        call_id = headers["webhook-id"]
        attempt = int(headers.get("x-kickoff-attempt", "1"))
        # One call of an id at a time, and the work kept with its id: a call repeated while the
        # first is still running (Kickoff's timeout passed) waits for it, then finds it done.
        # In production, record the id in the same database transaction as the work, under a
        # unique constraint.
        with LOCK:
            repeat = call_id in DONE
            if repeat:
                status, extra, answer = 200, {}, DONE[call_id]
            else:
                status, extra, answer = work(task, attempt, call_id)
                if 200 <= status < 300:
                    DONE[call_id] = answer
        self.answer(status, extra, answer, call_id, task, repeat=repeat)

    def answer(self, status, extra, answer, call_id, task, repeat=False):
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        line = json.dumps({"id": call_id, "task": task, "status": status, "repeat": repeat})
        with PRINTING:  # one whole line at a time: each call is answered on a thread of its own
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0),
                                 Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()
