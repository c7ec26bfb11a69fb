"""confgrid.flows"""
