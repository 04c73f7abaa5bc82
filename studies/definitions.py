"""The studies: each a grid of arms × seeds over one workflow, and the claim it tests.

Steps and seeds were chosen for about five hours of a 2-core machine with
``--jobs 2``; measured, it is more, and it depends on the CPU: a
segmentation-digits cell took 427 s on average on an AMD EPYC machine and
198 s on an Intel Xeon one (each report's runs table has every cell's wall
time and CPU). ``smoke`` is a one-minute check of the machinery itself.
"""

from studies.study import Arm, Curve, Evaluation, Metric, Pretraining, Study

PARAMS = Metric("params", "params", "results.json", "params", digits=0)
STEP_TIME = Metric("seconds_per_step", "s/step", "timing.json", "seconds_per_step", digits=3)

SEGMENTATION_METRICS = (
    Metric("miou", "mIoU", "results.json", "miou", better="higher"),
    Metric("miou_ms_flip", "mIoU ms+flip", "evaluation-ms_flip.json", "miou", better="higher"),
    Metric("pixel_accuracy", "pixel acc.", "results.json", "pixel_accuracy", better="higher"),
    PARAMS, STEP_TIME,
)
MS_FLIP = Evaluation("ms_flip", {"eval_multi_scale": True, "eval_flip": True})


def like_for_like_heads(rank):
    """The context-block arms of the segmentation head studies, like for like.

    Self-attention (γ = 0), Poly-NL (β = 0) and KAO_KV (σ = 0) start as the identity.
    The Hamburgers are run in their official forms (kctx.layers.OFFICIAL_VARIANTS, each
    ending with ReLU(Z + ·), which is the identity on the head's post-ReLU features when
    the branch is zero) with r = ``rank`` ≪ N and the head's batch-norm momentum 0.9
    (the official BN_MOM = 3e-4, i.e. 0.9997, is for 60k-step runs: after 1,000 steps
    its moving statistics would still be a third of the initial ones); they start with
    a full-variance branch, as published, and ``ham_v2_zero`` is V2 with V2+'s
    ZERO_HAM (σ = 0), the Hamburger that starts as the identity. ``ham_nmf`` is kctx's
    block as the earlier study ran it (its segmentation recipe: r = 64, momentum 0.99,
    the relative guard), with the final ReLU. ASPP replaces the whole head and cannot
    start as the identity; ``none`` is the head's two convolutions alone.
    """
    official = {"rank": rank, "norm_momentum": 0.9}
    return (
        Arm("none", {"context": "none"}),
        Arm("ham_nmf", {"context": "ham_nmf"}),
        Arm("ham_v1", {"context": "ham_nmf_v1", "context_options": official}),
        Arm("ham_v2", {"context": "ham_nmf_v2", "context_options": official}),
        Arm("ham_v2_zero", {"context": "ham_nmf_v2",
                            "context_options": {**official, "residual_scale_init": 0.0}}),
        Arm("ham_light", {"context": "ham_nmf_light", "context_options": {"rank": rank}}),
        Arm("self_attention", {"context": "self_attention"}),
        Arm("poly_nl", {"context": "poly_nl"}),
        Arm("kao_kv", {"context": "kao_kv"}),
        Arm("aspp", {"context": "aspp"}),
    )


SEGMENTATION_DIGITS = Study(
    name="segmentation-digits", workflow="segmentation", config="digits_seg",
    arms=like_for_like_heads(rank=8),
    baseline="none", seeds=(0, 1, 2, 3, 4),
    overrides={"steps": 1000, "prediction_images": 0},
    evaluations=(MS_FLIP,),
    metrics=SEGMENTATION_METRICS,
    description="""
Which head for HamNet-style segmentation on the embedded digits_seg canvases? HamNet
(Geng et al., ICLR 2021, Tab. 2-3) reports that the Ham head (NMF, and CD/VQ close
behind) beats DeepLabV3's ASPP and attention heads at lower cost. Every arm is the
digits_seg segmenter (ResNet-tiny at output stride 8, a 128-wide head) with a different
context block between the head's convolutions, like for like: the attention blocks
start as the identity; the Hamburgers run in their official forms (V1, V2, SegNeXt's
LightHam, and V2 with a zero-initialised branch, which starts as the identity), with
r = 8 for the head map's N = 64 positions (8×8; r ≪ N as the papers choose it: HamNet
r = 64 at N = 4,225, SegNeXt r = 16 at N = 4,096) and the head's batch-norm momentum;
`ham_nmf` is kctx's block as the earlier study ran it (r = 64). `none` (the head's two
convolutions alone) is the baseline. Scored single-scale and with multi-scale + flip
inference on the 300 test canvases. Here the objects (12-28 px) lie within the
backbone's receptive field at the head: no block is expected to help much.
""",
)

