"""YAML as SEAD reads a user's files: safe, and a key given twice in one mapping is an error, where plain YAML keeps
the last one without a word (Hydra's own loader refuses it too, with a traceback)."""

from __future__ import annotations

from collections.abc import Hashable

import yaml


class UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping, where plain YAML silently keeps the last."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader itself refuses unhashable keys, with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)
