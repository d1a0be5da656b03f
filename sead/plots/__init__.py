"""Matplotlib figures shared by controller reports, evaluation and training reports."""
