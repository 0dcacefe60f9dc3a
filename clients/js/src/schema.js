// Strict validation of what the server sends (docs/protocol.md §1-§6): every object rejects unknown
// keys, identifiers follow the common rule, numbers are finite. A validator returns its input
// unchanged or throws a SchemaError naming the path of the first problem.

export class SchemaError extends Error {}

export const IDENTIFIER = /^[A-Za-z0-9_-][A-Za-z0-9._:-]{0,255}$/;
const ISO_DATETIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

const fail = (path, problem) => {
  throw new SchemaError(`${path || 'value'} ${problem}`);
};

const isPlainObject = (value) =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export const string = (value, path) => (typeof value === 'string' ? value : fail(path, 'must be a string'));
const nonEmpty = (value, path) => (string(value, path).length > 0 ? value : fail(path, 'must not be empty'));
export const identifier = (value, path) =>
  IDENTIFIER.test(string(value, path)) ? value : fail(path, 'is not a valid identifier');
const boolean = (value, path) => (typeof value === 'boolean' ? value : fail(path, 'must be a boolean'));
const number = (value, path) =>
  typeof value === 'number' && Number.isFinite(value) ? value : fail(path, 'must be a finite number');
const integer = (value, path) => (Number.isSafeInteger(number(value, path)) ? value : fail(path, 'must be an integer'));
const nonNegative = (value, path) => (number(value, path) >= 0 ? value : fail(path, 'must not be negative'));
const positiveInteger = (value, path) => (integer(value, path) >= 1 ? value : fail(path, 'must be positive'));
const datetime = (value, path) =>
  ISO_DATETIME.test(string(value, path)) && !Number.isNaN(Date.parse(value))
    ? value
    : fail(path, 'must be an ISO-8601 date-time with offset');
const literal = (...allowed) => (value, path) =>
  allowed.includes(value) ? value : fail(path, `must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}`);

/** Any JSON value with finite numbers. */
export function json(value, path) {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') return number(value, path);
  if (Array.isArray(value)) {
    value.forEach((item, i) => json(item, `${path}[${i}]`));
    return value;
  }
  if (isPlainObject(value)) {
    for (const [key, item] of Object.entries(value)) json(item, `${path}.${key}`);
    return value;
  }
  return fail(path, 'is not a JSON value');
}

export const jsonObject = (value, path) => (isPlainObject(value) ? json(value, path) : fail(path, 'must be an object'));

const array = (item) => (value, path) => {
  if (!Array.isArray(value)) fail(path, 'must be an array');
  value.forEach((element, i) => item(element, `${path}[${i}]`));
  return value;
};

const record = (item) => (value, path) => {
  if (!isPlainObject(value)) fail(path, 'must be an object');
  for (const [key, element] of Object.entries(value)) item(element, `${path}.${key}`);
  return value;
};

const anyOf = (...alternatives) => (value, path) => {
  for (const alternative of alternatives) {
    try {
      return alternative(value, path);
    } catch (error) {
      if (!(error instanceof SchemaError)) throw error;
    }
  }
  return fail(path, 'matches none of the allowed shapes');
};

/** A strict object: `required` and `optional` map keys to validators; other keys are refused. */
export const object = (required, optional = {}) => withShape(required, optional, (value, path) => {
  if (!isPlainObject(value)) fail(path, 'must be an object');
  for (const key of Object.keys(value)) {
    if (!(key in required) && !(key in optional)) fail(`${path}.${key}`, 'is not an allowed field');
  }
  for (const [key, check] of Object.entries(required)) {
    if (!(key in value)) fail(`${path}.${key}`, 'is required');
    check(value[key], `${path}.${key}`);
  }
  for (const [key, check] of Object.entries(optional)) {
    if (key in value && value[key] !== undefined) check(value[key], `${path}.${key}`);
  }
  return value;
});

/** Marks a validator with the keys it requires and allows (what test/schema.test.js compares
 * with the published schema). */
function withShape(required, optional, validate) {
  validate.shape = { required: Object.keys(required), optional: Object.keys(optional) };
  return validate;
}

/** A union of strict objects told apart by their `type` field. */
const tagged = (variants) => (value, path) => {
  if (!isPlainObject(value)) fail(path, 'must be an object');
  const variant = variants[value.type];
  if (!variant) return fail(`${path}.type`, 'is not a known type');
  return variant(value, path);
};

const strings = array(string);
const priority = literal('now', 'next', 'later');

const contentPart = tagged({
  text: object({ type: literal('text'), text: string }, { providerOptions: jsonObject }),
  image_url: object({ type: literal('image_url'), image_url: object({ url: nonEmpty }) }),
});
const userContent = anyOf(string, array(contentPart));

