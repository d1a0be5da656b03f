"""Phases 1 and 4: sample user profiles, and reweight sampling from completion rates."""

from sead.controller.controller import ProfileController
from sead.controller.curriculum import CURRICULA, CurriculumRule, make_curriculum
from sead.controller.report import write_controller_report
from sead.controller.stats import CompletionStats

__all__ = [
    "CURRICULA",
    "CompletionStats",
    "CurriculumRule",
    "ProfileController",
    "make_curriculum",
    "write_controller_report",
]
