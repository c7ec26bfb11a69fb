"""Evaluation of a run: the paired bootstrap over the signal table (on Ray Data), and the result tables and study
tables written from its estimates.
"""
