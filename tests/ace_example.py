"""The 12-item example of the ACE tests (study 001), with every value computed by hand.

Items 1..12; model A right on 1-9 (a_A = 0.75), model B right on 1-6 (a_B = 0.5).

====  ===  =====  ===  =====  ===================  ===================
item  z_A  c_A    z_B  c_B    answer A             answer B
====  ===  =====  ===  =====  ===================  ===================
1-4   1    0.95   1    0.85   "Gold."              "gold"
5-6   1    0.95   1    0.55   "Gold."              "gold"
7-8   1    0.65   0    0.85   "Gold."              "wrong"
9     1    0.65   0    0.55   "Gold."              "wrong"
10    0    0.95   0    0.55   "x10a"               "x10b"
11    0    0.95   0    0.55   "x11a"               "x11b"
12    0    0.65   0    0.55   "same"               "Same"
====  ===  =====  ===  =====  ===================  ===================

Raw ECE (bins of width 0.1; ECE = sum_b |sum z - sum c| / n):
  A: bin 9 = items 1-6, 10, 11: 8 rows, 6 right: |6 - 7.6| = 1.6;
     bin 6 = items 7-9, 12: 4 rows, 3 right: |3 - 2.6| = 0.4;  ECE_A = 2.0 / 12 = 1/6.
  B: bin 8 = items 1-4, 7, 8: |4 - 5.1| = 1.1; bin 5 = items 5, 6, 9-12: |2 - 3.3| = 1.3;
     ECE_B = 2.4 / 12 = 0.2.  Raw ECE gap = 1/6 - 0.2 = -1/30.
Raw Brier: A: 6(0.05^2) + 3(0.35^2) + 2(0.95^2) + 0.65^2 = 0.015 + 0.3675 + 1.805 + 0.4225 = 2.61 -> 0.2175;
           B: 4(0.15^2) + 2(0.45^2) + 2(0.85^2) + 4(0.55^2) = 0.09 + 0.405 + 1.445 + 1.21 = 3.15 -> 0.2625.
           Raw Brier gap = -0.045.

IA: D_both-right = 1-6, D_both-wrong = 10-12, |D_IA| = 9, retention 0.75.
  ECE: A: bin 9 (1-6, 10, 11) |6 - 7.6| = 1.6, bin 6 (12) |0 - 0.65| = 0.65 -> 2.25 / 9 = 0.25;
       B: bin 8 (1-4) |4 - 3.4| = 0.6, bin 5 (5, 6, 10-12) |2 - 2.75| = 0.75 -> 1.35 / 9 = 0.15.  gap +0.1.
  Brier: A: 0.015 + 1.805 + 0.4225 = 2.2425 / 9;  B: 0.09 + 0.405 + 3(0.3025) = 1.4025 / 9.  gap 0.84 / 9.
  Both right ECE: A 0.05; B (4(0.15) + 2(0.45)) / 6 = 0.25.  Both wrong ECE: A (2(0.95) + 0.65) / 3 = 0.85; B 0.55.

DA (a_A > a_B, so A is reweighted to B): w = 0.5 / 0.75 = 2/3 if right, 0.5 / 0.25 = 2 if wrong; sum w = 12.
  ECE: bin 9: right weight 6(2/3) = 4, wrong 2(2) = 4: |4 - 0.95 * 8| = 3.6;
       bin 6: right 3(2/3) = 2, wrong 2: |2 - 0.65 * 4| = 0.6  -> ECE_A^DA = 4.2 / 12 = 0.35; gap 0.35 - 0.2 = 0.15.
  Brier: (2/3)(0.015 + 0.3675) + 2(1.805 + 0.4225) = 0.255 + 4.455 = 4.71 -> 0.3925; gap 0.13.
  Kish ESS = 12^2 / (9 (4/9) + 3 (4)) = 144 / 16 = 9; ESS / N = 0.75.
  B -> A: w_B = 0.75 / 0.5 = 1.5 if right, 0.25 / 0.5 = 0.5 if wrong:
       bin 8: right 4(1.5) = 6, wrong 2(0.5) = 1: |6 - 0.85 * 7| = 0.05; bin 5: right 3, wrong 2: |3 - 0.55 * 5| = 0.25
       -> ECE_B = 0.3 / 12 = 0.025; gap (b_to_a) = 1/6 - 0.025.
  Mean target q = (0.375, 0.625): A weights 5/6 (right), 1.5 (wrong); B weights 1.25, 0.75:
       A: bin 9 |5 - 7.6| = 2.6, bin 6 |2.5 - 2.6| = 0.1 -> 0.225;
       B: bin 8 |5 - 0.85 * 6.5| = 0.525, bin 5 |2.5 - 0.55 * 5.5| = 0.525 -> 0.0875; gap 0.1375.

CA (normalizer: lower-case, strip " ."): pools: items 1-6 {gold} (both), items 7-9 {gold (A), wrong (B)},
  items 10, 11 {A's, B's} (both wrong), item 12 {same} (both). 17 pairs, 9 right.
  Rater A: 0.9 on every right candidate, 0.7 on every wrong one; rater B: 0.6 on all.
  CA-ECE: A: bin 9 |9 - 8.1| = 0.9, bin 7 |0 - 5.6| = 5.6 -> 6.5 / 17; B: bin 6 |9 - 10.2| = 1.2 -> 1.2 / 17.
          gap 5.3 / 17 (a reversal of the raw ECE gap).
  CA-Brier: A (9(0.01) + 8(0.49)) / 17 = 4.01 / 17; B (9(0.16) + 8(0.36)) / 17 = 4.32 / 17; gap -0.31 / 17 (no reversal).
  Self-preference (items where the candidates differ: 7-11): A: 0.2, 0.2, 0.2, 0, 0 -> 0.12; B: 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ITEMS = [str(i) for i in range(1, 13)]
Z_A = [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0]
C_A = [0.95] * 6 + [0.65] * 3 + [0.95, 0.95, 0.65]
Z_B = [1] * 6 + [0] * 6
C_B = [0.85] * 4 + [0.55] * 2 + [0.85, 0.85] + [0.55] * 4
ANS_A = ["Gold."] * 9 + ["x10a", "x11a", "same"]
ANS_B = ["gold"] * 6 + ["wrong"] * 3 + ["x10b", "x11b", "Same"]


def normalize(s: str) -> str:
    return s.lower().strip(" .")


def rows(method: str = "verbalized", dataset: str = "qa") -> pd.DataFrame:
    """Own-answer rows of models ``A`` and ``B``."""
    parts = []
    for m, z, c, ans in (("A", Z_A, C_A, ANS_A), ("B", Z_B, C_B, ANS_B)):
        parts.append(pd.DataFrame(dict(model=m, dataset=dataset, method=method, item_id=ITEMS, signal=c,
                                       correct=np.asarray(z, dtype=float), answer=ans)))
    return pd.concat(parts, ignore_index=True)


def ratings(pool: pd.DataFrame, method: str = "verbalized") -> pd.DataFrame:
    """Rater A: 0.9 on right candidates, 0.7 on wrong ones; rater B: 0.6 on all."""
    a = pool.assign(rater="A", method=method, signal=np.where(pool["label"] == 1.0, 0.9, 0.7))
    b = pool.assign(rater="B", method=method, signal=0.6)
    return pd.concat([a, b], ignore_index=True)
