"""The grid specification: the YAML a user writes, validated into typed records before anything runs (models,
datasets, scoring, methods, API models, answer sets, capability).
"""
