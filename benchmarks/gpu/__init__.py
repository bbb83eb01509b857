"""The one-command check of a CUDA GPU (gpu_check.sh) and its Python half."""
