"""`confgrid analyze`: the same evaluation on outputs from anywhere (a CSV/parquet of confidences and correctness),
read, checked, grouped into settings and evaluated in turn.
"""
