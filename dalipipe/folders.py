"""A local folder as `dalipipe.sources` indexes it: its class folders, and its image
files in the order of Keras's `image_dataset_from_directory`.

Pure Python: nothing here imports DALI or TensorFlow.
"""

import os

from dalipipe.utils import IMAGE_EXTENSIONS, UNDECODABLE_EXTENSIONS


class LocalTree:
    """What a local folder holds, for `sources._index_directory` (which walks a
    prefix in object storage through `storage.remote_sources.RemoteTree`, with the same
    methods)."""

    def __init__(self, directory, follow_links):
        self.directory, self.follow_links = directory, follow_links

    def subdirs(self):
        """The class folders: sorted subfolders, hidden ones left out."""
        return sorted(
            d for d in os.listdir(self.directory)
            if os.path.isdir(os.path.join(self.directory, d)) and not d.startswith(".")
        )

    def images(self, subdir):
        """`list_images` of the subfolder `subdir`, or of the whole folder for None."""
        folder = self.directory if subdir is None else os.path.join(self.directory, subdir)
        return list_images(folder, self.follow_links)

    def loose_images(self):
        """Image files beside the class folders."""
        return [
            os.path.join(self.directory, f)
            for f in sorted(os.listdir(self.directory))
            if os.path.isfile(os.path.join(self.directory, f)) and looks_like_image(f)
        ]


def list_images(folder, follow_links):
    """Image files under `folder`, and images DALI cannot decode, in Keras's order.

    Keras's order: folders sorted by path, each folder's files sorted by name.
    Symbolic links to folders are followed only with `follow_links` (a link back
    into the tree is not followed twice); `folder` itself may be a link.
    """
    images, others, seen = [], [], set()
    walk = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=follow_links):
        real = os.path.realpath(dirpath)
        if real in seen:  # a symbolic link back into the tree
            dirnames.clear()
            continue
        seen.add(real)
        walk.append((dirpath, filenames))
    for dirpath, filenames in sorted(walk, key=lambda entry: entry[0]):
        for f in sorted(filenames):
            path = os.path.abspath(os.path.join(dirpath, f))
            if f.lower().endswith(IMAGE_EXTENSIONS):
                images.append(path)
            elif looks_like_image(f):
                others.append(path)
    return images, others


def looks_like_image(name):
    """Image files, decodable or not; other files (a labels.csv) are not samples."""
    return name.lower().endswith(IMAGE_EXTENSIONS + UNDECODABLE_EXTENSIONS)