SEGMENTATION_LARGE = Study(
    name="segmentation-large", workflow="segmentation", config="digits_seg_large",
    arms=like_for_like_heads(rank=16) + (
        Arm("segnext", {}, config="segnext_digits_large", baseline="segnext_none",
            label="SegNeXt-T"),
        Arm("segnext_none", {"context": "none"}, config="segnext_digits_large",
            label="SegNeXt-T, no Hamburger")),
    baseline="none", seeds=(0, 1, 2, 3, 4),
    overrides={"steps": 1000, "prediction_images": 0},
    evaluations=(MS_FLIP,),
    metrics=SEGMENTATION_METRICS,
    description="""
The segmentation heads where global context can matter: digits_seg_large's 1-3 digits of
48-96 px on 128×128 canvases are larger than the ResNet-tiny backbone's effective
receptive field at the head (`python -m segmentation.receptive_field --config
digits_seg_large`: every digit is wider than the square holding 90% of the backbone
output's input gradient, 43 px; 78% wider than the context block input's, 55 px; the
theoretical receptive fields, 75 and 91 px, cover most of them), and the head's map is
16×16 (N = 256). The arms are
segmentation-digits' like-for-like heads with r = 16 (≪ N), plus SegNeXt-T (MSCAN-T
from scratch with the official LightHamHead; segnext_digits_large's AdamW recipe) and
SegNeXt-T with its Hamburger replaced by `none`, the SegNeXt paper's decoder ablation
(compared with each other). 1,000 steps of batch 8; scored single-scale and with
multi-scale + flip on the 300 test canvases. A ResNet cell takes about 250 s and a
SegNeXt cell about 10 minutes single-threaded, so 5 seeds fit.
""",
)

# MSCAN-T pretrained as a digits classifier (classification's digits_mscan: 64×64 digits,
# AdamW, 10 epochs), the stand-in for SegNeXt's ImageNet-pretrained backbone.
MSCAN_T_DIGITS = Pretraining("mscan_t_digits", "classification", "digits_mscan")
SEGNEXT_DECODER_BLOCKS = (
    ("light_ham", {}, "LightHam"),
    ("none", {"context": "none"}, "no block"),
    ("self_attention", {"context": "self_attention"}, "self-attention"),
    ("poly_nl", {"context": "poly_nl"}, "Poly-NL"),
    ("kao_kv", {"context": "kao_kv"}, "KAO_KV"),
)

