"""`fit` through `DALIPyDataset.map` and through a user's `PyDataset` wrapping a
`DALIPyDataset` (issue 46's `Minus1`): run in pytest's process on TensorFlow
(`test_map.py`) and by `backend_job.py`'s MODE `map` on torch and JAX (and on a GPU,
`test_gpu.py`)."""

import keras

import dalipipe
from backend_job import OPTIONS, tag_of_batch

MAP_OPTIONS = dict(OPTIONS, batch_size=32, seed=3, augment=True)  # 4 steps


class Minus1(keras.utils.PyDataset):
    """The wrapper of issue 46: a user's `PyDataset` around a `DALIPyDataset`,
    recording the tags of each batch it gives."""

    def __init__(self, dataset, seen, **kwargs):
        super().__init__(**kwargs)
        self.dataset, self.seen = dataset, seen

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        x, y = self.dataset[i]
        self.seen.append(tag_of_batch(x))
        return x, y - 1 + 1


def map_fits(tagged_dir, epochs=3):
    """For `fit` through `ds.map(fn)` and through `Minus1`: whether the last batches
    that `fn` saw are the native epochs 0, 1, ... in order, whether two epochs
    differ, and the dataset's cursor after `fit`."""
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **MAP_OPTIONS)
    native = [[tag_of_batch(images) for images, _ in pipeline.epoch(e)] for e in range(epochs)]
    found = {}
    for how in ("map", "wrapper"):
        dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **MAP_OPTIONS)
        seen = []

        devices = set()

        def record(images, labels):
            seen.append(tag_of_batch(images))
            devices.add(str(getattr(images, "device", "numpy")))
            return images, labels

        data = dataset.map(record) if how == "map" else Minus1(dataset, seen)
        model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.GlobalAveragePooling2D(),
                                  keras.layers.Dense(3)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(data, epochs=epochs, verbose=0)
        want = [b for batches in native for b in batches]
        found[how] = {"native": seen[-len(want):] == want, "differ": native[0] != native[1],
                      "cursor": list(dataset._cursor.position)}
        if how == "map":
            found[how]["devices"] = sorted(devices)
    return found
