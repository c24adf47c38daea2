#!/usr/bin/env python3
"""Checks what Herald sent to the push-service doubles with independent implementations:
PyJWT (APNs ES256 provider token, FCM RS256 grant), py-vapid (VAPID header) and http-ece
(decrypts the aes128gcm Web Push body). Input: a JSON file written by PushDeliveryTests.
Prints one line per check; exits 1 on the first failure."""
import base64
import json
import sys
import time

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from py_vapid import Vapid02


def main():
    with open(sys.argv[1]) as f:
        c = json.load(f)

    # APNs: ES256, kid in the header, iss = team id, iat recent.
    with open(c["apns_public_key"], "rb") as f:
        apns_key = f.read()
    header = jwt.get_unverified_header(c["apns_jwt"])
    assert header["alg"] == "ES256" and header["kid"] == c["apns_kid"], header
    claims = jwt.decode(c["apns_jwt"], apns_key, algorithms=["ES256"], options={"require": ["iss", "iat"]})
    assert claims["iss"] == c["apns_iss"], claims
    assert abs(time.time() - claims["iat"]) < 3600, claims
    print("PyJWT: APNs ES256 ok")

    # FCM: RS256 JWT-bearer grant for the firebase.messaging scope.
    with open(c["fcm_private_key"], "rb") as f:
        private = serialization.load_pem_private_key(f.read(), password=None)
    public = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    claims = jwt.decode(c["fcm_assertion"], public, algorithms=["RS256"], audience=c["fcm_aud"],
                        options={"require": ["iss", "aud", "iat", "exp"]})
    assert claims["iss"] == c["fcm_iss"] and claims["scope"] == "https://www.googleapis.com/auth/firebase.messaging", claims
    assert claims["exp"] - claims["iat"] <= 3600, claims
    print("PyJWT: FCM RS256 ok")

    # VAPID (RFC 8292): "vapid t=<jwt>, k=<key>"; py-vapid verifies the token against k.
    auth = c["vapid_authorization"]
    assert auth.startswith("vapid "), auth
    params = dict(p.strip().split("=", 1) for p in auth[len("vapid "):].split(","))
    with open(c["vapid_public_key"], "rb") as f:
        pub = serialization.load_pem_public_key(f.read())
    raw = pub.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    k = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert params["k"] == k, "k is not the VAPID public key"
    assert Vapid02.verify(auth), "py-vapid refused the VAPID header"
    claims = jwt.decode(params["t"], public_pem(pub), algorithms=["ES256"], audience=c["vapid_aud"])
    assert claims["sub"].startswith("mailto:") and claims["exp"] <= time.time() + 86400, claims
    print("py-vapid: ok")

    # Web Push body: aes128gcm for the subscription's key and auth secret.
    receiver = serialization.load_pem_private_key(c["webpush_private_key"].encode(), password=None)
    plaintext = http_ece.decrypt(base64.b64decode(c["webpush_body"]), private_key=receiver,
                                 auth_secret=base64.b64decode(c["webpush_auth"]), version="aes128gcm")
    assert plaintext == base64.b64decode(c["webpush_plaintext"]), plaintext
    print("http-ece: ok")


def public_pem(key):
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAILED:", e)
        sys.exit(1)