// The newest reference message schema: what a message belongs to is a typed `correlation` with
// both ids, where it came from a typed `provenance`; no free-form `metadata`.
export const modelMessage = object(
  { role: literal('system', 'user', 'assistant', 'tool'), content: userContent },
  {
    id: string,
    reasoningContent: string,
    tool_call_id: string,
    name: string,
    tool_calls: array(
      object({
        id: nonEmpty,
        type: literal('function'),
        function: object({ name: string, arguments: string }),
      }),
    ),
    modelIdentity: object({ provider: string, api: string, model: string }),
    providerOptions: jsonObject,
    provenance: object({ source: literal('catalog', 'tool_injection', 'compaction_summary') }),
    correlation: object({ inputId: nonEmpty, requestId: nonEmpty }),
    telemetry: object({}, { model: string, usage: object({ inputTokens: integer, outputTokens: integer }) }),
    extensions: jsonObject,
  },
);

export const sessionDescriptor = object(
  { sessionId: identifier, status: literal('active', 'closed'), createdAt: datetime, updatedAt: datetime },
  { metadata: jsonObject },
);

const display = object({ summary: string }, { detail: json });
const stringOrNumber = anyOf(string, number);
const patchScope = literal('turn', 'session');
const runtimePatch = object(
  { scope: patchScope, source: literal('skill', 'tool', 'system') },
  {
    skill: object({ id: string, name: string, basePath: string }),
    toolPolicy: object({}, { allow: strings, deny: strings }),
    toolDiscovery: object({}, { discover: strings, reset: boolean }),
    modelOverride: object({ modelId: string }, { effort: stringOrNumber }),
    systemPromptAppend: string,
    environment: record(string),
    hooks: array(
      object(
        {
          event: literal(
            'PreToolUse',
            'PostToolUse',
            'PostToolUseFailure',
            'PermissionRequest',
            'UserPromptSubmit',
            'SessionStart',
            'SessionEnd',
            'TaskCompleted',
          ),
          type: string,
        },
        { value: string, tools: strings, once: boolean },
      ),
    ),
  },
);
const contextPatch = object(
  { scope: patchScope },
  {
    context: object(
      {},
      {
        id: string,
        capabilities: object(
          {},
          {
            filesystem: object({ roots: strings }, { cwd: string }),
            browser: object({}, { pageId: string, tabId: stringOrNumber }),
            network: object({}, { allowDomains: strings }),
          },
        ),
        environment: record(string),
        metadata: jsonObject,
      },
    ),
    reset: boolean,
  },
);
const permissionRules = array(object({ toolName: string }, { ruleContent: string }));
const permissionUpdate = tagged({
  addRules: object({ type: literal('addRules'), rules: permissionRules, behavior: literal('allow', 'deny') }),
  removeRules: object({ type: literal('removeRules'), rules: permissionRules }),
});
const usage = object(
  { inputTokens: nonNegative, outputTokens: nonNegative, totalTokens: nonNegative, maxContextTokens: nonNegative },
  {
    cacheReadInputTokens: nonNegative,
    cacheMissInputTokens: nonNegative,
    billableInputTokens: nonNegative,
    reasoningTokens: nonNegative,
  },
);

/** The `session.stream` variants of §6.2, each with `sessionId` and `type`. */
const stream = (type, required, optional) =>
  object({ sessionId: nonEmpty, type: literal(type), ...required }, optional);
const tool = (type, required, optional) => stream(type, { id: nonEmpty, name: string, ...required }, optional);

export const streamMessage = tagged({
  turn_start: stream('turn_start', { turn: integer }),
  turn_end: stream('turn_end', { turn: integer }),
  turn_interrupted: stream('turn_interrupted', { inputId: nonEmpty, requestId: nonEmpty, turn: integer }),
  input_applied: stream('input_applied', {
    inputId: nonEmpty,
    requestId: nonEmpty,
    priority: literal('now', 'next'),
    turn: integer,
  }),
  content: stream('content', { delta: string }),
  thinking: stream('thinking', { delta: string }),
  tool_use: tool('tool_use', { input: json }),
  tool_progress: tool('tool_progress', {
    progress: object(
      { kind: literal('progress') },
      { message: string, data: json, completed: number, total: number, resumeToken: string },
    ),
  }),
  tool_message: tool('tool_message', { content: display }),
  tool_runtime_patch: tool('tool_runtime_patch', { patch: runtimePatch }),
  tool_context_patch: tool('tool_context_patch', { patch: contextPatch }),
  tool_new_messages: tool('tool_new_messages', { messages: array(modelMessage) }),
  tool_permission_updates: tool('tool_permission_updates', { updates: array(permissionUpdate) }),
  tool_result: tool('tool_result', { output: json }, { display, isError: boolean }),
  usage: stream('usage', { usage }),
  result: stream('result', { subtype: literal('success', 'error') }, { content: string, error: string }),
  error: stream('error', { message: string }, { code: string }),
});

const permissionRequested = object(
  {
    permissionRequestId: identifier,
    toolName: string,
    input: jsonObject,
    title: string,
    message: string,
    affectedPaths: strings,
    risks: strings,
  },
  { kind: string },
);

