// The official AG-UI client (@ag-ui/client's HttpAgent, unmodified, from npm) against the
// server: a text run, a tool call stopped by an approval and resumed with the answer, a run
// whose connection drops mid-stream and continues from Last-Event-ID, and a retried run.
// Every event the client receives is also checked against @ag-ui/core's own schemas, and the
// client must never warn (it strips unknown fields and drops unknown events with a warning).
// Usage: node client.mjs BASE_URL TOKEN OUT.json [RECONNECT_BASE_URL]
// (BASE_URL like http://127.0.0.1:8080/v1/agent; the dropped run reconnects to RECONNECT_BASE_URL
// when given: another gateway of a cluster). Writes every event received, per scenario, to
// OUT.json (validated again in Python).

import { HttpAgent, randomUUID, verifyEvents } from "@ag-ui/client";
import { from, lastValueFrom, toArray } from "rxjs";
import { EventSchemas } from "@ag-ui/core/schemas";
import { writeFileSync } from "node:fs";
import assert from "node:assert/strict";

const [base, token, out, reconnectBase] = process.argv.slice(2);
const url = `${base}/ag-ui`;
const headers = { Authorization: `Bearer ${token}` };
const received = {};
const warnings = [];
const warn = console.warn;
console.warn = (...args) => {
  warnings.push(args.map(String).join(" "));
  warn(...args);
};

function agent(threadId, extra = {}) {
  return new HttpAgent({ url, headers, threadId, ...extra });
}

// Runs one turn and records every event the client applied (verified by its pipeline).
async function run(name, agentInstance, parameters = {}) {
  const events = (received[name] ??= []);
  const result = await agentInstance.runAgent(parameters, {
    onEvent: ({ event }) => {
      const parsed = EventSchemas.safeParse(event);
      assert.ok(parsed.success, `${name}: ${JSON.stringify(event)} fails @ag-ui/core: ${parsed.error}`);
      events.push(event);
    },
  });
  return { result, events };
}

const texts = (events) =>
  events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");

async function textRun() {
  const threadId = `text-${randomUUID()}`;
  const a = agent(threadId);
  a.addMessage({ id: randomUUID(), role: "user", content: "demo:deltas=5 hello" });
  const { result, events } = await run("text", a, { runId: randomUUID() });
  assert.equal(events[0].type, "RUN_STARTED");
  assert.equal(events.at(-1).type, "RUN_FINISHED");
  assert.equal(texts(events), "delta-1 delta-2 delta-3 delta-4 delta-5 ");
  const answer = result.newMessages.find((m) => m.role === "assistant");
  assert.equal(answer.content, "delta-1 delta-2 delta-3 delta-4 delta-5 ");
  assert.ok(events.at(-1).usage?.[0]?.totalTokens > 0, "the run reports its usage");
}

async function approvalRun() {
  const threadId = `approval-${randomUUID()}`;
  const a = agent(threadId);
  a.addMessage({ id: randomUUID(), role: "user", content: "needs approval" });
  const first = await run("approval", a, { runId: randomUUID() });
  const finished = first.events.at(-1);
  assert.equal(finished.type, "RUN_FINISHED");
  assert.equal(finished.outcome.type, "interrupt");
  const [interrupt] = finished.outcome.interrupts;
  assert.equal(interrupt.reason, "tool_call");
  const start = first.events.find((e) => e.type === "TOOL_CALL_START");
  assert.equal(start.toolCallName, "demo_approval");
  assert.equal(interrupt.toolCallId, start.toolCallId);
  const call = first.result.newMessages.find((m) => m.toolCalls?.length);
  assert.equal(call.toolCalls[0].function.name, "demo_approval");
  assert.equal(a.pendingInterrupts?.length ?? 1, 1);

  const second = await run("approval", a, {
    runId: randomUUID(),
    resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }],
  });
  const result = second.events.find((e) => e.type === "TOOL_CALL_RESULT");
  assert.equal(result.toolCallId, start.toolCallId);
  assert.match(texts(second.events), /approved/);
  assert.equal(second.events.at(-1).outcome?.type ?? "success", "success");
  assert.ok(a.messages.some((m) => m.role === "tool" && m.toolCallId === start.toolCallId));
}

