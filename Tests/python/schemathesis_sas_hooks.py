"""schemathesis hooks (SCHEMATHESIS_HOOKS) that let generated requests past authentication.

scripts/schemathesis.sh creates a hub and passes its two default keys in the environment:
  HERALD_ST_URL     the edge's base URL, e.g. http://127.0.0.1:41234
  HERALD_ST_HUB     the hub every NH operation's {hub} is set to
  HERALD_ST_LISTEN  "KeyName;Key" of DefaultListenSharedAccessSignature
  HERALD_ST_FULL    "KeyName;Key" of DefaultFullSharedAccessSignature
  HERALD_ST_BASIC   "user:password" for the tutorial's routes and /v1

The NH operations (/{hub}/...) get a SharedAccessSignature signed here as NH's SDKs sign it
(HMAC-SHA256 over "<url-encoded sr>\\n<expiry>" keyed by the key's UTF-8 bytes), alternating the
Listen and the Full key, so generated bodies, headers and queries reach the handlers rather than
stopping at 401. The console's operations (/console/...) get a session cookie (the user signs in
through the console's own form; schemathesis.sh grants it Manage) and their forms the session's
CSRF token; the sign-in form its double-submit cookie; sign-out a session of its own each time.
Every other operation gets Basic credentials; the hub management operations (/v1/hubs/{hub}/...)
act on a hub of their own (MANAGED_HUB), made again before each.
"""
import base64
import hashlib
import hmac
import itertools
import os
import secrets
import threading
import time
import urllib.parse

import requests
import schemathesis

BASE = os.environ["HERALD_ST_URL"].rstrip("/") + "/"
HUB = os.environ["HERALD_ST_HUB"]
KEYS = [tuple(os.environ[name].split(";", 1)) for name in ("HERALD_ST_LISTEN", "HERALD_ST_FULL")]
BASIC = "Basic " + base64.b64encode(os.environ["HERALD_ST_BASIC"].encode()).decode()
_turn = itertools.count()


def sas_token(key_name: str, key: str) -> str:
    """A token for every path under the edge's root, valid for an hour."""
    expiry = int(time.time()) + 3600
    resource = urllib.parse.quote(BASE, safe="")
    digest = hmac.new(key.encode(), f"{resource}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = urllib.parse.quote(base64.b64encode(digest).decode(), safe="")
    return f"SharedAccessSignature sr={resource}&sig={signature}&se={expiry}&skn={key_name}"


def console_session() -> str:
    """Signs in through the console's form, as a browser does; the session token."""
    user, password = os.environ["HERALD_ST_BASIC"].split(":", 1)
    for _ in range(30):
        browser = requests.Session()
        browser.get(BASE + "console/login", timeout=30)
        nonce = browser.cookies.get("herald_signin")
        answer = browser.post(BASE + "console/login", data={"user": user, "password": password, "_csrf": nonce},
                              allow_redirects=False, timeout=30)
        token = answer.cookies.get("herald_session")
        if answer.status_code == 303 and token:
            return token
        if answer.status_code != 429:
            raise RuntimeError(f"console sign-in failed: {answer.status_code} {answer.text[:300]}")
        time.sleep(int(answer.headers.get("Retry-After", "1")))
    raise RuntimeError("console sign-in: still 429 after 30 tries")


def csrf_of(token: str) -> str:
    """The CSRF token of a session's forms (ConsoleSession.csrf)."""
    digest = hashlib.sha256(b"herald-console-csrf\0" + token.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


_shared = {}
_lock = threading.Lock()


def shared_session() -> str:
    with _lock:
        if "token" not in _shared:
            _shared["token"] = console_session()
        return _shared["token"]


@schemathesis.auth(refresh_interval=None)
class HeraldAuth:
    def get(self, case, context):
        path = case.operation.path
        if path.startswith("/{hub}"):
            name, key = KEYS[next(_turn) % len(KEYS)]
            return sas_token(name, key)
        if path == "/console/login":
            return ("herald_signin", secrets.token_urlsafe(16))
        if path == "/console/logout":
            # Signing out revokes the session: never the one every other page uses.
            return ("herald_session", console_session())
        if path.startswith("/console"):
            return ("herald_session", shared_session())
        return BASIC

    def set(self, case, data, context):
        case.headers = dict(case.headers or {})
        if isinstance(data, tuple):
            cookie, value = data
            case.headers["Cookie"] = f"{cookie}={value}"
            if isinstance(case.body, dict):
                case.body["_csrf"] = value if cookie == "herald_signin" else csrf_of(value)
            if cookie == "herald_session":
                # A multipart form carries the token in its action's query too, checked before
                # its body is read.
                case.query = dict(case.query or {})
                case.query["_csrf"] = csrf_of(value)
            return
        case.headers["Authorization"] = data


# The hub the management operations (/v1/hubs/{hub}/...) act on: never the one whose keys sign the
# NH operations (a generated DELETE would take them away for the rest of the run). Made again
# before each of those operations, since one of them deletes it.
MANAGED_HUB = "stmanaged"
# The console's forms that delete a hub or take a key away act on it too.
MANAGED_CONSOLE = ("/console/hubs/{hub}/delete", "/console/hubs/{hub}/keys/{key}/revoke",
                   "/console/hubs/{hub}/keys/{key}/rotate")


def acts_on_managed_hub(path):
    return path.startswith("/v1/hubs/") or path in MANAGED_CONSOLE


@schemathesis.hook
def map_path_parameters(context, path_parameters):
    # The hub the keys belong to: a generated name would only ever meet 401 (or 403).
    if path_parameters and "hub" in path_parameters:
        operation = getattr(context, "operation", None)
        managed = operation is not None and acts_on_managed_hub(operation.path)
        path_parameters["hub"] = MANAGED_HUB if managed else HUB
    return path_parameters


@schemathesis.hook
def before_call(context, case, **kwargs):
    if acts_on_managed_hub(case.operation.path):
        made = requests.post(BASE + "v1/hubs", json={"name": MANAGED_HUB}, headers={"Authorization": BASIC},
                             timeout=30)
        if made.status_code not in (201, 409):
            raise RuntimeError(f"making {MANAGED_HUB}: {made.status_code} {made.text[:300]}")
