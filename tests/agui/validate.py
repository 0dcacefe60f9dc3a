"""Validates every AG-UI event the official client received (client.mjs's output) against the
AG-UI project's own Python models (PyPI `ag-ui-protocol`, the 1.0 schema): each must parse as
the event its `type` names, and dump back to the same JSON (nothing dropped, no nulls).
Usage: python3 validate.py EVENTS.json"""

import json
import sys

from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)


def main(path):
    scenarios = json.load(open(path))
    count = 0
    for name, events in scenarios.items():
        assert events, f"{name}: no events"
        for event in events:
            parsed = EVENT.validate_python(event)
            again = json.loads(parsed.model_dump_json(by_alias=True, exclude_none=True))
            assert again == event, f"{name}: {event} reads back as {again}"
            count += 1
    print(f"{count} events valid")


if __name__ == "__main__":
    main(sys.argv[1])