SEGNEXT_DECODER = Study(
    name="segnext-decoder", workflow="segmentation", config="segnext_digits_large",
    arms=tuple(Arm(name, overrides, label=label, pretrained=MSCAN_T_DIGITS.name)
               for name, overrides, label in SEGNEXT_DECODER_BLOCKS) + (
        Arm("light_ham_scratch", {}, baseline="light_ham",
            label="LightHam, MSCAN-T from scratch"),),
    baseline="none", seeds=(0, 1, 2, 3, 4), pretraining=(MSCAN_T_DIGITS,),
    # lr 1e-3 (the head's 1e-2): segnext_digits_large's from-scratch 3e-3 fine-tunes the
    # pretrained MSCAN-T to 0.25 mIoU at seed 0, 1e-3 to 0.54 (docs/studies.md).
    overrides={"steps": 1000, "prediction_images": 0, "learning_rate": 1e-3},
    evaluations=(MS_FLIP,),
    metrics=SEGMENTATION_METRICS,
    description="""
The SegNeXt paper's decoder ablation (Guo et al., NeurIPS 2022, Tab. 6-7: the Hamburger in
the LightHamHead against no block and against attention) at our scale, on a pretrained
backbone as the paper's: SegNeXt-T (segnext_digits_large: MSCAN-T, the official
LightHamHead, mmseg's AdamW recipe with the head at 10× the learning rate, here lr 1e-3,
1,000 steps of batch 8 on digits_seg_large's 128×128 canvases) whose MSCAN-T starts from the
`mscan_t_digits` pretraining run (classification's digits_mscan: MSCAN-T with VAN's
classifier on the 1,438 training digits at 64×64, the stand-in for ImageNet; one run for
every seed, as one ImageNet checkpoint is for every published SegNeXt). The arms put
the official LightHam, nothing, or another context block (self-attention, Poly-NL and
KAO_KV, each starting as the identity) in the head's Hamburger place, compared with no
block; `light_ham_scratch` is the official model from scratch (segmentation-large's
`segnext` arm), compared with the pretrained one: what the pretraining gives.
Scored single-scale and with multi-scale + flip on the 300 test canvases.
""",
)


def _ham(name, method="nmf", **options):
    return Arm(name, {"context": f"ham_{method}", **({"context_options": options}
                                                      if options else {})})


# The arms trained with K = 1, 3, 6 (nmf) and 9, each also scored with every K.
K_ARMS = ("nmf", "nmf-K1", "nmf-K3", "nmf-K9")
EVAL_STEPS = (1, 3, 6, 9)

HAMBURGER_ABLATIONS = Study(
    name="hamburger-ablations", workflow="segmentation", config="digits_seg",
    arms=(
        _ham("nmf"),
        _ham("nmf-bptt", one_step_gradient=False),
        _ham("nmf-K1", steps=1), _ham("nmf-K3", steps=3), _ham("nmf-K9", steps=9),
        _ham("nmf-init-online", init="online"), _ham("nmf-init-fixed", init="fixed"),
        # Learned bases get gradient only through the K steps, so this arm needs BPTT (as in
        # the paper's Tab. 8, which compares it with random init and the one-step gradient).
        _ham("nmf-init-learned", init="learned", one_step_gradient=False),
        _ham("nmf-r8", rank=8), _ham("nmf-r16", rank=16),
        Arm("cd", {"context": "ham_cd"}, baseline="cd"),
        Arm("cd-T1", {"context": "ham_cd", "context_options": {"temperature": 1.0}},
            baseline="cd"),
    ),
    baseline="nmf", seeds=(0, 1, 2),
    overrides={"steps": 1000, "prediction_images": 0},
    evaluations=tuple(Evaluation(f"K{k}", {"eval_ham_steps": k}, arms=K_ARMS)
                      for k in EVAL_STEPS),
    metrics=SEGMENTATION_METRICS[:1] + SEGMENTATION_METRICS[2:] + tuple(
        Metric(f"miou_eval_K{k}", f"mIoU eval K={k}", f"evaluation-K{k}.json", "miou",
               better="higher", summary=False) for k in EVAL_STEPS),
    description="""
HamNet's ablations (Geng et al., ICLR 2021, Sec. 4 and Appendix F: Tab. 4, 8, 9) at our
scale, on the segmentation-digits recipe (1,000 steps) with the NMF ham (r = 64, K = 6,
one-step gradient, a random dictionary per step: the baseline) changed one setting at a
time: BPTT through the K steps instead of the one-step gradient; K = 1, 3, 9 (the same K
in training and evaluation; the four arms trained with K = 1, 3, 6, 9 are also scored
with each of these K at evaluation, the "mIoU eval K" columns: HamNet's Appendix F
recommends the same K in training and test and finds more steps at test worse); the dictionary initialisation (online-updated, fixed
random, and learned, which needs BPTT); r = 8 and 16; and for CD the softmax temperature T = 1 against the
recommended 0.1 (compared with the CD ham at T = 0.1). Here the head's feature map is
8×8 (n = 64 positions, d = 128), so r = 64 is not a low rank: r = 8 and 16 are.
""",
)