const envelope = (type, data) =>
  object(
    {
      protocolVersion: literal(1),
      eventId: identifier,
      sequence: positiveInteger,
      sessionId: identifier,
      occurredAt: datetime,
      type: literal(type),
      data,
    },
    { requestId: identifier },
  );

const eventVariants = tagged({
  'session.stream': envelope('session.stream', streamMessage),
  'permission.requested': envelope('permission.requested', permissionRequested),
  'session.closed': envelope('session.closed', jsonObject),
});

/** An event envelope (§1.4) with the cross-field rule of the stream variants. */
export function agentEvent(value, path = 'event') {
  eventVariants(value, path);
  if (value.type === 'session.stream' && value.data.sessionId !== value.sessionId) {
    throw new SchemaError('Stream event Session does not match the server event envelope');
  }
  return value;
}

/** `AgentEventCursor` (§1.5). */
export const eventCursor = object({
  protocolVersion: literal(1),
  sessionId: identifier,
  sequence: positiveInteger,
  eventId: identifier,
});

export const COMMAND_TYPES = [
  'initialize',
  'session.create',
  'session.read',
  'session.list',
  'session.resume',
  'session.fork',
  'session.close',
  'input.submit',
  'request.abort',
  'permission.resolve',
];

export const initializeResult = object({
  protocolVersion: literal(1),
  commands: (value, path) => {
    array(literal(...COMMAND_TYPES))(value, path);
    return value.length === COMMAND_TYPES.length && value.every((type, i) => type === COMMAND_TYPES[i])
      ? value
      : fail(path, 'must list the 10 commands in order');
  },
  transports: (value, path) =>
    array(literal('http-sse'))(value, path).length === 1 ? value : fail(path, 'must be ["http-sse"]'),
  features: object({
    approvals: literal(true),
    durableEvents: literal(true),
    eventReplay: literal(true),
    idempotentCommands: literal(true),
  }),
  serverTime: datetime,
});

export const sessionResult = object({ session: sessionDescriptor });
export const listResult = object({ sessions: array(sessionDescriptor) }, { nextCursor: nonEmpty });

const submitBase = { sessionId: identifier, inputId: identifier, status: string };
const submitShapes = {
  started: object({ ...submitBase, status: literal('started'), requestId: identifier }),
  steered: object({ ...submitBase, status: literal('steered'), requestId: identifier, priority: literal('now', 'next') }),
  queued: object({ ...submitBase, status: literal('queued'), priority: literal('later') }),
};
export const submitResult = withShape(submitBase, { requestId: identifier, priority: string }, (value, path) => {
  if (!isPlainObject(value) || !(value.status in submitShapes)) return fail(`${path}.status`, 'is not a known status');
  return submitShapes[value.status](value, path);
});

export const abortResult = object({ sessionId: identifier, aborted: literal(true) });
export const resolveResult = object({
  sessionId: identifier,
  permissionRequestId: identifier,
  resolved: literal(true),
});

/** The reader of each command's success `data`, paired as the published schema pairs them (its
 * `x-result-data`; test/schema.test.js checks). `session.read` is read as any object, as the
 * reference client reads it, so that a server adding fields stays readable. */
export const RESULTS = {
  initialize: initializeResult,
  'session.create': sessionResult,
  'session.read': jsonObject,
  'session.list': listResult,
  'session.resume': sessionResult,
  'session.fork': sessionResult,
  'session.close': sessionResult,
  'input.submit': submitResult,
  'request.abort': abortResult,
  'permission.resolve': resolveResult,
};

const errorCodes = literal(
  'PROTOCOL_VERSION_UNSUPPORTED',
  'INVALID_COMMAND',
  'UNAUTHENTICATED',
  'FORBIDDEN',
  'SESSION_NOT_FOUND',
  'PERMISSION_NOT_FOUND',
  'SESSION_CONFLICT',
  'COMMAND_CONFLICT',
  'COMMAND_IN_PROGRESS',
  'COMMAND_ABANDONED',
  'STREAM_FRAME_TOO_LARGE',
  'RATE_LIMITED',
  'OVERLOADED',
  'STALE_CURSOR',
  'INTERNAL_ERROR',
);

/** A command response (§1.3): success with an object `data`, or a structured failure. */
export const commandResponse = (value, path = 'response') => {
  if (!isPlainObject(value)) return fail(path, 'must be an object');
  const common = { protocolVersion: literal(1), commandId: string };
  if (value.ok === true) return object({ ...common, ok: literal(true), data: jsonObject })(value, path);
  return object({
    ...common,
    ok: literal(false),
    error: object(
      { code: errorCodes, message: string, retryable: boolean },
      {
        retryAfterMs: (v, p) => (Number.isSafeInteger(v) && v >= 0 ? v : fail(p, 'must be a non-negative integer')),
        details: jsonObject,
      },
    ),
  })(value, path);
};
