// The browser client across a move (cli/tests/bundle/clients.rs): `before` runs a turn on the
// source and prints where it stopped; `after`, on the new deployment, retries that turn's command
// with its commandId and follows the session from the cursor it kept through a new turn.
import { AgentClient } from '../../../clients/js/src/agent-client.js';

const [phase, baseUrl, token, state] = process.argv.slice(2);
const client = new AgentClient({
  baseUrl,
  client: { name: 'move-test-js', version: '1' },
  headers: () => ({ authorization: `Bearer ${token}` }),
});

async function untilResult(events, requestId) {
  const seen = [];
  for await (const event of events) {
    seen.push(event);
    if (event.type === 'session.stream' && event.data.type === 'result' && event.requestId === requestId) return seen;
  }
  throw new Error('the stream ended before the result');
}

if (phase === 'before') {
  const session = await client.createSession();
  const commandId = `js-before-${Date.now()}`;
  const submitted = await session.send('demo:deltas=3 before the move', { commandId });
  const seen = await untilResult(session.events(), submitted.requestId);
  const last = seen.at(-1);
  const cursor = { protocolVersion: 1, sessionId: last.sessionId, sequence: last.sequence, eventId: last.eventId };
  console.log(JSON.stringify({ sessionId: session.sessionId, cursor, commandId, submitted }));
} else {
  const kept = JSON.parse(state);
  const replayed = await client.submitInput(kept.sessionId, 'demo:deltas=3 before the move', { commandId: kept.commandId });
  const next = await client.submitInput(kept.sessionId, 'demo:deltas=2 after the move');
  const seen = await untilResult(client.events(kept.sessionId, { after: kept.cursor }), next.requestId);
  console.log(JSON.stringify({ replayed, sequences: seen.map((event) => event.sequence) }));
}
