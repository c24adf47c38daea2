"""Provisions a hub only through Herald's HTTP management API (/v1/hubs), then sends
through it with PyPI's azure-notification-hub-unofficial, as a platform team's tooling would:
the hub with a quota, a Send-only key for the backend, APNs credentials; an installation and a
send with the NH client; the hub's limits read back. Prints what happened as JSON; the Swift test
checks what reached the APNs double.

Usage: nh_provision_check.py EDGE_URL USER:PASSWORD APNS_KEY_FILE KEY_ID TEAM_ID TOPIC APNS_URL APNS_TOKEN
(APNS_URL, a test double's address, is taken only by an edge in test-mode.)
"""
import base64
import json
import sys
import time
import urllib.error
import urllib.request

from azure_notification_hub import NotificationHubsClient, create_apple_notification

edge, basic, key_file, key_id, team_id, topic, apns_url, apns_token = sys.argv[1:9]
AUTH = "Basic " + base64.b64encode(basic.encode()).decode()
HUB = "provisioned"
out = {}


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(edge.rstrip("/") + path, data=data, method=method,
                                     headers={"Authorization": AUTH, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def http(connection_string):
    # The answers name the edge as sb://host/; this stack serves plain HTTP.
    return connection_string.replace("Endpoint=sb://", "Endpoint=http://")


status, headers, hub = call("POST", "/v1/hubs", {"name": HUB, "limits": {"pushesPerMonth": 100}})
assert status == 201, (status, hub)
full = next(k for k in hub["keys"] if k["name"] == "DefaultFullSharedAccessSignature")
out["created"] = {"location": headers.get("Location"), "cache": headers.get("Cache-Control"),
                  "secret_shown": bool(full.get("primaryKey"))}
status, _, again = call("GET", "/v1/hubs/" + HUB)
out["secret_read_back"] = "primaryKey" in json.dumps(again)

status, _, backend_key = call("PUT", f"/v1/hubs/{HUB}/keys/Backend", {"rights": ["Send"]})
assert status == 201, (status, backend_key)
with open(key_file) as f:
    pem = f.read()
status, _, credentials = call("PUT", f"/v1/hubs/{HUB}/credentials/apns",
                              {"key": pem, "keyId": key_id, "teamId": team_id, "topic": topic, "url": apns_url})
assert status == 200, (status, credentials)
out["apns_source"] = next(p["source"] for p in credentials["platforms"] if p["platform"] == "apns")
out["credentials_leak"] = "PRIVATE KEY" in json.dumps(credentials)

# The device side registers with the Full key (an app backend would use Listen); the backend
# sends with its Send-only key.
devices = NotificationHubsClient(http(full["primaryConnectionString"]), HUB)
devices.create_or_update_installation({"installationId": "prov-1", "platform": "apns", "pushChannel": apns_token,
                                       "tags": ["provisioned"]})
sender = NotificationHubsClient(http(backend_key["primaryConnectionString"]), HUB)
out["send"] = sender.send_notification(create_apple_notification({"aps": {"alert": "provisioned"}}),
                                       tag_expression="provisioned")

# The push is counted against the quota when the send is committed.
deadline = time.monotonic() + 20
while True:
    status, _, limits = call("GET", f"/v1/hubs/{HUB}/limits")
    if limits.get("pushesThisMonth") == 1 or time.monotonic() > deadline:
        break
    time.sleep(0.05)
out["limits"] = limits
print(json.dumps(out))
