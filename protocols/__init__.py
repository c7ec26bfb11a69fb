"""confgrid.protocols"""
