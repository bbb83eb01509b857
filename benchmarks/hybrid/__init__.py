"""Hybrid models: what rolling back linear-attention state costs an SD round."""
