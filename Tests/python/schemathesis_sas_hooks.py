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
stopping at 401; every other operation gets Basic credentials.
"""
import base64
import hashlib
import hmac
import itertools
import os
import time
import urllib.parse

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


@schemathesis.auth(refresh_interval=None)
class HeraldAuth:
    def get(self, case, context):
        if case.operation.path.startswith("/{hub}"):
            name, key = KEYS[next(_turn) % len(KEYS)]
            return sas_token(name, key)
        return BASIC

    def set(self, case, data, context):
        case.headers = dict(case.headers or {})
        case.headers["Authorization"] = data


@schemathesis.hook
def map_path_parameters(context, path_parameters):
    # The hub the keys belong to: a generated name would only ever meet 401.
    if path_parameters and "hub" in path_parameters:
        path_parameters["hub"] = HUB
    return path_parameters
