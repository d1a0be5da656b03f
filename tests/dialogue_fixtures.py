"""Hand-built turns through the real tag format, shared by the metric and reward tests."""

from sead.scenario.profile_space import ProfileSpace
from sead.scenario.tags import TagSchema

# Ranges: cooperation 4, emotion 3, trust 5; noise is not sampled, so it never enters UPA.
SPACE = ProfileSpace.from_config(
    {
        "cooperation": {"low": 0, "high": 4, "allowed": [1, 2, 3]},
        "emotion": {"low": 0, "high": 3, "allowed": [1, 2]},
        "trust": {"low": 0, "high": 5, "allowed": [1, 2, 3, 4]},
        "noise": {"low": 0, "high": 5, "sampled": False},
    }
)
SCHEMA = TagSchema(SPACE, num_stages=4)


def agent(c, e, t, stage, status=0, noise=0):
    """Agent turn through the real tags; pass "?" (or an out-of-range int) for a value that will not parse."""
    text = SCHEMA.format_agent("hello", {"cooperation": c, "emotion": e, "trust": t, "noise": noise}, stage, status)
    return SCHEMA.parse_agent(text)


def user(c, e, t, status=0, noise=0, think=None):
    text = SCHEMA.format_user("ok", {"cooperation": c, "emotion": e, "trust": t, "noise": noise}, status, think=think)
    return SCHEMA.parse_user(text)
