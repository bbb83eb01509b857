"""Engine speed: the decode loop against transformers and llama.cpp, its host overhead, the compiled path."""
