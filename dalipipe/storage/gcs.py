"""Google Cloud Storage through google-cloud-storage (the `gcs` extra), with the
endpoint and credentials DALI's GCS client uses: Application Default Credentials
(`GOOGLE_APPLICATION_CREDENTIALS`, ...), none with `DALI_GCS_ANONYMOUS=1`, and the
endpoint of `DALI_GCS_ENDPOINT_URL` or `CLOUD_STORAGE_EMULATOR_ENDPOINT`.
"""

import os

from dalipipe.storage.errors import Raising, by_code


class GCS:
    """google-cloud-storage's client, with the endpoint and credentials DALI's uses,
    keeping `connections` connections open per endpoint (requests' default is 10:
    with more threads reading, the others' connections would be closed after each
    request and opened again)."""

    def __init__(self, *, connect_timeout, read_timeout, attempts, connections):
        import google.api_core.exceptions
        import google.auth.exceptions
        import requests.exceptions
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY

        self.api_exceptions = google.api_core.exceptions
        self.auth_exceptions = google.auth.exceptions
        self.connection_errors = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
        self.retry = DEFAULT_RETRY.with_timeout(attempts * read_timeout)
        self.timeout = (connect_timeout, read_timeout)
        endpoint = (os.environ.get("DALI_GCS_ENDPOINT_URL")
                    or os.environ.get("CLOUD_STORAGE_EMULATOR_ENDPOINT") or None)
        self.endpoint = endpoint or "https://storage.googleapis.com"
        options = {"api_endpoint": endpoint} if endpoint else None
        if os.environ.get("DALI_GCS_ANONYMOUS", "0").strip() not in ("", "0"):
            from google.auth.credentials import AnonymousCredentials

            self.client = storage.Client(project="<none>", credentials=AnonymousCredentials(),
                                         client_options=options)
        else:
            try:
                self.client = storage.Client(client_options=options)
            except self.auth_exceptions.DefaultCredentialsError as e:
                self.client = Raising(e)  # raised by each request, with its URI
                return
        # `_http`: the client's requests session (google-cloud-storage names it so).
        _size_connection_pools(self.client._http, connections)

    def list(self, bucket, prefix, delimiter=False):
        blobs = self.client.list_blobs(bucket, prefix=prefix, delimiter="/" if delimiter else None,
                                       timeout=self.timeout, retry=self.retry)
        found = [(b.name, b.size, b.etag or "") for b in blobs]
        return found, sorted(blobs.prefixes)

    def head(self, bucket, key):
        blob = self.client.bucket(bucket).get_blob(key, timeout=self.timeout, retry=self.retry)
        if blob is None:
            raise self.api_exceptions.NotFound(f"No such object: {key}")
        return blob.size, blob.etag or ""

    def get(self, bucket, key, start, end):
        blob = self.client.bucket(bucket).blob(key)
        return blob.download_as_bytes(start=start or None, end=end, timeout=self.timeout,
                                      retry=self.retry, checksum=None)

    def open(self, bucket, key):
        blob = self.client.bucket(bucket).get_blob(key, timeout=self.timeout, retry=self.retry)
        if blob is None:
            raise self.api_exceptions.NotFound(f"No such object: {key}")
        return blob.open("rb", chunk_size=8 << 20, timeout=self.timeout, retry=self.retry)

    def translate(self, error, uri, listing):
        if isinstance(error, self.api_exceptions.RetryError) and error.cause is not None:
            error = error.cause  # the retries ran out: the last failure says why
        if isinstance(error, self.auth_exceptions.DefaultCredentialsError):
            return PermissionError(
                f"No Google credentials found for {uri!r}: set GOOGLE_APPLICATION_CREDENTIALS "
                "(or DALI_GCS_ANONYMOUS=1 for a public bucket).")
        if isinstance(error, self.connection_errors):
            return ConnectionError(f"Cannot reach the GCS endpoint {self.endpoint} for {uri!r}: {error}")
        if isinstance(error, self.api_exceptions.GoogleAPICallError):
            code = {404: "NoSuchKey", 403: "AccessDenied", 401: "InvalidAccessKeyId",
                    416: "InvalidRange"}.get(error.code, str(error.code))
            if code == "NoSuchKey" and listing:
                code = "NoSuchBucket"
            return by_code(code, uri, listing, error)
        return None


def _size_connection_pools(session, connections):
    """Replaces the plain `requests` adapters of `session` (the client's
    `AuthorizedSession`) with ones that keep `connections` connections per host.

    An adapter of another kind (google-auth's mutual-TLS one, with
    `GOOGLE_API_USE_CLIENT_CERTIFICATE`) is left as it is.
    """
    from requests.adapters import HTTPAdapter

    for prefix, adapter in list(session.adapters.items()):
        if type(adapter) is HTTPAdapter:
            session.mount(prefix, HTTPAdapter(pool_maxsize=connections,
                                              max_retries=adapter.max_retries))
