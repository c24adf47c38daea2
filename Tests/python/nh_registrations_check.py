"""Reads and deletes NH registrations on Herald with PyPI's azure-notification-hub-unofficial (a
port of NH's JS SDK that no one here wrote), and prints what it saw as JSON.

Usage: nh_registrations_check.py HUB FULL_CONNECTION_STRING LISTEN_CONNECTION_STRING ID...
Each ID (a registration's or an installation's) is read, deleted and read again.
The connection strings are `herald hubs keys` output with sb:// replaced by http://.
"""
import json
import sys

from azure_notification_hub import NotificationHubsClient
from azure_notification_hub.client import AzureNHError

hub, full_cs, listen_cs = sys.argv[1:4]
ids = sys.argv[4:]
device = NotificationHubsClient(listen_cs, hub)
backend = NotificationHubsClient(full_cs, hub)
out = {}


def status(call):
    try:
        call()
        return 200
    except AzureNHError as error:
        return error.status_code


out["listed"] = sorted(entry.get("RegistrationId") for entry in backend.list_registrations(top=100))
out["listen_list"] = status(lambda: device.list_registrations())
for registration_id in ids:
    got = device.get_registration(registration_id)
    out[registration_id] = {
        "get": {key: got.get(key) for key in ("RegistrationId", "Tags", "DeviceToken", "TemplateName", "etag")},
        "delete": status(lambda: device.delete_registration(registration_id)),
        "get_deleted": status(lambda: device.get_registration(registration_id)),
    }
print(json.dumps(out))
