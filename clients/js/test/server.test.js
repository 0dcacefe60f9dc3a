// The client against the real server: lost responses, cut streams, stale cursors, approvals.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { AgentClient, AgentProtocolError } from '../src/agent-client.js';
import { startProxy } from './support/proxy.js';
import { startServer } from './support/server.js';

let server;
let proxy;

before(async () => {
  server = await startServer('[executor]\ndemo_slow_delta_interval_ms = 20\n');
  proxy = await startProxy(server.baseUrl);
});

after(async () => {
  await proxy?.close();
  await server?.stop();
});

const connect = (baseUrl, token, options = {}) =>
  new AgentClient({
    baseUrl,
    client: { name: 'js-client-test', version: '0.1.0' },
    headers: () => ({ authorization: `Bearer ${token}` }),
    retryBaseDelayMs: 10,
    ...options,
  });

/** Every event until the `result` of `requestId`. */
async function untilResult(events, requestId) {
  const seen = [];
  for await (const event of events) {
    seen.push(event);
    if (event.type === 'session.stream' && event.data.type === 'result' && event.requestId === requestId) return seen;
  }
  throw new Error('the stream ended before the result');
}

const text = (events) =>
  events
    .filter((event) => event.type === 'session.stream' && event.data.type === 'content')
    .map((event) => event.data.delta)
    .join('');

test('a session streams the answer to its input', async () => {
  const client = connect(server.baseUrl, server.token);
  const session = await client.createSession({ purpose: 'js-client-test' });
  const submitted = await session.send('hello from node');
  assert.equal(submitted.status, 'started');
  const events = await untilResult(session.events(), submitted.requestId);
  assert.deepEqual(
    events.map((event) => event.sequence),
    events.map((_, i) => i + 1),
  );
  assert.match(text(events), /\[demo\]/);
  assert.equal(events.at(-1).data.subtype, 'success');
});

test('a command whose response was lost is retried with its commandId and returns the stored result', async () => {
  const direct = connect(server.baseUrl, server.token);
  const before = (await direct.listSessions({ limit: 100 })).sessions.length;
  const client = connect(proxy.baseUrl, server.token);
  await client.initialize();
  proxy.state.commands.length = 0;
  proxy.state.dropResponseOf.add('session.create');

  const session = await client.createSession({ attempt: 'lost-response' });

  const creates = proxy.state.commands.filter((command) => command.type === 'session.create');
  assert.equal(creates.length, 2, 'the first answer was lost, so the client asked again');
  assert.equal(creates[0].commandId, creates[1].commandId);
  const sessions = (await direct.listSessions({ limit: 100 })).sessions;
  assert.equal(sessions.length, before + 1, 'the retry did not create a second session');
  assert.ok(sessions.some((descriptor) => descriptor.sessionId === session.sessionId));
});

test('a stream cut mid-flight resumes from the last event: every event exactly once, in order', async () => {
  const client = connect(proxy.baseUrl, server.token);
  const session = await client.createSession();
  const submitted = await session.send('demo:deltas=300');
  proxy.state.streams.length = 0;
  proxy.state.cutStreamAfterBytes = 20_000;
  const states = [];

  const events = await untilResult(session.events({ onConnection: (state) => states.push(state) }), submitted.requestId);

  assert.deepEqual(
    events.map((event) => event.sequence),
    events.map((_, i) => i + 1),
  );
  assert.equal(new Set(events.map((event) => event.eventId)).size, events.length);
  const expected = Array.from({ length: 300 }, (_, i) => `delta-${i + 1} `).join('');
  assert.ok(text(events).includes(expected), 'every delta arrived once and in order');
  assert.ok(proxy.state.streams.length >= 2, 'the cut connection was replaced');
  const resumed = proxy.state.streams[1];
  const resumedAfter = Number(new URL(resumed.url, 'http://x').searchParams.get('after'));
  assert.ok(resumedAfter > 0);
  assert.equal(resumed.lastEventId, String(resumedAfter));
  assert.ok(states.some((state) => state.status === 'reconnecting' && state.after === resumedAfter));
});

