"""Each pass's inputs, built ahead: `InputsAhead`, one per `ImagePipeline`.

A pass's inputs (`ImagePipeline.epoch_inputs`: the order, the random draws, with
boxes their placement, packed) are O(N) NumPy and Python work: at 1.28M samples
about 1 s with `mix`, 4 s with boxes. Built when a pass starts, they would stall the
thread that reads it (the training thread on the native formats, the feed on
`format="tf"`). So they are asked for (`prepare`) as soon as the pass they serve is
known, and built in the background, for the pass to take (`get`): the dataset's
`passes.Cursor` asks for the first pass's when the dataset is made and for the
pass at each position set (`set_position`: a resumed epoch, from its step), and when
a training pass of epoch `e` starts, for epoch `e + 1` from its first step. A pass
whose inputs were not asked for (another position than the one foreseen) builds
its own in its thread. A `get` of inputs being built waits for that build rather
than starting another; of inputs asked for and not yet started, it builds them
itself.

One background thread of the process builds the inputs asked for, one at a time,
in the order asked (the O(N) work takes Python's lock for much of its time: two
builds at once would take no less time in all, and would slow the thread that
trains). It holds each `InputsAhead` by a weak reference between builds: the builds
asked for by a dataset collected before they start are dropped. The thread ends
when nothing is left to build.

The inputs are the very arrays `epoch_inputs` returns, for the same
`(epoch, start_batch)`: ahead or not, they are equal bit for bit. They are marked
read-only (`writeable = False`) before anyone reads them: the native runner, the
TensorFlow inputs and the cache only slice and gather them, and a write would raise.
A pipeline whose inputs do not depend on the epoch (no shuffle, nothing random:
a validation split) keeps one epoch's.
"""

import collections
import os
import threading
import weakref

from dalipipe import feed

# The inputs kept, by `(epoch, start_batch)`: the pass under way's, the next one's,
# and one more (a pass left early and restarted; `format="tf"` keeps three epochs).
KEEP = 3

# A build's states: asked for and not started, being built, done (`inputs` or `error`).
_QUEUED, _RUNNING, _DONE = "queued", "running", "done"


class _Build:
    """One build of a pass's inputs: done when `event` is set, with `inputs` or
    `error`."""

    def __init__(self, state):
        self.state = state
        self.event = threading.Event()
        self.inputs = None
        self.error = None


class InputsAhead:
    """The inputs of an `ImagePipeline`'s passes by `(epoch, start_batch)`, the last
    `KEEP` of them, built in the background thread when asked ahead. Thread-safe.

    Args:
        image_pipeline: the pipeline whose `epoch_inputs` are built.

    Attributes:
        built: `(epoch, start_batch, ahead)` of the last 64 builds, in order
            (`ahead`: in the background thread).
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
        key = self._key(epoch, start_batch)
        build, mine = self._claim(key, take=True)
        if mine:
            self._run(build, epoch, start_batch, ahead=False)
        build.event.wait()
        if build.error is None:
            return build.inputs
        with self._lock:
            if self._builds.get(key) is build:
                del self._builds[key]
        if mine:
            raise build.error
        return self.get(epoch, start_batch)  # a build ahead failed: its error raised here

    def prepare(self, epoch, start_batch=0):
        """Has the inputs of `(epoch, start_batch)` built in the background thread,
        unless they are kept or asked for already. A `start_batch` outside
        `[0, steps)` is ignored (the `get` that asks for it raises)."""
        try:
            start_batch = self.image_pipeline.check_start_batch(start_batch)
        except ValueError:
            return
        build, mine = self._claim(self._key(epoch, start_batch), take=False)
        if mine:
            _BUILDER.ask(self, build, int(epoch), start_batch)

    def _claim(self, key, *, take):
        """`(build, mine)`: the build of `key`, and whether the caller is to run it:
        a new one (asked for in the background unless `take`; the oldest kept past
        `KEEP` are dropped), or with `take`, one asked for and not yet started."""
        with self._lock:
            build = self._builds.get(key)
            if build is not None:
                self._builds.move_to_end(key)
                if take and build.state == _QUEUED:
                    build.state = _RUNNING
                    return build, True
                return build, False
            build = self._builds[key] = _Build(_RUNNING if take else _QUEUED)
            while len(self._builds) > KEEP:
                self._builds.popitem(last=False)
            return build, True

    def _start(self, build):
        """Whether the background thread is to run `build`: still asked for (kept,
        not dropped past `KEEP`), and not taken by a `get` meanwhile."""
        with self._lock:
            if build.state != _QUEUED or not any(b is build for b in self._builds.values()):
                return False
            build.state = _RUNNING
            return True

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
            build.state = _DONE
            build.event.set()


class _Builder:
    """The background thread that builds the inputs asked for, one at a time, in
    order: started when one is asked for, ended when none is left."""

    def __init__(self):
        self._reset()

    def _reset(self):
        # Also in a forked child, where the parent's thread does not run.
        self._asked = collections.deque()  # of (weak InputsAhead, build, epoch, start)
        self._lock = threading.Lock()
        self._thread = None

    def ask(self, inputs_ahead, build, epoch, start_batch):
        with self._lock:
            self._asked.append((weakref.ref(inputs_ahead), build, epoch, start_batch))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="dalipipe-inputs-ahead",
                                                daemon=True)
                self._thread.start()

    def _work(self):
        while True:
            with self._lock:
                if not self._asked:
                    self._thread = None
                    return
                ref, build, epoch, start_batch = self._asked.popleft()
            inputs_ahead = ref()  # None: its dataset was collected, nothing to build
            if inputs_ahead is not None and inputs_ahead._start(build):
                inputs_ahead._run(build, epoch, start_batch, ahead=True)
            del inputs_ahead


_BUILDER = _Builder()
os.register_at_fork(after_in_child=_BUILDER._reset)  # builds asked there are taken by `get`
