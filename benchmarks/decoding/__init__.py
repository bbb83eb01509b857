"""Decode-loop speed: specmoe's loop against transformers and llama.cpp, its host overhead, the compiled path."""
