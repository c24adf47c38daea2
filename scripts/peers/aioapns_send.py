"""aioapns sends COUNT alerts to herald-bench's APNs double, for `herald-bench peers`.

aioapns is the asyncio APNs client django-push-notifications uses. It always dials Apple's host
on 443, so only its protocol class's host and port are pointed at the server; everything else is
the library as published: token auth (ES256 JWT), its connection pool, one request per push.
Prints one JSON line: {"sent", "ok", "failed", "seconds", "cpu_seconds"}.
"""

import argparse
import asyncio
import json
import resource
import ssl
import time
import uuid

from aioapns import APNs, NotificationRequest, PushType
from aioapns.connection import APNsProductionClientProtocol


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main(args):
    APNsProductionClientProtocol.APNS_SERVER = args.host
    APNsProductionClientProtocol.APNS_PORT = args.port
    context = ssl.create_default_context(cafile=args.ca)
    # aioapns offers no ALPN (Apple's servers speak HTTP/2 without it); nghttpd insists on "h2".
    context.set_alpn_protocols(["h2"])
    with open(args.key) as f:
        key = f.read()
    client = APNs(
        key=key, key_id=args.key_id, team_id=args.team_id, topic=args.topic, use_sandbox=False,
        max_connections=args.connections, ssl_context=context,
    )
    token = "ab" * 32
    window = asyncio.Semaphore(args.in_flight)
    results = {"ok": 0, "failed": 0}

    async def one(n):
        async with window:
            request = NotificationRequest(
                device_token=token, message={"aps": {"alert": f"peer {n}"}}, notification_id=str(uuid.uuid4()),
                push_type=PushType.ALERT)
            result = await client.send_notification(request)
            results["ok" if result.is_successful else "failed"] += 1

    # A first push opens a connection and signs the token: not timed, as Herald's stack is started
    # before its send is timed.
    await one(-1)
    results["ok"] = results["failed"] = 0
    cpu_before, started = cpu_seconds(), time.monotonic()
    await asyncio.gather(*(one(n) for n in range(args.count)))
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu_before
    print(json.dumps({"sent": args.count, **results, "seconds": seconds, "cpu_seconds": cpu}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("host", "ca", "key", "key-id", "team-id", "topic"):
        parser.add_argument("--" + name, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--in-flight", type=int, default=1000)
    asyncio.run(main(parser.parse_args()))
