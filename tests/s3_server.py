"""A local S3 server for the tests: moto's (`moto[server]`), a real HTTP S3 API that
boto3 and DALI's AWS SDK both talk to, on a free port of 127.0.0.1.

It runs in a process of its own: DALI's readers fetch their first batches inside
`pipe.build()`, which holds the GIL, so a server on a thread of the test's process
could not answer them. No request leaves this machine: `ENVIRONMENT` points both
clients at it and switches the instance metadata service off. The server logs a line
per request, which `S3Server.object_gets` counts.
"""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

STARTUP_SECONDS = 30
ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    # No instance metadata requests, no user's ~/.aws files, no proxies.
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "NO_PROXY": "127.0.0.1",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """A running server: its `endpoint` URL, its request log, and its `process` (a
    `subprocess.Popen`: a test may stop it)."""

    def __init__(self, endpoint, log_path, process=None):
        self.endpoint, self.log_path, self.process = endpoint, log_path, process

    def client(self):
        """A boto3 client of the server (credentials from `ENVIRONMENT`)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def log_size(self):
        """Where the request log ends now: pass it to `object_gets`."""
        return os.path.getsize(self.log_path)

    def object_gets(self, bucket, since=0):
        """The keys of the GET requests for objects of `bucket` (not listings) logged
        after byte `since` of the log, one per request: boto3's and DALI's (ranged
        GETs, which the server logs in colour)."""
        with open(self.log_path, "rb") as f:
            f.seek(since)
            log = re.sub(r"\x1b\[[0-9;]*m", "", f.read().decode(errors="replace"))
        return re.findall(rf'"GET /{re.escape(bucket)}/([^ ?"]+) HTTP', log)


@contextlib.contextmanager
def moto_server(**environment):
    """An `S3Server` on a free port of 127.0.0.1, in a process of its own with
    `environment` added, stopped on exit."""
    pytest.importorskip("moto.server", reason="needs moto's server: pip install 'moto[server]'")
    pytest.importorskip("flask", reason="needs moto's server: pip install 'moto[server]'")
    pytest.importorskip("boto3", reason="needs boto3: pip install 'dalipipe[s3]'")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="moto-") as folder:
        log_path = os.path.join(folder, "requests.log")
        # Appended to: the tests read it while the server writes (a pipe would fill).
        with open(log_path, "ab") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **environment})
        running = S3Server(f"http://127.0.0.1:{port}", log_path, server)
        try:
            _wait_for(server, running)
            yield running
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGCONT)  # a test may have suspended it
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(10)


def _wait_for(server, running):
    """Waits until the server answers, at most `STARTUP_SECONDS`."""
    import boto3
    import botocore.exceptions

    client = boto3.client("s3", endpoint_url=running.endpoint, region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x")
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if server.poll() is not None:
            with open(running.log_path, "rb") as f:
                pytest.fail(f"moto's S3 server exited ({server.returncode}): "
                            f"{f.read().decode(errors='replace')[-2000:]}")
        try:
            client.list_buckets()
            return
        except botocore.exceptions.ClientError:  # an answer, if a refusal
            return
        except botocore.exceptions.BotoCoreError:  # not listening yet
            if time.monotonic() > deadline:
                pytest.fail(f"moto's S3 server did not answer within {STARTUP_SECONDS} s")
            time.sleep(0.1)


def upload_folder(client, folder, bucket, prefix):
    """Uploads every file under `folder` to `bucket`, as `prefix/<its relative path>`."""
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            client.upload_file(path, bucket, f"{prefix}/{os.path.relpath(path, folder)}")


@contextlib.contextmanager
def copy_served(folder, uri):
    """Outside pytest's fixtures (a job's process): a `moto_server` of its own holding
    a copy of `folder` at `uri` (`s3://BUCKET/PREFIX/`), with this process's AWS
    variables pointing at it as the `s3_server` fixture sets them; yields `uri`. The
    environment and `dalipipe.storage`'s clients are restored on exit. Without moto,
    flask or boto3 it raises ImportError (`moto_server` would skip)."""
    import importlib.util

    from dalipipe import storage

    for module in ("moto", "flask", "boto3"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"a local S3 server needs {module}: pip install 'moto[server]'")
    bucket, prefix = uri[len("s3://"):].rstrip("/").split("/", 1)
    saved = dict(os.environ)
    try:
        with moto_server() as server:
            os.environ.update(ENVIRONMENT, AWS_ENDPOINT_URL=server.endpoint)
            storage.reset_clients()
            client = server.client()
            client.create_bucket(Bucket=bucket)
            upload_folder(client, folder, bucket, prefix)
            yield uri
    finally:
        os.environ.clear()
        os.environ.update(saved)
        storage.reset_clients()
