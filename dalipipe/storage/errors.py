"""The errors of `dalipipe.storage`, from the codes of S3's and GCS's answers."""

from dalipipe.storage.uris import split_uri


class Raising:
    """Stands for a client that could not be made: any use raises `error`."""

    def __init__(self, error):
        self.error = error

    def __getattr__(self, name):
        raise self.error


_DENIED = ("AccessDenied", "403", "AllAccessDisabled", "InvalidAccessKeyId",
           "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "AuthorizationHeaderMalformed")


def by_code(code, uri, listing, error):
    """The error for the code of an answer (S3's names: "NoSuchKey", "AccessDenied")
    to a request for `uri`; a missing bucket is a ValueError when `listing`."""
    if code == "NoSuchBucket":
        bucket = split_uri(uri)[1]
        message = f"No such bucket {bucket!r} for {uri!r}"
        return ValueError(message) if listing else FileNotFoundError(message)
    if code in ("NoSuchKey", "404", "NotFound"):
        return FileNotFoundError(f"No such object: {uri!r}")
    if code in _DENIED:
        return PermissionError(
            f"Access denied to {uri!r} ({code}): check the credentials and their "
            f"permissions (the same for DALI's reads). {error}")
    if code in ("InvalidRange", "416"):
        return ValueError(f"The byte range asked of {uri!r} starts past its end.")
    return OSError(f"Request for {uri!r} failed ({code}): {error}")