test('STALE_CURSOR is surfaced and not retried', async () => {
  const small = await startServer('[server]\nmax_events_per_session = 5\n');
  try {
    let streamRequests = 0;
    const counting = (url, init) => {
      if (init.method === 'GET') streamRequests += 1;
      return fetch(url, init);
    };
    const client = connect(small.baseUrl, small.token, { fetch: counting, maxEventReconnectAttempts: 5 });
    const session = await client.createSession();
    const submitted = await session.send('demo:deltas=20');
    const latest = await finished(client, session.sessionId, submitted.requestId);
    assert.ok(latest > 5);
    streamRequests = 0;
    const cursor = { protocolVersion: 1, sessionId: session.sessionId, sequence: 1, eventId: 'retired-event' };
    await assert.rejects(
      session.events({ after: cursor }).next(),
      (error) => error instanceof AgentProtocolError && error.code === 'STALE_CURSOR' && error.status === 409 && !error.retryable,
    );
    assert.equal(streamRequests, 1);
  } finally {
    await small.stop();
  }
});

/** Waits (through session.read, never the stream) until the request answered; returns the last sequence. */
async function finished(client, sessionId, requestId) {
  for (let i = 0; i < 200; i += 1) {
    const data = await client.readSession(sessionId);
    const sequence = data.recovery.lastEventSequence ?? 0;
    const messages = data.messages ?? [];
    if (messages.some((message) => message.role === 'assistant') && sequence > 0) return sequence;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`request ${requestId} did not finish`);
}

test('a retryable failure is retried after its retryAfterMs; a final one is not', async () => {
  const capped = await startServer('[executor]\nmax_active_sessions_per_tenant = 1\n');
  try {
    const posts = [];
    const recording = async (url, init) => {
      const body = JSON.parse(init.body);
      const response = await fetch(url, init);
      posts.push({ type: body.type, commandId: body.commandId, answeredAt: Date.now() });
      return response;
    };
    const client = connect(capped.baseUrl, capped.token, { fetch: recording, maxCommandAttempts: 2 });
    await client.createSession();
    await assert.rejects(
      client.createSession(),
      (error) => error.code === 'OVERLOADED' && error.retryable && error.retryAfterMs === 1000,
    );
    const creates = posts.filter((post) => post.type === 'session.create');
    assert.equal(creates.length, 3);
    assert.equal(creates[1].commandId, creates[2].commandId);
    assert.ok(creates[2].answeredAt - creates[1].answeredAt >= 900, 'the retry waited for retryAfterMs');

    posts.length = 0;
    await assert.rejects(client.resumeSession('no-such-session'), (error) => error.code === 'SESSION_NOT_FOUND' && error.status === 404);
    assert.equal(posts.filter((post) => post.type === 'session.resume').length, 1);
  } finally {
    await capped.stop();
  }
});

test('an approval is requested, resolved and reported; close ends the stream', async () => {
  const client = connect(server.baseUrl, server.token);
  const session = await client.createSession();
  const submitted = await session.send('this needs approval');
  const seen = [];
  for await (const event of session.events()) {
    seen.push(event);
    if (event.type === 'permission.requested') {
      await session.resolvePermission(event.data.permissionRequestId, { approved: true, scope: 'once' });
    }
    if (event.type === 'session.stream' && event.data.type === 'result' && event.requestId === submitted.requestId) {
      const closed = await session.close();
      assert.equal(closed.status, 'closed');
    }
  }
  assert.equal(seen.at(-1).type, 'session.closed', 'the iterator ends after session.closed');
  assert.ok(seen.some((event) => event.type === 'permission.requested'));
  assert.match(text(seen), /approved/);
});

test('a consumer that stops iterating closes its connection', async () => {
  const client = connect(proxy.baseUrl, server.token);
  const session = await client.createSession();
  const submitted = await session.send('demo:slow');
  proxy.state.openStreams = 0;
  for await (const event of session.events()) {
    if (event.type === 'session.stream' && event.data.type === 'content') break;
  }
  for (let i = 0; i < 100 && proxy.state.openStreams > 0; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(proxy.state.openStreams, 0, 'breaking out of the loop closed the connection');
  await session.abort();
  const rest = await untilResult(session.events(), submitted.requestId);
  assert.equal(rest.at(-1).data.type, 'result');
});
