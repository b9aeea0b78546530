"""The mutant kernels of the mutation harness (tools/mutation_score.py): one quantizer, one
activation quantizer and one GEMM per kind, written from the shipped docs without the kit, each
with its faults as switches, and the catalogue of graded mutants (``catalogue.py``)."""
