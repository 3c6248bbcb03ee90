"""Every private DALI attribute dalipipe touches, behind named functions.

DALI's TensorFlow plugin builds a Python pipeline only to read its inputs, and DALI
offers no public call that releases a pipeline's threads and device state before it
is collected, nor one that spares a pipeline its shutdown at exit; its `auto_aug.auto_augment` picks a sub-policy per sample from its own
random numbers, and the tables that its `apply_auto_augment` reads (which
`dalipipe.recipes.AutoAugment` reads with the epoch's numbers) are private. What
dalipipe needs of DALI's internals is done here only, so that a
DALI release that renames it breaks one module, and `tests/test_dali_hooks.py`,
which checks each on real DALI pipelines, says which.

Imports DALI inside its functions only. Checked on DALI 2.4.
"""


def shut_down(pipeline):
    """Stops `pipeline`'s worker threads and frees its device state now, rather than
    when it is collected (`Pipeline._shutdown`, which DALI's `atexit` handler calls
    for the pipelines still alive). The pipeline cannot run afterwards."""
    pipeline._shutdown()


def left_at_exit(pipeline):
    """Leaves `pipeline` out of the shutdown that DALI's `atexit` handler does of the
    pipelines still alive (`Pipeline._pipes`, a set of weak references): a pipeline
    whose run waits on a stalled input (a read in storage) would hold the exiting
    process until that input returns."""
    import weakref

    from nvidia.dali.pipeline import Pipeline

    Pipeline._pipes.discard(weakref.ref(pipeline))


def auto_augment_tables(policy):
    """The tables through which DALI's `apply_auto_augment` applies `policy` (an
    `nvidia.dali.auto_aug.core.Policy`), made in the graph being defined.

    Returns:
        `(probabilities, magnitude_bins, augmentation_ids, augmentations)`: three
        constant graph nodes, each a row per sub-policy and a column per stage (the
        stage's probability, magnitude bin, and the index of its augmentation in
        `augmentations[stage]`), and `augmentations`, the augmentations each stage
        chooses among.
    """
    from nvidia.dali.auto_aug import auto_augment

    ids, augmentations = auto_augment._sub_policy_to_augmentation_map(policy)
    return (auto_augment._sub_policy_to_probability_map(policy),
            auto_augment._sub_policy_to_magnitude_bin_map(policy), ids, augmentations)
