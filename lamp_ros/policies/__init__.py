"""Reference policies written as Python prototypes (PyTorch); the compiler's inputs."""