CLASSIFICATION_DIGITS = Study(
    name="classification-digits", workflow="classification", config="digits",
    arms=tuple(Arm(model, {"model": model}) for model in (
        "kanet_kv", "kanet_qkv", "mobilenet_v2", "attnnet", "mobilenet_v2_kao")),
    baseline="mobilenet_v2", seeds=(0, 1, 2, 3, 4),
    overrides={"epochs": 10, "decay_epochs": (5, 7, 8)},
    metrics=(Metric("top1", "top-1", "results.json", "top1", better="higher"),
             Metric("loss", "test loss", "results.json", "loss", better="lower"),
             PARAMS, Metric("madds", "MAdds", "results.json", "madds", digits=0), STEP_TIME),
    description="""
Kronecker attention networks (Gao et al., TPAMI 2020, Tab. 5-6): KANets with KAO_KV /
KAO_QKV match AttnNet (regular attention) and MobileNetV2 on accuracy with fewer
parameters and MAdds than attention. Each arm trains one model of the family on
scikit-learn's digits (1,438 train / 359 test, 32×32 RGB) with the digits recipe at half
its length (10 epochs, the step decay at the same fractions: epochs 5, 7, 8) and is
scored on the test split; the baseline is MobileNetV2.
""",
)

GAN_DIGITS = Study(
    name="gan-digits", workflow="gan", config="digits",
    arms=tuple(Arm(context, {"context": context}) for context in (
        "ham_nmf", "self_attention", "none")),
    baseline="self_attention", seeds=(0, 1, 2),
    overrides={"steps": 750, "checkpoint_every": 250, "sample_every": 750},
    evaluations=(Evaluation("10k", {"eval_samples": 10000}),),
    metrics=(Metric("fcd", "FCD (2k)", "results.json", "value", better="lower", digits=2),
             Metric("classifier_score", "CS (2k)", "results.json", "classifier_score",
                    better="higher", digits=3),
             Metric("fcd_10k", "FCD (10k)", "evaluation-10k.json", "value", better="lower",
                    digits=2),
             Metric("classifier_score_10k", "CS (10k)", "evaluation-10k.json",
                    "classifier_score", better="higher", digits=3),
             PARAMS, STEP_TIME),
    description="""
HamGAN (Geng et al., ICLR 2021, Tab. 5): a Hamburger in both nets of a class-conditional
SAGAN generates better images (lower FID) than self-attention, at lower cost. Each arm
is the digits HamGAN (32×32 digits, blocks at 32² in G and 16² in D) with its context
block swapped, trained for 750 steps (half of README command 1's 1,500, to fit the
budget; no EMA, as in the digits config); scored by the Fréchet distance in the features of a digits classifier
(FCD) and that classifier's score (CS, an Inception-score analogue) on 2,000 samples at
the end of training and on 10,000 samples by `gan.evaluate`. The baseline is
self-attention (SAGAN).
""",
)

SEQUENCE_METRICS = (
    Metric("accuracy", "accuracy", "results.json", "accuracy", better="higher"),
    Metric("steps_to_99", "steps to 99%", "val_accuracy", "first_step_reaching",
           reached=0.99, digits=0),
    PARAMS, STEP_TIME,
)

SEQUENCE_ADDING = Study(
    name="sequence-adding", workflow="sequence", config="adding",
    arms=(Arm("adding-psf", {"model": "psf"}, label="Adding PSF-Attn"),
          Arm("adding-transformer", {"model": "transformer"}, label="Adding Transformer"),
          Arm("temporal_order-psf", {"model": "psf"}, config="temporal_order",
              baseline="temporal_order-transformer", label="Temporal order PSF-Attn"),
          Arm("temporal_order-transformer", {"model": "transformer"}, config="temporal_order",
              baseline="temporal_order-transformer", label="Temporal order Transformer")),
    baseline="adding-transformer", seeds=(0, 1, 2),
    overrides={"steps": 1000, "eval_examples": 2000},
    metrics=SEQUENCE_METRICS,
    description="""
Chord / PSF-Attn (Khalitov et al., 2022, Sec. 5.2): on the synthetic long-sequence
tasks at n = 1,024, PSF-Attn (O(n log n) sparse factors) learns Adding and Temporal
Order to ≥ 99% held-out accuracy where a Transformer of the same width struggles.
Each arm is the CLI's config (batch 40, Adam 10⁻³, fresh sequences) with at most 1,000
steps and 2,000 held-out sequences instead of the CLI's 1,500 and 5,000, to fit the
budget: single-threaded without oneDNN (deterministic mode) a Transformer step at
n = 1,024 takes about 1.85 s on this machine. Training stops at 99% held-out accuracy
(checked every 250 steps) or at the step budget; "steps to 99%" is the first check at
or above it (– where it never was).
""",
)

