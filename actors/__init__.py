"""confgrid.actors"""
