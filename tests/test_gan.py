import dataclasses
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from gan.configs import CONFIGS, get_config
from gan.data import digits_batches, in_memory_batches
from gan.layers import ConditionalBatchNormalization, spectral_norm
from gan.model import ConditionalGAN, hinge_discriminator_loss, hinge_generator_loss
from gan.models import build_discriminator, build_generator
from kctx.testing import mirrored_strategy
from workflow_runs import GAN_HALF_WIDTHS, ROOT, assert_same_update, environment


def _gan(config, context="ham_nmf", g_opt=None, d_opt=None, ema_decay=None, ema_start=0,
         seed=0):
    """``context``: one block for G and D, or a (G's, D's) pair."""
    keras.utils.set_random_seed(seed)
    g_context, d_context = (context, context) if isinstance(context, str) else context
    gan = ConditionalGAN(build_generator(config, g_context),
                         build_discriminator(config, d_context),
                         ema_decay=ema_decay, ema_start=ema_start, d_steps=config.d_steps)
    gan.compile(
        g_opt or keras.optimizers.Adam(config.g_learning_rate, config.beta_1, config.beta_2),
        d_opt or keras.optimizers.Adam(config.d_learning_rate, config.beta_1, config.beta_2),
    )
    return gan


def _random_batches(config, batch_size, seed=0):
    rng = np.random.default_rng(seed)
    shape = (4 * batch_size, config.resolution, config.resolution, config.image_channels)
    images = rng.uniform(-1, 1, shape).astype("float32")
    labels = rng.integers(0, config.num_classes, 4 * batch_size).astype("int32")
    return in_memory_batches(images, labels, batch_size, config.latent_dim, config.num_classes,
                             seed=seed)


def _networks(name):
    """What of a config builds G and D and makes a step: all but its name and the
    optimisation recipe's batch size (the test's is 2)."""
    return dataclasses.replace(get_config(name, batch_size=2), name="")


# Each distinct pair of networks once (HamGAN-baby and -strong differ only in batch size).
DISTINCT_CONFIGS = sorted({_networks(name): name for name in sorted(CONFIGS, reverse=True)}
                          .values())


@pytest.mark.parametrize("name", DISTINCT_CONFIGS)
def test_every_config_builds_and_trains(name):
    """One eager step of each config at batch 2. Eagerly: a traced step of the 64² and 128²
    networks keeps about 1 GB in TensorFlow's runtime after the model is gone (measured with
    KCTX_TEST_MEMORY), and the traced step is the digits config's below, the same
    train_step."""
    config = get_config(name, batch_size=2)
    gan = _gan(config)
    gan.compile(gan.g_optimizer, gan.d_optimizer, run_eagerly=True)
    history = gan.fit(_random_batches(config, 2), steps_per_epoch=1, epochs=1,
                      verbose=0).history
    for key in ("d_loss", "g_loss"):
        assert np.isfinite(history[key][-1]), (name, history)
    labels = tf.constant([0, 1]) % config.num_classes  # celeba64 has a single class
    sample = gan([tf.random.normal((2, config.latent_dim)), labels])
    assert tuple(sample.shape) == (2, config.resolution, config.resolution, config.image_channels)
    assert float(tf.reduce_max(tf.abs(sample))) <= 1.0


