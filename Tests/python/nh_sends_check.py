"""Sends through Herald's Notification Hubs API with PyPI's azure-notification-hub-unofficial (a port
of NH's JS SDK that no one here wrote): native apple and fcmv1 sends, a template send, a scheduled
send and a cancelled one, and telemetry. Prints what happened as JSON; the Swift test checks what
reached the APNs and FCM doubles.

Usage: nh_sends_check.py HUB FULL_CONNECTION_STRING APNS_TOKEN FCM_TOKEN WNS_CHANNEL BROWSER_SUBSCRIPTION_JSON
The connection string is `herald hubs keys` output with sb:// replaced by http://.
"""
import datetime
import json
import sys
import time

from azure_notification_hub import (
    NotificationHubsClient,
    create_browser_installation,
    create_browser_notification,
    create_windows_toast_notification,
    create_apple_notification,
    create_fcm_v1_notification,
    create_template_notification,
)

hub, full_cs, apns_token, fcm_token, wns_channel, browser_json = sys.argv[1:7]
backend = NotificationHubsClient(full_cs, hub)
# The client returns {} for NH's empty 201 and drops its Location header, which names the send; the
# check reads it from the responses of the client's own httpx.Client (the one private detail used).
locations = []
backend._client.event_hooks["response"].append(lambda response: locations.append(response.headers.get("location")))
out = {}


def last_id():
    return locations[-1].split("?")[0].rsplit("/", 1)[-1]


backend.create_or_update_installation({
    "installationId": "py-apns", "platform": "apns", "pushChannel": apns_token, "tags": ["py"],
    "templates": {"news_en": {"body": '{"aps":{"alert":"{\'News: \' + $(title)}","badge":"#(count)"}}', "tags": ["lang_en"]}},
})
backend.create_or_update_installation({
    "installationId": "py-fcm", "platform": "fcmv1", "pushChannel": fcm_token, "tags": ["py"],
    "templates": {"news_en": {"body": '{"message":{"notification":{"title":"$(title)"}}}', "tags": ["lang_en"]}},
})

backend.create_or_update_installation({"installationId": "py-wns", "platform": "wns", "pushChannel": wns_channel, "tags": ["py"]})
subscription = json.loads(browser_json)
backend.create_or_update_installation(create_browser_installation(
    "py-browser", {"endpoint": subscription["endpoint"], **subscription["keys"]}, tags=["py"]))

out["windows"] = backend.send_notification(
    create_windows_toast_notification('<toast><visual><binding template="ToastText01"><text id="1">native wns</text></binding></visual></toast>'),
    tag_expression="py")
out["windows_id"] = last_id()
out["browser"] = backend.send_notification(create_browser_notification({"title": "native web push"}), tag_expression="py")
out["browser_id"] = last_id()
out["apple"] = backend.send_notification(
    create_apple_notification({"aps": {"alert": "native apple"}}, headers={"apns-priority": "10"}), tag_expression="py")
out["apple_id"] = last_id()
out["fcm"] = backend.send_notification(
    create_fcm_v1_notification({"message": {"data": {"k": "native fcm"}}}), tag_expression="py")
out["fcm_id"] = last_id()
out["template"] = backend.send_notification(
    create_template_notification({"title": "from python", "count": "2"}), tag_expression="lang_en && py")
out["template_id"] = last_id()

# Scheduled: isoformat() of an aware datetime carries +00:00, as this client sends it.
now = datetime.datetime.now(datetime.timezone.utc)
out["scheduled"] = backend.schedule_notification(
    now + datetime.timedelta(seconds=2), create_apple_notification({"aps": {"alert": "scheduled"}}), tag_expression="py")
out["scheduled_id"] = last_id()
out["cancelled"] = backend.schedule_notification(
    now + datetime.timedelta(seconds=1), create_apple_notification({"aps": {"alert": "cancelled"}}), tag_expression="py")
out["cancelled_id"] = last_id()
out["cancel"] = backend.cancel_scheduled_notification(out["cancelled_id"])

# Telemetry, polled until the scheduled send has been made (Completed) or 20 s have passed.
deadline = time.monotonic() + 20
while True:
    details = backend.get_notification_outcome_details(out["scheduled_id"])["_raw_xml"]
    if "<State>Completed</State>" in details or time.monotonic() > deadline:
        break
    time.sleep(0.1)
out["scheduled_details"] = details
out["apple_details"] = backend.get_notification_outcome_details(out["apple_id"])["_raw_xml"]
out["cancelled_details"] = backend.get_notification_outcome_details(out["cancelled_id"])["_raw_xml"]
print(json.dumps(out))
