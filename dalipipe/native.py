"""The native runner: an `ImagePipeline`'s DALI graph run from Python, NumPy out.

No TensorFlow. `ImagePipeline.epoch` and `ImagePipeline.run` use it; the GPU tests
and `benchmarks/gpu_bench.py` run the graph this way.
"""

import numpy as np

from dalipipe import sampling


class Runner:
    """Feeds an `ImagePipeline`'s graph from NumPy inputs, one epoch per `run`.

    The DALI pipeline is built once, on the first `run`, and reset for each.
    """

    def __init__(self, image_pipeline):
        self.image_pipeline = image_pipeline
        self.batches = {}
        self.position = {}
        self.pipe = None

    def run(self, sample_ids, random=None, weights=None, *, copy_to_host=True):
        """See `ImagePipeline.run` (a generator: nothing runs before the first batch)."""
        count = len(sample_ids)
        inputs = {
            "samples": np.asarray(sample_ids),
            "random": np.zeros((count, sampling.NUM_RANDOM), np.float32)
            if random is None else np.asarray(random, np.float32),
            "weights": np.ones(count, np.float32)
            if weights is None else np.asarray(weights, np.float32),
        }
        if self.pipe is None:
            from nvidia.dali.pipeline import do_not_convert

            self.pipe = self.image_pipeline.dali_pipeline(feed=do_not_convert(self.source))
            self.pipe.build()
        size = self.image_pipeline.batch_size
        self.batches = {
            name: [values[i: i + size] for i in range(0, count, size)]
            for name, values in inputs.items()
        }
        self.position = dict.fromkeys(inputs, 0)
        self.pipe.reset()
        while True:
            try:
                outputs = self.pipe.run()
            except StopIteration:
                return
            if not copy_to_host:
                yield tuple(outputs)
            elif self.image_pipeline.unbatched:  # batches of one: single samples
                yield tuple(_to_numpy(out)[0] for out in outputs)
            else:
                yield tuple(_to_numpy(out) for out in outputs)

    def source(self, name):
        """The callable that gives the next batch of input `name`.

        Not graph code: DALI's conditionals (`color_mode="rgba"`) must not convert it.
        """
        from nvidia.dali.pipeline import do_not_convert

        @do_not_convert
        def next_batch():
            i = self.position[name]
            if i >= len(self.batches[name]):
                raise StopIteration
            self.position[name] = i + 1
            batch = self.batches[name][i]
            return self.image_pipeline.load_samples(batch) if name == "samples" else batch

        return next_batch


def _to_numpy(tensor_list):
    if hasattr(tensor_list, "as_cpu"):
        tensor_list = tensor_list.as_cpu()
    return np.array(tensor_list.as_tensor())
