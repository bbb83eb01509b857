"""Serving: llama.cpp's llama-server plain and with a draft model."""
