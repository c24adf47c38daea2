"""The web console in a real browser: Debian's chromium driven by PyPI's playwright (its own
browser download is never used: the system chromium's executable is given).

    console_check.py URL SCREENSHOT_DIR

Against a live stack in accounts mode with users `admin` (Manage on the hub default) and `alice`
(no Manage), passwords in ADMIN_PASSWORD and ALICE_PASSWORD, and HERALD (the `herald` CLI) with
HERALD_DIR (the stack's folder). It signs in, creates a hub, watches a device appear after a
registration, sends test pushes (an alert, and rich content with an uploaded file) and follows them
to Completed, reads the inbox, signs out; it checks that a user without Manage is refused, that a
form without its CSRF token is refused, that a revoked session ends, and that no request leaves for
another origin. Each page is saved as a PNG at desktop and phone widths, and checked by axe-core
(PyPI's axe-playwright-python carries it): no WCAG violation (labels, contrast, landmarks…).
"""

import base64
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect, sync_playwright

URL = sys.argv[1].rstrip("/")
SHOTS = sys.argv[2]
ORIGIN = "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(URL))
ADMIN = ("admin", os.environ["ADMIN_PASSWORD"])
ALICE = ("alice", os.environ["ALICE_PASSWORD"])
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
TOKEN = "a1" * 32  # alice's APNs device token
WIDTHS = {"desktop": {"width": 1280, "height": 860}, "phone": {"width": 390, "height": 844}}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

requests_seen = []
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def api(method, path, user, body=None, content_type="application/json"):
    """The tutorial's API, as the iOS client calls it (Basic auth)."""
    request = urllib.request.Request(URL + path, method=method, data=body)
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode())
    if body is not None:
        request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.read()


AXE = Axe()


def nh(method, path, headers=None, body=b""):
    """Notification Hubs' REST API on the hub default, with a SAS token of its Full key (NH's
    documented signature: HMAC-SHA256 over the encoded URI and the expiry)."""
    keys = subprocess.run(
        [os.environ["HERALD"], "hubs", "keys", "default", "--dir", os.environ["HERALD_DIR"]], capture_output=True, text=True
    ).stdout
    full = next(line for line in keys.splitlines() if "SharedAccessKeyName=DefaultFullSharedAccessSignature;" in line)
    key = full.split("SharedAccessKey=", 1)[1].strip()
    sr = urllib.parse.quote(URL + "/", safe="")
    expiry = str(int(time.time()) + 600)
    sig = base64.b64encode(hmac.new(key.encode(), f"{sr}\n{expiry}".encode(), hashlib.sha256).digest()).decode()
    token = f"SharedAccessSignature sr={sr}&sig={urllib.parse.quote(sig, safe='')}&se={expiry}&skn=DefaultFullSharedAccessSignature"
    request = urllib.request.Request(URL + path, method=method, data=body or None, headers={"Authorization": token, **(headers or {})})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers)


def apns_certificate(topic, password):
    """A self-signed APNs-style certificate (the bundle id as the subject's UID) as a .p12, by openssl."""
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        key, cert, p12 = (os.path.join(folder, name) for name in ("key.pem", "cert.pem", "push.p12"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "30",
                        "-subj", f"/UID={topic}/CN=Apple Push Services: {topic}"], capture_output=True, check=True)
        subprocess.run(["openssl", "pkcs12", "-export", "-inkey", key, "-in", cert, "-passout", f"pass:{password}",
                        "-out", p12], capture_output=True, check=True)
        with open(p12, "rb") as file:
            return file.read()


def shot(page, name, width):
    page.screenshot(path=os.path.join(SHOTS, f"{name}-{width}.png"), full_page=True)
    # axe-core's WCAG rules on the page as shown (evaluated through the driver, not a page script).
    violations = AXE.run(page).response["violations"]
    check(not violations, f"{name} at {width} width: axe-core found {[(v['id'], v['impact'], v['nodes'][0]['target']) for v in violations]}")


