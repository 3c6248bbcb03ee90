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


def test_auto_augment_tables_hold_each_sub_policy_stage_by_stage():
    from nvidia.dali import pipeline_def
    from nvidia.dali.auto_aug import auto_augment

    policy = auto_augment.get_image_net_policy()
    found = {}

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def tables():
        probabilities, bins, ids, found["augmentations"] = \
            dali_hooks.auto_augment_tables(policy)
        return probabilities, bins, ids

    pipeline = tables()
    pipeline.build()
    probabilities, bins, ids = (out.as_array()[0] for out in pipeline.run())
    dali_hooks.shut_down(pipeline)
    augmentations = found["augmentations"]
    stages = max(len(sub_policy) for sub_policy in policy.sub_policies)
    assert probabilities.shape == bins.shape == ids.shape == (len(policy.sub_policies), stages)
    for row, sub_policy in enumerate(policy.sub_policies):
        for stage, (augmentation, probability, magnitude_bin) in enumerate(sub_policy):
            assert probabilities[row, stage] == pytest.approx(probability)
            if magnitude_bin is not None:
                assert bins[row, stage] == magnitude_bin
            assert augmentations[stage][ids[row, stage]].name == augmentation.name


def test_left_at_exit_takes_the_pipeline_out_of_dalis_exit_shutdown():
    import weakref

    from nvidia.dali import fn, pipeline_def
    from nvidia.dali.pipeline import Pipeline

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def numbers():
        return fn.random.uniform(shape=(2,))

    pipeline = numbers()
    pipeline.build()
    assert weakref.ref(pipeline) in Pipeline._pipes  # what DALI's atexit handler shuts down
    dali_hooks.left_at_exit(pipeline)
    assert weakref.ref(pipeline) not in Pipeline._pipes
    dali_hooks.shut_down(pipeline)
