"""Golden text of every spine pass on the known-precision Gaussian model, and meaning."""

from __future__ import annotations

import numpy as np
from scipy import stats

import factorflow as ff
from factorflow.ir import check, format_program
from factorflow.transforms.channels import channels
from factorflow.transforms.lower import lower
from factorflow.transforms.messages import messages
from factorflow.transforms.schedule_pass import schedule_program
from tests.conftest import assert_close

LOWERED = """\
program known_precision
ranges v_n=2
random real v_mean  # mean
observed real v_x[v_n]  # x
v_mean = Gaussian(mean=0.0, precision=0.01)
for v_n:
    v_x[v_n] = Gaussian(mean=v_mean, precision=1.0)
"""

CHANNELS = """\
program known_precision
ranges v_n=2
random real v_mean  # mean
observed real v_x[v_n]  # x
use real v_mean__use0[v_n]  # use 0 of mean
v_mean = Gaussian(mean=0.0, precision=0.01)
v_mean__use0 = Variable(def=v_mean, uses: ((broadcast, (v_n))))
for v_n:
    v_x[v_n] = Gaussian(mean=v_mean__use0[v_n], precision=1.0)
"""

MESSAGES_EP = """\
v_mean__F = Gaussian.sample_average_conditional(mean=0.0, precision=0.01)
Gaussian.log_average_factor(sample=v_mean__B, mean=0.0, precision=0.01)
v_mean__marginal = Variable.marginal(def=v_mean__F, use0=v_mean__use0__B)
v_mean__use0__F = Variable.use(marginal=v_mean__marginal, use=v_mean__use0__B)
v_mean__B = Variable.backward(marginal=v_mean__marginal, def=v_mean__F)
Variable.evidence(marginal=v_mean__marginal, def=v_mean__B, use0=v_mean__use0__F)
v_mean__use0__B[v_n] = Gaussian.mean_average_conditional(sample=v_x[v_n], precision=1.0)
Gaussian.log_average_factor(sample=v_x[v_n], mean=v_mean__use0__F[v_n], precision=1.0)
"""

SCHEDULED_VMP = """\
v_mean__F = Gaussian.sample_average_logarithm(mean=0.0, precision=0.01)
v_mean__use0__B = Gaussian.mean_average_logarithm(sample=v_x[v_n], precision=1.0)
v_mean__marginal = Variable.marginal(def=v_mean__F, use0=v_mean__use0__B)
v_mean__use0__F = Variable.use(marginal=v_mean__marginal)
v_mean__B = Variable.backward(marginal=v_mean__marginal)
while:
Gaussian.average_log_factor(sample=v_mean__B, mean=0.0, precision=0.01)
Variable.evidence(marginal=v_mean__marginal)
Gaussian.average_log_factor(sample=v_x[v_n], mean=v_mean__use0__F[v_n], precision=1.0)
"""


def _body_text(program) -> str:
    text = format_program(program, decls=False).splitlines()[2:]
    # parameters are checked by the structural tests below; the golden text keeps calls
    return "\n".join(line.split(", plates:")[0].rstrip() + (")" if ", plates:" in line
                                                            else "")
                     for line in text) + "\n"


def test_lower_golden(known_precision_model):
    program, bindings = lower(known_precision_model)
    check(program)
    assert format_program(program) == LOWERED
    assert_close(bindings.values["v_x"], [5.0, 7.0])


def test_channels_golden(known_precision_model):
    program = channels(lower(known_precision_model)[0])
    check(program)
    assert format_program(program) == CHANNELS


def test_messages_golden_ep(known_precision_model):
    program = messages(channels(lower(known_precision_model)[0]), "ep")
    check(program)
    assert _body_text(program) == MESSAGES_EP


def test_schedule_runs_acyclic_messages_once(known_precision_model):
    """With known precision nothing is cyclic: every update runs once, none loops."""
    program = schedule_program(messages(channels(lower(known_precision_model)[0]),
                                        "vmp")).program
    check(program)
    assert _body_text(program) == SCHEDULED_VMP


def test_spine_meaning_matches_closed_form(known_precision_model):
    """Running the compiled program gives the conjugate posterior and exact evidence."""
    for algorithm in ("ep", "vmp"):
        result = known_precision_model.infer(algorithm)
        post_prec = 0.01 + 2.0
        assert_close(result["mean"].mean, 12.0 / post_prec)
        assert_close(result["mean"].variance, 1.0 / post_prec)
        cov = np.eye(2) + 100.0 * np.ones((2, 2))
        exact = stats.multivariate_normal([0.0, 0.0], cov).logpdf([5.0, 7.0])
        assert_close(result.log_evidence, exact)


def test_print_of_a_program_is_its_text_form():
    with ff.Model() as model:
        m = ff.Gaussian("m", 0.0, variance=1.0)
        ff.Gaussian("y", m, variance=1.0, observed=2.0)
    program = model.compile("ep").program
    assert str(program) == format_program(program)
    assert str(program).startswith("program model (ep)\nrandom real v_m  # m\n")
