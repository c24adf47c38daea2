#!/usr/bin/env python3
"""Writes the libFuzzer seed corpus, Tests/FuzzCorpus/<target>/, committed beside the tests.

One valid input per shape each target knows (a request of every service, a frame of every kind,
the tutorial's bodies, a PushSubscription, texts that need escaping); libFuzzer mutates from
there. Run it again when a message or frame kind is added (the proto seeds follow the order of
`FuzzTarget.requests` in Sources/herald-fuzz/Fuzz.swift).
"""
import importlib.util
import json
import pathlib
import shutil
import struct
import sys
import tempfile

from grpc_tools import protoc

root = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "Tests" / "python"))
from lean_client import REQUEST, MESSAGE, END, CANCEL, WINDOW, GOAWAY, ERROR  # noqa: E402

out = root / "Tests" / "FuzzCorpus"
# The seeds below are written over; the others stay: inputs a fuzzing session found and kept
# (regression-*) and seeds written by hand beside these.


def write(target, name, data):
    folder = out / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())


# proto: the selector byte, then a request of that type with its fields set.
gen = tempfile.mkdtemp(prefix="herald-seeds-")
protos = [str(p.relative_to(root / "proto")) for p in sorted((root / "proto").rglob("*.proto"))]
include = str(pathlib.Path(protoc.__file__).parent / "_proto")
if protoc.main(["protoc", f"-I{root / 'proto'}", f"-I{include}", f"--python_out={gen}", *protos]) != 0:
    sys.exit("protoc failed")


def module(path, name):
    spec = importlib.util.spec_from_file_location(name, f"{gen}/{path}")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


sys.path.insert(0, gen)
health = module("grpc/health/v1/health_pb2.py", "seed_health_pb2")
from herald.v1 import auth_pb2, dispatch_pb2, payload_pb2, registration_pb2  # noqa: E402

payload = dispatch_pb2.NativePayload(platform=1, body=b'{"aps":{"alert":"hi"}}', push_type="alert", priority=10,
                                     ttl_seconds=60, collapse_id="c")
requests = [
    health.HealthCheckRequest(service="herald.v1.AuthService"),
    auth_pb2.AuthenticateRequest(authorization="Basic YWxpY2U6YWxpY2U="),
    auth_pb2.IssueTokenRequest(authorization="Basic YWxpY2U6YWxpY2U="),
    auth_pb2.RevokeTokenRequest(token="hrd_abc"),
    auth_pb2.RevokeUserTokensRequest(user="alice"),
    auth_pb2.CreateUserRequest(user="alice", password="correct horse"),
    auth_pb2.SetPasswordRequest(user="alice", password="battery staple"),
    auth_pb2.DeleteUserRequest(user="alice"),
    auth_pb2.ListUsersRequest(),
    auth_pb2.UserExistsRequest(user="bob"),
    dispatch_pb2.SendRequest(target_user="bob", target_tag="news", payloads=[payload], sender="alice"),
    dispatch_pb2.ListDeliveriesRequest(notification_id="n-1", requester="alice", after_sequence=2, limit=5),
    dispatch_pb2.GetOutcomeRequest(notification_id="n-1", requester="alice"),
    dispatch_pb2.ListInboxRequest(after_sequence=3, limit=10, handle="h"),
    payload_pb2.StorePayloadRequest(recipient="bob", kind=2, content=b"\x89PNG", content_type="image/png",
                                    message="m", rich_type="img", ttl_seconds=60, sender="alice"),
    payload_pb2.FetchPayloadRequest(id=7, requester="bob"),
    payload_pb2.DeletePayloadRequest(id=7, recipient="bob"),
    registration_pb2.CreateRegistrationIdRequest(owner="alice", handle="h"),
    registration_pb2.UpsertRegistrationRequest(owner="alice", registration_id="r-1", platform=1, handle="ab" * 32,
                                               tags=["news", "sports"]),
    registration_pb2.DeleteRegistrationRequest(owner="alice", registration_id="r-1"),
    registration_pb2.ListRegistrationsRequest(owner="alice"),
    registration_pb2.StreamAudienceRequest(tag="news", platform=2),
    registration_pb2.RemoveHandleRequest(platform=1, handle="ab" * 32, invalid_since_unix_ms=1),
    registration_pb2.PutHubRegistrationRequest(
        hub="h", if_match=2, trusted=True,
        registration=registration_pb2.HubRegistration(
            registration_id="r1", platform=1, handle="ab" * 32, tags=["news"], is_template=True,
            body_template='{"aps":{"alert":"$(m)"}}', headers=[registration_pb2.HubRegistrationField(name="apns-priority", value="5")])),
    registration_pb2.GetHubRegistrationRequest(hub="h", registration_id="r1"),
    registration_pb2.DeleteHubRegistrationRequest(hub="h", registration_id="r1", if_match=1),
    registration_pb2.ListHubRegistrationsRequest(hub="h", tag="news", after="r0", limit=10),
]
for index, message in enumerate(requests):
    write("proto", f"{index:02d}-{type(message).__name__}", bytes([index]) + message.SerializeToString())
