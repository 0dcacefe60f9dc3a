// Following one session: its whole event log from the first event, then live events as they are
// stored. The client reconnects from the last delivered event by itself (docs/protocol.md §11.4);
// when it gives up (the server is down for a while), this keeps trying from the same event with a
// growing pause until the page moves on. When the history before the cursor is no longer retained
// (STALE_CURSOR), the view starts again from `session.read`: its transcript, then the events after
// its recovery cursor (§7).

import { AgentProtocolError } from './agent-client.js';

const MAX_PAUSE_MS = 10_000;
const MAX_SNAPSHOTS_IN_A_ROW = 3;

/** Whether trying again can help. */
export const retryable = (error) => !(error instanceof AgentProtocolError) || error.retryable;

/** The client's `after` option for resuming after `event`. */
const cursorOf = (event) => ({
  protocolVersion: 1,
  sessionId: event.sessionId,
  sequence: event.sequence,
  eventId: event.eventId,
});

/**
 * The cursor of a `session.read` recovery object, or undefined to replay from the first event.
 * Only the sequence travels on the wire; the event id behind a recovery cursor is not known, so
 * the cursor gets one that says where it came from.
 */
function recoveryCursor(sessionId, recovery) {
  const sequence = recovery?.lastEventSequence;
  if (!Number.isSafeInteger(sequence) || sequence < 1) return undefined;
  return { protocolVersion: 1, sessionId, sequence, eventId: `recovery-${sequence}` };
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

/**
 * Follows `sessionId`. Resolves 'closed' after `session.closed`, 'aborted' when `signal` fires;
 * rejects with a failure that retrying cannot fix.
 *
 * hooks.onEvent(event); hooks.onSnapshot(readData) before the events after its cursor;
 * hooks.onStatus({ state: 'connecting' | 'live' | 'reconnecting' | 'closed', after, attempt }).
 */
export async function followSession(client, sessionId, { signal, onEvent, onSnapshot, onStatus }) {
  let after;
  let failures = 0;
  let snapshots = 0;
  let stale = false;
  const onConnection = ({ status, after: from, attempt }) => {
    if (status === 'open') onStatus({ state: 'live', after: from });
    else if (status === 'reconnecting' || failures > 0) onStatus({ state: 'reconnecting', after: from, attempt: attempt + failures });
    else onStatus({ state: 'connecting', after: from });
  };
  for (;;) {
    if (signal.aborted) return 'aborted';
    try {
      if (stale) {
        const snapshot = await client.readSession(sessionId, { signal });
        after = recoveryCursor(sessionId, snapshot.recovery);
        stale = false;
        onSnapshot(snapshot);
      }
      for await (const event of client.events(sessionId, { after, signal, onConnection })) {
        after = cursorOf(event);
        failures = 0;
        snapshots = 0;
        onEvent(event);
      }
      onStatus({ state: 'closed', after: after?.sequence ?? 0 });
      return 'closed';
    } catch (error) {
      if (signal.aborted) return 'aborted';
      if (error?.code === 'STALE_CURSOR') {
        snapshots += 1;
        if (snapshots > MAX_SNAPSHOTS_IN_A_ROW) throw error;
        stale = true;
        continue;
      }
      if (!retryable(error)) throw error;
      failures += 1;
      onStatus({ state: 'reconnecting', after: after?.sequence ?? 0, attempt: failures });
      await pause(Math.min(MAX_PAUSE_MS, 1000 * failures), signal);
    }
  }
}
