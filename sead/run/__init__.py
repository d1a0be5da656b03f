"""The run directory, shared by both training backends (embedded and verl), so either can resume the other's
layout and `sead eval`, `sead report` and `sead audit-mask` read any run. `layout` says where each file lives;
the other modules are what a run does with them: one writer (`lock`), a fresh start or a resume under frozen
settings (`start`, `frozen_config`), checkpoints with manifests (`checkpoints`, `manifest`), strict JSON lines
(`json_lines`) and the metrics log (`metrics_log`), the reward stored with each rollout (`scoring`), the
fixed-rule profile sets (`fixed_profiles`) and what every step ends with (`steps`).
"""
