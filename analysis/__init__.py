"""confgrid.analysis"""
