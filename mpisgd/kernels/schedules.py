"""Step-size schedules γ_t, selected by integer code (docs/ALGORITHMS.md §3).
t counts examples from 1."""

from numba import njit

OPTIMAL = 0
BOTTOU = 1
XU = 2
CONSTANT = 3
INVSCALING = 4

SCHEDULES = {
    "optimal": OPTIMAL,  # 1 / (λ (t0 + t)); t0 = 0 is Pegasos' 1/(λt)
    "bottou": BOTTOU,  # γ0 / (1 + λ γ0 t)
    "xu": XU,  # γ0 (1 + λ γ0 t)^(−0.75)
    "constant": CONSTANT,  # γ0
    "invscaling": INVSCALING,  # γ0 / t^power
}
# Schedules that divide by λ and so need λ > 0.
NEEDS_POSITIVE_LAMBDA = ("optimal",)


@njit(cache=True)
def eta(code, t, eta0, lam, t0, power):
    if code == OPTIMAL:
        return 1.0 / (lam * (t0 + t))
    if code == BOTTOU:
        return eta0 / (1.0 + lam * eta0 * t)
    if code == XU:
        return eta0 * (1.0 + lam * eta0 * t) ** -0.75
    if code == CONSTANT:
        return eta0
    # INVSCALING
    return eta0 / t**power
