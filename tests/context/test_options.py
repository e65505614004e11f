"""Assembly options: the optimisations' switches are the registered features, by name."""

from __future__ import annotations

from dataclasses import fields

from context.options import SWITCHES, AssemblyOptions
from ctxpress_core.features import REGISTRY, resolve


def test_every_switch_is_a_registered_feature_with_its_default() -> None:
    assert set(SWITCHES) == {"whole_file", "summaries", "constructor_attributes", "nearby_first", "similar",
                             "fill_below", "suffix_floor", "steady_excerpts"}
    defaults = AssemblyOptions()
    for f in fields(AssemblyOptions):
        if f.name in SWITCHES:
            assert f.metadata["feature"] == f.name  # the field carries the registry's name
            assert getattr(defaults, f.name) == REGISTRY[f.name].default


def test_resolved_features_become_options_by_name() -> None:
    features = resolve({"steady_excerpts": False, "similar": False, "crop": False})
    options = AssemblyOptions.with_features(features, budget_tokens=300, timeout_ms=5.0)
    assert (options.budget_tokens, options.timeout_ms) == (300, 5.0)
    assert {name: getattr(options, name) for name in SWITCHES} == {name: features[name] for name in SWITCHES}
    assert not options.steady_excerpts and not options.similar and options.summaries
