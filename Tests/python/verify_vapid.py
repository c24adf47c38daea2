#!/usr/bin/env python3
"""Checks that each Web Push request carries a VAPID header signed with its own hub's key, with
PyPI's py-vapid (a VAPID key per hub). Input: a JSON list of
{"name", "authorization", "public_key"} written by PushDeliveryTests; one line per request;
exits 1 on the first failure."""
import base64
import json
import sys

from cryptography.hazmat.primitives import serialization
from py_vapid import Vapid02


def main():
    with open(sys.argv[1]) as f:
        pushes = json.load(f)
    keys = set()
    for push in pushes:
        auth = push["authorization"]
        assert auth.startswith("vapid "), auth
        params = dict(p.strip().split("=", 1) for p in auth[len("vapid "):].split(","))
        public = serialization.load_pem_public_key(push["public_key"].encode())
        raw = public.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        k = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        assert params["k"] == k, f"{push['name']}: k is not its hub's VAPID public key"
        assert Vapid02.verify(auth), f"{push['name']}: py-vapid refused the VAPID header"
        keys.add(k)
        print(f"py-vapid: {push['name']} ok")
    assert len(keys) == len(pushes), "two pushes were signed with the same key"


if __name__ == "__main__":
    main()
