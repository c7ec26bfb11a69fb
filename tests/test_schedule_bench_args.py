"""benchmarks/schedule_bench.py's command line: combinations that cannot run as asked fail at once, naming the flag."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "schedule_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("schedule_bench", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # stdlib imports only at the top: nothing starts
    return module


@pytest.mark.parametrize("argv, says", [
    ("--workload sim --cluster local", "--workload sim with --cluster local"),
    ("--workload sim --cluster long", "--workload sim with --cluster long"),
    ("--workload long --cluster local", "--workload long with --cluster local"),
    ("--cluster 8gpu --workload sim --sim-load-s -1", "--sim-load-s -1: must be a finite number of seconds >= 0"),
    ("--cluster 8gpu --workload sim --sim-request-s -0.5", "--sim-request-s -0.5: must be"),
    ("--cluster 8gpu --workload sim --sim-request-s nan", "--sim-request-s nan: must be"),
    ("--cluster 8gpu --sim-load-s 2", "--sim-load-s 2: only with --workload sim (got --workload short)"),
    ("--cluster 8gpu --workload long --sim-request-s 1", "--sim-request-s 1: only with --workload sim"),
    ("--no-baseline", "--no-baseline with --cluster local"),
    ("--cluster 8gpu --repeats 0", "--repeats 0: must be at least 1"),
    ("--cluster 8gpu --items -3", "--items -3: must be at least 1"),
    ("--cluster 8gpu --json /nonexistent-dir/x.json", "--json /nonexistent-dir/x.json: its folder"),
    ("--cluster 8gpu --gpus 4", "--gpus 4 with --cluster 8gpu: that cluster declares 8 GPUs"),
])
def test_a_combination_that_cannot_run_fails_at_once(bench, capsys, argv, says):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv.split())
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in last, last


def test_combinations_that_run(bench):
    args, items = bench.parse_args("--workload long --cluster long".split())  # --cluster long is the long workload
    assert (args.cluster, items) == ("long", 128)
    args, items = bench.parse_args("--cluster 8gpu --workload sim --sim-load-s 0 --no-baseline".split())
    assert (args.sim_load_s, args.sim_request_s, args.no_baseline, items) == (0.0, bench.SIM_DEFAULT[1], True, 24)
    args, items = bench.parse_args("--cluster 8gpu --workload long".split())
    assert (args.sim_load_s, args.sim_request_s, items) == (*bench.SIM_DEFAULT, 32)
    args, _ = bench.parse_args("--cluster long --no-baseline".split())  # it runs no baseline anyway
    assert args.no_baseline
