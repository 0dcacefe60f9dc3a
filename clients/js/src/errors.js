// Error classes of docs/protocol.md §11.5 and the retry classification shared by commands and
// events.

export class SdkError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class AgentProtocolError extends SdkError {
  /**
   * @param {string} code one of the protocol error codes
   * @param {string} message
   * @param {{status?: number, retryable?: boolean, retryAfterMs?: number, details?: object, cause?: unknown}} [options]
   */
  constructor(code, message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.protocolCode = code;
    this.code = code;
    this.status = options.status ?? 500;
    this.retryable = options.retryable ?? false;
    if (options.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
    if (options.details !== undefined) this.details = options.details;
  }
}

/** Retryability of a response that carries no structured failure: 408, 429 and 5xx. */
export function retryableStatus(status) {
  return status === 408 || status === 429 || status >= 500;
}

/** `Retry-After` as milliseconds: delta-seconds or an HTTP date; undefined when absent or bad. */
export function retryAfterHeader(headers, now = Date.now()) {
  const value = headers?.get?.('retry-after');
  if (value == null || value.trim() === '') return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** An unstructured (non-protocol) failure of an HTTP exchange. */
export function unstructuredFailure(status, headers, message, cause) {
  return new AgentProtocolError('INTERNAL_ERROR', message, {
    status,
    retryable: retryableStatus(status),
    retryAfterMs: retryAfterHeader(headers),
    cause,
  });
}

/** Whether the caller's signal ended the operation; rethrows its reason if so. */
export function throwIfAborted(signal) {
  if (signal?.aborted) throw abortReason(signal);
}

export function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  return new DOMException('The operation was aborted.', 'AbortError');
}

/** Resolves after `ms`, or rejects with the abort reason as soon as the signal fires. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortReason(signal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