shutil.rmtree(gen)


# lean: one frame of each kind, and all of them in one stream.
def frame(kind, call, body=b""):
    return struct.pack(">IBBI", 6 + len(body), kind, 0, call) + body


def short(text):
    data = text.encode()
    return struct.pack(">H", len(data)) + data


head = struct.pack(">II", 5000, 256) + short("herald.v1.PayloadService/FetchPayload") + struct.pack(">H", 1)
head += short("x-request-id") + short("abc")
frames = {
    "request": frame(REQUEST, 7, head + b"\x08\x07\x12\x03bob"),
    "message": frame(MESSAGE, 7, b"\x01\x02\x03"),
    "end": frame(END, 7, b"\x05gone"),
    "cancel": frame(CANCEL, 9),
    "window": frame(WINDOW, 9, struct.pack(">I", 128)),
    "goaway": frame(GOAWAY, 0),
    "error": frame(ERROR, 0, b"\x03bad"),
}
for name, data in frames.items():
    write("lean", name, data)
write("lean", "stream", b"".join(frames.values()))

# json: the tutorial clients' bodies.
for name, body in {
    "ios": {"Platform": "apns", "Handle": "ab" * 32, "Tags": ["news"]},
    "android": {"platform": "fcm", "handle": "fcm-token", "tags": None},
    "browser": {"Platform": "browser", "Handle": {"endpoint": "https://fcm.googleapis.com/fcm/send/x",
                                                  "keys": {"p256dh": "B" * 87, "auth": "A" * 22}}},
}.items():
    write("json", name, json.dumps(body))
write("json", "message", json.dumps("Hello \"world\" <&>"))
write("json", "android-unescaped", '"He said "hi""')

# subscription: a valid PushSubscription (65-byte point, 16-byte secret, URL-safe base64).
import base64  # noqa: E402


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


write("subscription", "valid", json.dumps({"endpoint": "https://fcm.googleapis.com/fcm/send/abc",
                                           "keys": {"p256dh": b64(b"\x04" + b"\x01" * 64), "auth": b64(b"\x02" * 16)}}))

# payloads: texts that need escaping in JSON or XML.
for name, text in {"plain": "Hello", "quotes": 'Quote " backslash \\ less < amp & done', "unicode": "Grüße 🎉 \u2028",
                   "control": "tab\tnewline\nbell\x07", "xml": "]]> <![CDATA[ &amp; &#0;"}.items():
    write("payloads", name, text)
# template: an NH template body, NUL, the value every property gets.
for name, (body, value) in {
    "apns": ('{"aps":{"alert":"$(message)","badge":"#(count)"}}', "3"),
    "composite": ('{"aps":{"alert":"{\'Breaking: \' + .(title, 20) + \' \'\'x\'\'\'}"}}', 'a "long" <title> that is clipped'),
    "defaults": ('{"a":"$(missing:{fall\\\\}back})","b":"%(p)","c":["$(q, 3)",1,null]}', "é/?&"),
    "wns": ('<toast launch="$(p)"><visual><binding template="T"><text id="1">$(message)</text><!-- $(x) --></binding></visual></toast>',
            "<&>\"'"),
}.items():
    write("template", name, body.encode() + b"\0" + value.encode())

