// A Kickoff worker in TypeScript: Kickoff's `webhook` jobs call it, it verifies each call's
// Standard Webhooks signature with the published library (`npm install standardwebhooks`), does
// the job and answers what became of it (docs/workers.md):
//
// - 2xx: done (the job completes);
// - 429 or 503 with `Retry-After`: not now, ask again then (a snooze: no attempt spent);
// - anything else: failed, retried with backoff (another attempt, the same `webhook-id`);
// - with `kickoff-no-retry: true` on the answer: failed for good (the job is discarded).
//
// Build and run:  npm ci && npx tsc && KICKOFF_WEBHOOK_SECRET=whsec_... node dist/worker.js [port]
// It prints `listening <port>`, then one JSON line per call it answered.

import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { AddressInfo } from 'node:net';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';

interface Task {
  task?: string;
  name?: string;
}

type Answer = [status: number, headers: Record<string, string>, body: unknown];

const webhook = new Webhook(process.env.KICKOFF_WEBHOOK_SECRET ?? '');
// The calls done, by `webhook-id` (the same on every attempt of a job): a call repeated after a
// lost answer is answered again without doing the work twice. Keep it in your database, written
// in the transaction that does the work.
const done = new Map<string, unknown>();
const askedToWait = new Set<string>();

/** What the job asks for. */
function work(task: Task, attempt: number, callId: string): Answer {
  switch (task.task) {
    case 'greet':
      return [200, {}, { greeting: `hello ${task.name}` }];
    case 'flaky':
      return attempt === 1
        ? [500, {}, { error: 'the first attempt fails (retried)' }]
        : [200, {}, { done: 'at the second attempt' }];
    case 'busy':
      if (!askedToWait.has(callId)) {
        askedToWait.add(callId);
        return [429, { 'retry-after': '1' }, { error: 'busy: ask again in a second' }];
      }
      return [200, {}, { done: 'after waiting' }];
    default:
      // A job this worker will never do: no retry can help.
      return [422, { 'kickoff-no-retry': 'true' }, { error: `no such task: ${JSON.stringify(task.task)}` }];
  }
}

function answer(res: ServerResponse, [status, headers, body]: Answer, callId: string | null, task: Task | null, repeat = false): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
  console.log(JSON.stringify({ id: callId, task, status, repeat }));
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks).toString('utf8');
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (typeof value === 'string') headers[name] = value;
  }
  let task: unknown;
  try {
    task = webhook.verify(body, headers);
  } catch (e) {
    if (e instanceof WebhookVerificationError) {
      // Not from Kickoff, or changed on the way (or signed with a secret rotated away): refused,
      // and retried, so a call signed right goes through once the secret is.
      return answer(res, [401, {}, { error: `signature: ${e.message}` }], null, null);
    }
    task = undefined;
  }
  if (typeof task !== 'object' || task === null) {
    // Signed, but not a JSON object (a job without a body): no retry will change it.
    return answer(res, [422, { 'kickoff-no-retry': 'true' }, { error: 'the body is not a JSON object' }], null, null);
  }
  const callId = headers['webhook-id'];
  const attempt = Number(headers['x-kickoff-attempt'] ?? '1');
  // From the check to the record nothing awaits, so a call repeated while the first runs (Kickoff's
  // timeout passed) finds it done. With work that awaits, record the id in the same database
  // transaction as the work, under a unique constraint.
  if (done.has(callId)) {
    return answer(res, [200, {}, done.get(callId)], callId, task as Task, true);
  }
  const result = work(task as Task, attempt, callId);
  if (result[0] >= 200 && result[0] < 300) done.set(callId, result[2]);
  answer(res, result, callId, task as Task);
}

const server = createServer((req, res) => {
  handle(req, res).catch((e) => {
    res.writeHead(500);
    res.end(String(e));
  });
});
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  console.log(`listening ${(server.address() as AddressInfo).port}`);
});
