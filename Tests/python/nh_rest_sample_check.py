"""Sends through Herald with PyPI's notificationhubs-rest-python (Microsoft's REST sample wrapper,
which no one here wrote) over HTTPS: native, direct, template, scheduled and test sends. Prints what
happened as JSON; the Swift test checks what reached the APNs and FCM doubles.

Usage: REQUESTS_CA_BUNDLE=ca.pem nh_rest_sample_check.py HUB CONNECTION_STRING TAGGED_TOKEN DIRECT_TOKEN FCM_TOKEN
The sample forces https and takes a three-part connection string (`herald hubs keys` output as is).
Its known bugs, and what Herald does about them:
  - ScheduleTime is sent with literal quotes ("2030-01-01'T'08:00:00"): Herald reads it.
  - no FCM v1 (only "gcm", FCM's retired legacy API, refused by Herald with a message): the check
    sends fcmv1 through the sample's own send machinery (its format set after the sample's check),
    whose content type is then XML (Herald goes by ServiceBusNotification-Format).
  - its settings are class attributes: a second NotificationHub (the debug one) changes the first,
    so the test send comes last.
"""
import contextlib
import datetime
import io
import json
import sys

import requests
from notificationhubs_rest_python.NotificationHub import AzureNotification, AzureNotificationHub as NotificationHub

hub_name, connection_string, tagged, direct, fcm = sys.argv[1:6]
hub = NotificationHub(connection_string, hub_name)
token = hub._AzureNotificationHub__generate_sas_token()
out = {}

# The sample has no installation calls: the devices are put with requests and the sample's own token.
for installation in [
    {"installationId": "rest-1", "platform": "apns", "pushChannel": tagged, "tags": ["rest"],
     "templates": {"news_en": {"body": '{"aps":{"alert":"$(title)"}}', "tags": ["lang_en"]}}},
    {"installationId": "rest-2", "platform": "fcmv1", "pushChannel": fcm, "tags": ["rest"]},
]:
    response = requests.put(f"{hub.Endpoint}{hub_name}/installations/{installation['installationId']}?api-version=2015-04",
                            json=installation, headers={"Authorization": token})
    response.raise_for_status()

out["apple"] = hub.send_apple_notification(False, {"aps": {"alert": "rest apple"}}, "rest")[0]
out["direct"] = hub.send_apple_notification(True, {"aps": {"alert": "rest direct"}}, device_handle=direct)[0]
out["template"] = hub.send_template_notification({"title": "rest template"}, "lang_en")[0]
when = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(seconds=2)
out["scheduled"] = hub.send_apple_notification(False, {"aps": {"alert": "rest scheduled"}}, "rest", scheduled_time=when)[0]
out["scheduled_header"] = hub._AzureNotificationHub__send_notification(
    AzureNotification("apple", {"aps": {}}), False, "rest", scheduled_time=when, skip_send=True)[1]["ServiceBusNotification-ScheduleTime"]
# AzureNotification refuses any format it does not know; the format is set after it is made.
fcmv1 = AzureNotification("apple", json.dumps({"message": {"data": {"k": "rest fcm"}}}))
fcmv1.format = "fcmv1"
out["fcmv1"] = hub._AzureNotificationHub__send_notification(fcmv1, False, "rest")[0]
try:
    hub.send_google_notification(False, {"data": {"k": "v"}}, "rest")
    out["gcm"] = "accepted"
except Exception as error:  # the sample raises a bare Exception on anything but 201
    out["gcm"] = str(error)

# The test send: debug=1 adds &test and prints the response, NH's NotificationOutcome.
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    NotificationHub(connection_string, hub_name, debug=1).send_apple_notification(False, {"aps": {"alert": "rest test"}}, "rest")
out["test_send"] = printed.getvalue()
print(json.dumps(out))
