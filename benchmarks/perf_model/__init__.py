"""The performance model checked: fits, held-out points, reconstructions, out-of-sample and
config-only predictions.
"""