# sas: tokens as the SDKs write them, and the expiries that once trapped herald-auth.
sig = "dGVzdHNpZ25hdHVyZXRlc3RzaWduYXR1cmV0ZXN0c2lnbmE%3D"
for name, se in {"valid": "1700000600", "max": "9223372036854775807", "min": "-9223372036854775808",
                 "overflow": "99999999999999999999"}.items():
    write("sas", name, f"SharedAccessSignature sr=https%3A%2F%2Fns.example%2Fhub&sig={sig}&se={se}&skn=DefaultListenSharedAccessSignature")
write("sas", "go-order", f"SharedAccessSignature se=1700000600&sig={sig}&skn=DefaultFullSharedAccessSignature&sr=http%3a%2f%2fns.example")

# installation: a PUT body, NUL, a JSON-Patch, NUL, the value every template property gets.
token = "ab" * 32
put = json.dumps({"installationId": "dev-1", "platform": "apns", "pushChannel": token, "tags": ["news"],
                  "templates": {"tmpl": {"body": '{"aps":{"alert":"$(msg)"}}', "headers": {"apns-expiration": "$(exp)"},
                                         "tags": ["en"]}}})
for name, (patch, value) in {
    "body": ([{"op": "replace", "path": "/templates/tmpl/body", "value": '{"aps":{"alert":"$(msg"}}'}], "hi"),
    "expiration": ([{"op": "add", "path": "/templates/tmpl/headers", "value": {"apns-expiration": "-9223372036854775808"}}],
                   "-9223372036854775808"),
    "tags": ([{"op": "add", "path": "/tags", "value": '["a","b"]'}, {"op": "remove", "path": "/tags/news"}], "x"),
}.items():
    write("installation", name, put.encode() + b"\0" + json.dumps(patch).encode() + b"\0" + value.encode())

# nhheaders: NH send headers, one per line, NUL, the body.
for name, (headers, body) in {
    "apple": ("ServiceBusNotification-Format: apple\napns-priority: 5\napns-expiration: 253402300799\napns-collapse-id: c",
              '{"aps":{"alert":"x"}}'),
    "expiry": ("ServiceBusNotification-Format: apple\nServiceBusNotification-Apns-Expiry: 9999-12-31T23:59:59Z", "{}"),
    "windows": ("ServiceBusNotification-Format: windows\nX-WNS-Type: wns/raw\nX-WNS-TTL: 9223372036854775807", "raw"),
    "fcm": ("ServiceBusNotification-Format: fcmv1", '{"message":{"data":{"k":"v"}}}'),
}.items():
    write("nhheaders", name, headers.encode() + b"\0" + body.encode())

# batch: a Content-Type, NUL, the multipart body.
batch = ("--b\r\nContent-Type: application/json\r\nContent-Disposition: inline; name=notification\r\n\r\n"
         '{"aps":{"alert":"x"}}\r\n--b\r\nContent-Type: application/json\r\nContent-Disposition: inline; name="devices"\r\n\r\n'
         '["a1","b2"]\r\n--b--')
write("batch", "valid", b'multipart/mixed; boundary="b"\0' + batch.encode())
write("batch", "dashes", b"multipart/mixed; boundary=" + b"-" * 70 + b"\0" + b"-" * 4000)

# tagexpr: expressions over the four tags the target's devices carry.
for name, text in {"or": "a || b", "and": "a && !b", "nested": "(a || b) && !(c && d)", "bangs": "!" * 39 + "a",
                   "system": "$UserId:{u} || c"}.items():
    write("tagexpr", name, text)
# nhregistration: Atom entries as the .NET, JS and Java SDKs write them.
ns = ('xmlns:i="http://www.w3.org/2001/XMLSchema-instance" '
      'xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"')
def entry(kind, fields):
    return (f'<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><{kind} {ns}>{fields}'
            f'</{kind}></content></entry>')
