// The client against scripted responses: the browser-client behaviours of docs/protocol.md §12
// (items 27-34), retry rules of §11.3 and strict validation.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { AgentClient, AgentProtocolError, nanoid } from '../src/agent-client.js';
import { COMMAND_TYPES } from '../src/schema.js';

const INITIALIZED = {
  protocolVersion: 1,
  commands: [...COMMAND_TYPES],
  transports: ['http-sse'],
  features: { approvals: true, durableEvents: true, eventReplay: true, idempotentCommands: true },
  serverTime: '2026-11-29T00:00:00.000Z',
};

const json = (status, body, headers = {}) =>
  new Response(typeof body === 'string' ? body : JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  });
const success = (commandId, data) => json(200, { protocolVersion: 1, commandId, ok: true, data });
const sse = (text) => new Response(text, { status: 200, headers: { 'content-type': 'text/event-stream' } });
const event = (sequence, type = 'session.stream', sessionId = 'session-1') => ({
  protocolVersion: 1,
  eventId: `event-${sequence}`,
  sequence,
  sessionId,
  occurredAt: '2026-11-29T00:00:00.000Z',
  type,
  data: type === 'session.stream' ? { sessionId, type: 'content', delta: `d${sequence}` } : { reason: 'user' },
});
const frame = (value, newline = '\n') => `data: ${JSON.stringify(value)}${newline}${newline}`;

/** A fetch that answers `initialize` itself and every other request from `script`. */
function scripted(script) {
  const calls = [];
  const fetch = async (url, init) => {
    const body = init.body ? JSON.parse(init.body) : undefined;
    calls.push({ url: String(url), init, body });
    if (body?.type === 'initialize' && !script.initialize) return success(body.commandId, INITIALIZED);
    return script.next(String(url), init, body, calls);
  };
  return { fetch, calls };
}

const client = (fetch, options = {}) =>
  new AgentClient({
    baseUrl: 'http://agent.test/v1/agent/',
    client: { name: 'client-test', version: '1.0.0' },
    fetch,
    retryBaseDelayMs: 0,
    ...options,
  });

const streamCalls = (calls) => calls.filter((call) => call.init.method === 'GET');

test('item 27: a CRLF frame, a reconnect with the cursor in both places, and the end at session.closed', async () => {
  const responses = [sse(frame(event(1), '\r\n')), sse(frame(event(2, 'session.closed')))];
  const { fetch, calls } = scripted({ next: () => responses.shift() });
  const seen = [];
  for await (const item of client(fetch, { maxEventReconnectAttempts: 1 }).events('session-1')) seen.push(item.sequence);
  assert.deepEqual(seen, [1, 2]);
  const gets = streamCalls(calls);
  assert.equal(gets.length, 2);
  assert.equal(gets[0].url, 'http://agent.test/v1/agent/sessions/session-1/events?after=0');
  assert.equal(gets[0].init.headers.get('last-event-id'), null);
  assert.equal(gets[1].url, 'http://agent.test/v1/agent/sessions/session-1/events?after=1');
  assert.equal(gets[1].init.headers.get('last-event-id'), '1');
  assert.equal(gets[1].init.headers.get('accept'), 'text/event-stream');
});

test('item 28: more than 4 MiB without a frame delimiter is STREAM_FRAME_TOO_LARGE', async () => {
  const body = new ReadableStream({
    start(controller) {
      const chunk = new TextEncoder().encode('x'.repeat(1024 * 1024));
      controller.enqueue(new TextEncoder().encode('data: '));
      for (let i = 0; i < 5; i += 1) controller.enqueue(chunk);
      // Never closes: only the bound can end this.
    },
  });
  const { fetch } = scripted({ next: () => new Response(body, { status: 200 }) });
  await assert.rejects(
    client(fetch, { maxEventReconnectAttempts: 0 }).events('session-1').next(),
    (error) => error instanceof AgentProtocolError && error.code === 'STREAM_FRAME_TOO_LARGE' && error.status === 502 && !error.retryable,
  );
});

test('item 28: a complete frame over 4 MiB of UTF-8 is STREAM_FRAME_TOO_LARGE, even in one chunk', async () => {
  // 1.4 M CJK characters: 4.2 MB of UTF-8, but fewer UTF-16 units than 4 Mi (the older rule).
  const large = event(1);
  large.data.delta = '漢'.repeat(1_400_000);
  const big = sse(frame(large));
  const { fetch } = scripted({ next: () => big });
  await assert.rejects(
    client(fetch, { maxEventReconnectAttempts: 0 }).events('session-1').next(),
    (error) => error instanceof AgentProtocolError && error.code === 'STREAM_FRAME_TOO_LARGE' && error.status === 502 && !error.retryable,
  );
});

