"""Numbers do not move (issue 39): the demo, sensitivity, methods, ACE, capability and ConfidenceBench examples and
``confgrid analyze`` of a run's signal table, five CSV columns, Parquet in turn and a model column, run at tiny
sizes (tools/golden.py :data:`~tools.golden.TEST_CASES`), equal the expected files in tests/data/golden/:
results/*.csv byte for byte, tables/signals.parquet as a table, the manifest's shard keys.

After a change of numbers that is intended (and named in its commit): ``python tools/golden.py refresh``.
"""

from __future__ import annotations

import pytest

from tools import golden

pytest.importorskip("ray")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """Every test case run once, kept as the expected files are (tools/golden.py ``snapshot``)."""
    root = tmp_path_factory.mktemp("golden")
    skipped = golden.run(root / "run", golden.TEST_CASES, log=lambda line: None, tiny=True)
    assert not skipped, skipped
    golden.snapshot(root / "run", root / "snapshot")
    return root / "snapshot"


@pytest.mark.parametrize("case", golden.TEST_CASES)
def test_numbers_do_not_move(fresh, case):
    expected = golden.TEST_DATA / case
    assert expected.is_dir(), f"no expected files for {case}: python tools/golden.py refresh"
    diff = golden.compare_case(expected, fresh / case)
    assert not diff, (f"{case}: the numbers moved (expected: tests/data/golden/{case}); if the change is intended, "
                      "run python tools/golden.py refresh and name it in the commit\n" + "\n".join(diff))
