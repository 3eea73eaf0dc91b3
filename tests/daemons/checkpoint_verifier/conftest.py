from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemons.checkpoint_verifier.fakes import FakeApi


@pytest.fixture
def api(tmp_path: Path) -> FakeApi:
    """An API server of one team namespace, whose claim's volume is an empty directory under ``tmp_path``."""
    volume = tmp_path / "volume"
    volume.mkdir()
    return FakeApi(volume)
