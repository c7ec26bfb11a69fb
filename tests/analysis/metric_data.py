"""Hypothesis data for the metric property tests (test_metrics.py, test_estimators.py): confidences with ties and
the edges 0 and 1, binary correctness."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

conf_values = st.one_of(
    st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0]),
    st.floats(0.0, 1.0, allow_nan=False),
)


@st.composite
def datasets(draw, min_size=1, max_size=40):
    """(confidence, correct): two float arrays of one length in ``[min_size, max_size]``."""
    n = draw(st.integers(min_size, max_size))
    conf = draw(st.lists(conf_values, min_size=n, max_size=n))
    corr = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    return np.array(conf), np.array(corr)


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
