// The browser AgentClient of protocol v1 (docs/protocol.md §11): idempotent commands with safe
// retries, and a replayable event stream that never repeats or skips an event. No dependencies: it
// runs in browsers and in Node.js 18+ as a plain ES module.

import {
  AgentProtocolError,
  SdkError,
  abortReason,
  retryableStatus,
  sleep,
  throwIfAborted,
  unstructuredFailure,
} from './errors.js';
import { IDENTIFIER, RESULTS, SchemaError, agentEvent, commandResponse, eventCursor } from './schema.js';
import { MAX_FRAME_BYTES, sseData } from './sse.js';

export { AgentProtocolError, SdkError, SchemaError };
export const AGENT_PROTOCOL_VERSION = 1;

const ALPHABET = 'useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict';

/** A 21-character URL-safe random id (the format of server-generated ids). */
export function nanoid(size = 21) {
  const bytes = crypto.getRandomValues(new Uint8Array(size));
  let id = '';
  for (const byte of bytes) id += ALPHABET[byte & 63];
  return id;
}

const count = (value, name, min, fallback) => {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${name} must be an integer of at least ${min}`);
  }
  return value;
};

const checkClientInfo = (client) => {
  if (typeof client !== 'object' || client === null) throw new TypeError('client { name, version } is required');
  for (const key of ['name', 'version']) {
    if (typeof client[key] !== 'string' || !IDENTIFIER.test(client[key])) {
      throw new TypeError(`client.${key} must be a protocol identifier`);
    }
  }
  if (client.title !== undefined && (typeof client.title !== 'string' || client.title.length < 1 || client.title.length > 256)) {
    throw new TypeError('client.title must be 1 to 256 characters');
  }
  return client.title === undefined
    ? { name: client.name, version: client.version }
    : { name: client.name, version: client.version, title: client.title };
};

const withoutUndefined = (object) =>
  Object.fromEntries(Object.entries(object).filter(([, value]) => value !== undefined));

export class AgentClient {
  #baseUrl;
  #clientInfo;
  #capabilities;
  #fetch;
  #headers;
  #maxCommandAttempts;
  #maxEventReconnectAttempts;
  #retryBaseDelayMs;
  #initialized;

  /**
   * @param {import('./agent-client').AgentClientOptions} options
   */
  constructor(options) {
    if (typeof options?.baseUrl !== 'string' || options.baseUrl === '') throw new TypeError('baseUrl is required');
    this.#baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.#clientInfo = checkClientInfo(options.client);
    this.#capabilities = options.capabilities;
    const fetchFunction = options.fetch ?? globalThis.fetch;
    if (typeof fetchFunction !== 'function') throw new TypeError('No fetch implementation is available');
    this.#fetch = fetchFunction;
    this.#headers = options.headers;
    this.#maxCommandAttempts = count(options.maxCommandAttempts, 'maxCommandAttempts', 1, 3);
    this.#maxEventReconnectAttempts = count(options.maxEventReconnectAttempts, 'maxEventReconnectAttempts', 0, 5);
    this.#retryBaseDelayMs = count(options.retryBaseDelayMs, 'retryBaseDelayMs', 0, 250);
  }

  /** `initialize`, shared by every caller; a failure clears it so the next call tries again. */
  initialize(opts = {}) {
    if (!this.#initialized) {
      const data = withoutUndefined({ client: this.#clientInfo, capabilities: this.#capabilities });
      this.#initialized = this.#command('initialize', data, opts).catch((error) => {
        this.#initialized = undefined;
        throw error;
      });
    }
    return this.#initialized;
  }

  async createSession(metadata, opts = {}) {
    const data = await this.#ready('session.create', withoutUndefined({ metadata }), opts);
    return new RemoteAgentSession(this, data.session);
  }

  async resumeSession(sessionId, opts = {}) {
    const data = await this.#ready('session.resume', { sessionId }, opts);
    return new RemoteAgentSession(this, data.session);
  }

  async forkSession(sessionId, opts = {}) {
    const { messageId, metadata } = opts;
    const data = await this.#ready('session.fork', withoutUndefined({ sessionId, messageId, metadata }), opts);
    return new RemoteAgentSession(this, data.session);
  }

  /** The raw `data` of `session.read` (descriptor, transcript, pending inputs, recovery). */
  readSession(sessionId, opts = {}) {
    return this.#ready('session.read', { sessionId }, opts);
  }

  listSessions(opts = {}) {
    const { cursor, limit } = opts;
    return this.#ready('session.list', withoutUndefined({ cursor, limit }), opts);
  }

  submitInput(sessionId, input, opts = {}) {
    const { priority, expectedRequestId, maxTurns } = opts;
    const data = withoutUndefined({ sessionId, input, priority, expectedRequestId, maxTurns });
    return this.#ready('input.submit', data, opts);
  }

  abortRequest(sessionId, opts = {}) {
    return this.#ready('request.abort', { sessionId }, opts);
  }

  async closeSession(sessionId, opts = {}) {
    const data = await this.#ready('session.close', { sessionId }, opts);
    return data.session;
  }

  resolvePermission(sessionId, permissionRequestId, decision, opts = decision) {
    const { approved, reason, scope } = decision ?? {};
    const data = withoutUndefined({ sessionId, permissionRequestId, approved, reason, scope });
    return this.#ready('permission.resolve', data, opts ?? {});
  }

  /**
   * The session's events after `opts.after` (a cursor), then live ones, ending after
   * `session.closed`. Reconnects from the last delivered sequence; never yields a sequence twice.
   */
  async *events(sessionId, opts = {}) {
    const { signal, onConnection } = opts;
    let after = 0;
    if (opts.after !== undefined) {
      try {
        eventCursor(opts.after, 'after');
      } catch {
        throw new AgentProtocolError('INVALID_COMMAND', 'Event cursor is invalid', { status: 400 });
      }
      if (opts.after.sessionId !== sessionId) {
        throw new AgentProtocolError('INVALID_COMMAND', 'Event cursor belongs to another Session', { status: 400 });
      }
      after = opts.after.sequence;
    }
    await this.initialize({ signal });
    // Our own controller so that a consumer who stops iterating also closes the connection.
    const connection = new AbortController();
    const onAbort = () => connection.abort(abortReason(signal));
    signal?.addEventListener('abort', onAbort, { once: true });
    let attempts = 0;
    try {
      for (;;) {
        throwIfAborted(signal);
        onConnection?.({ status: attempts === 0 ? 'connecting' : 'reconnecting', after, attempt: attempts });
        let received = false;
        let failure;
        try {
          for await (const event of this.#connect(sessionId, after, connection.signal, onConnection)) {
            if (event.sequence <= after) {
              throw new AgentProtocolError(
                'INVALID_COMMAND',
                `Received non-monotonic event sequence ${event.sequence} after ${after}`,
                { status: 502 },
              );
            }
            after = event.sequence;
            attempts = 0;
            received = true;
            yield event;
            if (event.type === 'session.closed') return;
          }
        } catch (error) {
          if (signal?.aborted) throw abortReason(signal);
          if (error instanceof AgentProtocolError && (!error.retryable || error.code === 'STALE_CURSOR')) throw error;
          failure = error;
        }
        attempts = received ? 1 : attempts + 1;
        if (attempts > this.#maxEventReconnectAttempts) {
          throw (
            failure ??
            new AgentProtocolError('INTERNAL_ERROR', 'Agent event stream ended before Session closure', {
              status: 502,
              retryable: true,
            })
          );
        }
        await sleep(this.#retryDelay(attempts), signal);
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      connection.abort();
    }
  }

  /** One SSE connection: validated events of this session, in the order received. */
  async *#connect(sessionId, after, signal, onConnection) {
    const headers = await this.#requestHeaders({ accept: 'text/event-stream' });
    if (after > 0) headers.set('last-event-id', String(after));
    const url = `${this.#baseUrl}/sessions/${encodeURIComponent(sessionId)}/events?after=${after}`;
    const fetchFunction = this.#fetch;
    const response = await fetchFunction(url, { method: 'GET', headers, signal });
    if (!response.ok || !response.body) throw await streamFailure(response);
    onConnection?.({ status: 'open', after, attempt: 0 });
    for await (const data of sseData(response.body, MAX_FRAME_BYTES)) {
      let event;
      try {
        event = agentEvent(JSON.parse(data));
      } catch (cause) {
        throw new AgentProtocolError('INTERNAL_ERROR', 'Agent event stream sent an invalid event', {
          status: 502,
          retryable: true,
          cause,
        });
      }
      if (event.sessionId !== sessionId) {
        throw new AgentProtocolError('INVALID_COMMAND', 'Received an event of another Session', { status: 502 });
      }
      yield event;
    }
  }

  async #ready(type, data, opts) {
    await this.initialize({ signal: opts.signal });
    return this.#command(type, data, opts);
  }

  /** Sends one command, retrying with the same `commandId` while a retry can help. */
  async #command(type, data, opts) {
    const validate = RESULTS[type];
    const { signal } = opts;
    const command = { protocolVersion: AGENT_PROTOCOL_VERSION, commandId: opts.commandId ?? nanoid(), type, data };
    for (let attempt = 1; ; attempt += 1) {
      throwIfAborted(signal);
      try {
        return await this.#post(command, signal, validate);
      } catch (error) {
        if (signal?.aborted) throw abortReason(signal);
        const retryable = !(error instanceof AgentProtocolError) || error.retryable;
        if (!retryable || attempt >= this.#maxCommandAttempts) throw error;
        await sleep(error.retryAfterMs ?? this.#retryDelay(attempt), signal);
      }
    }
  }

  async #post(command, signal, validate) {
    const headers = await this.#requestHeaders({ 'content-type': 'application/json' });
    const fetchFunction = this.#fetch;
    const response = await fetchFunction(`${this.#baseUrl}/commands`, {
      method: 'POST',
      headers,
      body: JSON.stringify(command),
      signal,
    });
    const text = await response.text();
    let body;
    try {
      body = commandResponse(JSON.parse(text));
    } catch (cause) {
      throw unstructuredFailure(response.status, response.headers, `Agent server answered HTTP ${response.status} without a valid command response`, cause);
    }
    if (body.ok === false) {
      const { code, message, retryable, retryAfterMs, details } = body.error;
      throw new AgentProtocolError(code, message, { status: response.status, retryable, retryAfterMs, details });
    }
    if (!response.ok) {
      throw unstructuredFailure(response.status, response.headers, `Agent server answered HTTP ${response.status} with a success body`);
    }
    try {
      return validate(body.data, 'data');
    } catch (cause) {
      throw new AgentProtocolError('INTERNAL_ERROR', `Agent server sent an invalid ${command.type} result`, {
        status: response.status,
        retryable: retryableStatus(response.status),
        cause,
      });
    }
  }

  async #requestHeaders(base) {
    const headers = new Headers(base);
    const user = typeof this.#headers === 'function' ? await this.#headers() : this.#headers;
    if (user) new Headers(user).forEach((value, name) => headers.set(name, value));
    return headers;
  }

  #retryDelay(attempt) {
    const base = this.#retryBaseDelayMs;
    return base * 2 ** (attempt - 1) + Math.floor(Math.random() * base);
  }
}

