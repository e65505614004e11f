"""Assembly options: the optimisations' switches are the registered features, by name."""

from __future__ import annotations

from dataclasses import fields, replace

from context.assembly import steady
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


# The options that may change while held excerpts stay (assembly/steady.py): the deadline and the count of the
# file's tokens change nothing chosen, the key carries the detected language itself, and the held excerpts
# compare the recent edits outside their block on their own.
NOT_IN_STEADY_KEY = {"timeout_ms", "exact_file_tokens", "language", "recent_edit_lines"}


def _other_value(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str) or value is None:
        return "other"
    return ((1, 2),)


def test_every_option_changes_the_held_excerpts_key_unless_marked() -> None:
    """A field added to the options re-chooses held excerpts when it changes, unless it is marked steady=False
    and listed above: no switch can be left out of the key."""
    defaults = AssemblyOptions()
    unmarked = {f.name for f in fields(AssemblyOptions) if f.metadata.get("steady", True)}
    assert {f.name for f in fields(AssemblyOptions)} - unmarked == NOT_IN_STEADY_KEY
    for f in fields(AssemblyOptions):
        changed = replace(defaults, **{f.name: _other_value(getattr(defaults, f.name))})
        if f.name in NOT_IN_STEADY_KEY:
            assert steady.key(changed, "python") == steady.key(defaults, "python"), f.name
        else:
            assert steady.key(changed, "python") != steady.key(defaults, "python"), f.name
    assert steady.key(defaults, "python") != steady.key(defaults, "go")
