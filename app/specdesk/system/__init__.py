"""What this machine has, read from the operating system and the GPU driver: process
RSS (psutil), GPU memory (NVML), and the memory report of loaded models. No llama.cpp."""