test('item 29: a stream that always ends empty is given up after max attempts + 1 requests', async () => {
  const { fetch, calls } = scripted({ next: () => sse('') });
  await assert.rejects(
    client(fetch, { maxEventReconnectAttempts: 2 }).events('session-1').next(),
    (error) => error.code === 'INTERNAL_ERROR' && error.retryable === true && error.status === 502,
  );
  assert.equal(streamCalls(calls).length, 3);
});

test('item 30: STALE_CURSOR is surfaced after one request and never retried', async () => {
  const stale = { protocolVersion: 1, commandId: 'events', ok: false, error: { code: 'STALE_CURSOR', message: 'Event cursor is stale', retryable: false } };
  const { fetch, calls } = scripted({ next: () => json(409, stale) });
  await assert.rejects(
    client(fetch, { maxEventReconnectAttempts: 5 }).events('session-1').next(),
    (error) => error instanceof AgentProtocolError && error.code === 'STALE_CURSOR' && error.status === 409,
  );
  assert.equal(streamCalls(calls).length, 1);
});

test('item 31: a cursor of another session is refused before any request', async () => {
  const { fetch, calls } = scripted({ next: () => assert.fail('no request may be made') });
  const after = { protocolVersion: 1, sessionId: 'session-2', sequence: 3, eventId: 'event-3' };
  await assert.rejects(
    client(fetch).events('session-1', { after }).next(),
    (error) => error.code === 'INVALID_COMMAND' && error.status === 400,
  );
  await assert.rejects(
    client(fetch).events('session-1', { after: { ...after, sessionId: 'session-1', sequence: 0 } }).next(),
    (error) => error.code === 'INVALID_COMMAND' && error.status === 400,
  );
  assert.equal(calls.length, 0);
});

test('item 32: a repeated sequence after a reconnect fails closed', async () => {
  const responses = [sse(frame(event(1))), sse(frame(event(1)))];
  const { fetch } = scripted({ next: () => responses.shift() });
  const events = client(fetch).events('session-1');
  assert.equal((await events.next()).value.sequence, 1);
  await assert.rejects(events.next(), (error) => error.code === 'INVALID_COMMAND' && error.status === 502 && /non-monotonic/.test(error.message));
});

test('item 33: a custom fetch is called without a receiver', async () => {
  let receiver = 'not called';
  const fetch = function (url, init) {
    receiver = this;
    return Promise.resolve(success(JSON.parse(init.body).commandId, INITIALIZED));
  };
  await client(fetch).initialize();
  assert.equal(receiver, undefined);
});

test('item 34: an unstructured 429 is retried with the same commandId', async () => {
  let first = true;
  const { fetch, calls } = scripted({
    initialize: true,
    next: (url, init, body) => {
      if (first) {
        first = false;
        return new Response('slow down', { status: 429, headers: { 'retry-after': '0' } });
      }
      return success(body.commandId, INITIALIZED);
    },
  });
  await client(fetch, { maxCommandAttempts: 2 }).initialize();
  assert.equal(calls.length, 2);
  assert.equal(calls[0].body.commandId, calls[1].body.commandId);
  assert.equal(calls[0].body.commandId.length, 21);
});

test('a structured failure decides retryability by its body, not its status', async () => {
  const failure = (code, retryable, retryAfterMs) => (url, init, body) =>
    json(code === 'OVERLOADED' ? 503 : 404, {
      protocolVersion: 1,
      commandId: body.commandId,
      ok: false,
      error: { code, message: code, retryable, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) },
    });
  const notFound = scripted({ next: failure('SESSION_NOT_FOUND', false) });
  await assert.rejects(client(notFound.fetch).resumeSession('missing'), (error) => error.code === 'SESSION_NOT_FOUND' && error.status === 404);
  assert.equal(notFound.calls.filter((c) => c.body.type === 'session.resume').length, 1);

  const overloaded = scripted({ next: failure('OVERLOADED', true, 0) });
  await assert.rejects(client(overloaded.fetch, { maxCommandAttempts: 3 }).resumeSession('busy'), (error) => error.code === 'OVERLOADED' && error.retryAfterMs === 0);
  const resumes = overloaded.calls.filter((c) => c.body.type === 'session.resume');
  assert.equal(resumes.length, 3);
  assert.equal(new Set(resumes.map((c) => c.body.commandId)).size, 1);
});

