"""Multi-seed studies with confidence intervals, run through the workflows' own CLIs.

``python -m studies.run NAME [--seeds 0-4] [--arm A] [--jobs 2]`` runs the
missing cells of a study (one deterministic run folder per arm and seed;
finished cells are skipped, interrupted ones resume), and ``python -m
studies.report NAME`` writes ``studies/results/NAME.{json,md,png}``: per arm
the mean, sd and 95% t-interval over seeds, and per arm the paired difference
from its baseline with its interval and paired t-test (and, for the study's
curves, each arm's mean and paired difference at every checkpoint step).
"""

from studies.definitions import STUDIES, get_study
from studies.stats import describe, paired
from studies.study import Arm, Curve, Evaluation, Metric, Pretraining, Study

__all__ = ["STUDIES", "Arm", "Curve", "Evaluation", "Metric", "Pretraining", "Study", "describe", "get_study",
           "paired"]