PEAK_MEMORY = Metric("peak_memory_mb", "peak MB", "timing.json", "peak_memory_mb", digits=0)

# The causal Hamburger in its blocked form (a dictionary per block of 64 positions, the fast
# form, ``block_size``) against the other causal mixers, at two context lengths with the same
# characters per step.
LANGUAGE_MIXERS = (("causal_hamburger", {"block_size": 64}, "Causal Ham (L = 64)"),
                   ("attention", {}, "Attention"),
                   ("linear_attention", {}, "Linear attention"),
                   ("causal_conv", {}, "Causal conv"))
LANGUAGE_LENGTHS = (("stdlib", 512, 8), ("stdlib_2048", 2048, 2))  # config, T, batch


def _language_arms():
    return tuple(Arm(f"{mixer}-{length}", {"mixer": mixer, **options, "batch_size": batch},
                     config=config, baseline=f"attention-{length}",
                     label=f"{label} (T = {length})")
                 for config, length, batch in LANGUAGE_LENGTHS
                 for mixer, options, label in LANGUAGE_MIXERS)


# The training loss in bits per character, the mean over each 250-step interval.
TRAINING_BITS = Curve("bits_per_character", "Training bits/char", digits=3)

LANGUAGE_STDLIB = Study(
    name="language-stdlib", workflow="language", config="stdlib",
    arms=_language_arms(),
    baseline="attention-512", seeds=(0, 1, 2),
    overrides={"steps": 1000, "checkpoint_every": 250},
    metrics=(Metric("bits_per_character", "bits/char", "results.json", "bits_per_character",
                    better="lower", digits=4),
             PARAMS, STEP_TIME, PEAK_MEMORY),
    curves=(TRAINING_BITS,),
    description="""
The causal Hamburger (kctx's, not in the papers) as the token mixer of a character-level
decoder, against causal softmax attention, linear attention (Katharopoulos et al., 2020) and
a causal convolution (k = 4), at 512 and 2,048 characters of context with the same 4,096
characters per step (8 × 512, 2 × 2,048). Every arm has the same embedding, blocks, MLPs and
parameters (each mixer 4·C² weights: the Hamburger's ham has d = 2·C channels, r = 16, K =
6, the one-step gradient), the same 1,000 AdamW steps on the same windows (seed by seed),
scored in bits per character on the first 200,000 held-out characters. The params column
counts every weight: the Hamburger's include its fixed initial dictionaries D₀ (d × r = 256
× 16 in each of the 4 blocks, 16,384 numbers, not trained), so it trains 858,624 weights
against attention's and linear attention's 859,136 and the convolution's 857,600. For scale,
byte n-gram models counted on the training split score 4.540 (unigram), 3.581 (bigram: the
byte before), 2.798, 2.372 and 2.300 (5-gram) bits per character on the same characters at T
= 512 (`python -m language.ngram`, docs/workflows/language.md). The Hamburger runs in its
blocked form (a dictionary per block of 64 positions, fitted to the blocks before); its
per-position form computes the same operator with a dictionary per position, at 6× the step
(docs/operators/causal-hamburger.md), and is not an arm. The baseline is attention at the
same context length. Step time is each cell's training time per step as it ran: the cells
run in parts across sessions and machines, some beside another cell on a 2-core machine
(from within 5% of a step alone to 1.8× it, by machine and pair of cells), some alone, so
the column is a rough cost only; the step times measured alone, arm against arm on one
machine, are in docs/operators/causal-hamburger.md. Peak memory is the training process's
peak resident memory (runtime and data included). Half the CLI's batch and a third of its
steps: about 6 CPU-hours for the 24 cells, estimated from the step times measured at the
CLI's batch (docs/operators/causal-hamburger.md), halved.
""",
)

