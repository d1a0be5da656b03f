"""Imported by verl itself, inside `import verl`, in every process: the driver, the TaskRunner and each Ray
worker. Found through the `verl.plugins` entry point of the installed package (setup.py); where that is turned
off or the package is not installed, VERL_USE_EXTERNAL_MODULES=sead.verl_backend.plugin does the same (the
launcher sets both the variable and Ray's runtime_env, so it also reaches workers on other nodes).

Registering means importing: the agent loop registers itself under `sead_dialogue`. Nothing here touches a
device or starts anything.
"""

from sead.verl_backend import agent_loop  # noqa: F401  (registers SEADDialogueAgentLoop)