/** A failed SSE request: the structured failure if the body has one, else by status. */
async function streamFailure(response) {
  let text = '';
  try {
    text = await response.text();
  } catch {
    // The body is unreadable: fall through to the status.
  }
  try {
    const body = commandResponse(JSON.parse(text));
    if (body.ok === false) {
      const { code, message, retryable, retryAfterMs, details } = body.error;
      return new AgentProtocolError(code, message, { status: response.status, retryable, retryAfterMs, details });
    }
  } catch {
    // Not a structured failure.
  }
  const status = response.ok ? 502 : response.status;
  return unstructuredFailure(status, response.headers, `Agent event stream request failed with HTTP ${response.status}`);
}

/** One session of an AgentClient, with the client's methods bound to its id. */
export class RemoteAgentSession {
  /** @param {AgentClient} client @param {object} session the descriptor the server returned */
  constructor(client, session) {
    this.client = client;
    this.sessionId = session.sessionId;
    this.session = session;
  }

  send(input, opts) {
    return this.client.submitInput(this.sessionId, input, opts);
  }

  events(opts) {
    return this.client.events(this.sessionId, opts);
  }

  abort(opts) {
    return this.client.abortRequest(this.sessionId, opts);
  }

  close(opts) {
    return this.client.closeSession(this.sessionId, opts);
  }

  fork(opts) {
    return this.client.forkSession(this.sessionId, opts);
  }

  read(opts) {
    return this.client.readSession(this.sessionId, opts);
  }

  resolvePermission(permissionRequestId, decision) {
    return this.client.resolvePermission(this.sessionId, permissionRequestId, decision);
  }
}
