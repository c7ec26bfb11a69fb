"""A study entry is declared by keywords on its class, which register it (flows/studies/__init__.py)."""

from __future__ import annotations

import logging

import pytest

from confgrid.flows.studies import STUDIES, Study, get_study


def test_the_class_keywords_set_the_attributes_and_register_the_study():
    try:
        class Mine(Study, name="mine_test", title="t", tables=("a",), figures=("f",), section="capability"):
            pass

        assert get_study("mine_test") is Mine and (Mine.tables, Mine.figures, Mine.section) == (("a",), ("f",),
                                                                                                "capability")
        with pytest.raises(ValueError, match="'mine_test' is already registered"):
            class Other(Study, name="mine_test"):
                pass
    finally:
        STUDIES.pop("mine_test", None)
    with pytest.raises(TypeError, match="unknown keyword 'tabels'; allowed: name, title, section, tables, figures"):
        class Typo(Study, name="typo_test", tabels=("a",)):
            pass
    assert "typo_test" not in STUDIES


def test_a_view_that_fails_is_logged_not_raised(caplog):
    def broken(x):
        raise RuntimeError(f"no {x}")

    with caplog.at_level(logging.WARNING, logger="confgrid"):
        assert Study.never_fatal("tables not built", broken, "data") is None
        assert Study.never_fatal("tables not built", len, "ab") == 2
    assert "tables not built: RuntimeError: no data" in caplog.text
