"""Grids that are invalid fail before any model is loaded, with one clear message (issue 14, items 7-10)."""

from __future__ import annotations

import socket
import time

import pytest
from typer.testing import CliRunner

from confgrid.cli.main import app
from confgrid.flows.spec.grid import load_grid, parse_grid
from confgrid.flows.spec.base import GridSpecError

BASE = ("name: g\nmodels:\n  - name: fixture\n    model: confgrid-fixture\n"
        "datasets:\n  - name: truthfulqa\n    adapter: truthfulqa\n    limit: 6\n")


def _grid(tmp_path, text: str):
    path = tmp_path / "grid.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _problems(text: str, tmp_path) -> str:
    with pytest.raises(GridSpecError) as ei:
        load_grid(_grid(tmp_path, text))
    return str(ei.value)


def test_duplicate_yaml_key_is_an_error_naming_key_and_lines(tmp_path):
    msg = _problems(BASE + "bootstrap:\n  resamples: 200\n  resamples: 7\n", tmp_path)
    assert "duplicate key 'resamples' at line 11 (first at line 10)" in msg


def test_duplicate_key_in_a_prompt_file_is_an_error(tmp_path):
    from confgrid.protocols.prompts import load_prompt_file

    f = tmp_path / "p.yaml"
    f.write_text("id: x\nid: y\nuser: '{question}'\n")
    with pytest.raises(Exception, match="duplicate key 'id'"):
        load_prompt_file(f)


@pytest.mark.parametrize("value", ['"no"', '"yes"', "1", '"true"'])
def test_booleans_are_strict(value, tmp_path):
    text = BASE.replace("model: confgrid-fixture\n", f"model: confgrid-fixture\n    chat_template: {value}\n")
    msg = _problems(text, tmp_path)
    assert "models[0].chat_template: expected a boolean; allowed: true, false" in msg


def test_yaml_booleans_still_work(tmp_path):
    spec = load_grid(_grid(tmp_path, BASE.replace("model: confgrid-fixture\n",
                                                  "model: confgrid-fixture\n    chat_template: false\n")))
    assert spec.models[0].chat_template is False


def test_unknown_key_lists_the_allowed_keys(tmp_path):
    msg = _problems(BASE + "bootstrap:\n  resample: 7\n", tmp_path)
    assert "bootstrap.resample: unknown key; allowed: resamples, seed, level" in msg
    msg = _problems(BASE + "boostrap: {}\n", tmp_path)
    assert "boostrap: unknown key; allowed: name, " in msg and "bootstrap" in msg


@pytest.mark.parametrize("name", ["../../../../tmp/escaped", "a/b", ".hidden", "", "x y"])
def test_grid_name_is_a_label(name, tmp_path):
    with pytest.raises(GridSpecError, match=r"name: expected a label"):
        parse_grid({"name": name, "models": [{"name": "m", "model": "confgrid-fixture"}],
                    "datasets": [{"name": "t", "adapter": "triviaqa"}]})


def test_empty_model_directory_says_no_model_files(tmp_path):
    (tmp_path / "empty").mkdir()
    msg = _problems(BASE.replace("model: confgrid-fixture", f"model: {tmp_path / 'empty'}"), tmp_path)
    assert f"no model files in '{tmp_path / 'empty'}'" in msg and "empty" in msg


def test_backends_check_the_model_directory_too(tmp_path):
    from confgrid.actors.backend import check_model_dir

    with pytest.raises(FileNotFoundError, match="no model files in"):
        check_model_dir(str(tmp_path))
    check_model_dir("Qwen/Qwen3-8B")  # a hub id: not checked here


def _cli(args, monkeypatch):
    import ray

    res = CliRunner().invoke(app, args)
    assert not ray.is_initialized(), "Ray was started for a grid that cannot run"
    return res


def test_mc_context_on_a_dataset_without_options_fails_before_ray(tmp_path, monkeypatch):
    grid = _grid(tmp_path, BASE + "scoring:\n  contexts: [bare, mc_bare]\n")
    res = _cli(["run", str(grid), "--out", str(tmp_path / "o")], monkeypatch)
    assert res.exit_code == 2
    assert "scoring.contexts: 'mc_bare' show(s) lettered options" in res.output and "truthfulqa" in res.output
    assert "Traceback" not in res.output


def test_mc_answer_set_on_a_dataset_without_options_fails(tmp_path, monkeypatch):
    text = BASE.replace("truthfulqa", "triviaqa") + "answer_sets:\n  - id: mc\n    prompt: mc_confidence\n    format: mc\n"
    res = _cli(["run", str(_grid(tmp_path, text)), "--out", str(tmp_path / "o")], monkeypatch)
    assert res.exit_code == 2 and "answer_sets[0].format: 'mc' asks lettered options, but no dataset" in res.output


def test_unwritable_output_directory_is_one_line(tmp_path, monkeypatch):
    out = tmp_path / "o"
    (out / "grid.yaml").mkdir(parents=True)  # writing grid.yaml fails (IsADirectoryError), even as root
    res = _cli(["run", str(_grid(tmp_path, BASE)), "--out", str(out)], monkeypatch)
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert lines[-1].startswith(f"cannot write the output directory {out}") and "Traceback" not in res.output


# -- Ray: a private local cluster, a given address checked (item 10) ---------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_without_address_a_private_local_cluster():
    from confgrid.flows.execute.ray_session import private_temp_dir, ray_target

    t = ray_target(None, environ={})
    assert t.kind == "local" and t.address == "local"
    assert ray_target(None, environ={"RAY_ADDRESS": "10.0.0.1:6379"}).kind == "job"
    assert private_temp_dir().rstrip("/").split("/")[-1].startswith("confgrid-ray-")
    assert len(private_temp_dir()) < 40  # Ray's socket paths must stay short


def test_given_addresses_are_probed():
    from confgrid.flows.execute.ray_session import ray_target

    assert ray_target("ray://head:10001", environ={}).probe == ("head", 10001)
    assert ray_target("10.0.0.5:6379", environ={}).probe == ("10.0.0.5", 6379)
    assert ray_target("auto", environ={"RAY_ADDRESS": "h:1234"}).probe == ("h", 1234)


def test_a_dead_address_times_out_with_a_message():
    from confgrid.flows.execute.ray_session import RayConnectError, init_ray

    port = _closed_port()
    t0 = time.monotonic()
    with pytest.raises(RayConnectError, match=rf"127.0.0.1:{port} does not answer after 1 s"):
        init_ray(f"127.0.0.1:{port}", connect_timeout=1.0)
    assert time.monotonic() - t0 < 5


def test_cli_with_a_dead_address_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFGRID_RAY_CONNECT_TIMEOUT", "1")
    grid = _grid(tmp_path, BASE.replace("limit: 6", "limit: 2"))
    res = _cli(["run", str(grid), "--out", str(tmp_path / "o"), "--address", f"127.0.0.1:{_closed_port()}"],
               monkeypatch)
    assert res.exit_code == 2 and "does not answer after 1 s" in res.output and "Traceback" not in res.output
