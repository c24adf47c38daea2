#!/usr/bin/env python3
"""Calls Herald's services over the lean protocol with lean_client.py. Usage: lean_check.py RUNTIME_DIR
PROTO_DIR. Message classes are generated from proto/ (python_out only: the stock protobuf runtime
is all they need). Prints one JSON object with the answers."""
import atexit
import base64
import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

sys.path.insert(0, str(Path(__file__).parent))
from lean_client import LeanClient, LeanError  # noqa: E402


def main():
    runtime_dir, proto_dir = sys.argv[1], sys.argv[2]
    out = tempfile.mkdtemp(prefix="herald-lean-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    protos = [str(p.relative_to(proto_dir)) for p in sorted(Path(proto_dir).rglob("*.proto"))]
    if protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out}", *protos]) != 0:
        sys.exit("protoc failed")
    sys.path.insert(0, out)
    auth_pb2 = importlib.import_module("herald.v1.auth_pb2")
    payload_pb2 = importlib.import_module("herald.v1.payload_pb2")
    spec = importlib.util.spec_from_file_location("herald_health_pb2", f"{out}/grpc/health/v1/health_pb2.py")
    health_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health_pb2)

    result = {"health": {}}
    for service in ["auth", "registration", "payload", "dispatch"]:
        client = LeanClient(f"{runtime_dir}/{service}.sock")
        answer = client.call("grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest(), health_pb2.HealthCheckResponse)
        result["health"][service] = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        client.close()

    client = LeanClient(f"{runtime_dir}/auth.sock")
    header = "Basic " + base64.b64encode(b"gus:gus").decode()
    answer = client.call("herald.v1.AuthService/Authenticate", auth_pb2.AuthenticateRequest(authorization=header),
                         auth_pb2.AuthenticateResponse, metadata=[("x-request-id", "python-lean-1")])
    result["authenticate"] = answer.user
    try:
        client.call("herald.v1.AuthService/Authenticate", auth_pb2.AuthenticateRequest(authorization="Basic x"),
                    auth_pb2.AuthenticateResponse)
    except LeanError as e:
        result["authenticate_bad"] = e.name
    try:
        client.call("herald.v1.AuthService/Nope", auth_pb2.AuthenticateRequest(), auth_pb2.AuthenticateResponse)
    except LeanError as e:
        result["unknown_method"] = e.name
    client.close()

    client = LeanClient(f"{runtime_dir}/payload.sock")
    stored = client.call("herald.v1.PayloadService/StorePayload", payload_pb2.StorePayloadRequest(
        recipient="gus", kind=payload_pb2.PAYLOAD_KIND_SECURE, content=b"over lean"), payload_pb2.StorePayloadResponse)
    fetched = client.call("herald.v1.PayloadService/FetchPayload", payload_pb2.FetchPayloadRequest(
        id=stored.id, requester="gus"), payload_pb2.FetchPayloadResponse)
    result["payload"] = fetched.content.decode()
    client.close()
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
