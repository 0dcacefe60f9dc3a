"""An OTLP/HTTP trace receiver built on the OpenTelemetry project's own protobuf definitions
(the `opentelemetry-proto` package), so the tests check our export with a parser nobody here wrote.

Usage: receiver.py — listens on 127.0.0.1 (a free port), prints `listening http://127.0.0.1:PORT`,
then serves until killed:
  POST /v1/traces   an ExportTraceServiceRequest (application/x-protobuf); answers the protobuf
                    ExportTraceServiceResponse. Anything that does not decode is a 400.
  GET  /spans       every span received so far, as a JSON array: ids in lowercase hex, the
                    resource's service.name, kind and status code as numbers, attributes as OTLP
                    JSON values ({"stringValue": ...}).
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS = []
LOCK = threading.Lock()


def attributes(key_values):
    return [{"key": kv.key, "value": MessageToDict(kv.value)} for kv in key_values]


def flatten(request):
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: MessageToDict(kv.value) for kv in resource_spans.resource.attributes}
        service = resource.get("service.name", {}).get("stringValue", "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "service": service,
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "traceId": span.trace_id.hex(),
                        "spanId": span.span_id.hex(),
                        "parentSpanId": span.parent_span_id.hex(),
                        "traceState": span.trace_state,
                        "name": span.name,
                        "kind": span.kind,
                        "startTimeUnixNano": str(span.start_time_unix_nano),
                        "endTimeUnixNano": str(span.end_time_unix_nano),
                        "attributes": attributes(span.attributes),
                        "events": [MessageToDict(event) for event in span.events],
                        "status": {"code": span.status.code, "message": span.status.message},
                    }
                )
    return spans


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        try:
            if self.headers.get("Content-Type", "") != "application/x-protobuf":
                raise ValueError("content type " + self.headers.get("Content-Type", ""))
            request.ParseFromString(body)
        except Exception as error:  # a body that does not decode fails the export, loudly
            self.send_error(400, str(error))
            return
        with LOCK:
            SPANS.extend(flatten(request))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        if self.path != "/spans":
            self.send_error(404)
            return
        with LOCK:
            body = json.dumps(SPANS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
