"""An OTLP/gRPC trace receiver for TracingTests, built on the OpenTelemetry project's own classes
(PyPI opentelemetry-proto) and grpcio: whatever Herald's exporter sends must decode here.

    python3 otlp_receiver.py PORT_FILE SPANS_FILE

Listens on 127.0.0.1 (a free port, written to PORT_FILE once serving), and appends each span it
receives to SPANS_FILE as one JSON object per line. Runs until terminated (SIGTERM).
"""

import json
import os
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind is None:
        return None
    return getattr(any_value, kind)


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def Export(self, request, context):
        lines = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "service": resource.get("service.name"),
                        "scope": scope_spans.scope.name,
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": {kv.key: value(kv.value) for kv in span.attributes},
                        "status": span.status.code,
                        "links": [link.span_id.hex() for link in span.links],
                        "metadata": {k: v for k, v in context.invocation_metadata() if k == "x-test-header"},
                    }))
        with self.lock, open(self.path, "a") as out:
            for line in lines:
                out.write(line + "\n")
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    port_file, spans_file = sys.argv[1], sys.argv[2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(spans_file), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(port_file + ".tmp", "w") as out:
        out.write(str(port))
    os.rename(port_file + ".tmp", port_file)
    # SIGTERM's default action ends the process: every span received is already in SPANS_FILE.
    server.wait_for_termination()

if __name__ == "__main__":
    main()
