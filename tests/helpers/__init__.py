"""What the kit's tests share and are not tests themselves: the repository's paths, the seeded
model families and GGUF files, the checkpoints and their mutation catalogue, the independent
kernels written as vendors write them, and the self-tests' subprocess runs of the installed
suite. Test modules import from here, never from each other (tests/test_architecture.py)."""