def sign_in(page, user):
    page.goto(URL + "/console/login")
    page.get_by_label("User name").fill(user[0])
    page.get_by_label("Password").fill(user[1])
    page.get_by_role("button", name="Sign in").click()


def follow_to_completed(page):
    # console.js swaps the outcome section in until the state is final; no reload here.
    expect(page.locator("#state")).to_have_text("Completed", timeout=30000)


def main():
    os.makedirs(SHOTS, exist_ok=True)
    with sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        desktop = browser.new_context(viewport=WIDTHS["desktop"])
        desktop.on("request", lambda request: requests_seen.append(request.url))
        page = desktop.new_page()
        console_errors = []
        # Errors a script or the CSP would report; answers' statuses are checked where they matter.
        page.on(
            "console",
            lambda message: message.type == "error"
            and not message.text.startswith("Failed to load resource")
            and console_errors.append(message.text),
        )

        # Signed out: every page sends you to sign in.
        page.goto(URL + "/console/hubs")
        expect(page).to_have_url(re.compile(r"/console/login"))
        shot(page, "login", "desktop")

        # A user without Manage is refused, and gets no session.
        sign_in(page, ALICE)
        expect(page.locator(".error")).to_contain_text("does not hold the Manage right")
        check(not any(c["name"] == "herald_session" for c in desktop.cookies()), "alice got a session cookie")

        # The sign-in form without its token: refused before any password is checked.
        refused = desktop.request.post(URL + "/console/login", form={"user": ADMIN[0], "password": ADMIN[1]})
        check(refused.status == 403, f"sign-in without the CSRF token answered {refused.status}")

        sign_in(page, ADMIN)
        expect(page).to_have_url(URL + "/console/hubs")
        session = next(c for c in desktop.cookies() if c["name"] == "herald_session")
        check(session["httpOnly"] and session["sameSite"] == "Strict" and session["path"] == "/console", f"session cookie {session}")
        check(not page.evaluate("document.cookie").count("herald_session"), "the session cookie is readable by scripts")
        shot(page, "hubs", "desktop")

        # CSRF: a form posted without the token (as another site would) is refused and changes nothing.
        forged = desktop.request.post(URL + "/console/hubs", form={"name": "forged"})
        check(forged.status == 403, f"hub creation without the CSRF token answered {forged.status}")
        check(desktop.request.get(URL + "/console/hubs/forged").status == 404, "the forged hub exists")

        # Create a hub.
        page.get_by_label("Name").fill("console-demo")
        page.get_by_role("button", name="Create hub").click()
        expect(page).to_have_url(URL + "/console/hubs/console-demo")
        expect(page.get_by_role("heading", name="Hub console-demo")).to_be_visible()
        expect(page.locator("table").first).to_contain_text("apns")
        page.goto(URL + "/console/hubs")
        expect(page.get_by_role("link", name="console-demo")).to_be_visible()

        # Round 2: keys made, rotated and revoked; credentials uploaded and deleted.
        page.goto(URL + "/console/hubs/console-demo")
        page.get_by_label("New key's name").fill("Backend")
        page.get_by_label("Send", exact=True).check()
        page.get_by_role("button", name="Create key").click()
        expect(page.get_by_role("heading", name="Key Backend")).to_be_visible()
        first = page.get_by_label("Primary").input_value()
        check(first.startswith("Endpoint=sb://") and "SharedAccessKeyName=Backend;" in first, f"connection string {first}")
        shot(page, "secret", "desktop")
        page.get_by_role("link", name="Back to hub console-demo").click()
        page.get_by_role("button", name="Rotate the primary secret of Backend").click()
        second = page.get_by_label("Primary").input_value()
        check(second != first and "SharedAccessKeyName=Backend;" in second, "rotating kept the primary secret")
        page.goto(URL + "/console/hubs/console-demo")
        expect(page.locator("ul.keys")).to_contain_text("Backend")
        page.get_by_role("button", name="Revoke Backend").click()
        expect(page).to_have_url(URL + "/console/hubs/console-demo")
        expect(page.locator("ul.keys")).not_to_contain_text("Backend")

        vapid = subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
                               capture_output=True, check=True).stdout
        page.get_by_text("Set browser credentials").click()
        page.get_by_label("VAPID key (EC P-256, .pem)").set_input_files(
            {"name": "vapid.pem", "mimeType": "application/x-pem-file", "buffer": vapid})
        page.get_by_label("Subject").fill("mailto:ops@example.com")
        page.get_by_role("button", name="Save browser credentials").click()
        expect(page).to_have_url(URL + "/console/hubs/console-demo")
        browser_row = page.locator("table").first.locator("tbody tr").filter(has=page.locator("th", has_text="browser"))
        expect(browser_row).to_contain_text("the hub's own credentials")
        check("PRIVATE KEY" not in page.content(), "the VAPID key is on the page")
        shot(page, "hub-credentials", "desktop")
        page.get_by_text("Set browser credentials").click()
        page.get_by_role("button", name="Delete browser credentials").click()
        expect(browser_row).not_to_contain_text("the hub's own credentials")

        # An APNs certificate (.p12 with a password), as a hub moved from NH has: its topic and
        # end read from the certificate, shown; the password never on the page.
        p12 = apns_certificate("com.example.console", "p12 password")
        page.get_by_text("Set apns credentials").click()
        page.get_by_label(re.compile("Or a certificate")).set_input_files(
            {"name": "push.p12", "mimeType": "application/x-pkcs12", "buffer": p12})
        page.get_by_label("Certificate password").fill("p12 password")
        page.get_by_role("button", name="Save apns credentials").click()
        expect(page).to_have_url(URL + "/console/hubs/console-demo")
        apns_row = page.locator("table").first.locator("tbody tr").filter(has=page.locator("th", has_text="apns"))
        expect(apns_row).to_contain_text("topic com.example.console")
        expect(apns_row).to_contain_text("ends ")
        check("p12 password" not in page.content(), "the certificate's password is on the page")
        shot(page, "hub-certificate", "desktop")
        page.get_by_text("Set apns credentials").click()
        page.get_by_role("button", name="Delete apns credentials").click()
        expect(apns_row).not_to_contain_text("com.example.console")

        # Deleting the hub takes its name typed again.
        page.get_by_label(re.compile("Type the hub's name")).fill("console-dem")
        page.get_by_role("button", name="Delete hub console-demo").click()
        expect(page.locator("main")).to_contain_text("type the hub's name, console-demo, to delete it")
        page.goto(URL + "/console/hubs/console-demo")
        page.get_by_label(re.compile("Type the hub's name")).fill("console-demo")
        page.get_by_role("button", name="Delete hub console-demo").click()
        expect(page).to_have_url(URL + "/console/hubs")
        expect(page.get_by_role("link", name="console-demo")).to_have_count(0)

        # Devices of the hub default: alice's appears after she registers it.
        page.goto(URL + "/console/hubs/default")
        expect(page.get_by_role("table", name="The hub's deliveries now")).to_contain_text("Deliveries waiting")
        expect(page.get_by_role("table", name="What the hub may use")).to_contain_text("Weight in delivery claims")
        shot(page, "hub", "desktop")
        page.goto(URL + "/console/hubs/default/devices?user=alice")
        expect(page.locator("table.devices")).to_contain_text("No device matches")
        status, body = api("POST", "/api/register?handle=" + TOKEN, ALICE)
        registration = json.loads(body)
        api("PUT", "/api/register/" + registration, ALICE, json.dumps({"Platform": "apns", "Handle": TOKEN, "Tags": ["sports"]}).encode())
        page.reload()
        expect(page.locator("table.devices")).to_contain_text(TOKEN)
        expect(page.locator("table.devices")).to_contain_text("sports")
        page.get_by_label("Tag or expression").fill("sports && !news")
        page.get_by_role("button", name="Search").click()
        expect(page.locator("table.devices")).to_contain_text(registration)
        shot(page, "devices", "desktop")

        # A device deleted from the console (a second one of alice's, so the sends below keep theirs).
        spare = "b2" * 32
        status, body = api("POST", "/api/register?handle=" + spare, ALICE)
        api("PUT", "/api/register/" + json.loads(body), ALICE, json.dumps({"Platform": "apns", "Handle": spare}).encode())
        page.goto(URL + "/console/hubs/default/devices?handle=" + spare)
        expect(page.locator("table.devices")).to_contain_text(spare)
        page.get_by_role("button", name="Delete registration " + json.loads(body)).click()
        expect(page).to_have_url(URL + "/console/hubs/default/devices")
        page.goto(URL + "/console/hubs/default/devices?handle=" + spare)
        expect(page.locator("table.devices")).to_contain_text("No device matches")

        # Test send: preview the native payloads, send, follow the outcome to Completed.
        page.goto(URL + "/console/hubs/default/send")
        page.get_by_label("Send to").select_option("user")
        page.get_by_label("User (for a user's devices, secure and rich)").fill("alice")
        page.get_by_label("Kind").select_option("alert")
        page.get_by_label("Text (alert, secure)").fill("Hello from the console")
        page.get_by_role("button", name="Preview payloads").click()
        expect(page.get_by_role("heading", name="Native payloads")).to_be_visible()
        expect(page.locator("pre.payload").first).to_contain_text('"alert" : "Hello from the console"')
        shot(page, "send-preview", "desktop")
        page.get_by_role("button", name="Send", exact=True).click()
        expect(page).to_have_url(re.compile(r"/console/hubs/default/sends/n-[0-9a-f]+$"))
        alert_id = page.url.rsplit("/", 1)[1]
        follow_to_completed(page)
        expect(page.locator("table").first).to_contain_text("apns")
        shot(page, "outcome", "desktop")

        # Rich: an uploaded image, stored by herald-payload; the device fetches it by the pushed id.
        page.goto(URL + "/console/hubs/default/send?user=alice")
        page.get_by_label("Kind").select_option("rich")
        page.get_by_label("File (rich)").set_input_files({"name": "dot.png", "mimeType": "image/png", "buffer": PNG})
        page.get_by_label("Message shown with rich content").fill("A picture")
        page.get_by_role("button", name="Send", exact=True).click()
        expect(page).to_have_url(re.compile(r"/sends/n-[0-9a-f]+$"))
        follow_to_completed(page)

        # Following live: a send scheduled an hour ahead (NH's API) stays Scheduled, and its page
        # polls; once it is cancelled the page shows Cancelled by itself, without a reload.
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
        status, headers = nh(
            "POST", "/default/schedulednotifications?api-version=2015-01",
            {"ServiceBusNotification-Format": "apple", "ServiceBusNotification-Tags": "sports",
             "ServiceBusNotification-ScheduleTime": when, "Content-Type": "application/json;charset=utf-8"},
            b'{"aps":{"alert":"later"}}')
        scheduled = headers["Location"].split("?")[0].rsplit("/", 1)[1]
        page.goto(URL + "/console/hubs/default/sends/" + scheduled)
        expect(page.locator("#state")).to_have_text("Scheduled")
        navigations = []
        page.on("framenavigated", lambda frame: navigations.append(frame.url))
        nh("DELETE", f"/default/schedulednotifications/{scheduled}?api-version=2015-01")
        expect(page.locator("#state")).to_have_text("Cancelled", timeout=15000)
        check(not navigations, f"the page reloaded to follow the send: {navigations}")
        check(page.locator("#outcome[data-live]").count() == 0, "a finished send's page still polls")

        # The inbox: newest first, payloads pretty-printed.
        page.goto(URL + "/console/inbox")
        entries = page.locator("article.entry")
        expect(entries.first).to_contain_text('"richId"')
        expect(page.locator("article.entry", has_text=alert_id)).to_contain_text("Hello from the console")
        # An entry's send, one click away (the inbox knows no hub: /console/sends/{id} finds it).
        page.locator("article.entry", has_text=alert_id).get_by_role("link", name=alert_id).click()
        expect(page).to_have_url(URL + "/console/hubs/default/sends/" + alert_id)
        page.goto(URL + "/console/inbox")
        rich_id = json.loads(entries.first.locator("pre.payload").inner_text())["richId"]
        status, content = api("GET", "/api/notifications/" + rich_id, ALICE)
        check(status == 200 and content == PNG, f"alice's fetch of the rich content: {status}, {len(content)} bytes")
        shot(page, "inbox", "desktop")

        # Outcomes: the sends, newest first, and the hour's chart.
        page.goto(URL + "/console/hubs/default/sends")
        expect(page.get_by_role("link", name=alert_id)).to_be_visible()
        expect(page.locator("svg.chart rect.delivered").first).to_be_attached()
        shot(page, "sends", "desktop")

        # Phone width: the same pages, signed in anew in a narrow window.
        phone = browser.new_context(viewport=WIDTHS["phone"])
        phone.on("request", lambda request: requests_seen.append(request.url))
        small = phone.new_page()
        small.goto(URL + "/console/login")
        shot(small, "login", "phone")
        sign_in(small, ADMIN)
        for name, path in [
            ("hubs", "/console/hubs"),
            ("hub", "/console/hubs/default"),
            ("devices", "/console/hubs/default/devices"),
            ("send-preview", None),
            ("outcome", f"/console/hubs/default/sends/{alert_id}"),
            ("sends", "/console/hubs/default/sends"),
            ("inbox", "/console/inbox"),
        ]:
            if path is None:
                small.goto(URL + "/console/hubs/default/send?user=alice")
                small.get_by_label("Text (alert, secure)").fill("Hello from a phone")
                small.get_by_role("button", name="Preview payloads").click()
                expect(small.get_by_role("heading", name="Native payloads")).to_be_visible()
            else:
                small.goto(URL + path)
            overflow = small.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            check(overflow <= 1, f"{name} is {overflow}px wider than a phone's viewport")
            shot(small, name, "phone")

        # A revoked session ends at once: the next page asks to sign in again.
        revoke = subprocess.run(
            [os.environ["HERALD"], "tokens", "revoke", "admin", "--dir", os.environ["HERALD_DIR"]], capture_output=True, text=True
        )
        check(revoke.returncode == 0, f"herald tokens revoke: {revoke.stderr}")
        small.goto(URL + "/console/hubs")
        expect(small).to_have_url(re.compile(r"/console/login\?expired=1"))

        # Sign out: the session is gone, and its cookie no longer opens anything.
        sign_in(page, ADMIN)
        cookie = next(c for c in desktop.cookies() if c["name"] == "herald_session")["value"]
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(URL + "/console/login")
        replay = urllib.request.Request(URL + "/console/hubs", headers={"Cookie": "herald_session=" + cookie})
        opener = urllib.request.build_opener(NoRedirect())
        try:
            opener.open(replay, timeout=30)
            check(False, "the signed-out session still opens /console/hubs")
        except urllib.error.HTTPError as error:
            check(error.code == 303, f"the signed-out session answered {error.code}")

        check(not console_errors, f"the browser's console reported errors: {console_errors}")
        browser.close()

    foreign = sorted({u for u in requests_seen if not (u.startswith(ORIGIN + "/") or u.startswith("data:"))})
    check(not foreign, f"requests left for another origin: {foreign}")
    print(f"console_check: {len(requests_seen)} requests, all to {ORIGIN}; screenshots in {SHOTS}")
    if failures:
        print(f"console_check: {len(failures)} failure(s)")
        sys.exit(1)
    print("console_check: ok")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    main()
