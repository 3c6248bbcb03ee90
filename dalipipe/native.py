"""The native runner: an `ImagePipeline`'s DALI graph run from Python, NumPy out.

No TensorFlow. `ImagePipeline.epoch` and `ImagePipeline.run` use it; the GPU tests
and `benchmarks/gpu_bench.py` run the graph this way.

DALI's decoder names no file when it fails ("Failed to decode sample #5 : ", the
samples carrying no source info), so the runner finds the file: DALI raises the
error with the batch that `pipe.run()` was to return, and the runner knows which
samples it fed in that batch and the ones after it. With `masks`, a sample's mask is
a file DALI decodes too, and is named when it is the one rejected.
"""

import re
import time

import numpy as np

from dalipipe import cache, checks, dali_hooks
from dalipipe.ranges import samples as ranges

# DALI's decoder errors: a sample it cannot decode, a header nvImageCodec cannot read.
_DECODE_FAILURE = re.compile(r"Failed to decode sample #(\d+)|nvImageCodec failure")


class Runner:
    """Feeds an `ImagePipeline`'s graph from NumPy inputs, one epoch per `run`.

    The DALI pipeline is built once, on the first `run`, and reset for each. A run
    left before its end (Keras's first-batch peek, a pass restarted at another step)
    leaves batches in flight in DALI's queue: the next run ends it first (its
    inputs end there, and the batches in flight are run and dropped), and the same
    pipeline serves it, with its threads, its decoder's set-up and its memory. A
    pipeline that fails (an error of DALI's, in a run or while the batches in flight
    are dropped) is shut down at once (`dali_hooks.shut_down`), and the next run
    builds another.

    Attributes:
        pipe: the DALI pipeline, or None before the first run and after a failure.
        built: the DALI pipelines built so far.
    """

    def __init__(self, image_pipeline):
        self.image_pipeline = image_pipeline
        self.batches = {}
        self.position = {}
        self.pipe = None
        self.built = 0
        self.finished = True  # whether the last run was read to its end
        self.load_seconds = 0.0  # spent giving DALI its inputs (`dalipipe.report`)
        self._run_token = None  # the run under way's: an earlier run's generator stops

    def run(self, sample_ids, random=None, weights=None, *, copy_to_host=True):
        """See `ImagePipeline.run` (a generator: nothing runs before the first batch)."""
        count = len(sample_ids)
        if random is None and self.image_pipeline.options.boxes is not None:
            raise ValueError("With `boxes`, `random` holds each sample's boxes: pass the "
                             "`random` of `ImagePipeline.epoch_inputs`. Received: random=None")
        inputs = {
            "samples": np.asarray(sample_ids),
            "cached": np.asarray(sample_ids),
            "random": np.zeros((count, self.image_pipeline.num_random), np.float32)
            if random is None else np.asarray(random, np.float32),
            "weights": np.ones(count, np.float32)
            if weights is None else np.asarray(weights, np.float32),
        }
        self._end_left_run()
        if self.pipe is None:
            from nvidia.dali.pipeline import do_not_convert

            self.pipe = self.image_pipeline.build_dali_pipeline(feed=do_not_convert(self.source))
            self.built += 1
            self.pipe.build()
        size = self.image_pipeline.batch_size
        self.batches = {  # the graph's inputs only ("cached" only with a cache)
            name: [inputs[name][i: i + size] for i in range(0, count, size)]
            for name in self.image_pipeline.input_names
        }
        self.position = dict.fromkeys(self.batches, 0)
        self.pipe.reset()
        self.finished = False
        token = self._run_token = object()
        store = self.image_pipeline.cache
        if store is not None:
            store.pass_ended()  # what other processes stored meanwhile
        returned = 0
        while True:
            if self._run_token is not token:
                raise RuntimeError(
                    "This run of the DALI pipeline was ended by a later one: read a run "
                    "before starting the next (a run left is ended by the next).")
            try:
                outputs = self.pipe.run()
            except StopIteration:
                self.finished = True
                if store is not None:
                    store.pass_ended()
                return
            except RuntimeError as e:
                self._release()  # no longer valid: the next run builds one
                message = self.decode_failure(str(e), returned)
                if message is None:
                    raise
                raise RuntimeError(message) from e
            returned += 1
            if store is not None:  # the cache's outputs: stored, then dropped
                *outputs, images, sizes, slots = outputs
                store.fill(lambda: cache.host_array(images), lambda: cache.host_array(sizes),
                           cache.host_array(slots))
            if not copy_to_host:
                yield tuple(outputs)
                continue
            reused = not self.pipe.exec_dynamic
            arrays = tuple(_to_numpy(out, reused=reused) for out in outputs)
            if self.image_pipeline.unbatched:  # batches of one: single samples
                arrays = tuple(array[0] for array in arrays)
            yield arrays

    def _end_left_run(self):
        """Ends the run left before its end, if any: its inputs end where it was
        left, and DALI runs the batches it has in flight, which are dropped, so that
        its pipeline can start the next run. A failure there (a file that DALI
        cannot decode, in a batch nobody reads) shuts the pipeline down instead."""
        if self.finished or self.pipe is None:
            return
        self._run_token = None
        for name, batches in self.batches.items():
            self.position[name] = len(batches)  # every input ends here
        try:
            while True:
                self.pipe.run()
        except StopIteration:
            self.finished = True
        except Exception:  # DALI's error, raised again by a run that reads its batch
            self._release()

    def _release(self):
        """Shuts the DALI pipeline down now (its threads, its device memory) rather
        than when it is collected; the next run builds another."""
        pipe, self.pipe = self.pipe, None
        self.finished = True
        if pipe is not None:
            dali_hooks.shut_down(pipe)

    def decode_failure(self, error, batch):
        """The message for DALI's decoder `error` in batch number `batch`, naming the
        files and their reasons; None for any other error.

        The candidates are the samples fed in that batch and later ones (at the
        sample number DALI gives, if it gives one); the decoder of the check decodes
        each in full, on the pipeline's device, and the ones it rejects are named.
        Failing that, the sample DALI numbers is named as the one it rejected.
        """
        match = _DECODE_FAILURE.search(error)
        if match is None:
            return None
        fed = self.batches["samples"][batch:self.position["samples"]]
        number = None if match.group(1) is None else int(match.group(1))
        candidates = [int(sample) for samples in fed
                      for i, sample in enumerate(samples) if number in (None, i)]
        named = {}
        for sample in candidates:
            named.update(self.recheck(sample))
        if not named and number is not None and fed and number < len(fed[0]):
            sample = fed[0][number]
            mask = self.mask_of(sample)
            named[self.image_pipeline.file_paths[sample]] = (
                "DALI's decoder rejects it (the check's decoder decodes it here)" if mask is None
                else f"DALI's decoder rejects it or its mask {mask} (the check's decoder "
                     "decodes both here)")
        if not named:
            return None
        advice = ("Fix or remove it; `dalipipe check --full SOURCE` lists every file that "
                  "DALI cannot decode.")
        if len(named) == 1:
            ((path, reason),) = named.items()
            return f"DALI failed to decode {path}: {reason}. {advice}"
        listed = "\n".join(f"  {path}: {reason}" for path, reason in named.items())
        return f"DALI failed to decode one of these files. {advice}\n{listed}"

    def recheck(self, sample):
        """`{path: reason}` of the files of sample `sample` that the check's decoder,
        decoding in full, rejects: its image (on the pipeline's device) and, with
        `masks`, its mask (on the CPU, where the graph decodes masks)."""
        pipeline = self.image_pipeline
        device = dict(device=pipeline.device, device_id=pipeline.device_id or 0)
        path = pipeline.file_paths[sample]
        if not pipeline.from_tfrecord:
            reason = checks.check_file(path, full=True, **device)
        else:
            index = pipeline.index
            data = ranges.load_encoded(index.tfrecord_files, index.refs[[sample]])[0]
            reason = checks.check_bytes(data, full=True, **device)
        found = {} if reason is None else {path: reason}
        mask = self.mask_of(sample)
        if mask is not None and pipeline.index.mask_refs is not None:  # a tar shard's
            from dalipipe.annotations.members import mask_bytes

            reason = checks.check_bytes(mask_bytes(pipeline.index, [sample])[0], full=True)
        else:
            reason = None if mask is None else checks.check_file(mask, full=True)
        if reason is not None:
            found[mask] = f"{reason}, the mask of {path}"
        return found

    def mask_of(self, sample):
        """The mask file the graph reads for sample `sample`, or None without `masks`."""
        masks = self.image_pipeline.index.mask_paths
        return None if masks is None else masks[int(sample)]

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
            if name not in ("samples", "cached"):
                return batch
            started = time.perf_counter()
            if name == "cached":
                found = self.image_pipeline.cache.rows(batch)
            else:
                found = self.image_pipeline.load_samples(batch)
            self.load_seconds += time.perf_counter() - started
            return found

        return next_batch


def _to_numpy(tensor_list, *, reused):
    """A dense batch of DALI's as a NumPy array that stays valid after the next batch,
    copied once at most.

    A GPU batch: `as_cpu()` copies it into a new host buffer, which the array views
    (the one copy). A CPU batch: DALI's default executor (`exec_dynamic`) gives each
    batch buffers of its own, kept while the array views them, so it is not copied;
    with `reused` (the older executor, which writes later batches into the same
    buffers) it is copied.
    """
    from nvidia.dali.tensors import TensorListCPU

    if not isinstance(tensor_list, TensorListCPU):
        return np.asarray(tensor_list.as_cpu().as_tensor())
    if reused:
        return np.array(tensor_list.as_tensor())
    return np.asarray(tensor_list.as_tensor())
