"""The order tests run in: grouped by the server they need, so each server boots once per session."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specwatch.profiles.profile import ProfileSet, ServerProfile

#: fixture name -> the role in a profile set's [fixtures] table
ROLE_FIXTURES = {"baseline_server": "baseline", "spec_server": "spec", "tuned_server": "tuned",
                 "untuned_server": "untuned"}


def servers_of(item: Any, profiles: ProfileSet, profile_for: Callable[[str], ServerProfile]) -> list[str]:
    """Profile names a test item needs, from its fixtures, parameters and ``specwatch_server`` marker."""
    names: list[str] = []
    for fixture, role in ROLE_FIXTURES.items():
        if fixture in getattr(item, "fixturenames", ()):
            prof = profiles.for_role(role)
            if prof:
                names.append(prof.name)
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "profile_name" in callspec.params:
        names.append(callspec.params["profile_name"])
    marker = item.get_closest_marker("specwatch_server") if hasattr(item, "get_closest_marker") else None
    if marker and marker.args:
        names.append(profile_for(marker.args[0]).name)
    return names


def order_items(items: list[Any], profiles: ProfileSet, profile_for: Callable[[str], ServerProfile]) -> list[Any]:
    """Group tests by the server they need, in profile order, so each server boots once.

    Tests that need no server come first; tests that compare servers come last, when the
    measurements they compare are already memoised.
    """
    order = {name: i for i, name in enumerate(profiles.servers)}

    def key(pair: tuple[int, Any]) -> tuple[int, int]:
        idx, item = pair
        needed = servers_of(item, profiles, profile_for)
        if not needed:
            rank = -1 if not (item.get_closest_marker("perf") or item.get_closest_marker("correctness")) else 10**6
        else:
            rank = order.get(needed[0], 10**6 - 1)
        return rank, idx

    return [item for _, item in sorted(enumerate(items), key=key)]
