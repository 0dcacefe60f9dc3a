"""The Python client across a move (cli/tests/bundle/clients.rs): `before` runs a turn on the
source and prints where it stopped; `after`, on the new deployment, retries that turn's command
with its command id and follows the session from the cursor it kept through a new turn."""

import json
import sys
import time

from agent_runtime_client import AgentClient

phase, base_url, token = sys.argv[1:4]


def until_result(events, request_id):
    seen = []
    for event in events:
        seen.append(event)
        if event.type == "session.stream" and event.data.get("type") == "result" and event.request_id == request_id:
            events.close()
            return seen
    raise RuntimeError("the stream ended before the result")


with AgentClient(
    base_url, {"name": "move-test-py", "version": "1"}, headers={"authorization": f"Bearer {token}"}
) as client:
    if phase == "before":
        session = client.create_session()
        command_id = f"py-before-{time.time_ns()}"
        submitted = client.submit_input(session.session_id, "demo:deltas=3 before the move", command_id=command_id)
        seen = until_result(session.events(), submitted.request_id)
        last = seen[-1]
        cursor = {"protocolVersion": 1, "sessionId": last.session_id, "sequence": last.sequence, "eventId": last.event_id}
        print(json.dumps({"sessionId": session.session_id, "cursor": cursor, "commandId": command_id,
                          "submitted": {"inputId": submitted.input_id, "requestId": submitted.request_id}}))
    else:
        kept = json.loads(sys.argv[4])
        replayed = client.submit_input(kept["sessionId"], "demo:deltas=3 before the move", command_id=kept["commandId"])
        following = client.submit_input(kept["sessionId"], "demo:deltas=2 after the move")
        seen = until_result(client.events(kept["sessionId"], after=kept["cursor"]), following.request_id)
        print(json.dumps({"replayed": {"inputId": replayed.input_id, "requestId": replayed.request_id},
                          "sequences": [event.sequence for event in seen]}))
