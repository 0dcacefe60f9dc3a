// Type declarations of the protocol v1 browser client (docs/protocol.md §11).

export declare const AGENT_PROTOCOL_VERSION: 1;
export declare function nanoid(size?: number): string;

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export type ErrorCode =
  | 'PROTOCOL_VERSION_UNSUPPORTED'
  | 'INVALID_COMMAND'
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN'
  | 'SESSION_NOT_FOUND'
  | 'PERMISSION_NOT_FOUND'
  | 'SESSION_CONFLICT'
  | 'COMMAND_CONFLICT'
  | 'COMMAND_IN_PROGRESS'
  | 'COMMAND_ABANDONED'
  | 'STREAM_FRAME_TOO_LARGE'
  | 'RATE_LIMITED'
  | 'OVERLOADED'
  | 'STALE_CURSOR'
  | 'INTERNAL_ERROR';

export declare class SdkError extends Error {}
export declare class SchemaError extends Error {}
export declare class AgentProtocolError extends SdkError {
  constructor(
    code: ErrorCode,
    message: string,
    options?: { status?: number; retryable?: boolean; retryAfterMs?: number; details?: JsonObject; cause?: unknown },
  );
  readonly protocolCode: ErrorCode;
  readonly code: ErrorCode;
  readonly status: number;
  readonly retryable: boolean;
  readonly retryAfterMs?: number;
  readonly details?: JsonObject;
}

export interface ClientInfo {
  name: string;
  version: string;
  title?: string;
}

export type HeadersSource = HeadersInit | (() => HeadersInit | Promise<HeadersInit>);

export interface AgentClientOptions {
  /** e.g. `https://host/v1/agent`; trailing slashes are stripped. */
  baseUrl: string;
  client: ClientInfo;
  capabilities?: { approvals?: boolean; durableEvents?: boolean; eventReplay?: boolean };
  /** Called without a receiver. Defaults to the global fetch. */
  fetch?: typeof fetch;
  /** Evaluated again for every request (e.g. a bearer token that can change). */
  headers?: HeadersSource;
  /** Default 3, at least 1. */
  maxCommandAttempts?: number;
  /** Default 5, at least 0. */
  maxEventReconnectAttempts?: number;
  /** Default 250, at least 0. */
  retryBaseDelayMs?: number;
}

export interface CommandOptions {
  /** The idempotency key; reused on every retry. Default: a fresh nanoid. */
  commandId?: string;
  signal?: AbortSignal;
}

export interface SessionDescriptor {
  sessionId: string;
  status: 'active' | 'closed';
  createdAt: string;
  updatedAt: string;
  metadata?: JsonObject;
}

export interface InitializeResult {
  protocolVersion: 1;
  commands: string[];
  transports: ['http-sse'];
  features: { approvals: true; durableEvents: true; eventReplay: true; idempotentCommands: true };
  serverTime: string;
}

export type Priority = 'now' | 'next' | 'later';
export type UserContent =
  | string
  | Array<
      | { type: 'text'; text: string; providerOptions?: JsonObject }
      | { type: 'image_url'; image_url: { url: string } }
    >;

export type SubmitResult =
  | { sessionId: string; inputId: string; status: 'started'; requestId: string }
  | { sessionId: string; inputId: string; status: 'steered'; requestId: string; priority: 'now' | 'next' }
  | { sessionId: string; inputId: string; status: 'queued'; priority: 'later' };

export interface StreamMessage {
  sessionId: string;
  type:
    | 'turn_start'
    | 'turn_end'
    | 'turn_interrupted'
    | 'input_applied'
    | 'content'
    | 'thinking'
    | 'tool_use'
    | 'tool_progress'
    | 'tool_message'
    | 'tool_runtime_patch'
    | 'tool_context_patch'
    | 'tool_new_messages'
    | 'tool_permission_updates'
    | 'tool_result'
    | 'usage'
    | 'result'
    | 'error';
  [field: string]: JsonValue;
}