for name, text in {
    "apple": entry("AppleRegistrationDescription", f'<RegistrationId i:nil="true"/><Tags>a,b</Tags><DeviceToken>{token}</DeviceToken>'),
    "apple-template": entry("AppleTemplateRegistrationDescription",
                            f'<Tags>news</Tags><PushVariables>{{"k":"v"}}</PushVariables><DeviceToken>{token}</DeviceToken>'
                            '<BodyTemplate><![CDATA[{"aps":{"alert":"$(m)"}}]]></BodyTemplate><TemplateName>t</TemplateName>'
                            '<Expiry>$(e)</Expiry><Priority>5</Priority><ApnsHeaders><ApnsHeader><Header>apns-push-type</Header>'
                            '<Value>alert</Value></ApnsHeader></ApnsHeaders>'),
    "fcm": '<?xml version="1.0" encoding="utf-8"?>' + entry("FcmV1RegistrationDescription", "<Tags>x</Tags><FcmV1RegistrationId>tok:en</FcmV1RegistrationId>"),
    "windows-template": entry("WindowsTemplateRegistrationDescription",
                              '<ChannelUri>https://db5.notify.windows.com/?token=A</ChannelUri><BodyTemplate><![CDATA[<toast>$(m)</toast>]]>'
                              '</BodyTemplate><WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader></WnsHeaders>'),
}.items():
    write("nhregistration", name, text)

# router: one HTTP request per route of the edge (Sources/herald-fuzz/RouterFuzz.swift), as text:
# "METHOD target", header lines, an empty line, the body. Credentials the fake services accept:
# any Basic or Bearer (alice), any SAS token (Listen, Send, Manage), the console session "s1" with
# its CSRF token. EdgeTests' FuzzSeedTests fails when a route of the router has no seed here.
import base64  # noqa: E402
import hashlib  # noqa: E402

basic = "Authorization: Basic YWxpY2U6YWxpY2U="
sas = ("Authorization: SharedAccessSignature sr=http%3a%2f%2flocalhost%2fapp1&sig=c2ln&se=4102444800"
       "&skn=DefaultFullSharedAccessSignature")
session = "s1"
csrf = base64.urlsafe_b64encode(hashlib.sha256(f"herald-console-csrf\0{session}".encode()).digest()).decode().rstrip("=")
console = f"Cookie: herald_session={session}"
form = "Content-Type: application/x-www-form-urlencoded"
xml = "Content-Type: application/atom+xml;type=entry;charset=utf-8"
jsonct = "Content-Type: application/json"
apple = entry("AppleRegistrationDescription", f"<Tags>a,b</Tags><DeviceToken>{token}</DeviceToken>")
installation = json.dumps({"installationId": "i1", "platform": "apns", "pushChannel": token, "tags": ["a"],
                           "templates": {"t": {"body": '{"aps":{"alert":"$(m)"}}', "tags": ["x"]}}})
