"""Losses ℓ(p, y) and their derivatives ∂ℓ/∂p, selected by integer code
(docs/ALGORITHMS.md §1). ``param`` is δ for Huber and ε for ε-insensitive,
ignored otherwise. Classification losses take y ∈ {−1, +1}."""

import math

from numba import njit

HINGE = 0
LOG = 1
SQUARED_HINGE = 2
MODIFIED_HUBER = 3
PERCEPTRON = 4
SQUARED = 5
ABSOLUTE = 6
HUBER = 7
EPSILON_INSENSITIVE = 8

LOSSES = {
    "hinge": HINGE,
    "log": LOG,
    "squared_hinge": SQUARED_HINGE,
    "modified_huber": MODIFIED_HUBER,
    "perceptron": PERCEPTRON,
    "squared": SQUARED,
    "absolute": ABSOLUTE,
    "huber": HUBER,
    "epsilon_insensitive": EPSILON_INSENSITIVE,
}
CLASSIFICATION_LOSSES = ("hinge", "log", "squared_hinge", "modified_huber", "perceptron")
REGRESSION_LOSSES = ("squared", "absolute", "huber", "epsilon_insensitive")
# Default for ``param``: Huber's δ and the ε of ε-insensitive.
DEFAULT_PARAM = {"huber": 1.0, "epsilon_insensitive": 0.1}


@njit(cache=True)
def loss(code, p, y, param):
    if code == HINGE:
        return max(0.0, 1.0 - y * p)  # max(0, 1 − yp)
    if code == LOG:
        z = -y * p  # ln(1 + e^z), stable for both signs of z
        if z > 0.0:
            return z + math.log1p(math.exp(-z))
        return math.log1p(math.exp(z))
    if code == SQUARED_HINGE:
        m = max(0.0, 1.0 - y * p)
        return 0.5 * m * m  # ½ max(0, 1 − yp)²
    if code == MODIFIED_HUBER:
        z = y * p
        if z >= -1.0:
            m = max(0.0, 1.0 - z)
            return m * m  # max(0, 1 − yp)²
        return -4.0 * z  # −4yp
    if code == PERCEPTRON:
        return max(0.0, -y * p)  # max(0, −yp)
    if code == SQUARED:
        r = p - y
        return 0.5 * r * r  # ½ (p − y)²
    if code == ABSOLUTE:
        return abs(p - y)  # |p − y|
    if code == HUBER:
        r = abs(p - y)
        if r <= param:
            return 0.5 * r * r  # ½ (p − y)²
        return param * (r - 0.5 * param)  # δ (|p − y| − δ/2)
    # EPSILON_INSENSITIVE
    return max(0.0, abs(p - y) - param)  # max(0, |p − y| − ε)


@njit(cache=True)
def dloss(code, p, y, param):
    if code == HINGE:
        return -y if y * p < 1.0 else 0.0
    if code == LOG:
        z = y * p  # −y / (1 + e^(yp)), without overflow for large |yp|
        if z > 0.0:
            e = math.exp(-z)
            return -y * e / (1.0 + e)
        return -y / (1.0 + math.exp(z))
    if code == SQUARED_HINGE:
        return -y * max(0.0, 1.0 - y * p)
    if code == MODIFIED_HUBER:
        z = y * p
        if z >= -1.0:
            return -2.0 * y * max(0.0, 1.0 - z)
        return -4.0 * y
    if code == PERCEPTRON:
        return -y if y * p <= 0.0 else 0.0
    if code == SQUARED:
        return p - y
    if code == ABSOLUTE:
        r = p - y
        return 1.0 if r > 0.0 else (-1.0 if r < 0.0 else 0.0)
    if code == HUBER:
        return min(param, max(-param, p - y))  # clip(p − y, −δ, δ)
    # EPSILON_INSENSITIVE
    r = p - y
    if r > param:
        return 1.0
    if r < -param:
        return -1.0
    return 0.0


@njit(cache=True)
def loss_and_dloss(code, p, y, param):
    """(ℓ(p, y), ∂ℓ/∂p); the log loss shares one exponential between them."""
    if code == LOG:
        z = y * p  # e = e^(−|yp|): ℓ = max(0, −yp) + ln(1 + e), ∂ℓ/∂p = −y·σ(−yp)
        e = math.exp(-abs(z))
        if z > 0.0:
            return math.log1p(e), -y * e / (1.0 + e)
        return -z + math.log1p(e), -y / (1.0 + e)
    return loss(code, p, y, param), dloss(code, p, y, param)


@njit(cache=True)
def weighted_loss_sum(code, p, y, sw, param):
    """Σ s_i ℓ(p_i, y_i) over dense arrays (``sw``: the weights s_i)."""
    total = 0.0
    for i in range(p.shape[0]):
        total += sw[i] * loss(code, p[i], y[i], param)
    return total
