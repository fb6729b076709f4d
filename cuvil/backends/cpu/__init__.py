"""The CPU backend: C code generation, the C toolchain with its on-disk cache (`toolchain`), and Cuvil's own
kernel library (`kernels`)."""