// A fetch that drops the connection after `dropAfter` complete frames and continues the same
// run with a new POST carrying Last-Event-ID, passing on only whole frames: the client sees one
// unbroken stream.
function droppingFetch(dropAfter, log) {
  return async (input, init) => {
    let lastId = null;
    let attempts = 0;
    const open = async () => {
      attempts += 1;
      const controller = new AbortController();
      const retryHeaders = { ...init.headers };
      if (lastId !== null) retryHeaders["Last-Event-ID"] = lastId;
      const target = attempts > 1 && reconnectBase ? `${reconnectBase}/ag-ui` : input;
      const response = await fetch(target, { ...init, headers: retryHeaders, signal: controller.signal });
      if (response.status !== 200) assert.fail(`attempt ${attempts}: ${response.status} ${await response.text()}`);
      return { response, controller };
    };
    const first = await open();
    const decoder = new TextDecoder();
    const encoder = new TextEncoder();
    const body = new ReadableStream({
      async start(sink) {
        let current = first;
        let frames = 0;
        let dropped = false;
        for (;;) {
          const reader = current.response.body.getReader();
          let buffer = "";
          let cut = false;
          for (;;) {
            let chunk;
            try {
              chunk = await reader.read();
            } catch {
              cut = true;
              break;
            }
            if (chunk.done) break;
            buffer += decoder.decode(chunk.value, { stream: true });
            let end;
            while ((end = buffer.indexOf("\n\n")) >= 0) {
              const frame = buffer.slice(0, end + 2);
              buffer = buffer.slice(end + 2);
              const id = frame.match(/^id: ([0-9:]+)$/m);
              if (id) lastId = id[1];
              sink.enqueue(encoder.encode(frame));
              frames += 1;
              if (!dropped && frames === dropAfter) {
                // What arrived after this frame is lost with the connection.
                dropped = true;
                log.push({ droppedAfterId: lastId });
                current.controller.abort();
                cut = true;
                break;
              }
            }
            if (cut) break;
          }
          if (!cut) break;
          current = await open();
        }
        log.push({ attempts });
        sink.close();
      },
    });
    return new Response(body, { status: 200, headers: first.response.headers });
  };
}

async function droppedRun() {
  const threadId = `dropped-${randomUUID()}`;
  const log = [];
  const a = agent(threadId, { fetch: droppingFetch(3, log) });
  a.addMessage({ id: randomUUID(), role: "user", content: "demo:deltas=40 demo:interval=25 resume me" });
  const { events } = await run("dropped", a, { runId: randomUUID() });
  const expected = Array.from({ length: 40 }, (_, i) => `delta-${i + 1} `).join("");
  assert.equal(texts(events), expected, "no delta lost or repeated across the drop");
  assert.equal(events.filter((e) => e.type === "RUN_STARTED").length, 1);
  assert.equal(events.at(-1).type, "RUN_FINISHED");
  assert.ok(log[0].droppedAfterId !== null, "the connection dropped mid-run");
  assert.equal(log.at(-1).attempts, 2, "one reconnection");
}

async function retriedRun() {
  const threadId = `retried-${randomUUID()}`;
  const runId = randomUUID();
  const message = { id: randomUUID(), role: "user", content: "demo:deltas=3 once" };
  const a = agent(threadId);
  a.addMessage(message);
  const first = await run("retried", a, { runId });
  // The same run again, as a client that lost the answer would send it.
  const b = agent(threadId);
  b.addMessage(message);
  const second = await run("retried", b, { runId });
  assert.equal(texts(second.events), texts(first.events));
  // The thread holds the input once: the retry ran nothing.
  const read = await fetch(`${base}/commands`, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify({
      protocolVersion: 1,
      commandId: randomUUID(),
      type: "session.read",
      data: { sessionId: threadId },
    }),
  }).then((r) => r.json());
  const users = read.data.messages.filter((m) => m.role === "user");
  assert.equal(users.length, 1, JSON.stringify(read.data.messages));
}

