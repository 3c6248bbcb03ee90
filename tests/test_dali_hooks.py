"""`dalipipe.dali_hooks`: each private DALI attribute that dalipipe uses, checked on real
DALI pipelines, so that a DALI release that changes one fails here by name."""

import os

import pytest

from dalipipe import dali_hooks


def os_threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_shut_down_stops_the_pipelines_threads():
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=2, num_threads=4, device_id=None)
    def numbers():
        return fn.random.uniform(shape=(2,))

    before = os_threads()
    pipeline = numbers()
    pipeline.build()
    (out,) = pipeline.run()
    assert out.as_array().shape == (2, 2)
    assert os_threads() >= before + 4
    dali_hooks.shut_down(pipeline)
    assert os_threads() <= before
