"""A pytest plugin (``-p mutant_kernels.profile``) registering the Hypothesis profile the
mutation harness runs: the suite's ``ci`` profile (200 derandomized examples, the default budget
of a certificate) without the shrink phase. Derandomized, the examples drawn are the same with
or without it, so what is detected is the same; a killed mutant does not spend minutes shrinking
the example that killed it."""

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "mutation-ci", max_examples=200, derandomize=True, database=None, deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    print_blob=True)
