"""The files of a dense task's source: a flat folder's images, image sizes, and the
one wording of files left unmatched. A folder may be local or in object storage
(`s3://`, `gs://`): a prefix is listed by `dalipipe.storage.remote_sources`, which
also resolves a table's paths (`resolve_path`) as it does for images alone."""

import os

from dalipipe import storage
from dalipipe.storage import remote_sources
from dalipipe.utils import IMAGE_EXTENSIONS, listing


def flat_images(folder, argument):
    """The image files directly in `folder`, sorted by name, as absolute paths (URIs
    for a prefix in object storage).

    Hidden files (`._Abyssinian_1.jpg`, which macOS archives add) and other files are
    left out; subfolders are not walked.

    Args:
        folder: a local folder, or an `s3://` or `gs://` prefix (one listing:
            `dalipipe.storage.remote_sources.flat_images`).
        argument: the argument that named it, for messages (`"directory"`, `"masks"`).

    Raises:
        ValueError: when `folder` is not a folder (an empty or missing prefix) or
            holds no image file.
        PermissionError, ConnectionError, ImportError: for a prefix, see
            `dalipipe.storage`.
    """
    folder = os.fspath(folder)
    if storage.is_remote(folder):
        try:
            found = remote_sources.flat_images(folder)
        except ValueError as e:
            raise ValueError(f"`{argument}` must be a folder of image files. Received: "
                             f"{argument}={folder!r} ({e})") from e
    elif not os.path.isdir(folder):
        raise ValueError(f"`{argument}` must be a folder of image files. "
                         f"Received: {argument}={folder!r}")
    else:
        found = sorted(
            os.path.abspath(os.path.join(folder, name)) for name in os.listdir(folder)
            if not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)
            and os.path.isfile(os.path.join(folder, name))
        )
    if not found:
        raise ValueError(f"No image files found in `{argument}`={folder!r}. "
                         f"Allowed formats: {IMAGE_EXTENSIONS}")
    return found


def stem(path):
    """The file name without folder and extension: `'a/Abyssinian_1.jpg'` gives
    `'Abyssinian_1'`."""
    return os.path.splitext(os.path.basename(path))[0]


def unmatched(count_what, paths):
    """`"<n> <count_what>: <the first paths>"`, the wording of files left unmatched."""
    return f"{len(paths)} {count_what}: {listing(paths)}"


def image_size(data, path="<bytes>"):
    """`(width, height)` of an image from its header, as PIL's `Image.size`.

    Raises:
        ValueError: naming `path`, for bytes PIL cannot identify.
    """
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise ValueError(f"The image {path!r} cannot be decoded ({e})") from e


def read_size(path):
    """`image_size` of the file at `path` (local or `s3://`, `gs://`).

    Raises:
        ValueError: naming `path`, for a file that cannot be read or decoded.
    """
    from dalipipe.storage.fetch import read_files

    (data, reason), = read_files([path])
    if data is None:
        raise ValueError(f"The image {path!r} cannot be read: {reason}")
    return image_size(data, path)
