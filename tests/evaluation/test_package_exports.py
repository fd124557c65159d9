"""``del_plugin.evaluation`` imports its modules on first use: every public name resolves to the object of the module
it lives in, and nothing else is offered under a public name."""

from __future__ import annotations

import importlib

import del_plugin.evaluation as evaluation


def test_every_public_name_resolves_to_its_home():
    homes = evaluation._HOMES
    assert set(homes) == set(evaluation.__all__)
    for name, module in homes.items():
        assert getattr(evaluation, name) is getattr(importlib.import_module(f"del_plugin.evaluation.{module}"), name)
    assert evaluation.cli is importlib.import_module("del_plugin.evaluation.cli")  # a submodule, as attribute
    for missing in ("no_such_name", "__no_such_dunder__"):
        try:
            getattr(evaluation, missing)
        except AttributeError as err:
            assert missing in str(err)
        else:
            raise AssertionError(f"{missing} resolved")
