"""Drives Herald's Notification Hubs API with PyPI's azure-notification-hub-unofficial (a port of
NH's JS SDK that no one here wrote), over plain HTTP on loopback, and prints what happened as JSON.

Usage: nh_installations_check.py HUB FULL_CONNECTION_STRING LISTEN_CONNECTION_STRING
The connection strings are `herald hubs keys` output with sb:// replaced by http://.
"""
import json
import sys

from azure_notification_hub import NotificationHubsClient
from azure_notification_hub.client import AzureNHError

hub, full_cs, listen_cs = sys.argv[1:4]
device = NotificationHubsClient(listen_cs, hub)   # what an app would hold
backend = NotificationHubsClient(full_cs, hub)    # what a back end would hold
out = {}


def status(call):
    try:
        call()
        return 200
    except AzureNHError as error:
        return error.status_code


token = "ab" * 32
installation = {
    "installationId": "py-dev-1",
    "platform": "APNS",
    "pushChannel": token,
    "userId": "alice@example.com",
    "tags": ["news", "sports"],
    "templates": {"greeting": {"body": '{"aps":{"alert":"$(msg)"}}', "tags": ["en"]}},
}
out["put"] = device.create_or_update_installation(installation)
# Read-your-writes: no sleep between PUT and GET (NH's own SDK tests sleep a second).
out["get"] = device.get_installation("py-dev-1")
out["patch"] = device.update_installation(
    "py-dev-1",
    [
        {"op": "add", "path": "/tags", "value": "weather"},
        {"op": "remove", "path": "/tags/sports"},
        {"op": "replace", "path": "/userId", "value": "bob@example.com"},
        {"op": "add", "path": "/templates/farewell", "value": json.dumps({"body": '{"aps":{"alert":"bye"}}'})},
    ],
)
out["after_patch"] = backend.get_installation("py-dev-1")
out["get_missing"] = status(lambda: device.get_installation("py-nope"))
out["delete"] = device.delete_installation("py-dev-1")
out["delete_again"] = device.delete_installation("py-dev-1")
out["get_deleted"] = status(lambda: backend.get_installation("py-dev-1"))
out["put_gcm"] = status(lambda: device.create_or_update_installation({"installationId": "py-dev-2", "platform": "gcm", "pushChannel": "t"}))
out["put_bad_tag"] = status(
    lambda: device.create_or_update_installation({"installationId": "py-dev-2", "platform": "apns", "pushChannel": token, "tags": ["a,b"]}))

# Sends and queries need more than Listen.
for n in range(3):
    backend.create_or_update_installation(
        {"installationId": f"py-{n}", "platform": "apns", "pushChannel": f"{n:02x}" * 32, "tags": ["all", f"n{n}"]})
notification = {"platform": "apple", "body": json.dumps({"aps": {"alert": "from python"}}), "contentType": "application/json;charset=utf-8"}
try:
    device.send_notification(notification, tag_expression="all")
    out["listen_send"] = 200
except AzureNHError as error:
    out["listen_send"] = error.status_code
    out["listen_send_body"] = error.body
out["backend_send"] = backend.send_notification(notification, tag_expression="all && !n1")
out["listen_query"] = status(lambda: device._handle_response(device._client.get(device._request_url("/installations"), headers=device._create_headers())))
query = backend._client.get(backend._request_url("/installations", {"tag": "all"}), headers=backend._create_headers())
out["backend_query"] = [i["installationId"] for i in backend._handle_response(query)["installations"]]
print(json.dumps(out))
