#!/usr/bin/env python3
"""Calls every Herald service with Python grpcio, an implementation independent of Herald's own.

Stubs are generated from proto/ by grpcio-tools into a temporary folder, so this checks the .proto
contract as well as the servers. Usage: grpc_check.py RUNTIME_DIR PROTO_DIR. Prints one JSON object
with what each call answered; exits 1 when a call fails unexpectedly. The Swift integration test runs
it against a live stack and checks the answers.
"""
import atexit
import base64
import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_tools import protoc


def generate(proto_dir, out_dir):
    protos = [str(p.relative_to(proto_dir)) for p in sorted(Path(proto_dir).rglob("*.proto"))]
    include = str(Path(protoc.__file__).parent / "_proto")
    code = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out_dir}",
                        f"--grpc_python_out={out_dir}", *protos])
    if code != 0:
        sys.exit(f"protoc failed with {code}")
    sys.path.insert(0, out_dir)


def main():
    runtime_dir, proto_dir = sys.argv[1], sys.argv[2]
    out = tempfile.mkdtemp(prefix="herald-py-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    generate(proto_dir, out)
    # The generated grpc/health/v1 package would shadow grpcio's own "grpc" package: load the
    # message module from its file and call Check through a plain channel method.
    spec = importlib.util.spec_from_file_location("herald_health_pb2", f"{out}/grpc/health/v1/health_pb2.py")
    health_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health_pb2)
    auth_pb2 = importlib.import_module("herald.v1.auth_pb2")
    auth_grpc = importlib.import_module("herald.v1.auth_pb2_grpc")
    common_pb2 = importlib.import_module("herald.v1.common_pb2")
    reg_pb2 = importlib.import_module("herald.v1.registration_pb2")
    reg_grpc = importlib.import_module("herald.v1.registration_pb2_grpc")
    payload_pb2 = importlib.import_module("herald.v1.payload_pb2")
    payload_grpc = importlib.import_module("herald.v1.payload_pb2_grpc")
    dispatch_pb2 = importlib.import_module("herald.v1.dispatch_pb2")
    dispatch_grpc = importlib.import_module("herald.v1.dispatch_pb2_grpc")

    def channel(service):
        return grpc.insecure_channel(f"unix:{runtime_dir}/{service}.grpc.sock")

    result = {"health": {}}
    for service in ["auth", "registration", "payload", "dispatch"]:
        with channel(service) as ch:
            check = ch.unary_unary("/grpc.health.v1.Health/Check",
                                   request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                   response_deserializer=health_pb2.HealthCheckResponse.FromString)
            answer = check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            result["health"][service] = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)

    with channel("auth") as ch:
        stub = auth_grpc.AuthServiceStub(ch)
        header = "Basic " + base64.b64encode(b"carol:carol").decode()
        result["authenticate"] = stub.Authenticate(auth_pb2.AuthenticateRequest(authorization=header), timeout=5).user
        try:
            stub.Authenticate(auth_pb2.AuthenticateRequest(authorization="Basic !!!"), timeout=5)
            result["authenticate_bad"] = "OK"
        except grpc.RpcError as e:
            result["authenticate_bad"] = e.code().name
        # Account management and tokens are plain RPCs too.
        stub.CreateUser(auth_pb2.CreateUserRequest(user="py-user", password="py-password-1"), timeout=30)
        try:
            stub.CreateUser(auth_pb2.CreateUserRequest(user="py-user", password="py-password-1"), timeout=30)
            result["create_user_again"] = "OK"
        except grpc.RpcError as e:
            result["create_user_again"] = e.code().name
        result["users"] = [u.name for u in stub.ListUsers(auth_pb2.ListUsersRequest(), timeout=5).users]
        issued = stub.IssueToken(auth_pb2.IssueTokenRequest(authorization=header), timeout=30)
        result["bearer"] = stub.Authenticate(
            auth_pb2.AuthenticateRequest(authorization="Bearer " + issued.token), timeout=5).scheme

    with channel("registration") as ch:
        stub = reg_grpc.RegistrationServiceStub(ch)
        rid = stub.CreateRegistrationId(reg_pb2.CreateRegistrationIdRequest(owner="carol"), timeout=5).registration_id
        stub.UpsertRegistration(reg_pb2.UpsertRegistrationRequest(
            owner="carol", registration_id=rid, platform=common_pb2.PLATFORM_FCM, handle="fcm-token-1",
            tags=["sports"]), timeout=5)
        listed = stub.ListRegistrations(reg_pb2.ListRegistrationsRequest(owner="carol"), timeout=5)
        result["registrations"] = [
            {"id": r.registration_id, "platform": common_pb2.Platform.Name(r.platform), "tags": sorted(r.tags)}
            for r in listed.registrations]
        audience = [r.registration_id for batch in
                    stub.StreamAudience(reg_pb2.StreamAudienceRequest(tag="sports"), timeout=5)
                    for r in batch.registrations]
        result["audience"] = audience
        devices = stub.ListDevices(reg_pb2.ListDevicesRequest(user="carol", tag="sports", handle_prefix="fcm-", scope=common_pb2.READ_SCOPE_HUB), timeout=5)
        result["devices"] = [sorted(d.tags) for d in devices.devices]
        try:
            stub.ListDevices(reg_pb2.ListDevicesRequest(tag="a &&", scope=common_pb2.READ_SCOPE_HUB), timeout=5)
            result["devices_bad_tag"] = "OK"
        except grpc.RpcError as e:
            result["devices_bad_tag"] = e.code().name
        try:
            stub.UpsertRegistration(reg_pb2.UpsertRegistrationRequest(
                owner="mallory", registration_id=rid, platform=common_pb2.PLATFORM_FCM, handle="x"), timeout=5)
            result["upsert_foreign"] = "OK"
        except grpc.RpcError as e:
            result["upsert_foreign"] = e.code().name

    with channel("payload") as ch:
        stub = payload_grpc.PayloadServiceStub(ch)
        stored = stub.StorePayload(payload_pb2.StorePayloadRequest(
            recipient="carol", kind=payload_pb2.PAYLOAD_KIND_SECURE, content=b"from python"), timeout=5)
        fetched = stub.FetchPayload(payload_pb2.FetchPayloadRequest(id=stored.id, requester="carol"), timeout=5)
        result["payload"] = {"content": fetched.content.decode(), "read": fetched.read}
        try:
            stub.FetchPayload(payload_pb2.FetchPayloadRequest(id=stored.id, requester="mallory"), timeout=5)
            result["payload_foreign"] = "OK"
        except grpc.RpcError as e:
            result["payload_foreign"] = e.code().name

    with channel("dispatch") as ch:
        stub = dispatch_grpc.DispatchServiceStub(ch)
        sent = stub.Send(dispatch_pb2.SendRequest(target_user="carol", payloads=[dispatch_pb2.NativePayload(
            platform=common_pb2.PLATFORM_FCM, body=b'{"data":{"hello":"python"}}')]), timeout=10)
        result["send_state"] = dispatch_pb2.OutcomeState.Name(sent.outcome.state)
        # A read of one send names whose it is, or says it is an operator's (READ_SCOPE_ALL).
        try:
            stub.GetOutcome(dispatch_pb2.GetOutcomeRequest(notification_id=sent.outcome.notification_id), timeout=5)
            result["outcome_unscoped"] = "OK"
        except grpc.RpcError as e:
            result["outcome_unscoped"] = e.code().name
        # Send commits the outbox and returns; delivery follows. Poll the outcome with a deadline.
        deadline = time.monotonic() + 10
        while True:
            outcome = stub.GetOutcome(dispatch_pb2.GetOutcomeRequest(
                notification_id=sent.outcome.notification_id, scope=common_pb2.READ_SCOPE_ALL), timeout=5)
            if outcome.state == dispatch_pb2.OUTCOME_STATE_COMPLETED or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        result["final_state"] = dispatch_pb2.OutcomeState.Name(outcome.state)
        result["delivered"] = sum(p.success for p in outcome.platforms)
        inbox = stub.ListInbox(dispatch_pb2.ListInboxRequest(limit=1000), timeout=5)
        result["inbox_payloads"] = [e.payload.decode() for e in inbox.entries if e.handle == "fcm-token-1"]
        # The console's reads.
        sends = stub.ListSends(dispatch_pb2.ListSendsRequest(limit=5, scope=common_pb2.READ_SCOPE_HUB), timeout=5)
        result["sends"] = [s.notification_id == sent.outcome.notification_id for s in sends.sends]
        stats = stub.SendStats(dispatch_pb2.SendStatsRequest(minutes=60, scope=common_pb2.READ_SCOPE_HUB), timeout=5)
        result["stats_delivered"] = sum(m.delivered for m in stats.minutes)
        queue = stub.GetHubQueue(dispatch_pb2.GetHubQueueRequest(hub="default", scope=common_pb2.READ_SCOPE_HUB), timeout=5)
        result["queue_pending"] = queue.pending
        try:
            stub.GetHubQueue(dispatch_pb2.GetHubQueueRequest(hub="default"), timeout=5)
            result["queue_unscoped"] = "OK"
        except grpc.RpcError as e:
            result["queue_unscoped"] = e.code().name
        # A hub-wide read without READ_SCOPE_HUB is refused by the service that holds the data.
        try:
            stub.ListSends(dispatch_pb2.ListSendsRequest(limit=5), timeout=5)
            result["sends_unscoped"] = "OK"
        except grpc.RpcError as e:
            result["sends_unscoped"] = e.code().name
        newest = stub.ListInbox(dispatch_pb2.ListInboxRequest(limit=1, newest_first=True), timeout=5)
        result["inbox_newest"] = newest.entries[0].sequence == max(e.sequence for e in inbox.entries)
        try:
            stub.Send(dispatch_pb2.SendRequest(), timeout=5)
            result["send_empty"] = "OK"
        except grpc.RpcError as e:
            result["send_empty"] = e.code().name

    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
