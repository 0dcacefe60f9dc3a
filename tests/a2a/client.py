"""The official A2A client (PyPI `a2a-sdk`, unmodified) against the server: it fetches the agent
card and the extended card, sends and streams messages, gets and cancels tasks, subscribes
again after a dropped stream (continuing exactly after the last update it kept, with our
event-sequence extension, and from the task snapshot without it), answers an input-required
approval, and retries a message that must run once.

Usage: python3 client.py BASE_URL TOKEN [TOOL]   (BASE_URL like http://127.0.0.1:8080, where the
card is; TOOL: a tool of the tenant's profile that the extended card must list as a skill)
"""

import asyncio
import sys
from uuid import uuid4

import httpx
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError

EXTENSION = "urn:agent-runtime:a2a:event-sequence:v1"


def message(text, context_id="", task_id="", message_id=None):
    return SendMessageRequest(
        message=Message(
            role=Role.ROLE_USER,
            message_id=message_id or uuid4().hex,
            context_id=context_id,
            task_id=task_id,
            parts=[Part(text=text)],
        )
    )


def texts(events):
    return "".join(
        part.text
        for event in events
        if event.WhichOneof("payload") == "artifact_update"
        for part in event.artifact_update.artifact.parts
    )


def cursor_of(event):
    kind = event.WhichOneof("payload")
    inner = getattr(event, kind)
    return inner.metadata[EXTENSION]["cursor"]


def state(event):
    return TaskState.Name(event.status_update.status.state)


async def collect(stream):
    return [event async for event in stream]


async def main(base, token, tool=None):
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        assert card.capabilities.streaming
        assert [e.uri for e in card.capabilities.extensions] == [EXTENSION]
        assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
        assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)

        extended = await streaming.get_extended_agent_card(GetExtendedAgentCardRequest())
        skills = [skill.id for skill in extended.skills]
        assert "agent-session" in skills, skills
        assert tool is None or tool in skills, skills
        assert tool is None or tool not in [skill.id for skill in card.skills], "the public card names no tool"

        # SendMessage, blocking: the finished task, its answer and its history.
        [reply] = await collect(blocking.send_message(message("demo:deltas=3 blocking")))
        task = reply.task
        assert TaskState.Name(task.status.state) == "TASK_STATE_COMPLETED", task
        assert task.artifacts[0].parts[0].text == "delta-1 delta-2 delta-3 "
        roles = [Role.Name(m.role) for m in task.history]
        assert roles == ["ROLE_USER", "ROLE_AGENT"], roles
        got = await streaming.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert got.status.state == task.status.state and len(got.history) == 1

        # SendStreamingMessage: the task first, then its updates, to its end.
        events = await collect(streaming.send_message(message("demo:deltas=4 streamed")))
        assert events[0].WhichOneof("payload") == "task"
        assert texts(events) == "delta-1 delta-2 delta-3 delta-4 "
        assert state(events[-1]) == "TASK_STATE_COMPLETED"
        context_id = events[0].task.context_id

        # A retried message (same messageId) runs once and answers the same task.
        retry_id = uuid4().hex
        [first] = await collect(blocking.send_message(message("demo:deltas=2 once", context_id, message_id=retry_id)))
        [again] = await collect(blocking.send_message(message("demo:deltas=2 once", context_id, message_id=retry_id)))
        assert first.task.id == again.task.id
        assert again.task.artifacts[0].parts[0].text == "delta-1 delta-2 "

        # A stream dropped mid-task, then subscribed again after the last update kept: after a
        # status update (which the same event's first answer chunk follows), and after chunks.
        expected = "".join(f"delta-{n} " for n in range(1, 21))
        for keep in (2, 3, 6):
            stream = streaming.send_message(
                message(f"demo:deltas=20 demo:interval=20 drop after {keep}"),
                context=ClientCallContext(service_parameters={"A2A-Extensions": EXTENSION}),
            )
            kept = []
            async for event in stream:
                kept.append(event)
                if len(kept) == keep:
                    break
            await stream.aclose()
            task_id = kept[0].task.id
            last = cursor_of(kept[-1])
            resumed = await collect(
                streaming.subscribe(
                    SubscribeToTaskRequest(id=task_id),
                    context=ClientCallContext(
                        service_parameters={"A2A-Extensions": EXTENSION, "Last-Event-ID": last}
                    ),
                )
            )
            assert resumed[0].WhichOneof("payload") == "task"
            assert texts(kept) + texts(resumed) == expected, f"no update lost or repeated ({keep})"
            states = [state(e) for e in kept[1:] + resumed[1:] if e.WhichOneof("payload") == "status_update"]
            assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], states
        # An ended task cannot be subscribed to, nor canceled once completed.
        for call in (
            lambda: collect(streaming.subscribe(SubscribeToTaskRequest(id=task_id))),
            lambda: streaming.cancel_task(CancelTaskRequest(id=task_id)),
        ):
            try:
                await call()
                raise AssertionError("an ended task was accepted")
            except (UnsupportedOperationError, TaskNotCancelableError):
                pass

        # Without the extension, a new subscription starts from the task as it is.
        stream = streaming.send_message(message("demo:deltas=30 demo:interval=25 again"))
        head = []
        async for event in stream:
            head.append(event)
            if len(head) == 4:
                break
        await stream.aclose()
        snapshot_then_rest = await collect(streaming.subscribe(SubscribeToTaskRequest(id=head[0].task.id)))
        snapshot = snapshot_then_rest[0].task
        so_far = snapshot.artifacts[0].parts[0].text if snapshot.artifacts else ""
        assert so_far + texts(snapshot_then_rest[1:]) == "".join(f"delta-{n} " for n in range(1, 31))

        # CancelTask is request.abort; canceling again answers the canceled task.
        stream = streaming.send_message(message("demo:slow cancel me"))
        async for event in stream:
            if event.WhichOneof("payload") == "artifact_update":
                break
        await stream.aclose()
        slow_id = event.artifact_update.task_id
        canceled = await streaming.cancel_task(CancelTaskRequest(id=slow_id))
        assert TaskState.Name(canceled.status.state) == "TASK_STATE_CANCELED", canceled
        again = await streaming.cancel_task(CancelTaskRequest(id=slow_id))
        assert again.status.state == canceled.status.state

        # An approval: the task waits in input-required; the next message answers it.
        events = await collect(streaming.send_message(message("needs approval")))
        assert state(events[-1]) == "TASK_STATE_INPUT_REQUIRED"
        asked = events[-1].status_update.status.message
        assert "demo_approval" in asked.parts[0].text
        waiting = events[0].task
        answer = message("yes", waiting.context_id, waiting.id)
        [done] = await collect(blocking.send_message(answer))
        assert TaskState.Name(done.task.status.state) == "TASK_STATE_COMPLETED"
        assert "approved" in done.task.artifacts[0].parts[0].text

        # Unknown tasks are not found.
        try:
            await streaming.get_task(GetTaskRequest(id="nobody~nothing"))
            raise AssertionError("an unknown task was found")
        except TaskNotFoundError:
            pass
        await streaming.close()
        await blocking.close()
    print("ok")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
