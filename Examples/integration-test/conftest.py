"""Herald for our integration tests: started with its compose files and test overlay, or reused.

How another team would write it. Settings (environment):
  HERALD_URL         use a Herald that is already running (e.g. started by CI), start nothing
  HERALD_REPO        where Herald's repository is (default: two folders up, as a git submodule)
  HERALD_COMPOSE     the compose command, e.g. "docker compose" (default: that when it works,
                     else "docker-compose")
  HERALD_EDGE_PORT   the host port for the edge (default: a free one)
  HERALD_COMPOSE_PROJECT   the compose project name (default: herald-it-<random>)
  HERALD_TEST_USER / HERALD_TEST_PASSWORD   the account the overlay creates (tester / tester-password)
"""
import os
import shlex
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

TEST_USER = os.environ.get("HERALD_TEST_USER", "tester")
TEST_PASSWORD = os.environ.get("HERALD_TEST_PASSWORD", "tester-password")


def _compose_command():
    if "HERALD_COMPOSE" in os.environ:
        return shlex.split(os.environ["HERALD_COMPOSE"])
    try:
        subprocess.run(["docker", "compose", "version"], check=True, capture_output=True)
        return ["docker", "compose"]
    except (OSError, subprocess.CalledProcessError):
        return ["docker-compose"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url, timeout):
    """Polls /readyz: 200 once every Herald service answers SERVING."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            reply = requests.get(f"{url}/readyz", timeout=2)
            if reply.status_code == 200:
                return
            last = f"{reply.status_code} {reply.text}"
        except requests.RequestException as error:
            last = repr(error)
        time.sleep(0.2)
    raise RuntimeError(f"Herald at {url} not ready after {timeout}s: {last}")


class Herald:
    """The edge's URL, the test account, and the test routes."""

    def __init__(self, url):
        self.url = url
        self.auth = (TEST_USER, TEST_PASSWORD)
        self.user = TEST_USER

    def inbox(self, handle):
        """What would have been pushed to `handle`, oldest first."""
        reply = requests.get(f"{self.url}/v1/test/inbox", params={"handle": handle}, timeout=10)
        reply.raise_for_status()
        return reply.json()["entries"]

    def wait_for_inbox(self, handle, count=1, timeout=10):
        """Pushes are delivered after the send is answered: poll until `count` arrive."""
        deadline = time.monotonic() + timeout
        while True:
            entries = self.inbox(handle)
            if len(entries) >= count or time.monotonic() >= deadline:
                return entries
            time.sleep(0.05)

    def reset(self):
        requests.post(f"{self.url}/v1/test/reset", timeout=30).raise_for_status()


@pytest.fixture(scope="session")
def herald(request):
    if "HERALD_URL" in os.environ:
        url = os.environ["HERALD_URL"].rstrip("/")
        _wait_ready(url, 60)
        yield Herald(url)
        return
    repo = Path(os.environ.get("HERALD_REPO", Path(__file__).resolve().parents[2]))
    port = os.environ.get("HERALD_EDGE_PORT", str(_free_port()))
    project = os.environ.get("HERALD_COMPOSE_PROJECT", f"herald-it-{uuid.uuid4().hex[:8]}")
    compose = _compose_command() + [
        "--project-name", project,
        "-f", str(repo / "docker-compose.yml"),
        "-f", str(repo / "docker-compose.test.yml"),
    ]
    env = dict(os.environ, HERALD_EDGE_PORT=f"127.0.0.1:{port}")
    subprocess.run(compose + ["up", "-d"], check=True, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, 120)
        yield Herald(url)
    finally:
        if request.session.testsfailed:
            subprocess.run(compose + ["logs", "--no-color"], env=env)
        subprocess.run(compose + ["down", "-v"], check=True, env=env)


@pytest.fixture(autouse=True)
def clean_herald(herald):
    """Every test starts from an empty Herald (the test account is there again)."""
    herald.reset()
    yield