routes = {
    "healthz": ("GET /healthz", [], ""),
    "readyz": ("GET /readyz", [], ""),
    "openapi": ("GET /openapi.json", [], ""),
    "metrics": ("GET /metrics", [], ""),
    "register-new": ("POST /api/register?handle=abc", [basic], ""),
    "register-put": ("PUT /api/register/r1", [basic, jsonct], json.dumps({"Platform": "apns", "Handle": token, "Tags": ["a"]})),
    "register-delete": ("DELETE /api/register/r1", [basic], ""),
    "notify": ("POST /api/notifications?pns=apns&to_tag=alice", [basic, jsonct], json.dumps("hello")),
    "notification-get": ("GET /api/notifications/7", [basic], ""),
    "v1-send": ("POST /v1/notifications?kind=rich&to_user=bob&message=hi&rich_type=img&ttl_seconds=60",
                [basic, "Content-Type: image/png"], "\x89PNG"),
    "v1-outcome": ("GET /v1/notifications/7/outcome", [basic], ""),
    "v1-failures": ("GET /v1/notifications/7/failures?limit=10&after=3", [basic], ""),
    "v1-token": ("POST /v1/auth/token", [basic], ""),
    "v1-token-delete": ("DELETE /v1/auth/token", ["Authorization: Bearer abc"], ""),
    "v1-audit": ("GET /v1/audit?hub=app1&after=3&limit=50", [basic], ""),
    "v1-audit-all": ("GET /v1/audit?after=99999999999999999999&limit=0", [basic], ""),
    "test-inbox": ("GET /v1/test/inbox?user=alice&limit=5", [], ""),
    "test-reset": ("POST /v1/test/reset", [], ""),
    "nh-registrationids": ("POST /app1/registrationIDs?api-version=2015-01", [sas], ""),
    "nh-registrationids-lower": ("POST /app1/registrationids?api-version=2015-01", [sas], ""),
    "nh-registration-create": ("POST /app1/registrations?api-version=2015-01", [sas, xml], apple),
    "nh-registration-create-upper": ("POST /app1/Registrations?api-version=2015-01", [sas, xml], apple),
    "nh-registration-put": ("PUT /app1/registrations/r1?api-version=2015-01", [sas, xml, 'If-Match: "*"'], apple),
    "nh-registration-put-upper": ("PUT /app1/Registrations/r1?api-version=2015-01", [sas, xml], apple),
    "nh-registration-get": ("GET /app1/registrations/r1?api-version=2015-01", [sas], ""),
    "nh-registration-get-upper": ("GET /app1/Registrations/r1?api-version=2015-01", [sas], ""),
    "nh-registration-delete": ("DELETE /app1/registrations/r1?api-version=2015-01", [sas, 'If-Match: *'], ""),
    "nh-registration-delete-upper": ("DELETE /app1/Registrations/r1?api-version=2015-01", [sas], ""),
    "nh-registrations-feed": ("GET /app1/registrations?api-version=2015-01&$top=2&ContinuationToken=r1~3", [sas], ""),
    "nh-registrations-feed-upper": ("GET /app1/Registrations?$filter=ChannelUri%20eq%20'abc'", [sas], ""),
    "nh-registrations-feed-wide": ("GET /app1/registrations?$filter=ChannelUri%20eq%20''&$top=-1", [sas], ""),
    "nh-tag-feed": ("GET /app1/tags/news/registrations?$top=1&ContinuationToken=zz~-9", [sas], ""),
    "nh-installation-put": ("PUT /app1/installations/i1?api-version=2015-01", [sas, jsonct], installation),
    "nh-installation-patch": ("PATCH /app1/installations/i1?api-version=2015-01", [sas, "Content-Type: application/json-patch+json"],
                              json.dumps([{"op": "add", "path": "/tags", "value": "b"},
                                          {"op": "replace", "path": "/templates/t/body", "value": "{}"}])),
    "nh-installation-get": ("GET /app1/installations/i1", [sas], ""),
    "nh-installation-delete": ("DELETE /app1/installations/i1", [sas], ""),
    "nh-installations": ("GET /app1/installations?tag=a&$top=5", [sas], ""),
    "nh-export": ("GET /app1/export?after=x", [sas], ""),
    "nh-user-delete": ("DELETE /app1/users/u1", [sas], ""),
    "nh-send": ("POST /app1/messages?direct&api-version=2015-01",
                [sas, "ServiceBusNotification-Format: apple", "ServiceBusNotification-Tags: a || b",
                 "ServiceBusNotification-DeviceHandle: " + token, "apns-priority: 10", jsonct],
                '{"aps":{"alert":"hi"}}'),
    "nh-send-template": ("POST /app1/messages", [sas, "ServiceBusNotification-Format: template", jsonct], '{"m":"hi"}'),
    "nh-batch": ("POST /app1/messages/$batch?direct", [sas, "ServiceBusNotification-Format: apple",
                                                       'Content-Type: multipart/mixed; boundary="b"'], batch),
    "nh-message": ("GET /app1/messages/7", [sas], ""),
    "nh-message-failures": ("GET /app1/messages/7/failures?$top=3", [sas], ""),
    "nh-scheduled": ("POST /app1/schedulednotifications", [sas, "ServiceBusNotification-Format: gcm",
                                                           "ServiceBusNotification-ScheduleTime: 2030-01-01T00:00:00Z", jsonct],
                     '{"message":{"notification":{"title":"x"}}}'),
    "nh-scheduled-delete": ("DELETE /app1/schedulednotifications/7", [sas], ""),
    "console": ("GET /console", [], ""),
    "console-css": ("GET /console/assets/console.css", [], ""),
    "console-js": ("GET /console/assets/console.js", [], ""),
    "console-login-page": ("GET /console/login?expired=1", [], ""),
    "console-login": ("POST /console/login", [form, "Cookie: herald_signin=n1"], "user=a b&password=c d&_csrf=n1"),
    "console-logout": ("POST /console/logout", [console, form], f"_csrf={csrf}"),
    "console-hubs": ("GET /console/hubs", [console], ""),
    "console-hub-create": ("POST /console/hubs", [console, form], f"_csrf={csrf}&name=app2"),
    "console-hub": ("GET /console/hubs/app1", [console], ""),
    "console-devices": ("GET /console/hubs/app1/devices?tag=a<b>&user=\"x\"&after=3", [console], ""),
    "console-send-form": ("GET /console/hubs/app1/send", [console], ""),
    "console-send": ("POST /console/hubs/app1/send", [console, form],
                     f"_csrf={csrf}&message=hi%20there&user=bob&tag=&handle=&platform=apns"),
    "console-send-preview": ("POST /console/hubs/app1/send", [console, form],
                             f"_csrf={csrf}&target=tag&tag=news&kind=template&platform=apns&text=1&action=preview"),
    "console-sends": ("GET /console/hubs/app1/sends?before=9", [console], ""),
    "console-hub-send": ("GET /console/hubs/app1/sends/7", [console], ""),
    "console-inbox": ("GET /console/inbox?user=alice", [console], ""),
    "console-send-detail": ("GET /console/sends/7", [console], ""),
}
for name, (line, headers, body) in routes.items():
    write("router", name, "\r\n".join([line, *headers, "", body]))