# The global mixers of language-stdlib with the short convolution before them (k = 4, as
# Mamba's), at T = 512, and the convolution-only mixer as the local reference.
SHORT_CONV = 4
LANGUAGE_STDLIB_SHORT_CONV = Study(
    name="language-stdlib-short-conv", workflow="language", config="stdlib",
    arms=tuple(Arm(f"{mixer}-short_conv", {"mixer": mixer, **options, "short_conv": SHORT_CONV,
                                           "batch_size": 8},
                   label=f"{label} + short conv")
               for mixer, options, label in LANGUAGE_MIXERS if mixer != "causal_conv")
    + (Arm("causal_conv", {"mixer": "causal_conv", "batch_size": 8}, label="Causal conv"),),
    baseline="attention-short_conv", seeds=(0, 1, 2),
    overrides={"steps": 1000, "checkpoint_every": 250},
    metrics=LANGUAGE_STDLIB.metrics,
    curves=LANGUAGE_STDLIB.curves,
    description="""
language-stdlib (3 seeds) left its global mixers far behind the causal convolution
after 1,000 steps (3.36–3.57 bits per character against 2.18 at T = 512), near a byte bigram
model's 3.58 (`python -m language.ngram`): without a position encoding they see local order
only through causality. H3 (Fu et al., 2023) and Mamba (Gu &
Dao, 2023) give their global mixers a short depthwise causal convolution first; this study
does the same for the causal Hamburger (blocked, L = 64), attention and linear attention
(`--short-conv 4`: k·C + C = 640 weights a block, 2,560 in all) and asks how they then
compare with each other and with the convolution alone (k = 4 over C × C channels:
language-stdlib's causal_conv-512 command, whose numbers repeat on the same CPU model and
package versions). Otherwise language-stdlib's setting at
T = 512: batch 8, 1,000 AdamW steps, 3 seeds, bits per character on the first 200,000
held-out characters; attention with the short convolution is the baseline. Step time is
each cell's own as it ran (a rough cost, as in language-stdlib). About 3 hours for the 12
cells one at a time on this machine, an estimate from language-stdlib's step times.
""",
)

SMOKE = Study(
    name="smoke", workflow="segmentation", config="digits_seg",
    arms=(Arm("ham_nmf", {"context": "ham_nmf"}), Arm("none", {"context": "none"})),
    baseline="none", seeds=(0, 1),
    overrides={"steps": 6, "checkpoint_every": 3, "batch_size": 4, "crop_size": 32,
               "head_channels": 32, "eval_images": 16, "prediction_images": 0},
    # (Re-scored on one arm: the other arm's metric is None, as in a study whose
    # evaluation applies to some arms; a process fewer per cell of that arm.)
    evaluations=(Evaluation("flip", {"eval_flip": True}, arms=("ham_nmf",)),),
    metrics=(Metric("miou", "mIoU", "results.json", "miou", better="higher"),
             Metric("miou_flip", "mIoU flip", "evaluation-flip.json", "miou", better="higher"),
             PARAMS, STEP_TIME),
    description="""
A check of the studies machinery in about a minute: the digits_seg segmenter (32-channel
head) with and without a Ham head, 6 steps of batch 4 on 32×32 crops, scored on 16 test
canvases (the Ham head with flips too). Its numbers mean nothing about the heads.
""",
)

STUDIES = {study.name: study for study in (
    SEGMENTATION_DIGITS, SEGMENTATION_LARGE, SEGNEXT_DECODER, HAMBURGER_ABLATIONS,
    CLASSIFICATION_DIGITS, GAN_DIGITS, SEQUENCE_ADDING, LANGUAGE_STDLIB,
    LANGUAGE_STDLIB_SHORT_CONV, SMOKE)}


def get_study(name):
    """The study called ``name``."""
    try:
        return STUDIES[name]
    except KeyError:
        raise ValueError(f"Unknown study {name!r}. Valid: {', '.join(STUDIES)}") from None
