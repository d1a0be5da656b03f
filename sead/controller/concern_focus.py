"""Which behaviours users bring: more users who raise the kinds of concern the agent answers least.

A behaviour's category is the kind of concern a user with it voices. Left uniform, a run can lose a whole kind (no
continuation of a group answers it, so GRPO has nothing to learn from there) while most of its dialogues go to kinds
it already answers. With `controller.concern_focus` = f > 0, every controller update weighs each kind by

    w = 1 + f * (1 - a),   a = (answered + 1) / (voiced + 2)

over the dialogues the rule reads, and draws each behaviour in proportion to its kind's weight. A kind never
answered is drawn at most 1 + f times as often per behaviour as one always answered, so none is starved; a kind not
voiced yet counts as half answered.
"""

from __future__ import annotations

from sead.controller.stats import CompletionStats
from sead.scenario.behaviours import BehaviourLibrary


def kind_weights(library: BehaviourLibrary, stats: CompletionStats, focus: float) -> dict[str, dict]:
    """Per kind of the library: voiced, answered, the weight above and the share of behaviour draws it gets."""
    sizes = library.categories
    counts = {kind: stats.concerns.get(kind, (0, 0)) for kind in sizes}
    weight = {kind: 1.0 + focus * (1.0 - (answered + 1) / (voiced + 2)) for kind, (voiced, answered) in counts.items()}
    total = sum(weight[kind] * size for kind, size in sizes.items())
    return {
        kind: {
            "voiced": voiced,
            "answered": answered,
            "weight": weight[kind],
            "share": weight[kind] * sizes[kind] / total,
        }
        for kind, (voiced, answered) in counts.items()
    }


def behaviour_probs(library: BehaviourLibrary, kinds: dict[str, dict]) -> list[float]:
    """Probability of each behaviour, in library order, from `kind_weights`."""
    weights = [kinds[b.category]["weight"] for b in library.behaviours]
    total = sum(weights)
    return [w / total for w in weights]