def test_generator_computes_its_image_in_float32_under_mixed_bfloat16():
    """Under mixed_bfloat16 the blocks compute in bfloat16 and the image's last convolution
    and tanh in float32 (on PyTorch's CPU kernels without oneDNN bfloat16, the gradient of a
    one-channel bfloat16 convolution fails: the GAN's killed and resumed PyTorch run)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        generator = build_generator(get_config("digits"))
    finally:
        keras.config.set_dtype_policy(previous)
    last = generator.get_layer("sn_g_conv_out")
    assert last.compute_dtype == last.layer.compute_dtype == "float32"
    assert generator.get_layer("sn_g_block2_conv2").compute_dtype == "bfloat16"
    z, labels = tf.random.normal((2, get_config("digits").latent_dim)), tf.constant([1, 7])
    with tf.GradientTape() as tape:
        images = generator([z, labels], training=True)
        loss = tf.reduce_mean(images)
    assert images.dtype == tf.float32
    gradient = tape.gradient(loss, last.layer.kernel)
    assert gradient.dtype == tf.float32 and np.isfinite(gradient.numpy()).all()


def test_sagan_128_sizes():
    assert "imagenet128_hamgan_baby" in DISTINCT_CONFIGS
    assert "imagenet128_hamgan_strong" not in DISTINCT_CONFIGS
    config = get_config("imagenet128_hamgan_baby")
    assert (config.batch_size, config.g_learning_rate, config.d_learning_rate,
            config.beta_1, config.d_steps) == (256, 1e-4, 4e-4, 0.0, 1)
    assert get_config("imagenet128_hamgan_strong").batch_size == 1024
    g, d = build_generator(config), build_discriminator(config)
    # The ham sits at 32×32: d = 4·64 = 256 channels in G, 2·64 = 128 in D, r = d / 8.
    assert g.get_layer("g_context").rank == 32 and d.get_layer("d_context").rank == 16
    assert g.get_layer("g_context").output.shape[1:3] == (32, 32)
    assert d.get_layer("d_context").output.shape[1:3] == (32, 32)
    with pytest.raises(ValueError, match="Unknown GAN config 'imagenet64'"):
        get_config("imagenet64")


def test_one_step_on_two_replicas_equals_one_replica(monkeypatch):
    """The ham (its bases fixed: random ones are drawn per replica) in G and self-attention
    in D: one traced pair of steps on two replicas for both blocks and the plain G/D."""
    import gan.models

    original = gan.models.context_block

    def fixed_bases(block, /, **kwargs):
        if block.startswith("ham"):
            kwargs.update(init="fixed", seed=0)
        return original(block, **kwargs)

    monkeypatch.setattr(gan.models, "context_block", fixed_bases)
    config = get_config("digits", batch_size=8)
    sgd = lambda: keras.optimizers.SGD(0.01)  # noqa: E731 - linear in the gradient
    single = _gan(config, ("ham_nmf", "self_attention"), sgd(), sgd(), ema_decay=0.5)
    initial = single.get_weights()
    before = {net: [v.numpy() for v in getattr(single, net).variables]
              for net in ("generator", "discriminator", "ema_generator")}
    single.fit(digits_batches(8, config.latent_dim, seed=3), steps_per_epoch=1, verbose=0)
    with mirrored_strategy(2).scope():
        multi = _gan(config, ("ham_nmf", "self_attention"), sgd(), sgd(), ema_decay=0.5)
        multi.set_weights(initial)
    multi.fit(digits_batches(8, config.latent_dim, seed=3), steps_per_epoch=1, verbose=0)
    # Rounding only: the batch of 8 and the two of 4 run different oneDNN kernels (they
    # differed by 1.1e-4 in G's SN linear kernel on a Sapphire Rapids CPU), so the
    # updates are compared relative to their size (tests/workflow_runs.py).
    for net in ("generator", "discriminator", "ema_generator"):
        assert_same_update(before[net], [v.numpy() for v in getattr(single, net).variables],
                           [v.numpy() for v in getattr(multi, net).variables], label=net)


def test_pytorch_steps_make_the_tensorflow_update(tmp_path):
    """The GAN's step on PyTorch (gradients from ``torch.autograd``; D called on real then
    fake images while spectral normalisation assigns its kernels in place) makes the
    TensorFlow step's update: two steps of G, D and G's EMA from the same weights
    (tests/gan_step_check.py)."""
    from gan_step_check import two_steps

    initial = tmp_path / "initial.npz"
    two_steps(initial, tmp_path / "tensorflow.npz")
    completed = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gan_step_check.py"), str(initial),
         str(tmp_path / "torch.npz")],
        env=environment(KERAS_BACKEND="torch", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
            [str(ROOT), str(ROOT / "tests")])), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    weights = {}
    for name in ("initial", "tensorflow", "torch"):
        with np.load(tmp_path / f"{name}.npz") as arrays:
            weights[name] = [arrays[f"arr_{index}"] for index in range(len(arrays.files))]
    assert_same_update(weights["initial"], weights["tensorflow"], weights["torch"],
                       label="PyTorch against TensorFlow")


def test_xla_step_trains_and_spectral_norm_keeps_discriminator_layers_near_one():
    """One XLA program holds both networks' forward and backward passes; after its steps
    every spectrally normalised layer of D has a largest singular value near 1 (the traced
    step without XLA is the workflow's, in the runs of tests/test_runner.py and below)."""
    config = get_config("digits", batch_size=16)
    gan = _gan(config)
    gan.compile(gan.g_optimizer, gan.d_optimizer, jit_compile=True)
    history = gan.fit(digits_batches(16, config.latent_dim), steps_per_epoch=5,
                      verbose=0).history
    assert np.isfinite(history["d_loss"][-1])
    normalized = [layer for layer in gan.discriminator.layers if hasattr(layer, "vector_u")]
    assert len(normalized) >= 8
    for layer in normalized:
        kernel = getattr(layer.layer, "kernel", None)
        kernel = (kernel if kernel is not None else layer.layer.embeddings).numpy()
        sigma = np.linalg.svd(kernel.reshape(-1, kernel.shape[-1]), compute_uv=False)[0]
        assert abs(sigma - 1.0) < 0.1, (layer.name, sigma)


def test_spectral_norm_on_embedding_keeps_float_outputs_and_gradients():
    embedding = spectral_norm(keras.layers.Embedding(10, 4, name="emb"))
    labels = tf.constant([1, 2])
    with tf.GradientTape() as tape:
        out = embedding(labels, training=True)
        loss = tf.reduce_sum(out)
    assert out.dtype == tf.float32 and np.any(out.numpy() != np.round(out.numpy()))
    assert all(g is not None for g in tape.gradient(loss, embedding.trainable_variables))


def test_hinge_losses():
    real, fake = np.array([2.0, 0.5, -1.0]), np.array([-2.0, 0.0, 3.0])
    expected_d = np.mean(np.maximum(0, 1 - real)) + np.mean(np.maximum(0, 1 + fake))
    assert float(hinge_discriminator_loss(real, fake)) == pytest.approx(expected_d)
    assert float(hinge_generator_loss(fake)) == pytest.approx(-np.mean(fake))


def test_conditional_batch_norm_matches_numpy_and_replicas():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 3, 4)).astype("float32") * 2 + 1
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1], "int32")
    layer = ConditionalBatchNormalization(3, epsilon=1e-5)
    layer.build(x.shape)
    layer.gamma.assign(rng.uniform(0.5, 1.5, (3, 4)))
    layer.beta.assign(rng.standard_normal((3, 4)))
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    expected = ((x - mean) / np.sqrt(var + 1e-5) * layer.gamma.numpy()[labels][:, None, None]
                + layer.beta.numpy()[labels][:, None, None])
    np.testing.assert_allclose(layer(x, labels, training=True), expected, rtol=1e-5, atol=1e-5)
    # Two replicas with half the batch each normalise with the global-batch moments.
    strategy = mirrored_strategy(2)
    with strategy.scope():
        synced = ConditionalBatchNormalization(3, epsilon=1e-5)
        synced.build(x.shape)
        synced.set_weights(layer.get_weights())
    data = tf.data.Dataset.from_tensor_slices((x, labels)).batch(8)
    batch = next(iter(strategy.experimental_distribute_dataset(data)))
    out = strategy.run(lambda a, b: synced(a, b, training=True), args=batch)
    np.testing.assert_allclose(np.concatenate(strategy.experimental_local_results(out)),
                               expected, rtol=1e-5, atol=1e-5)


