"""Test-only oracles: independent re-implementations the package is checked against (never imported by it)."""
