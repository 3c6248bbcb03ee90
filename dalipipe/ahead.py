"""Each pass's inputs, built ahead: `InputsAhead`, one per `ImagePipeline`.

A pass's inputs (`ImagePipeline.epoch_inputs`: the order, the random draws, with
boxes their placement, packed) are O(N) NumPy and Python work: at 1.28M samples
about 1 s with `mix`, 4 s with boxes. Built when a pass starts, they would stall the
thread that reads it (the training thread on the native formats, the feed on
`format="tf"`). So when a training pass of epoch `e` starts, its `passes.Cursor`
asks for epoch `e + 1` from its first step (`prepare`), which a background thread
builds while epoch `e` runs; the next pass takes them (`get`) if it loads that
epoch from that step, and builds its own in its thread otherwise (a resumed
position, a pass left early and restarted at another step). A `get` of inputs still
being built waits for that build rather than starting another.

The inputs are the very arrays `epoch_inputs` returns, for the same
`(epoch, start_batch)`: ahead or not, they are equal bit for bit. They are marked
read-only (`writeable = False`) before anyone reads them: the native runner, the
TensorFlow inputs and the cache only slice and gather them, and a write would raise.
A pipeline whose inputs do not depend on the epoch (no shuffle, nothing random:
a validation split) keeps one epoch's.
"""

import collections
import threading

from dalipipe import feed

# The inputs kept, by `(epoch, start_batch)`: the pass under way's, the next one's,
# and one more (a pass left early and restarted; `format="tf"` keeps three epochs).
KEEP = 3


class _Build:
    """One build of a pass's inputs: done when `event` is set, with `inputs` or
    `error`."""

    def __init__(self):
        self.event = threading.Event()
        self.inputs = None
        self.error = None


class InputsAhead:
    """The inputs of an `ImagePipeline`'s passes by `(epoch, start_batch)`, the last
    `KEEP` of them, built in a background thread when asked ahead. Thread-safe.

    Args:
        image_pipeline: the pipeline whose `epoch_inputs` are built.

    Attributes:
        built: `(epoch, start_batch, ahead)` of the last 64 builds, in order
            (`ahead`: in a background thread).
    """

    def __init__(self, image_pipeline):
        self.image_pipeline = image_pipeline
        options = image_pipeline.options
        # Inputs the same in every epoch: one epoch's serve them all.
        self._same_every_epoch = not options.shuffle and not feed.random_parts(options)
        self._builds = collections.OrderedDict()
        self._lock = threading.Lock()
        self.built = collections.deque(maxlen=64)

    def _key(self, epoch, start_batch):
        return (0 if self._same_every_epoch else int(epoch)), int(start_batch)

    def get(self, epoch, start_batch=0):
        """`ImagePipeline.epoch_inputs(epoch, start_batch=start_batch)`, read-only:
        the ones built ahead (waited for while their build runs), or built here.

        Raises:
            ValueError: for a `start_batch` outside `[0, steps)`.
            The error of the build (one made here, after a build ahead failed).
        """
        start_batch = self.image_pipeline.check_start_batch(start_batch)
        build, mine = self._claim(self._key(epoch, start_batch))
        if mine:
            self._run(build, epoch, start_batch, ahead=False)
        build.event.wait()
        if build.error is None:
            return build.inputs
        key = self._key(epoch, start_batch)
        with self._lock:
            if self._builds.get(key) is build:
                del self._builds[key]
        if mine:
            raise build.error
        return self.get(epoch, start_batch)  # a build ahead failed: its error raised here

    def prepare(self, epoch, start_batch=0):
        """Starts building the inputs of `(epoch, start_batch)` in a background thread,
        unless they are kept or being built."""
        build, mine = self._claim(self._key(epoch, start_batch))
        if mine:
            threading.Thread(target=self._run, args=(build, epoch, start_batch, True),
                             name="dalipipe-inputs-ahead", daemon=True).start()

    def _claim(self, key):
        """`(build, mine)`: the build of `key`, and whether the caller is to run it
        (a new one; the oldest kept past `KEEP` are dropped)."""
        with self._lock:
            build = self._builds.get(key)
            if build is not None:
                self._builds.move_to_end(key)
                return build, False
            build = self._builds[key] = _Build()
            while len(self._builds) > KEEP:
                self._builds.popitem(last=False)
            return build, True

    def _run(self, build, epoch, start_batch, ahead):
        try:
            inputs = self.image_pipeline.epoch_inputs(epoch, start_batch=start_batch)
            for array in inputs:
                if array is not None:
                    array.flags.writeable = False
            build.inputs = inputs
            self.built.append((int(epoch), int(start_batch), ahead))
        except BaseException as e:  # raised by the `get` that takes them
            build.error = e
        finally:
            build.event.set()
