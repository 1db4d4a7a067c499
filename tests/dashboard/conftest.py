from __future__ import annotations

import pytest
from dashboard_world import World, build_world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("dashboard") / "store")