test('initialize is shared while in flight and retried after a failure', async () => {
  let failNext = true;
  const { fetch, calls } = scripted({
    initialize: true,
    next: (url, init, body) => {
      if (failNext) {
        failNext = false;
        return json(400, { protocolVersion: 1, commandId: body.commandId, ok: false, error: { code: 'INVALID_COMMAND', message: 'no', retryable: false } });
      }
      return success(body.commandId, INITIALIZED);
    },
  });
  const agent = client(fetch);
  await assert.rejects(agent.initialize());
  const [a, b] = await Promise.all([agent.initialize(), agent.initialize()]);
  assert.equal(a, b);
  assert.equal(calls.length, 2);
});

test('results and events are validated strictly', async () => {
  const extraField = scripted({
    next: (url, init, body) =>
      success(body.commandId, {
        session: { sessionId: 's', status: 'active', createdAt: '2026-11-29T00:00:00Z', updatedAt: '2026-11-29T00:00:00Z', tenantId: 'leak' },
      }),
  });
  await assert.rejects(client(extraField.fetch, { maxCommandAttempts: 1 }).createSession(), (error) => error.code === 'INTERNAL_ERROR' && !error.retryable);

  const badEvent = { ...event(1), data: { sessionId: 'other', type: 'content', delta: 'x' } };
  const { fetch, calls } = scripted({ next: () => sse(frame(badEvent)) });
  await assert.rejects(client(fetch, { maxEventReconnectAttempts: 1 }).events('session-1').next(), (error) => error.code === 'INTERNAL_ERROR' && error.retryable);
  assert.equal(streamCalls(calls).length, 2, 'an invalid frame is retried like a broken connection');
});

test('streamed messages follow the newest strict message schema', async () => {
  const injected = (message) => ({
    ...event(1),
    data: { sessionId: 'session-1', type: 'tool_new_messages', id: 't', name: 'Skill', messages: [message] },
  });
  const newest = {
    role: 'user',
    content: 'skill text',
    provenance: { source: 'tool_injection' },
    correlation: { inputId: 'i-1', requestId: 'r-1' },
    telemetry: { model: 'm', usage: { inputTokens: 1, outputTokens: 2 } },
    extensions: { x: 1 },
    providerOptions: { cache: true },
  };
  const good = scripted({ next: () => sse(frame(injected(newest)) + frame(event(2, 'session.closed'))) });
  const seen = [];
  for await (const item of client(good.fetch).events('session-1')) seen.push(item.type);
  assert.deepEqual(seen, ['session.stream', 'session.closed']);

  for (const message of [
    { ...newest, correlation: { inputId: 'i-1' } },
    { ...newest, correlation: { inputId: 'i-1', requestId: null } },
    { ...newest, metadata: { correlation: { inputId: 'i-1', requestId: 'r-1' } } },
    { role: 'assistant', content: '', tool_calls: [{ id: '', type: 'function', function: { name: 'n', arguments: '{}' } }] },
  ]) {
    const bad = scripted({ next: () => sse(frame(injected(message))) });
    await assert.rejects(
      client(bad.fetch, { maxEventReconnectAttempts: 0 }).events('session-1').next(),
      (error) => error.code === 'INTERNAL_ERROR',
      JSON.stringify(message),
    );
  }
});

test('heartbeats, comments and multi-line data are parsed as the reference does', async () => {
  const data = JSON.stringify(event(1), null, 1).split('\n').map((line) => `data:   ${line}`).join('\n');
  const body = `: heartbeat\n\nid: 1\nevent: message\n${data}\n\n` + frame(event(2, 'session.closed'));
  const { fetch } = scripted({ next: () => sse(body) });
  const seen = [];
  for await (const item of client(fetch).events('session-1')) seen.push(item.type);
  assert.deepEqual(seen, ['session.stream', 'session.closed']);
});

test('an abort signal ends a waiting stream with its reason', async () => {
  const { fetch } = scripted({
    next: (url, init) =>
      new Promise((resolve, reject) => {
        init.signal.addEventListener('abort', () => reject(init.signal.reason));
      }),
  });
  const controller = new AbortController();
  const reason = new Error('user left');
  const pending = client(fetch).events('session-1', { signal: controller.signal }).next();
  setTimeout(() => controller.abort(reason), 10);
  await assert.rejects(pending, (error) => error === reason);
});

test('options are checked and ids are URL-safe', () => {
  assert.throws(() => client(() => {}, { maxCommandAttempts: 0 }), RangeError);
  assert.throws(() => client(() => {}, { maxEventReconnectAttempts: -1 }), RangeError);
  assert.throws(() => client(() => {}, { retryBaseDelayMs: 1.5 }), RangeError);
  assert.throws(() => new AgentClient({ baseUrl: 'http://x', client: { name: '../bad', version: '1' } }), TypeError);
  for (let i = 0; i < 100; i += 1) assert.match(nanoid(), /^[A-Za-z0-9_-]{21}$/);
});
