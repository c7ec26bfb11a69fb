"""confgrid.cluster"""
