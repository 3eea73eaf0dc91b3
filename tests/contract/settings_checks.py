"""What the tests of every controller's settings model check alike: the problems a document is refused with, a bound
that holds at its edge and refuses past it, and the settings file read back as the component wrote it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pytest

from contract.issues import SettingsError
from contract.model import ControllerSettings

M = TypeVar("M", bound=ControllerSettings)


def problems_of(model: type[ControllerSettings], data: Any) -> str:
    """The SettingsError ``model`` refuses ``data`` with, as text; the test fails when it accepts it."""
    with pytest.raises(SettingsError) as info:
        model.parse(data)
    return str(info.value)


def assert_bound_holds(model: type[ControllerSettings], key: str, good: Any, bad: Any, fragment: str) -> None:
    """``good`` at ``key`` is accepted and ``bad`` refused, naming the key and why (``fragment``). An interval goes
    with a short requestTimeout, which must stay below it."""
    fit = {"requestTimeout": "100ms"} if key == "interval" else {}
    assert model.parse({key: good, **fit}) is not None
    text = problems_of(model, {key: bad, **fit})
    assert key in text
    assert fragment in text


def read_back(settings: M, tmp_path: Path) -> M:
    """``settings`` written as the component renders them, read as the daemon does: the same model, returned."""
    path = tmp_path / "settings.json"
    path.write_text(settings.to_json())
    again = type(settings).load(path)
    assert again == settings
    return again
