"""`confgrid show`: a finished run's result tables printed to the terminal.
"""