def test_ema_generator_tracks_the_generator_after_ema_start():
    config = get_config("digits", batch_size=4)
    gan = _gan(config, "none", ema_decay=0.75, ema_start=1)
    gan.fit(digits_batches(4, config.latent_dim), steps_per_epoch=1, verbose=0)
    for source, ema in zip(gan.generator.variables, gan.ema_generator.variables):
        np.testing.assert_allclose(ema.numpy(), source.numpy())  # step 1: not started, a copy
    before = [v.numpy().copy() for v in gan.generator.variables]
    gan.fit(digits_batches(4, config.latent_dim, start_step=1), steps_per_epoch=1, verbose=0)
    for source, ema, old in zip(gan.generator.variables, gan.ema_generator.variables, before):
        expected = 0.75 * old + 0.25 * source.numpy() if source.trainable else source.numpy()
        np.testing.assert_allclose(ema.numpy(), expected, rtol=1e-5, atol=1e-6)
    z, y = tf.random.normal((2, config.latent_dim)), tf.constant([3, 4])
    np.testing.assert_allclose(gan([z, y]), gan.ema_generator([z, y], training=False))


def test_in_memory_batches_are_a_function_of_seed_and_step():
    config = get_config("digits")
    first = list(digits_batches(8, config.latent_dim, seed=5).take(4))
    again = digits_batches(8, config.latent_dim, seed=5)
    iter(again)  # an extra iterator (as Keras makes under a strategy) changes nothing
    for a, b in zip(first, again.take(4)):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    resumed = next(iter(digits_batches(8, config.latent_dim, seed=5, start_step=3)))
    for key in resumed:
        np.testing.assert_array_equal(resumed[key], first[3][key])
    other = next(iter(digits_batches(8, config.latent_dim, seed=6)))
    assert not np.array_equal(other["images"], first[0]["images"])
    # One epoch visits every example once (1,797 // 64 full batches).
    epoch = list(digits_batches(64, config.latent_dim, seed=1).take(1797 // 64))
    labels = np.concatenate([b["labels"] for b in epoch])
    assert len(labels) == 28 * 64 and set(np.unique(labels)) == set(range(10))
    assert first[0]["images"].shape == (8, 32, 32, 1) and first[0]["z_d"].shape == (8, 64)
    assert dataclasses.asdict(config)["resolution"] == 32


def test_a_stopped_and_resumed_run_logs_and_evaluates_with_either_extractor(tmp_path):
    """One tiny run, stopped at its first checkpoint and then resumed (each in-process run
    traces the GAN's step again: one run for every check below):

    - ``gan.evaluate`` scores the unfinished run's newest checkpoint, then the saved
      generator and the latest checkpoint of the finished run;
    - TensorBoard holds Keras' epoch scalars of both runs (an epoch is a checkpoint
      interval: 0 before the stop, 1 after) and the final score at the last step;
    - FID / IS / KID with the FID Inception (the fixture's random weights): the weights
      file's SHA-256 and the resize recorded, reference statistics written once then read,
      and without a weights file a result that says where to get one."""
    import hashlib

    from fid_inception_check import WEIGHTS
    from gan.evaluate import evaluate
    from gan.train import train

    quiet = dict(verbose=0, log=lambda *_: None)
    tiny = dict(steps=4, batch_size=4, checkpoint_every=2, eval_samples=150, **GAN_HALF_WIDTHS)
    stopped = train(model_dir=tmp_path, stop_after_step=2, **tiny, **quiet)
    assert stopped["stopped_at"] == 2 and not (tmp_path / "generator.keras").exists()
    # gan.evaluate rebuilds G from run.json and restores the newest checkpoint.
    partial = evaluate(tmp_path, output=False, log=lambda *_: None)
    assert "ckpt-2" in partial["source"] and partial["metric"] == "fcd"
    for a, b in zip(partial["model"].variables, stopped["model"].generator.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    results = train(model_dir=tmp_path, **tiny, **quiet)
    assert results["steps"] == 4 and (tmp_path / "samples_final.png").exists()
    final = evaluate(tmp_path, log=lambda *_: None)
    assert final["source"].endswith("generator.keras")
    assert final["value"] == pytest.approx(results["value"], rel=1e-4)
    latest = evaluate(tmp_path, checkpoint="latest", output=False, log=lambda *_: None)
    assert "ckpt-4" in latest["source"]
    assert latest["value"] == pytest.approx(results["value"], rel=1e-4)
    z, labels = tf.random.normal((3, get_config("digits").latent_dim)), tf.constant([0, 5, 9])
    np.testing.assert_allclose(final["model"]([z, labels], training=False),
                               results["model"].generator([z, labels], training=False),
                               atol=1e-6)

    # TensorBoard: the runner logs Keras' epoch scalars and the final scores at the last
    # step, the resumed run after the stopped one's.
    tags = {}
    for event_file in (tmp_path / "logs").rglob("events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(str(event_file)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    assert {"epoch_d_loss", "epoch_g_loss", "fcd"} <= set(tags), sorted(tags)
    assert sorted(tags["epoch_d_loss"]) == [0, 1] and tags["fcd"] == [4]

    # The FID Inception's scores of the same run.
    stats = tmp_path / "reference.npz"
    options = dict(output=False, log=lambda *_: None, eval_samples=12, eval_real=12,
                   extractor="fid_inception_v3", fid_weights=str(WEIGHTS),
                   fid_reference=str(stats))
    first = evaluate(tmp_path, **options)
    assert stats.exists() and first["reference"] == str(stats)
    assert first["weights_sha256"] == hashlib.sha256(WEIGHTS.read_bytes()).hexdigest()
    assert first["resize"] == "tensorflow" and first["num_real"] == 12
    assert first["inception_score"] > 1 and first["kid_subset_size"] == 12
    assert "2048" in first["evaluation_error"]  # 12 samples: no FID, IS and KID still
    second = evaluate(tmp_path, **options)  # the reference is read, not recomputed
    assert second["kid"] == pytest.approx(first["kid"], rel=1e-6)
    # (A reference of another resize is refused: tests/test_fid_inception.py.)
    missing = evaluate(tmp_path, output=False, log=lambda *_: None, eval_samples=12,
                       extractor="fid_inception_v3")
    assert "pt_inception-2015-12-05-6726825d.pth" in missing["evaluation_error"]
