"""S3 through boto3 (the `s3` extra), with the endpoint and region DALI's AWS SDK uses.

boto3 is given `AWS_ENDPOINT_URL` and `AWS_REGION` explicitly: DALI's SDK reads those,
and boto3 left to itself would also read `AWS_ENDPOINT_URL_S3`, which DALI does not.
"""

import os

from dalipipe.storage.errors import by_code


class S3:
    """boto3's S3 client, with the endpoint and region DALI's SDK uses."""

    def __init__(self, *, connect_timeout, read_timeout, attempts, connections):
        import boto3
        import botocore.config
        import botocore.exceptions

        self.exceptions = botocore.exceptions
        config = botocore.config.Config(
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            retries={"mode": "standard", "total_max_attempts": attempts},
            max_pool_connections=connections,
        )
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
            region_name=region, config=config,
        )
        self.endpoint = self.client.meta.endpoint_url

    def list(self, bucket, prefix, delimiter=False):
        """`([(key, size, etag)], [folder prefixes])` of the keys under `prefix`."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, **({"Delimiter": "/"} if delimiter else {}))
        found, folders = [], []
        for page in pages:
            found += [(o["Key"], o["Size"], o.get("ETag", "")) for o in page.get("Contents", ())]
            folders += [p["Prefix"] for p in page.get("CommonPrefixes", ())]
        return found, folders

    def head(self, bucket, key):
        response = self.client.head_object(Bucket=bucket, Key=key)
        return response["ContentLength"], response.get("ETag", "")

    def get(self, bucket, key, start, end):
        extra = {} if start == 0 and end is None else {"Range": f"bytes={start}-{'' if end is None else end}"}
        response = self.client.get_object(Bucket=bucket, Key=key, **extra)
        with response["Body"] as body:
            return body.read()

    def open(self, bucket, key):
        return self.client.get_object(Bucket=bucket, Key=key)["Body"]

    def translate(self, error, uri, listing):
        """The dalipipe error for a botocore error, or None to let it through."""
        e = self.exceptions
        if isinstance(error, e.NoCredentialsError):
            return PermissionError(
                f"No AWS credentials found for {uri!r}: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (the same for DALI's reads).")
        if isinstance(error, (e.EndpointConnectionError, e.ConnectTimeoutError,
                              e.ReadTimeoutError, e.ConnectionClosedError)):
            return ConnectionError(
                f"Cannot reach the S3 endpoint {self.endpoint} for {uri!r} "
                f"(AWS_ENDPOINT_URL={os.environ.get('AWS_ENDPOINT_URL')!r}): {error}")
        if not isinstance(error, e.ClientError):
            return None
        code = str(error.response.get("Error", {}).get("Code", ""))
        return by_code(code, uri, listing, error)