// Reads a thread's stream (the re-attach route) until `finishes` runs have finished; every event
// passes @ag-ui/core's schemas and, as one sequence, the client's own verifier.
async function readThread(name, threadId, query, finishes) {
  const response = await fetch(`${url}/threads/${threadId}/events${query}`, { headers });
  if (response.status !== 200) assert.fail(`${response.status} ${await response.text()}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const events = (received[name] ??= []);
  let buffer = "";
  let finished = 0;
  while (finished < finishes) {
    const chunk = await reader.read();
    assert.ok(!chunk.done, "the thread's stream ended early");
    buffer += decoder.decode(chunk.value, { stream: true });
    let end;
    while (finished < finishes && (end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").find((line) => line.startsWith("data: "));
      if (!data) continue;
      const event = JSON.parse(data.slice(6));
      const parsed = EventSchemas.safeParse(event);
      assert.ok(parsed.success, `${name}: ${JSON.stringify(event)} fails @ag-ui/core: ${parsed.error}`);
      events.push(event);
      if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") finished += 1;
    }
  }
  await reader.cancel();
  await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
  return events;
}

// A client that joins a thread while a run streams: a snapshot run, then the run in progress
// reopened (its step and message started again) and followed to its end; and the whole thread
// from its first event.
async function threadStream() {
  const threadId = `thread-${randomUUID()}`;
  const controller = new AbortController();
  const started = await fetch(url, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({
      threadId,
      runId: randomUUID(),
      messages: [{ id: randomUUID(), role: "user", content: "demo:deltas=30 demo:interval=40 watched" }],
    }),
    signal: controller.signal,
  });
  const reader = started.body.getReader();
  let seen = "";
  while ((seen.match(/TEXT_MESSAGE_CONTENT/g) ?? []).length < 3) {
    seen += new TextDecoder().decode((await reader.read()).value);
  }
  controller.abort();
  const joined = await readThread("thread-joined", threadId, "", 2);
  assert.equal(joined[1].type, "MESSAGES_SNAPSHOT");
  const reopened = joined.slice(3).map((e) => e.type);
  assert.deepEqual(reopened.slice(0, 3), ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START"]);
  const whole = await readThread("thread-whole", threadId, "?after=0", 1);
  assert.equal(texts(whole), Array.from({ length: 30 }, (_, i) => `delta-${i + 1} `).join(""));
}

// A model failure is RUN_ERROR with our code; an aborted request is a cancelled run; an input
// sent while a request runs joins it, or, when that request ends first, runs next.
async function otherOutcomes() {
  const failing = agent(`fail-${randomUUID()}`);
  failing.addMessage({ id: randomUUID(), role: "user", content: "demo:fail" });
  await run("failed", failing, { runId: randomUUID() });
  const failEvents = received.failed;
  assert.equal(failEvents.at(-1).type, "RUN_ERROR", JSON.stringify(failEvents.at(-1)));
  assert.equal(failEvents.at(-1).code, "PROVIDER_UNAVAILABLE");

  const threadId = `cancel-${randomUUID()}`;
  const slow = agent(threadId);
  slow.addMessage({ id: randomUUID(), role: "user", content: "demo:deltas=200 demo:interval=20 long" });
  const running = run("cancelled", slow, { runId: randomUUID() });
  const steer = agent(threadId);
  steer.addMessage({ id: randomUUID(), role: "user", content: "and also this" });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const steered = run("steered", steer, { runId: randomUUID() });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const abort = await fetch(`${base}/commands`, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify({ protocolVersion: 1, commandId: randomUUID(), type: "request.abort", data: { sessionId: threadId } }),
  });
  assert.equal(abort.status, 200, await abort.text());
  const { events } = await running;
  assert.equal(events.at(-1).type, "RUN_FINISHED");
  assert.equal(events.at(-1).outcome.type, "cancelled");
  // The input waited for the request's next step, which the abort ended: it runs as the next
  // request, and the run follows that one.
  const steeredEvents = (await steered).events;
  assert.equal(steeredEvents.at(-1).type, "RUN_FINISHED");
  assert.match(texts(steeredEvents), /and also this/);
}

await textRun();
await otherOutcomes();
await threadStream();
await approvalRun();
await droppedRun();
await retriedRun();
assert.deepEqual(warnings, [], "the client warned about what it received");
writeFileSync(out, JSON.stringify(received));
console.log("ok");
