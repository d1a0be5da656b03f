"""The evaluation suite: seeded test sets, multi-trial evaluation of checkpoints and endpoints, reports."""
