"""The testbed a runner reports carries its noise controls; bad values name the field."""

import pytest
from mallard_wire import results as schemas
from pydantic import ValidationError

BASE = {"arch": "x86_64", "cpu_model": "Xeon", "cpus": "1", "kernel": "6.1", "governor":
        "performance", "smt": False, "thp": "madvise", "compiler": "gcc 12.2.0",
        "libc": "glibc 2.36", "page_size": 4096}


def test_noise_control_fields_are_kept():
    tb = schemas.TestbedIn.model_validate({**BASE, "turbo": "off", "aslr": "off",
                                   "workload_env": "minimal", "isolated": False})
    assert (tb.turbo, tb.aslr, tb.workload_env, tb.isolated) == ("off", "off", "minimal", False)
    old = schemas.TestbedIn.model_validate(BASE)  # a runner from before these fields
    assert old.aslr is None and old.isolated is None


@pytest.mark.parametrize(("field", "value"), [("aslr", "maybe"), ("turbo", 1),
                                              ("workload_env", "x" * 10), ("isolated", "often")])
def test_bad_noise_control_values_name_the_field(field, value):
    with pytest.raises(ValidationError) as e:
        schemas.TestbedIn.model_validate({**BASE, field: value})
    assert e.value.errors()[0]["loc"] == (field,)
