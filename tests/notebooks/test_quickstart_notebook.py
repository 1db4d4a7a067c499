"""notebooks/quickstart.ipynb runs top to bottom in a real Jupyter kernel (this venv's Python)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs_top_to_bottom(tmp_path: Path, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError naming the cell that failed

    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs), "the chart was drawn"
    text = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert "SCHEDULE_TOPIC_XXXX" in text and "rmq_sys_wheel_timer" in text
    assert "lag now: 0" in text  # the Spark consumer group caught up (section 5)
    charts = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(charts) == 3, "messages per topic, the group's lag, the reput lag over time"
    assert "micro-batches; now 0 bytes, 0 messages" in text  # section 6: the reput caught up