# The console's multipart forms (credentials, test send), as a browser posts them: the CSRF token
# in the action's query and in the body; and part headers with bytes of 0x80 and more, on the
# sign-in (refused before any parse) and on a signed-in upload.
def multipart(parts, boundary="XyZ"):
    body = b""
    for headers, content in parts:
        body += b"--" + boundary.encode() + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + content + b"\r\n"
    return body + b"--" + boundary.encode() + b"--\r\n"
def disposition(name, filename=None):
    return b'Content-Disposition: form-data; name="' + name + b'"' + (b'; filename="' + filename + b'"' if filename else b"")
upload = multipart([
    ([disposition(b"_csrf")], csrf.encode()),
    ([disposition(b"vapid-key", b"vapid.pem"), b"Content-Type: application/x-pem-file"],
     b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----"),
    ([disposition(b"subject")], b"mailto:ops@example.com"),
])
multipart_ct = "Content-Type: multipart/form-data; boundary=XyZ"
def request(line, headers, body):
    return "\r\n".join([line, *headers, "", ""]).encode() + body
write("router", "console-credentials-upload",
      request(f"POST /console/hubs/app1/credentials/browser?_csrf={csrf}", [console, multipart_ct], upload))
write("router", "console-send-upload", request(f"POST /console/hubs/app1/send?_csrf={csrf}", [console, multipart_ct], multipart([
    ([disposition(b"_csrf")], csrf.encode()), ([disposition(b"kind")], b"rich"), ([disposition(b"user")], b"bob"),
    ([disposition(b"file", b"a.png"), b"Content-Type: image/png"], b"\x89PNG\r\n\x1a\n"),
])))
write("router", "console-login-multipart", request("POST /console/login", ["Content-Type: multipart/form-data; boundary=B", "Cookie: herald_signin=n1"],
                                                  multipart([([b"\xc3\xa9: x"], b"v")], boundary="B")))
write("router", "console-upload-high-bytes", request(f"POST /console/hubs/app1/credentials/apns?_csrf={csrf}", [console, multipart_ct], multipart([
    ([b"\xff\xfe: x"], b"v"), ([disposition(b"\xc3\xa9\xff")], b"w"), ([disposition(b"_csrf")], csrf.encode()),
])))

print(f"wrote {sum(1 for _ in out.rglob('*') if _.is_file())} seeds under {out.relative_to(root)}")
