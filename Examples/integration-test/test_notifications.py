"""Our app's push flows, checked against a real Herald through its HTTP API only."""
import secrets

import requests


def register(herald, handle, tags=()):
    """What our iOS app does at start: get a registration id, then PUT the device (the tutorial's API)."""
    created = requests.post(f"{herald.url}/api/register", params={"handle": handle}, auth=herald.auth, timeout=10)
    assert created.status_code == 200, created.text
    registration_id = created.json()
    put = requests.put(
        f"{herald.url}/api/register/{registration_id}",
        json={"Platform": "apns", "Handle": handle, "Tags": list(tags)},
        auth=herald.auth,
        timeout=10,
    )
    assert put.status_code == 200, put.text
    return registration_id


def apns_token():
    return secrets.token_hex(32)


def test_secure_push_carries_only_an_id_and_the_device_fetches_the_payload(herald):
    device = apns_token()
    register(herald, device)

    sent = requests.post(
        f"{herald.url}/v1/notifications",
        params={"kind": "secure", "to_user": herald.user},
        data="Your code is 4711".encode(),
        auth=herald.auth,
        timeout=10,
    )
    assert sent.status_code == 202, sent.text

    [push] = herald.wait_for_inbox(device)
    assert push["platform"] == "apns"
    assert "4711" not in push["payload"], "the secret must not cross APNs"
    secure_id = push["payload"].split('"secureId":"')[1].split('"')[0]

    fetched = requests.get(f"{herald.url}/api/notifications/{secure_id}", auth=herald.auth, timeout=10)
    assert fetched.status_code == 200
    assert fetched.json()["Payload"] == "Your code is 4711"


def test_an_alert_to_a_tag_reaches_only_devices_with_that_tag(herald):
    fan, other = apns_token(), apns_token()
    register(herald, fan, tags=["scores"])
    register(herald, other, tags=["weather"])

    sent = requests.post(
        f"{herald.url}/v1/notifications",
        params={"kind": "alert", "to_tag": "scores"},
        data="Goal!".encode(),
        auth=herald.auth,
        timeout=10,
    )
    assert sent.status_code == 202, sent.text

    [push] = herald.wait_for_inbox(fan)
    assert '"alert":"Goal!"' in push["payload"]
    assert push["headers"]["apns-push-type"] == "alert"
    assert herald.inbox(other) == []


def test_each_test_starts_from_an_empty_herald(herald):
    # The devices of the tests above are gone: the reset fixture ran before this test.
    listed = requests.get(f"{herald.url}/v1/test/inbox", timeout=10).json()["entries"]
    assert listed == []