export interface PermissionRequest {
  permissionRequestId: string;
  toolName: string;
  input: JsonObject;
  title: string;
  message: string;
  kind?: string;
  affectedPaths: string[];
  risks: string[];
}

interface EventEnvelope<T extends string, D> {
  protocolVersion: 1;
  eventId: string;
  sequence: number;
  sessionId: string;
  requestId?: string;
  occurredAt: string;
  type: T;
  data: D;
}

export type AgentEvent =
  | EventEnvelope<'session.stream', StreamMessage>
  | EventEnvelope<'permission.requested', PermissionRequest>
  | EventEnvelope<'session.closed', JsonObject>;

export interface AgentEventCursor {
  protocolVersion: 1;
  sessionId: string;
  sequence: number;
  eventId: string;
}

export interface ConnectionState {
  status: 'connecting' | 'open' | 'reconnecting';
  /** The last sequence delivered; the connection resumes after it. */
  after: number;
  attempt: number;
}

export interface EventsOptions {
  after?: AgentEventCursor;
  signal?: AbortSignal;
  /** Extension for user interfaces: told about every (re)connection. */
  onConnection?: (state: ConnectionState) => void;
}

export interface PermissionDecision extends CommandOptions {
  approved: boolean;
  reason?: string;
  scope?: 'once' | 'session';
}

export declare class AgentClient {
  constructor(options: AgentClientOptions);
  initialize(opts?: CommandOptions): Promise<InitializeResult>;
  createSession(metadata?: JsonObject, opts?: CommandOptions): Promise<RemoteAgentSession>;
  resumeSession(sessionId: string, opts?: CommandOptions): Promise<RemoteAgentSession>;
  forkSession(
    sessionId: string,
    opts?: CommandOptions & { messageId?: string; metadata?: JsonObject },
  ): Promise<RemoteAgentSession>;
  readSession(sessionId: string, opts?: CommandOptions): Promise<JsonObject>;
  listSessions(
    opts?: CommandOptions & { cursor?: string; limit?: number },
  ): Promise<{ sessions: SessionDescriptor[]; nextCursor?: string }>;
  submitInput(
    sessionId: string,
    input: UserContent,
    opts?: CommandOptions & { priority?: Priority; expectedRequestId?: string; maxTurns?: number },
  ): Promise<SubmitResult>;
  abortRequest(sessionId: string, opts?: CommandOptions): Promise<{ sessionId: string; aborted: true }>;
  closeSession(sessionId: string, opts?: CommandOptions): Promise<SessionDescriptor>;
  resolvePermission(
    sessionId: string,
    permissionRequestId: string,
    decision: PermissionDecision,
  ): Promise<{ sessionId: string; permissionRequestId: string; resolved: true }>;
  events(sessionId: string, opts?: EventsOptions): AsyncGenerator<AgentEvent, void, undefined>;
}

export declare class RemoteAgentSession {
  readonly client: AgentClient;
  readonly sessionId: string;
  /** The descriptor the server returned when this handle was made. */
  readonly session: SessionDescriptor;
  send(input: UserContent, opts?: CommandOptions & { priority?: Priority; expectedRequestId?: string; maxTurns?: number }): Promise<SubmitResult>;
  events(opts?: EventsOptions): AsyncGenerator<AgentEvent, void, undefined>;
  abort(opts?: CommandOptions): Promise<{ sessionId: string; aborted: true }>;
  close(opts?: CommandOptions): Promise<SessionDescriptor>;
  fork(opts?: CommandOptions & { messageId?: string; metadata?: JsonObject }): Promise<RemoteAgentSession>;
  read(opts?: CommandOptions): Promise<JsonObject>;
  resolvePermission(
    permissionRequestId: string,
    decision: PermissionDecision,
  ): Promise<{ sessionId: string; permissionRequestId: string; resolved: true }>;
}
