"""Decode-loop speed: specmoe's loop against transformers and llama.cpp, host overhead, compiled path."""
